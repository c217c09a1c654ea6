#include "serve_benchmark.h"

#include <sched.h>
#include <sys/types.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <bit>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <optional>
#include <random>
#include <span>
#include <thread>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "kvtier/client.h"
#include "kvtier/daemon.h"
#include "scaling_projection.h"
#include "serve_daemon.h"
#include "serve_lookup_phase.h"
#include "temp_dir.h"

namespace kvtier::bench {
namespace {

using Clock = std::chrono::steady_clock;

enum Op : std::size_t { kLookup = 0, kPut = 1, kGet = 2 };
constexpr std::array<const char*, 3> kOpNames = {"lookup", "put", "get"};
constexpr uint64_t kPage = 4096;
// What a TCP put frame carries besides its payloads, at most (keys, tags, references).
constexpr uint64_t kFrameOverheadBytes = 64u << 10;

Result<std::array<uint32_t, 3>> ParseMix(const std::string& mix) {
  std::array<uint32_t, 3> weights{};
  std::size_t pos = 0;
  for (std::size_t i = 0; i < weights.size(); ++i) {
    const std::size_t end = i + 1 < weights.size() ? mix.find(':', pos) : mix.size();
    if (end == std::string::npos || end == pos) break;
    const char* first = mix.data() + pos;
    const char* last = mix.data() + end;
    const auto [ptr, ec] = std::from_chars(first, last, weights[i]);
    if (ec != std::errc() || ptr != last || weights[i] > 1'000'000) break;
    pos = end + 1;
    if (i + 1 == weights.size()) {
      if (weights[0] + weights[1] + weights[2] == 0) break;
      return weights;
    }
  }
  return Status::InvalidArgument("--mix must be lookup:put:get weights (integers up to 1,000,000, not all 0), got '" + mix + "'");
}

uint64_t SplitMix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// Chain `chain` of client `client`; `nonce` keeps runs against a long-lived server apart.
BlockKey ChainKey(uint64_t nonce, uint64_t client, uint64_t chain, uint64_t i) {
  return {(client << 32) + chain, (nonce << 16) + i + 1};
}

// The pattern of a block: 64-bit words derived from its key (so from client, chain, block).
uint64_t PatternWord(uint64_t seed, std::size_t word) { return seed ^ (static_cast<uint64_t>(word) * 0x9E3779B97F4A7C15ull); }
uint64_t PatternSeed(const BlockKey& key) { return SplitMix(key.hi ^ SplitMix(key.lo)); }

void FillPattern(std::span<std::byte> bytes, const BlockKey& key) {
  const uint64_t seed = PatternSeed(key);
  for (std::size_t w = 0; w < bytes.size() / 8; ++w) {
    const uint64_t v = PatternWord(seed, w);
    std::memcpy(bytes.data() + w * 8, &v, 8);
  }
}

bool CheckPattern(std::span<const std::byte> bytes, const BlockKey& key) {
  const uint64_t seed = PatternSeed(key);
  uint64_t diff = 0;
  for (std::size_t w = 0; w < bytes.size() / 8; ++w) {
    uint64_t v;
    std::memcpy(&v, bytes.data() + w * 8, 8);
    diff |= v ^ PatternWord(seed, w);
  }
  return diff == 0;
}

// What a client thread drives: the service through a Client, or the store in-process.
class Driver {
 public:
  virtual ~Driver() = default;
  // Room for one put and one get request: 2 * chain_blocks slots of max_block_bytes.
  virtual std::span<std::byte> buffer() = 0;
  // Returns the blocks stored (new or present); fewer than asked means refused.
  virtual Result<std::size_t> Put(std::span<const BlockKey> keys, std::span<const std::span<const std::byte>> payloads) = 0;
  // Returns the sizes of the blocks read (the stored prefix).
  virtual Result<std::vector<uint32_t>> Get(std::span<const BlockKey> keys, std::span<const std::span<std::byte>> outs) = 0;
  // Returns the stored prefix length.
  virtual Result<std::size_t> Lookup(std::span<const BlockKey> keys) = 0;
};

class StoreDriver final : public Driver {
 public:
  StoreDriver(TieredStore& store, std::size_t buffer_bytes) : store_(store), buffer_(buffer_bytes) {}
  std::span<std::byte> buffer() override { return buffer_; }
  Result<std::size_t> Put(std::span<const BlockKey> keys, std::span<const std::span<const std::byte>> payloads) override {
    std::vector<BlockPut> blocks(keys.size());
    for (std::size_t i = 0; i < keys.size(); ++i) blocks[i] = {.key = keys[i], .payload = payloads[i], .tokens = 16};
    KVTIER_ASSIGN_OR_RETURN(PutResult put, store_.Put(blocks));
    return put.new_blocks + put.present_blocks;
  }
  Result<std::vector<uint32_t>> Get(std::span<const BlockKey> keys, std::span<const std::span<std::byte>> outs) override {
    std::vector<std::size_t> sizes(keys.size());
    KVTIER_ASSIGN_OR_RETURN(std::size_t n, store_.Get(keys, outs, TransitionType::kSameToolRepeat, sizes));
    std::vector<uint32_t> read(n);
    for (std::size_t i = 0; i < n; ++i) read[i] = static_cast<uint32_t>(sizes[i]);
    return read;
  }
  Result<std::size_t> Lookup(std::span<const BlockKey> keys) override { return store_.Lookup(keys).prefix_blocks; }

