#include "cluster_benchmark.h"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <span>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "kvtier/client.h"
#include "util/quantile.h"

namespace kvtier::bench {
namespace {

using Clock = std::chrono::steady_clock;

double SecondsSince(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

// host:port split at the last colon, or InvalidArgument naming `what`.
Result<std::pair<std::string, uint16_t>> SplitHostPort(const std::string& address, const std::string& what) {
  const std::size_t colon = address.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == address.size()) {
    return Status::InvalidArgument(what + " '" + address + "' is not host:port");
  }
  char* end = nullptr;
  const unsigned long port = std::strtoul(address.c_str() + colon + 1, &end, 10);
  if (*end != '\0' || port == 0 || port > 65535) return Status::InvalidArgument(what + " '" + address + "' has no valid port");
  return std::make_pair(address.substr(0, colon), static_cast<uint16_t>(port));
}

bool IsUnixSocket(const std::string& address) { return address.find('/') != std::string::npos; }

// The chains put, their bytes kept to check every read against.
class Workload {
 public:
  explicit Workload(const ClusterBenchmarkOptions& o)
      : chains_(static_cast<std::size_t>(o.chains)),
        blocks_(static_cast<std::size_t>(o.chain_blocks)),
        block_bytes_(o.block_bytes),
        bytes_(chains_ * blocks_ * block_bytes_) {
    std::random_device device;
    nonce_ = (uint64_t{device()} << 32) | device();  // an earlier run's blocks are never found
    std::mt19937_64 random(nonce_);
    for (std::size_t w = 0; w + 8 <= bytes_.size(); w += 8) {
      const uint64_t word = random();
      std::memcpy(bytes_.data() + w, &word, 8);
    }
    keys_.resize(chains_);
    for (std::size_t c = 0; c < chains_; ++c) {
      for (std::size_t b = 0; b < blocks_; ++b) keys_[c].push_back({nonce_, (uint64_t{c} << 20) | b});
    }
  }
  std::size_t chains() const { return chains_; }
  std::size_t chain_blocks() const { return blocks_; }
  uint64_t block_bytes() const { return block_bytes_; }
  const std::vector<BlockKey>& keys(std::size_t chain) const { return keys_[chain]; }
  std::span<const std::byte> block(std::size_t chain, std::size_t i) const {
    return std::span(bytes_).subspan((chain * blocks_ + i) * block_bytes_, block_bytes_);
  }

 private:
  std::size_t chains_, blocks_;
  uint64_t block_bytes_;
  uint64_t nonce_ = 0;
  std::vector<std::byte> bytes_;
  std::vector<std::vector<BlockKey>> keys_;
};

// One connection to a node, with the buffers of one chain: in its shared memory over a Unix
// socket, in this process over TCP.
class NodeClient {
 public:
  static Result<NodeClient> Connect(const ClusterBenchmarkOptions& o, const std::string& address) {
    const uint64_t chain_bytes = static_cast<uint64_t>(o.chain_blocks) * o.block_bytes;
    ClientOptions client_options{.tenant = o.tenant, .auth_token = o.auth_token};
    NodeClient node;
    if (IsUnixSocket(address)) {
      client_options.shared_memory_bytes = chain_bytes;
      KVTIER_ASSIGN_OR_RETURN(node.client_, Client::ConnectUnix(address, client_options));
    } else {
      KVTIER_ASSIGN_OR_RETURN(auto host_port, SplitHostPort(address, "node"));
      client_options.shared_memory_bytes = 0;
      client_options.tls = {.enabled = !o.tls_ca_file.empty(), .ca_file = o.tls_ca_file};
      KVTIER_ASSIGN_OR_RETURN(node.client_, Client::ConnectTcp(host_port.first, host_port.second, client_options));
      node.local_.resize(chain_bytes);
    }
    const std::span<std::byte> memory = node.local_.empty() ? node.client_->shared_memory() : std::span(node.local_);
    for (int b = 0; b < o.chain_blocks; ++b) {
      node.outs_.push_back(memory.subspan(static_cast<std::size_t>(b) * o.block_bytes, o.block_bytes));
    }
    return node;
  }
  Client& client() { return *client_; }
  const std::vector<std::span<std::byte>>& outs() const { return outs_; }

