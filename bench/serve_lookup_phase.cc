#include "serve_lookup_phase.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <optional>
#include <string>

#include "kvtier/client.h"
#include "kvtier/protocol.h"
#include "lookup_load.h"
#include "redis_benchmark_baseline.h"
#include "scaling_projection.h"
#include "serve_daemon.h"

namespace kvtier::bench {
namespace {

constexpr uint32_t kBlockBytes = 4096;

std::vector<std::vector<BlockKey>> MakeChains(const LookupPhaseOptions& o) {
  std::vector<std::vector<BlockKey>> chains(static_cast<std::size_t>(o.chains));
  for (std::size_t c = 0; c < chains.size(); ++c) {
    for (int i = 0; i < o.chain_blocks; ++i) chains[c].push_back({0x6c6f6f6b00000000ull + c, static_cast<uint64_t>(i) + 1});
  }
  return chains;
}

// Puts every chain into the daemon through one client over its Unix socket and shared memory.
Status Populate(const ServeDaemon& daemon, const std::vector<std::vector<BlockKey>>& chains) {
  const std::size_t n = chains.front().size();
  ClientOptions options;
  options.shared_memory_bytes = n * kBlockBytes;
  KVTIER_ASSIGN_OR_RETURN(std::unique_ptr<Client> client, Client::ConnectUnix(daemon.socket_path(), options));
  const std::span<std::byte> shared = client->shared_memory();
  std::memset(shared.data(), 0x5a, shared.size());
  std::vector<ClientBlock> blocks(n);
  for (const std::vector<BlockKey>& chain : chains) {
    for (std::size_t i = 0; i < n; ++i) {
      blocks[i] = {.key = chain[i], .payload = shared.subspan(i * kBlockBytes, kBlockBytes), .tokens = 16};
    }
    KVTIER_ASSIGN_OR_RETURN(protocol::PutReply put, client->Put(blocks));
    if (put.new_blocks + put.present_blocks < n) {
      return Status::ResourceExhausted("the daemon stored " + std::to_string(put.new_blocks + put.present_blocks) + " of a " +
                                       std::to_string(n) + "-block chain: lower --lookup-chains");
    }
  }
  return Status::Ok();
}

// The bytes of a Lookup reply frame that found the whole chain: the value size of the Redis GETs.
Result<uint64_t> LookupReplyBytes(int chain_blocks) {
  const auto n = static_cast<uint32_t>(chain_blocks);
  protocol::ChainLookup found{.prefix_blocks = n, .load_blocks = n, .tier = std::vector<uint8_t>(n),
                              .bytes = std::vector<uint32_t>(n, kBlockBytes)};
  std::vector<std::byte> frame;
  KVTIER_RETURN_IF_ERROR(protocol::EncodeFrame(protocol::LookupReply{.chains = {found}}, 1, protocol::MessageType::kLookup,
                                               {}, frame));
  return frame.size();
}

double Percentile(const std::vector<float>& sorted, double p) {
  if (sorted.empty()) return 0;
  return sorted[std::min(sorted.size() - 1, static_cast<std::size_t>(p * static_cast<double>(sorted.size())))];
}

double Mean(const std::vector<float>& values) {
  double sum = 0;
  for (const float v : values) sum += v;
  return sum / static_cast<double>(values.size());
}

// One client count on one pinned daemon: the load, the daemon's CPU and its own lookup time.
Result<nlohmann::json> MeasureClients(const ServeDaemon& daemon, const LookupPhaseOptions& o, int cores, int clients,
                                      const std::vector<std::vector<BlockKey>>& chains) {
  std::optional<Result<double>> cpu_before;
  std::optional<Result<MetricsSample>> metrics_before;
  LookupLoadOptions load{.port = daemon.tcp_port(), .unix_socket = o.tcp ? "" : daemon.socket_path(),
                         .clients = clients, .threads = o.threads, .seconds = o.seconds,
                         .seed = o.seed * 131 + static_cast<uint64_t>(clients)};
  load.at_window_start = [&] {
    cpu_before.emplace(daemon.CpuSeconds());
    metrics_before.emplace(daemon.Metrics("lookup"));
  };
  KVTIER_ASSIGN_OR_RETURN(LookupLoadResult r, RunLookupLoad(load, chains));
  KVTIER_ASSIGN_OR_RETURN(const double cpu_after, daemon.CpuSeconds());
  KVTIER_ASSIGN_OR_RETURN(const MetricsSample after, daemon.Metrics("lookup"));
  KVTIER_RETURN_IF_ERROR(cpu_before->status());
  KVTIER_RETURN_IF_ERROR(metrics_before->status());
  const auto per_lookup_us = [&r](double seconds) {
    return r.lookups > 0 ? seconds / static_cast<double>(r.lookups) * 1e6 : 0.0;
  };
  const MetricsSample& before = **metrics_before;
  const uint64_t served = after.request.count - before.request.count;
  const double server_s = after.request.sum_seconds - before.request.sum_seconds;
  nlohmann::json j = {
      {"cores", cores},
      {"clients", clients},
      {"lookups_per_s", static_cast<double>(r.lookups) / r.elapsed_s},
      {"mean_lookup_us", r.latencies_us.empty() ? 0.0 : Mean(r.latencies_us)},
      {"p50_lookup_us", Percentile(r.latencies_us, 0.50)},
      {"p99_lookup_us", Percentile(r.latencies_us, 0.99)},
      {"server_lookup_us", served > 0 ? server_s / static_cast<double>(served) * 1e6 : 0.0},
      {"cpu_us_per_lookup", per_lookup_us(cpu_after - **cpu_before)},
      {"loop_cpu_us_per_lookup", per_lookup_us(after.event_loop_cpu_seconds - before.event_loop_cpu_seconds)},
      {"lookups", r.lookups},
      {"misses", r.misses},
      {"errors", r.errors}};
  if (r.errors > 0) j["first_error"] = r.first_error;
  AddLockFields(before.locks, after.locks, r.lookups, "cpu_us_per_lookup", "loop_cpu_us_per_lookup", j);
  return j;
}

// Every client count on a daemon pinned to `cores`: results appended to by_clients[clients].
Status RunOnCores(const LookupPhaseOptions& o, int cores, const std::vector<std::vector<BlockKey>>& chains,
                  std::map<int, nlohmann::json>& by_clients) {
  const int most = *std::max_element(o.clients.begin(), o.clients.end());
  const ServeDaemonOptions daemon_options{.persist = false,
                                          .policy_shards = o.policy_shards,
                                          .index_shards = o.index_shards,
                                          .max_connections = static_cast<uint32_t>(most) + 16,
                                          .cores = cores,
                                          .event_loops = o.event_loops_per_core * static_cast<uint32_t>(cores)};
  KVTIER_ASSIGN_OR_RETURN(std::unique_ptr<ServeDaemon> daemon, ServeDaemon::Start(daemon_options));
  KVTIER_RETURN_IF_ERROR(Populate(*daemon, chains).WithContext("storing the lookup chains"));
  // The DRAM tier's prefault would otherwise share the pinned cores with the first client
  // count's lookups (a third of the daemon's CPU in a 256-client profile) and count in its CPU.
  const double prefault_wait_s =
      daemon_options.dram_prefault ? WaitUntilResident(daemon->pid(), daemon_options.dram_mib << 20) : 0;
  for (const int clients : o.clients) {
    Result<nlohmann::json> j = MeasureClients(*daemon, o, cores, clients, chains);
    if (!j.ok()) return j.status().WithContext(std::to_string(clients) + " lookup clients on " + std::to_string(cores) + " cores");
    (*j)["prefault_wait_s"] = prefault_wait_s;
    by_clients[clients].push_back(std::move(*j));
  }
  return daemon->Stop().WithContext("stopping the lookup phase's daemon");
}

// The redis-benchmark GET fields of one client count's entry (an error note instead when it failed).
void AddBaseline(const RedisGetBaseline* redis, const std::string& unavailable, const LookupPhaseOptions& o,
                 nlohmann::json& entry) {
  double fastest = 0;
  for (const nlohmann::json& run : entry["by_cores"]) fastest = std::max(fastest, run["lookups_per_s"].get<double>());
  const int clients = entry["clients"];
  const auto requests = std::max<uint64_t>(static_cast<uint64_t>(clients) * 20, static_cast<uint64_t>(fastest * o.seconds));
  Result<RedisGetResult> r = redis != nullptr ? redis->Run(clients, o.threads, requests, 3 * o.seconds + 30, !o.tcp)
                                              : Result<RedisGetResult>(Status::Unavailable(unavailable));
  if (!r.ok()) {
    entry["baseline_lookups_per_s"] = nullptr;
    entry["baseline_error"] = r.status().message();
    return;
  }
  entry["baseline_lookups_per_s"] = r->gets_per_s;
  entry["baseline_p99_us"] = r->p99_us;
  entry["ratio"] = entry["lookups_per_s"].get<double>() / r->gets_per_s;
}

}  // namespace

Result<nlohmann::json> RunLookupPhases(const LookupPhaseOptions& o, uint64_t& errors) {
  const std::vector<std::vector<BlockKey>> chains = MakeChains(o);
  std::map<int, nlohmann::json> by_clients;
  for (const int cores : o.cores) KVTIER_RETURN_IF_ERROR(RunOnCores(o, cores, chains, by_clients));
  KVTIER_ASSIGN_OR_RETURN(const uint64_t reply_bytes, LookupReplyBytes(o.chain_blocks));
  Result<std::unique_ptr<RedisGetBaseline>> redis = RedisGetBaseline::Start(reply_bytes);
  nlohmann::json out = nlohmann::json::array();
  for (const int clients : o.clients) {
    nlohmann::json& runs = by_clients[clients];
    const nlohmann::json& widest = runs.back();  // the last core count given (by default the most)
    nlohmann::json entry = {{"clients", clients},
                            {"transport", o.tcp ? "tcp" : "unix"},
                            {"cores", widest["cores"]},
                            {"lookups_per_s", widest["lookups_per_s"]},
                            {"p99_lookup_us", widest["p99_lookup_us"]},
                            {"mean_lookup_us", widest["mean_lookup_us"]},
                            {"server_lookup_us", widest["server_lookup_us"]},
                            {"cpu_us_per_lookup", widest["cpu_us_per_lookup"]},
                            {"loop_cpu_us_per_lookup", widest["loop_cpu_us_per_lookup"]},
                            {"lock_hold_us_per_op", widest.value("lock_hold_us_per_op", 0.0)},
                            {"tier_lock_hold_us_per_op", widest.value("tier_lock_hold_us_per_op", 0.0)},
                            {"index_lock_hold_us_per_op", widest.value("index_lock_hold_us_per_op", 0.0)},
                            {"projected", widest.value("projected", nlohmann::json())},
                            {"baseline_value_bytes", reply_bytes},
                            {"errors", 0},
                            {"by_cores", runs}};
    uint64_t entry_errors = 0;
    for (const nlohmann::json& run : runs) entry_errors += run["errors"].get<uint64_t>();
    entry["errors"] = entry_errors;
    errors += entry_errors;
    const double first = runs.front()["lookups_per_s"];
    if (runs.size() > 1 && first > 0) entry["speedup"] = widest["lookups_per_s"].get<double>() / first;
    AddBaseline(redis.ok() ? redis->get() : nullptr, redis.status().message(), o, entry);
    out.push_back(std::move(entry));
  }
  return out;
}

}  // namespace kvtier::bench