 private:
  TieredStore& store_;
  std::vector<std::byte> buffer_;
};

class ClientDriver final : public Driver {
 public:
  explicit ClientDriver(std::unique_ptr<Client> client, std::size_t buffer_bytes) : client_(std::move(client)) {
    if (client_->shared_memory().size() < buffer_bytes) own_.resize(buffer_bytes);  // TCP: payloads inline
  }
  std::span<std::byte> buffer() override { return own_.empty() ? client_->shared_memory() : std::span<std::byte>(own_); }
  Result<std::size_t> Put(std::span<const BlockKey> keys, std::span<const std::span<const std::byte>> payloads) override {
    std::vector<ClientBlock> blocks(keys.size());
    for (std::size_t i = 0; i < keys.size(); ++i) blocks[i] = {.key = keys[i], .payload = payloads[i], .tokens = 16};
    KVTIER_ASSIGN_OR_RETURN(protocol::PutReply put, client_->Put(blocks));
    return std::size_t{put.new_blocks} + put.present_blocks;
  }
  Result<std::vector<uint32_t>> Get(std::span<const BlockKey> keys, std::span<const std::span<std::byte>> outs) override {
    return client_->Get(keys, outs);
  }
  Result<std::size_t> Lookup(std::span<const BlockKey> keys) override {
    KVTIER_ASSIGN_OR_RETURN(std::vector<protocol::ChainLookup> found, client_->Lookup({{keys.begin(), keys.end()}}));
    if (found.size() != 1) return Status::Internal("kvtier server answered " + std::to_string(found.size()) + " chains for one");
    return std::size_t{found[0].prefix_blocks};
  }

 private:
  std::unique_ptr<Client> client_;
  std::vector<std::byte> own_;
};

struct OpTally {
  std::vector<float> latencies_us;
  uint64_t bytes = 0;
  uint64_t misses = 0;   // lookups and gets that found less than the whole chain
  uint64_t refused = 0;  // puts the store did not wholly admit
};

struct ClientTally {
  std::array<OpTally, 3> ops;
  uint64_t errors = 0;
  std::string first_error;