 private:
  std::unique_ptr<Client> client_;
  std::vector<std::byte> local_;
  std::vector<std::span<std::byte>> outs_;
};

Status PutChains(const ClusterBenchmarkOptions& o, const Workload& w) {
  KVTIER_ASSIGN_OR_RETURN(NodeClient node, NodeClient::Connect(o, o.nodes[0]));
  std::vector<ClientBlock> blocks(w.chain_blocks());
  for (std::size_t c = 0; c < w.chains(); ++c) {
    for (std::size_t b = 0; b < w.chain_blocks(); ++b) {
      const std::span<std::byte> out = node.outs()[b];
      std::memcpy(out.data(), w.block(c, b).data(), out.size());
      blocks[b] = {.key = w.keys(c)[b], .payload = out, .tokens = 16};
    }
    KVTIER_ASSIGN_OR_RETURN(protocol::PutReply reply, node.client().Put(blocks));
    if (reply.refused_blocks > 0) {
      return Status::ResourceExhausted(o.nodes[0] + " refused " + std::to_string(reply.refused_blocks) + " blocks of chain " +
                                       std::to_string(c) + "; give its tiers more room or put fewer --chains");
    }
  }
  return Status::Ok();
}

struct LookupResult {
  uint64_t found_blocks = 0;
  std::vector<double> latencies_us;
};

// Every reading node looks every chain up once.
Result<LookupResult> LookUpChains(const ClusterBenchmarkOptions& o, const Workload& w) {
  LookupResult result;
  for (std::size_t n = 1; n < o.nodes.size(); ++n) {
    KVTIER_ASSIGN_OR_RETURN(NodeClient node, NodeClient::Connect(o, o.nodes[n]));
    for (std::size_t c = 0; c < w.chains(); ++c) {
      const auto start = Clock::now();
      Result<std::vector<protocol::ChainLookup>> found = node.client().Lookup({w.keys(c)});
      result.latencies_us.push_back(SecondsSince(start) * 1e6);
      if (!found.ok()) return found.status().WithContext("looking chain " + std::to_string(c) + " up on " + o.nodes[n]);
      result.found_blocks += found->at(0).prefix_blocks;
    }
  }
  return result;
}

struct ReadTally {
  uint64_t bytes = 0, blocks = 0, missing_blocks = 0, byte_errors = 0, errors = 0;
  std::string first_error;

