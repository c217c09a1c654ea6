#include "redis_baseline.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <mutex>
#include <thread>

#include "tier/redis_cluster_slots.h"
#include "tier/redis_connection.h"

namespace kvtier::bench {
namespace {

using Clock = std::chrono::steady_clock;
constexpr std::size_t kWindow = 64;  // commands queued per connection before reading replies

enum class Phase { kSet, kGet, kUnlink };

// One thread's share: its keys grouped by node, one connection per node.
Status RunPhase(Phase phase, const std::vector<RedisEndpoint>& nodes, const std::vector<std::vector<uint64_t>>& keys_by_node,
                const std::string& prefix, const std::string& value, uint64_t value_bytes) {
  std::vector<std::byte> out(value_bytes);
  for (std::size_t node = 0; node < nodes.size(); ++node) {
    const std::vector<uint64_t>& keys = keys_by_node[node];
    if (keys.empty()) continue;
    KVTIER_ASSIGN_OR_RETURN(std::unique_ptr<RedisConnection> connection,
                            RedisConnection::Connect(nodes[node], std::chrono::milliseconds(10000), {}));
    for (std::size_t begin = 0; begin < keys.size(); begin += kWindow) {
      const std::size_t end = std::min(keys.size(), begin + kWindow);
      for (std::size_t k = begin; k < end; ++k) {
        const std::string key = prefix + std::to_string(keys[k]);
        RedisArgs args;
        if (phase == Phase::kSet) args.Add("SET").Add(key).Add(value);
        if (phase == Phase::kGet) args.Add("GET").Add(key);
        if (phase == Phase::kUnlink) args.Add("UNLINK").Add(key);
        KVTIER_RETURN_IF_ERROR(connection->Append(args));
      }
      for (std::size_t k = begin; k < end; ++k) {
        KVTIER_ASSIGN_OR_RETURN(RedisReply reply, connection->GetReply());
        if (IsErrorReply(*reply)) return ErrorReplyStatus(*reply, "redis baseline on " + connection->address());
        if (phase == Phase::kGet) {
          if (reply->type != REDIS_REPLY_STRING || reply->len != value_bytes) {
            return Status::Corruption("redis baseline: GET " + prefix + std::to_string(keys[k]) + " returned no value of " +
                                      std::to_string(value_bytes) + " bytes");
          }
          std::memcpy(out.data(), reply->str, value_bytes);
        }
      }
    }
  }
  return Status::Ok();
}

// Runs `phase` on every thread's share at once; returns the seconds it took.
Result<double> RunThreads(Phase phase, const std::vector<RedisEndpoint>& nodes,
                          const std::vector<std::vector<std::vector<uint64_t>>>& shares, const std::string& prefix,
                          const std::string& value, uint64_t value_bytes) {
  std::mutex mutex;
  Status first_error;
  const auto start = Clock::now();
  std::vector<std::thread> threads;
  for (const auto& share : shares) {
    threads.emplace_back([&, &share = share] {
      Status status = RunPhase(phase, nodes, share, prefix, value, value_bytes);
      std::lock_guard lock(mutex);
      if (!status.ok() && first_error.ok()) first_error = std::move(status);
    });
  }
  for (std::thread& thread : threads) thread.join();
  if (!first_error.ok()) return first_error;
  return std::chrono::duration<double>(Clock::now() - start).count();
}

}  // namespace

Result<Measure> MeasureRedisBaseline(const std::vector<std::string>& endpoints_host_port, bool cluster,
                                     uint64_t value_bytes, uint64_t count, int connections) {
  if (endpoints_host_port.empty()) return Status::InvalidArgument("redis baseline: no endpoints");
  if (value_bytes == 0 || count == 0 || connections < 1) {
    return Status::InvalidArgument("redis baseline: value_bytes, count and connections must be positive");
  }
  std::vector<RedisEndpoint> nodes;
  for (const std::string& text : endpoints_host_port) {
    KVTIER_ASSIGN_OR_RETURN(RedisEndpoint endpoint, ParseRedisEndpoint(text, /*allow_unix=*/!cluster));
    nodes.push_back(std::move(endpoint));
  }
  const std::string prefix = "kvtier-baseline:" + std::to_string(::getpid()) + ":";
  std::vector<int> slot_owner;  // cluster: slot -> index into nodes
  if (cluster) {
    KVTIER_ASSIGN_OR_RETURN(std::unique_ptr<RedisConnection> seed,
                            RedisConnection::Connect(nodes[0], std::chrono::milliseconds(10000), {}));
    RedisArgs slots_command;
    slots_command.Add("CLUSTER").Add("SLOTS");
    KVTIER_ASSIGN_OR_RETURN(RedisReply reply, seed->Command(slots_command));
    KVTIER_ASSIGN_OR_RETURN(std::vector<SlotRange> ranges, ParseClusterSlots(*reply, nodes[0].host));
    nodes.clear();
    slot_owner.assign(kClusterSlots, -1);
    for (const SlotRange& range : ranges) {
      KVTIER_ASSIGN_OR_RETURN(RedisEndpoint master, ParseRedisEndpoint(range.master, /*allow_unix=*/false));
      auto it = std::find_if(nodes.begin(), nodes.end(), [&](const RedisEndpoint& n) { return n.ToString() == master.ToString(); });
      const int index = static_cast<int>(it - nodes.begin());
      if (it == nodes.end()) nodes.push_back(std::move(master));
      std::fill(slot_owner.begin() + range.first, slot_owner.begin() + range.last + 1, index);
    }
  }
  // shares[thread][node] = the keys that thread sends to that node.
  const auto threads = static_cast<std::size_t>(connections);
  std::vector<std::vector<std::vector<uint64_t>>> shares(threads, std::vector<std::vector<uint64_t>>(nodes.size()));
  for (uint64_t n = 0; n < count; ++n) {
    int node = static_cast<int>(n % nodes.size());
    if (cluster) node = slot_owner[ClusterKeySlot(prefix + std::to_string(n))];
    if (node < 0) return Status::Unavailable("redis baseline: the cluster leaves a slot unserved");
    shares[n % threads][static_cast<std::size_t>(node)].push_back(n);
  }
  const std::string value(value_bytes, 'x');
  const double bytes = static_cast<double>(value_bytes * count);
  // The values are deleted whatever happened before, so that a failed run leaves no keys.
  Result<double> write_seconds = RunThreads(Phase::kSet, nodes, shares, prefix, value, value_bytes);
  Result<double> read_seconds = write_seconds.ok() ? RunThreads(Phase::kGet, nodes, shares, prefix, value, value_bytes)
                                                   : write_seconds;
  Result<double> deleted = RunThreads(Phase::kUnlink, nodes, shares, prefix, value, value_bytes);
  if (!read_seconds.ok()) return read_seconds.status();
  if (!deleted.ok()) return deleted.status();
  Measure measure;
  measure.write_gbps = bytes / 1e9 / *write_seconds;
  measure.read_gbps = bytes / 1e9 / *read_seconds;
  return measure;
}

}  // namespace kvtier::bench