  void Error(const std::string& message) {
    if (errors++ == 0) first_error = message;
  }
};

struct Chain {
  uint64_t id = 0;
  std::vector<uint32_t> sizes;
};

// One client's loop until `deadline`.
void RunClient(Driver& driver, const ServeBenchmarkOptions& o, const std::array<uint32_t, 3>& mix, uint64_t nonce,
               uint64_t client, Clock::time_point deadline, std::atomic<uint64_t>& ops_done, ClientTally& tally) {
  std::mt19937_64 rng(SplitMix(o.seed * 1'000'003 + client));
  std::discrete_distribution<std::size_t> pick_op(
      {static_cast<double>(mix[0]), static_cast<double>(mix[1]), static_cast<double>(mix[2])});
  std::uniform_int_distribution<uint64_t> pick_pages(o.min_block_bytes / kPage, o.max_block_bytes / kPage);
  const auto n = static_cast<std::size_t>(o.chain_blocks);
  const std::size_t slot = o.max_block_bytes;
  const std::span<std::byte> put_area = driver.buffer().first(n * slot);
  const std::span<std::byte> get_area = driver.buffer().subspan(n * slot, n * slot);
  std::vector<Chain> recent;  // a ring of the last recent_chains stored chains
  std::size_t ring = 0;
  uint64_t next_chain = 0;
  std::vector<BlockKey> keys(n);
  std::vector<std::span<const std::byte>> payloads(n);
  std::vector<std::span<std::byte>> outs(n);
  while (Clock::now() < deadline) {
    const Op op = recent.empty() ? kPut : static_cast<Op>(pick_op(rng));
    OpTally& t = tally.ops[op];
    const Chain* chain = nullptr;
    if (op == kPut) {
      Chain fresh{next_chain++, std::vector<uint32_t>(n)};
      for (std::size_t i = 0; i < n; ++i) {
        fresh.sizes[i] = static_cast<uint32_t>(pick_pages(rng) * kPage);
        keys[i] = ChainKey(nonce, client, fresh.id, i);
        const std::span<std::byte> payload = put_area.subspan(i * slot, fresh.sizes[i]);
        FillPattern(payload, keys[i]);
        payloads[i] = payload;
      }
      const auto t0 = Clock::now();
      Result<std::size_t> stored = driver.Put(keys, payloads);
      t.latencies_us.push_back(std::chrono::duration<float, std::micro>(Clock::now() - t0).count());
      if (!stored.ok()) {
        tally.Error("put: " + stored.status().ToString());
        if (stored.status().code() == StatusCode::kUnavailable) break;  // the connection is gone
      } else {
        for (std::size_t i = 0; i < std::min(*stored, n); ++i) t.bytes += fresh.sizes[i];
        if (*stored < n) {
          ++t.refused;
        } else if (recent.size() < static_cast<std::size_t>(o.recent_chains)) {
          recent.push_back(std::move(fresh));
        } else {
          recent[ring] = std::move(fresh);
          ring = (ring + 1) % recent.size();
        }
      }
    } else {
      chain = &recent[std::uniform_int_distribution<std::size_t>(0, recent.size() - 1)(rng)];
      for (std::size_t i = 0; i < n; ++i) keys[i] = ChainKey(nonce, client, chain->id, i);
    }
    if (op == kLookup) {
      const auto t0 = Clock::now();
      Result<std::size_t> prefix = driver.Lookup(keys);
      t.latencies_us.push_back(std::chrono::duration<float, std::micro>(Clock::now() - t0).count());
      if (!prefix.ok()) {
        tally.Error("lookup: " + prefix.status().ToString());
        if (prefix.status().code() == StatusCode::kUnavailable) break;
      } else if (*prefix < n) {
        ++t.misses;
      }
    } else if (op == kGet) {
      for (std::size_t i = 0; i < n; ++i) {
        outs[i] = get_area.subspan(i * slot, slot);
        std::memset(outs[i].data(), 0xa5, 8);  // a block the server claims but never wrote fails the check
      }
      const auto t0 = Clock::now();
      Result<std::vector<uint32_t>> sizes = driver.Get(keys, outs);
      t.latencies_us.push_back(std::chrono::duration<float, std::micro>(Clock::now() - t0).count());
      if (!sizes.ok()) {
        tally.Error("get: " + sizes.status().ToString());
        if (sizes.status().code() == StatusCode::kUnavailable) break;
      } else {
        if (sizes->size() < n) ++t.misses;
        for (std::size_t i = 0; i < std::min(sizes->size(), n); ++i) {
          const uint32_t size = (*sizes)[i];
          if (size != chain->sizes[i]) {
            tally.Error("get: block " + keys[i].ToHex() + " came back with " + std::to_string(size) + " bytes, put with " +
                        std::to_string(chain->sizes[i]));
          } else if (!CheckPattern(outs[i].first(size), keys[i])) {
            tally.Error("get: block " + keys[i].ToHex() + " came back with wrong bytes");
          } else {
            t.bytes += size;
          }
        }
      }
    }
    ops_done.fetch_add(1, std::memory_order_relaxed);
  }
}

struct PhaseResult {
  double elapsed_s = 0;
  ClientTally total;
};

PhaseResult RunPhase(std::vector<std::unique_ptr<Driver>>& drivers, const ServeBenchmarkOptions& o,
                     const std::array<uint32_t, 3>& mix, uint64_t nonce, const char* label) {
  // Fault the buffers in before the clock starts (the shared segments are fresh memfds).
  for (auto& d : drivers) std::memset(d->buffer().data(), 0, d->buffer().size());
  std::vector<ClientTally> tallies(drivers.size());
  std::atomic<uint64_t> ops_done{0};
  const auto start = Clock::now();
  const auto deadline = start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(o.seconds));
  std::vector<std::thread> threads;
  for (std::size_t c = 0; c < drivers.size(); ++c) {
    threads.emplace_back([&, c] { RunClient(*drivers[c], o, mix, nonce, c, deadline, ops_done, tallies[c]); });
  }
  if (isatty(STDERR_FILENO) != 0) {
    while (Clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(500));
      const double s = std::chrono::duration<double>(Clock::now() - start).count();
      std::fprintf(stderr, "\rkvtier bench serve: %s %.0f/%.0f s, %llu requests   ", label, std::min(s, o.seconds), o.seconds,
                   static_cast<unsigned long long>(ops_done.load(std::memory_order_relaxed)));
    }
    std::fprintf(stderr, "\n");
  }
  for (std::thread& t : threads) t.join();
  PhaseResult r;
  r.elapsed_s = std::chrono::duration<double>(Clock::now() - start).count();
  for (ClientTally& t : tallies) {
    for (std::size_t op = 0; op < 3; ++op) {
      OpTally& into = r.total.ops[op];
      into.latencies_us.insert(into.latencies_us.end(), t.ops[op].latencies_us.begin(), t.ops[op].latencies_us.end());
      into.bytes += t.ops[op].bytes;
      into.misses += t.ops[op].misses;
      into.refused += t.ops[op].refused;
    }
    if (r.total.errors == 0 && t.errors > 0) r.total.first_error = t.first_error;
    r.total.errors += t.errors;
  }
  return r;
}