  void Add(const ReadTally& other) {
    bytes += other.bytes, blocks += other.blocks, missing_blocks += other.missing_blocks;
    byte_errors += other.byte_errors, errors += other.errors;
    if (first_error.empty()) first_error = other.first_error;
  }
};

// What a read checks beyond the client's own end-to-end checksum of every block (which fails
// the Get with Corruption, counted as a byte error): the sizes, or every byte against the
// bytes put.
enum class Check { kSizes, kEveryByte };

// Reads chain `c` and checks it.
void ReadChain(NodeClient& node, const Workload& w, std::size_t c, Check check, ReadTally& tally) {
  Result<std::vector<uint32_t>> sizes = node.client().Get(w.keys(c), node.outs());
  if (!sizes.ok()) {
    ++(sizes.status().code() == StatusCode::kCorruption ? tally.byte_errors : tally.errors);
    if (tally.first_error.empty()) tally.first_error = sizes.status().message();
    return;
  }
  tally.missing_blocks += w.chain_blocks() - sizes->size();
  for (std::size_t b = 0; b < sizes->size(); ++b) {
    const std::span<const std::byte> expected = w.block(c, b);
    const bool equal = (*sizes)[b] == expected.size() &&
                       (check == Check::kSizes || std::memcmp(node.outs()[b].data(), expected.data(), expected.size()) == 0);
    tally.byte_errors += equal ? 0 : 1;
    tally.bytes += (*sizes)[b];
    ++tally.blocks;
  }
}

// `clients` reading threads, each on its own connection to one of the reading nodes, read
// chains until `keep_going(pass)` says stop; `during` runs on this thread meanwhile.
template <typename KeepGoing, typename During>
Result<ReadTally> ReadFromOtherNodes(const ClusterBenchmarkOptions& o, const Workload& w, Check check, KeepGoing keep_going,
                                     During during) {
  std::vector<NodeClient> nodes;
  for (int t = 0; t < o.clients; ++t) {
    const std::string& address = o.nodes[1 + static_cast<std::size_t>(t) % (o.nodes.size() - 1)];
    KVTIER_ASSIGN_OR_RETURN(NodeClient node, NodeClient::Connect(o, address));
    nodes.push_back(std::move(node));
  }
  std::vector<ReadTally> tallies(nodes.size());
  std::vector<std::thread> threads;
  for (std::size_t t = 0; t < nodes.size(); ++t) {
    threads.emplace_back([&, t] {
      for (int pass = 0; keep_going(pass); ++pass) {
        for (std::size_t c = t; c < w.chains(); c += nodes.size()) ReadChain(nodes[t], w, c, check, tallies[t]);
      }
    });
  }
  during();
  for (std::thread& thread : threads) thread.join();
  ReadTally total;
  for (const ReadTally& tally : tallies) total.Add(tally);
  return total;
}

// Output of `command` through /bin/sh, or why it failed.
Result<std::string> RunShell(const std::string& command) {
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return Status::Unavailable("cannot run /bin/sh for: " + command);
  std::string output;
  char chunk[4096];
  while (std::size_t n = fread(chunk, 1, sizeof chunk, pipe)) output.append(chunk, n);
  const int rc = pclose(pipe);
  if (rc != 0) return Status::Unavailable("exit status " + std::to_string(rc) + " from: " + command);
  return output;
}

struct Baseline {
  double gbps = 0;
  std::string command;  // as run, the password masked
};

// redis-benchmark's GETs of the same value size and client count, from this namespace.
Result<Baseline> MeasureRedisBenchmark(const ClusterBenchmarkOptions& o, const Workload& w) {
  KVTIER_ASSIGN_OR_RETURN(auto host_port, SplitHostPort(o.redis[0], "redis endpoint"));
  const uint64_t requests = w.chains() * w.chain_blocks() * static_cast<uint64_t>(o.passes);
  const std::string args = "--cluster -h " + host_port.first + " -p " + std::to_string(host_port.second) +
                           " -t set,get -d " + std::to_string(o.block_bytes) + " -n " + std::to_string(requests) +
                           " -c " + std::to_string(o.clients) + " -P " + std::to_string(o.pipeline) + " -r 1000 --csv";
  const std::string auth = o.redis_password.empty() ? "" : " -a '" + o.redis_password + "'";
  Baseline baseline{.command = "redis-benchmark " + args + (auth.empty() ? "" : " -a ***")};
  KVTIER_ASSIGN_OR_RETURN(std::string output, RunShell("redis-benchmark " + args + auth + " 2>&1"));
  // --csv prints one line per test: "GET","<requests per second>",...
  const std::size_t line = output.find("\"GET\",\"");
  const double rps = line == std::string::npos ? 0 : std::strtod(output.c_str() + line + 7, nullptr);
  if (rps <= 0) return Status::Unavailable("redis-benchmark printed no GET rate; its output:\n" + output.substr(0, 2000));
  baseline.gbps = rps * static_cast<double>(o.block_bytes) / 1e9;
  return baseline;
}

}  // namespace

Status ClusterBenchmarkOptions::Validate() const {
  if (nodes.size() < 2) return Status::InvalidArgument("--nodes needs at least 2 addresses: the first puts, the others read");
  if (redis.empty()) return Status::InvalidArgument("--redis needs the Redis Cluster's endpoints (host:port), for the baseline");
  for (const std::string& endpoint : redis) KVTIER_RETURN_IF_ERROR(SplitHostPort(endpoint, "--redis endpoint").status());
  for (const std::string& node : nodes) {
    if (!IsUnixSocket(node)) KVTIER_RETURN_IF_ERROR(SplitHostPort(node, "--nodes address").status());
  }
  // Both travel through /bin/sh inside single quotes.
  if (redis_password.find('\'') != std::string::npos || redis[0].find('\'') != std::string::npos) {
    return Status::InvalidArgument("--redis-password and the first --redis endpoint must not contain a single quote");
  }
  if (chains < 1 || chains > 100'000) return Status::InvalidArgument("--chains must be 1 to 100,000");
  if (chain_blocks < 1 || chain_blocks > 1024) return Status::InvalidArgument("--chain-blocks must be 1 to 1,024");
  if (block_bytes < 8 || block_bytes % 8 != 0 || block_bytes > (16u << 20)) {
    return Status::InvalidArgument("--block-bytes must be a multiple of 8, from 8 to 16 MiB");
  }
  const uint64_t chain_bytes = static_cast<uint64_t>(chain_blocks) * block_bytes;
  if (chain_bytes > protocol::Limits{}.max_payload_bytes / 2) {
    return Status::InvalidArgument("--chain-blocks x --block-bytes (" + std::to_string(chain_bytes) +
                                   ") must stay under half the protocol's frame limit (" +
                                   std::to_string(protocol::Limits{}.max_payload_bytes / 2) + ")");
  }
  if (chain_bytes * static_cast<uint64_t>(chains) > (8ull << 30)) {
    return Status::InvalidArgument("--chains x --chain-blocks x --block-bytes must stay under 8 GiB (kept in memory to check reads)");
  }
  if (clients < 1 || clients > 256) return Status::InvalidArgument("--clients must be 1 to 256");
  if (passes < 1 || passes > 1000) return Status::InvalidArgument("--passes must be 1 to 1,000");
  if (pipeline < 1 || pipeline > 1024) return Status::InvalidArgument("--pipeline must be 1 to 1,024");
  if (!(failover_seconds >= 2 && failover_seconds <= 600)) return Status::InvalidArgument("--failover-seconds must be 2 to 600");
  return Status::Ok();
}

Result<std::string> RunClusterBenchmark(const ClusterBenchmarkOptions& options) {
  KVTIER_RETURN_IF_ERROR(options.Validate());
  const ClusterBenchmarkOptions& o = options;
  const Workload w(o);
  auto start = Clock::now();
  KVTIER_RETURN_IF_ERROR(PutChains(o, w).WithContext("putting chains through " + o.nodes[0]));
  const double put_s = SecondsSince(start);
  KVTIER_ASSIGN_OR_RETURN(LookupResult lookups, LookUpChains(o, w));

  start = Clock::now();
  KVTIER_ASSIGN_OR_RETURN(ReadTally reads,
                          ReadFromOtherNodes(o, w, Check::kSizes, [&](int pass) { return pass < o.passes; }, [] {}));
  const double get_s = SecondsSince(start);
  start = Clock::now();
  KVTIER_ASSIGN_OR_RETURN(ReadTally checked, ReadFromOtherNodes(o, w, Check::kEveryByte, [](int pass) { return pass < 1; }, [] {}));
  const double checked_s = SecondsSince(start);
  KVTIER_ASSIGN_OR_RETURN(Baseline baseline, MeasureRedisBenchmark(o, w));

  nlohmann::json failover_errors = nullptr;
  nlohmann::json failover = nullptr;
  if (!o.failover_command.empty()) {
    std::atomic<bool> stop{false};
    Status command_status;
    auto run_command = [&] {
      std::this_thread::sleep_for(std::chrono::seconds(1));
      command_status = RunShell(o.failover_command + " 2>&1").status();
      std::this_thread::sleep_for(std::chrono::duration<double>(o.failover_seconds - 1));
      stop.store(true);
    };
    KVTIER_ASSIGN_OR_RETURN(ReadTally during,
                            ReadFromOtherNodes(o, w, Check::kEveryByte, [&](int) { return !stop.load(); }, run_command));
    KVTIER_RETURN_IF_ERROR(command_status.WithContext("--failover-command"));
    failover_errors = during.errors + during.byte_errors;
    failover = {{"command", o.failover_command}, {"seconds", o.failover_seconds}, {"blocks_read", during.blocks},
                {"missing_blocks", during.missing_blocks}, {"failed_requests", during.errors},
                {"byte_errors", during.byte_errors}, {"first_error", during.first_error}};
  }

  const double blocks_put = static_cast<double>(w.chains() * w.chain_blocks());
  const double get_gbps = static_cast<double>(reads.bytes) / 1e9 / get_s;
  nlohmann::json out = {
      {"nodes", o.nodes.size()},
      {"chains", o.chains},
      {"found_ratio", static_cast<double>(lookups.found_blocks) / (blocks_put * static_cast<double>(o.nodes.size() - 1))},
      {"byte_errors", reads.byte_errors + checked.byte_errors},
      {"lookup_p50_us", Quantile(lookups.latencies_us, 0.50)},
      {"lookup_p99_us", Quantile(lookups.latencies_us, 0.99)},
      {"get_gbps", get_gbps},
      {"baseline_gbps", baseline.gbps},
      {"failover_errors", failover_errors},
      {"ratio", baseline.gbps > 0 ? get_gbps / baseline.gbps : 0.0},
      {"get",
       {{"clients", o.clients},
        {"passes", o.passes},
        {"seconds", get_s},
        {"bytes", reads.bytes},
        {"missing_blocks", reads.missing_blocks},
        {"failed_requests", reads.errors},
        {"first_error", reads.first_error},
        {"checked_pass",
         {{"gbps", static_cast<double>(checked.bytes) / 1e9 / checked_s},
          {"blocks", checked.blocks},
          {"missing_blocks", checked.missing_blocks},
          {"failed_requests", checked.errors},
          {"byte_errors", checked.byte_errors},
          {"first_error", checked.first_error}}}}},
      {"put_seconds", put_s},
      {"chain_blocks", o.chain_blocks},
      {"block_bytes", o.block_bytes},
      {"baseline", {{"command", baseline.command}, {"what", "GET requests/s x --block-bytes"}}},
      {"failover", failover}};
  return out.dump(2) + "\n";
}

}  // namespace kvtier::bench