double Percentile(const std::vector<float>& sorted, double p) {
  if (sorted.empty()) return 0;
  return sorted[std::min(sorted.size() - 1, static_cast<std::size_t>(p * static_cast<double>(sorted.size())))];
}

struct Summary {
  nlohmann::json ops = nlohmann::json::object();
  nlohmann::json p99 = nlohmann::json::object();
  double ops_per_s = 0, gbps = 0;
  double put_get_p99_us = 0;  // over puts and gets together
  uint64_t misses = 0, refused = 0;
};

Summary Summarize(PhaseResult& r) {
  Summary s;
  uint64_t requests = 0, bytes = 0;
  for (std::size_t op = 0; op < 3; ++op) {
    OpTally& t = r.total.ops[op];
    std::sort(t.latencies_us.begin(), t.latencies_us.end());
    nlohmann::json j = {{"requests", t.latencies_us.size()},
                        {"ops_per_s", static_cast<double>(t.latencies_us.size()) / r.elapsed_s},
                        {"p50_us", Percentile(t.latencies_us, 0.50)},
                        {"p99_us", Percentile(t.latencies_us, 0.99)},
                        {"p999_us", Percentile(t.latencies_us, 0.999)}};
    if (op != kLookup) j["gbps"] = static_cast<double>(t.bytes) / 1e9 / r.elapsed_s;
    if (op != kPut) j["misses"] = t.misses;
    if (op == kPut) j["refused"] = t.refused;
    s.p99[kOpNames[op]] = j["p99_us"];
    s.ops[kOpNames[op]] = std::move(j);
    requests += t.latencies_us.size();
    bytes += t.bytes;
    s.misses += t.misses;
    s.refused += t.refused;
  }
  std::vector<float> put_get = r.total.ops[kPut].latencies_us;
  put_get.insert(put_get.end(), r.total.ops[kGet].latencies_us.begin(), r.total.ops[kGet].latencies_us.end());
  std::sort(put_get.begin(), put_get.end());
  s.put_get_p99_us = Percentile(put_get, 0.99);
  s.ops_per_s = static_cast<double>(requests) / r.elapsed_s;
  s.gbps = static_cast<double>(bytes) / 1e9 / r.elapsed_s;
  return s;
}

// With the DRAM tier's prefault on, waits until `pid` holds the whole tier resident, so that a
// phase measures puts into a prefaulted tier, not puts racing the background pass; the
// seconds waited, reported beside the phase.
double WaitForPrefault(const ServeBenchmarkOptions& o, bool prefault, pid_t pid) {
  return prefault ? WaitUntilResident(pid, o.dram_mib << 20) : 0;
}

std::size_t BufferBytes(const ServeBenchmarkOptions& o) {
  return 2 * static_cast<std::size_t>(o.chain_blocks) * static_cast<std::size_t>(o.max_block_bytes);
}

// The in-process baseline opens the configuration the self-started daemon runs (less its
// listeners), so that the two differ only by the service around the store.
Result<PhaseResult> RunBaseline(const ServeBenchmarkOptions& o, int clients, bool prefault, const std::array<uint32_t, 3>& mix,
                                uint64_t nonce) {
  KVTIER_ASSIGN_OR_RETURN(TempDir dir, TempDir::Create());
  KVTIER_ASSIGN_OR_RETURN(
      ServeConfig config,
      ParseServeConfig(ServeDaemonConfigYaml(
                           {.dir = dir.path(),
                            .persist = o.persist,
                            .dram_prefault = prefault,
                            .dram_mib = o.dram_mib,
                            .policy_shards = o.policy_shards,
                            .index_shards = o.index_shards}),
                       "bench serve"));
  config.metrics_port = -1;
  config.server.tcp = false;
  KVTIER_ASSIGN_OR_RETURN(std::unique_ptr<Daemon> daemon, Daemon::Start(std::move(config)));
  std::vector<std::unique_ptr<Driver>> drivers;
  for (int c = 0; c < clients; ++c) drivers.push_back(std::make_unique<StoreDriver>(daemon->store(), BufferBytes(o)));
  (void)WaitForPrefault(o, prefault, ::getpid());
  PhaseResult r = RunPhase(drivers, o, mix, nonce, "in-process baseline");
  drivers.clear();
  KVTIER_RETURN_IF_ERROR(daemon->Stop().WithContext("stopping the baseline's store"));
  return r;
}

Result<std::unique_ptr<Client>> Connect(const ServeBenchmarkOptions& o, const std::string& endpoint, uint16_t port) {
  ClientOptions client_options;
  if (o.tcp) {
    client_options.shared_memory_bytes = 0;
    return Client::ConnectTcp(endpoint, port, client_options);
  }
  client_options.shared_memory_bytes = BufferBytes(o);
  return Client::ConnectUnix(endpoint, client_options);
}

struct ServiceResult {
  PhaseResult phase;
  std::optional<double> cpu_seconds;  // the self-started daemon's, during the phase
  std::optional<uint64_t> peak_rss_bytes;  // the self-started daemon's, by the phase's end
  std::optional<std::pair<LockReadings, LockReadings>> locks;  // its metadata and tier locks before and after
  double prefault_wait_s = 0;         // from the daemon's start to its DRAM tier being resident
};

Result<ServiceResult> RunService(const ServeBenchmarkOptions& o, int clients, bool prefault,
                                 const std::array<uint32_t, 3>& mix, uint64_t nonce) {
  std::unique_ptr<ServeDaemon> daemon;
  std::string endpoint = o.connect;
  uint16_t port = 0;
  if (o.connect.empty()) {
    KVTIER_ASSIGN_OR_RETURN(daemon, ServeDaemon::Start({.persist = o.persist,
                                                        .dram_prefault = prefault,
                                                        .dram_mib = o.dram_mib,
                                                        .policy_shards = o.policy_shards,
                                                        .index_shards = o.index_shards,
                                                        .max_connections = static_cast<uint32_t>(clients) + 16,
                                                        .workers = o.workers,
                                                        .max_workers = o.max_workers}));
    endpoint = o.tcp ? "127.0.0.1" : daemon->socket_path();
    port = daemon->tcp_port();
  } else if (o.tcp) {
    const std::size_t colon = o.connect.rfind(':');
    endpoint = o.connect.substr(0, colon);
    port = static_cast<uint16_t>(std::stoul(o.connect.substr(colon + 1)));  // checked by Validate
  }
  std::vector<std::unique_ptr<Driver>> drivers;
  for (int c = 0; c < clients; ++c) {
    Result<std::unique_ptr<Client>> client = Connect(o, endpoint, port);
    if (!client.ok()) return client.status().WithContext("client " + std::to_string(c) + " connecting to " + endpoint);
    drivers.push_back(std::make_unique<ClientDriver>(std::move(*client), BufferBytes(o)));
  }
  ServiceResult r;
  if (daemon != nullptr) r.prefault_wait_s = WaitForPrefault(o, prefault, daemon->pid());
  double cpu_before = 0;
  LockReadings locks_before;
  if (daemon != nullptr) {
    KVTIER_ASSIGN_OR_RETURN(cpu_before, daemon->CpuSeconds());
    KVTIER_ASSIGN_OR_RETURN(const MetricsSample metrics, daemon->Metrics("put"));
    locks_before = metrics.locks;
  }
  r.phase = RunPhase(drivers, o, mix, nonce, "service");
  if (daemon != nullptr) {
    KVTIER_ASSIGN_OR_RETURN(const double cpu_after, daemon->CpuSeconds());
    KVTIER_ASSIGN_OR_RETURN(const MetricsSample metrics_after, daemon->Metrics("put"));
    r.cpu_seconds = cpu_after - cpu_before;
    r.peak_rss_bytes = daemon->PeakResidentBytes();
    r.locks.emplace(locks_before, metrics_after.locks);
  }
  drivers.clear();  // disconnect before the daemon stops
  if (daemon != nullptr) KVTIER_RETURN_IF_ERROR(daemon->Stop().WithContext("stopping the service"));
  return r;
}

// One put+get client count: the baseline, then the service; its JSON entry.
Result<nlohmann::json> RunPutGet(const ServeBenchmarkOptions& o, int clients, bool prefault,
                                 const std::array<uint32_t, 3>& mix, uint64_t nonce) {
  KVTIER_ASSIGN_OR_RETURN(PhaseResult baseline, RunBaseline(o, clients, prefault, mix, nonce));
  KVTIER_ASSIGN_OR_RETURN(ServiceResult service, RunService(o, clients, prefault, mix, nonce));
  const Summary b = Summarize(baseline);
  const Summary s = Summarize(service.phase);
  uint64_t requests = 0;
  for (const OpTally& op : service.phase.total.ops) requests += op.latencies_us.size();
  nlohmann::json j = {{"clients", clients},
                      {"dram_prefault", prefault},
                      {"prefault_wait_s", service.prefault_wait_s},
                      {"gbps", s.gbps},
                      {"baseline_gbps", b.gbps},
                      {"ratio", b.gbps > 0 ? s.gbps / b.gbps : 0.0},
                      {"p99_us", s.put_get_p99_us},
                      {"baseline_p99_us", b.put_get_p99_us},
                      {"errors", service.phase.total.errors + baseline.total.errors},
                      {"elapsed_s", service.phase.elapsed_s},
                      {"ops_per_s", s.ops_per_s},
                      {"baseline_ops_per_s", b.ops_per_s},
                      {"ops", s.ops},
                      {"baseline_ops", b.ops},
                      {"misses", s.misses},
                      {"refused", s.refused}};
  j["cpu_us_per_op"] = nullptr;  // unknown for a server started elsewhere (--connect)
  if (service.cpu_seconds && requests > 0) j["cpu_us_per_op"] = *service.cpu_seconds / static_cast<double>(requests) * 1e6;
  j["daemon_peak_rss_bytes"] = nullptr;  // likewise
  if (service.peak_rss_bytes) j["daemon_peak_rss_bytes"] = *service.peak_rss_bytes;
  // A put+get phase does not read its daemon's event-loop CPU time (its work is the workers'), so
  // its projection has no loop bound.
  if (service.locks) AddLockFields(service.locks->first, service.locks->second, requests, "cpu_us_per_op", nullptr, j);
  if (service.phase.total.errors > 0) j["first_error"] = service.phase.total.first_error;
  if (baseline.total.errors > 0) j["baseline_first_error"] = baseline.total.first_error;
  return j;
}

// 2,048 clients are 2,048 sockets: raise the soft descriptor limit to the hard one.
Status RaiseFileLimit(const ServeBenchmarkOptions& o) {
  rlimit limit{};
  if (::getrlimit(RLIMIT_NOFILE, &limit) != 0) return Status::IoError(std::string("getrlimit: ") + std::strerror(errno));
  limit.rlim_cur = limit.rlim_max;
  if (::setrlimit(RLIMIT_NOFILE, &limit) != 0) return Status::IoError(std::string("setrlimit: ") + std::strerror(errno));
  int most = 0;
  for (const int n : o.lookup_clients) most = std::max(most, n);
  for (const int n : o.clients) most = std::max(most, n);
  if (limit.rlim_cur != RLIM_INFINITY && static_cast<uint64_t>(most) + 256 > limit.rlim_cur) {
    return Status::InvalidArgument(std::to_string(most) + " clients need more descriptors than the hard limit of " +
                                   std::to_string(limit.rlim_cur) + " (ulimit -Hn): lower the client counts");
  }
  return Status::Ok();
}

Status ValidateCounts(const std::vector<int>& counts, int most, const std::string& flag) {
  if (counts.empty()) return Status::InvalidArgument(flag + " needs at least one value");
  for (const int n : counts) {
    if (n < 1 || n > most) {
      return Status::InvalidArgument(flag + " values must be 1 to " + std::to_string(most) + ", got " + std::to_string(n));
    }
  }
  return Status::Ok();
}

}  // namespace

Status ServeBenchmarkOptions::Validate() const {
  KVTIER_RETURN_IF_ERROR(ValidateCounts(clients, 4096, "--clients"));
  if (dram_prefault != "on" && dram_prefault != "off" && dram_prefault != "both") {
    return Status::InvalidArgument("--dram-prefault must be on, off or both, got '" + dram_prefault + "'");
  }
  if (connect.empty() && lookups) {
    KVTIER_RETURN_IF_ERROR(ValidateCounts(lookup_clients, 16384, "--lookup-clients"));
    KVTIER_RETURN_IF_ERROR(ValidateCounts(cores, CPU_SETSIZE, "--cores"));
  }
  if (lookup_chains < 1 || lookup_chains > 65536) return Status::InvalidArgument("--lookup-chains must be 1 to 65,536");
  if (lookup_chain_blocks < 1 || lookup_chain_blocks > 1024) return Status::InvalidArgument("--lookup-chain-blocks must be 1 to 1,024");
  if (static_cast<uint64_t>(lookup_chains) * static_cast<uint64_t>(lookup_chain_blocks) * 4096 > (uint64_t{512} << 20)) {
    return Status::InvalidArgument("--lookup-chains x --lookup-chain-blocks x 4 KiB must fit in 512 MiB (half the daemon's DRAM)");
  }
  if (dram_mib < 64 || dram_mib > (uint64_t{1} << 20)) return Status::InvalidArgument("--dram-mib must be 64 to 1,048,576");
  if (policy_shards > 64 || (policy_shards > 0 && !std::has_single_bit(policy_shards))) {
    return Status::InvalidArgument("--policy-shards must be 0 (the daemon's default) or a power of two to 64");
  }
  if (index_shards > 64 || (index_shards > 0 && !std::has_single_bit(index_shards))) {
    return Status::InvalidArgument("--index-shards must be 0 (the daemon's default) or a power of two to 64");
  }
  if (load_threads < 1 || load_threads > 64) return Status::InvalidArgument("--load-threads must be 1 to 64");
  if (loops_per_core > 16) return Status::InvalidArgument("--loops-per-core must be 0 to 16");
  if (workers > 1024) return Status::InvalidArgument("--workers must be 0 to 1,024");
  if (!(seconds > 0 && seconds <= 3600)) return Status::InvalidArgument("--seconds must be in (0, 3600]");
  if (min_block_bytes < kPage || min_block_bytes % kPage != 0 || max_block_bytes % kPage != 0 ||
      max_block_bytes < min_block_bytes || max_block_bytes > (uint64_t{256} << 20)) {
    return Status::InvalidArgument("--min-block-bytes and --max-block-bytes must be 4 KiB multiples, min <= max <= 256 MiB");
  }
  if (chain_blocks < 1 || chain_blocks > 64) return Status::InvalidArgument("--chain-blocks must be 1 to 64");
  if (recent_chains < 1 || recent_chains > 1'000'000) return Status::InvalidArgument("--recent-chains must be 1 to 1,000,000");
  KVTIER_RETURN_IF_ERROR(ParseMix(mix).status());
  const uint64_t request_bytes = static_cast<uint64_t>(chain_blocks) * max_block_bytes;
  if (tcp && request_bytes + kFrameOverheadBytes > protocol::Limits{}.max_payload_bytes) {
    return Status::InvalidArgument("--tcp sends a request's payloads inline in one frame: --chain-blocks x --max-block-bytes (" +
                                   std::to_string(request_bytes) + ") must stay under " +
                                   std::to_string(protocol::Limits{}.max_payload_bytes - kFrameOverheadBytes) + " bytes");
  }
  if (tcp && !connect.empty()) {
    const std::size_t colon = connect.rfind(':');
    unsigned port = 0;
    const char* last = connect.data() + connect.size();
    if (colon == std::string::npos || colon == 0 ||
        std::from_chars(connect.data() + colon + 1, last, port).ptr != last || port == 0 || port > 65535) {
      return Status::InvalidArgument("--connect with --tcp must be host:port, got '" + connect + "'");
    }
  }
  return Status::Ok();
}

Result<std::string> RunServeBenchmark(const ServeBenchmarkOptions& options) {
  KVTIER_RETURN_IF_ERROR(options.Validate());
  KVTIER_RETURN_IF_ERROR(RaiseFileLimit(options));
  KVTIER_ASSIGN_OR_RETURN(const auto mix, ParseMix(options.mix));
  // Runs against a long-lived server must not find the keys of an earlier run.
  const uint64_t nonce = options.connect.empty() ? 0 : (std::random_device{}() & 0xffffffffu);
  uint64_t errors = 0;
  nlohmann::json lookups = nlohmann::json::array();
  if (options.connect.empty() && options.lookups) {
    const LookupPhaseOptions lookup{.clients = options.lookup_clients, .cores = options.cores, .chains = options.lookup_chains,
                                    .chain_blocks = options.lookup_chain_blocks, .threads = options.load_threads,
                                    .event_loops_per_core = options.loops_per_core,
                                    .tcp = options.tcp, .policy_shards = options.policy_shards,
                                    .index_shards = options.index_shards, .seconds = options.seconds, .seed = options.seed};
    KVTIER_ASSIGN_OR_RETURN(lookups, RunLookupPhases(lookup, errors));
  }
  nlohmann::json put_get = nlohmann::json::array();
  std::vector<bool> prefault_settings;
  if (options.dram_prefault != "on") prefault_settings.push_back(false);
  if (options.dram_prefault != "off") prefault_settings.push_back(true);
  for (const int clients : options.clients) {
    for (const bool prefault : prefault_settings) {
      KVTIER_ASSIGN_OR_RETURN(nlohmann::json j, RunPutGet(options, clients, prefault, mix, nonce));
      errors += j["errors"].get<uint64_t>();
      put_get.push_back(std::move(j));
    }
  }
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  nlohmann::json out = {
      {"seconds", options.seconds},
      {"errors", errors},
      {"lookups", std::move(lookups)},
      {"put_get", std::move(put_get)},
      {"max_rss_bytes", static_cast<uint64_t>(usage.ru_maxrss) * 1024},
      {"baselines",
       {{"lookups", std::string("redis-benchmark -t get -P 1, the same client count and --threads, on a private redis-server "
                                "(no persistence) over ") +
                        (options.tcp ? "TCP loopback" : "its Unix socket") +
                        ", values of baseline_value_bytes (a whole-chain lookup reply frame)"},
        {"put_get", "the same mix on a TieredStore in-process, opened from the daemon's configuration: N threads, no sockets"}}},
      {"config",
       {{"server", options.connect.empty() ? "kvtier serve child (/proc/self/exe), DRAM (dram_mib) over a 4 GiB disk tier in /tmp"
                                           : options.connect},
        {"lookup_transport", options.tcp ? "tcp 127.0.0.1, epoll clients" : "unix socket, epoll clients"},
        {"put_get_transport", options.tcp ? "tcp" : "unix+shm"},
        {"clients", options.clients},
        {"lookup_clients", options.lookup_clients},
        {"cores", options.cores},
        {"lookup_chains", options.lookup_chains},
        {"lookup_chain_blocks", options.lookup_chain_blocks},
        {"load_threads", options.load_threads},
        {"seconds", options.seconds},
        {"min_block_bytes", options.min_block_bytes},
        {"max_block_bytes", options.max_block_bytes},
        {"mix", options.mix},
        {"chain_blocks", options.chain_blocks},
        {"recent_chains", options.recent_chains},
        {"persist", options.persist},
        {"dram_prefault", options.dram_prefault},
        {"dram_mib", options.dram_mib},
        {"policy_shards", options.policy_shards > 0 ? options.policy_shards : kServePolicyShards},
        {"index_shards", options.index_shards > 0 ? options.index_shards : kServeIndexShards},
        {"seed", options.seed}}}};
  return out.dump(2) + "\n";
}

}  // namespace kvtier::bench
