// RedisRouter: which Redis node serves a key, for both remote-pool topologies.
//  - kHashRing: the endpoints are all the nodes, placed on a consistent-hash ring (hash_ring.h).
//  - kCluster: the endpoints are seeds. The 16384-slot map comes from CLUSTER SLOTS of any
//    node that answers; a MOVED reply updates its slot at once and asks for a full refresh,
//    and nodes named by the cluster are added as they appear (never removed: a node that
//    left is just down). A refresh also runs, at most once per reconnect interval, when a
//    node is found down, so that a failover's new master is picked up.
//
// Thread-safety: every method may be called concurrently. `map_mutex_` (shared) guards the
// node list and the slot map; `refresh_mutex_` lets one refresh run at a time. Lock order:
// refresh_mutex_, then map_mutex_; no network call runs under map_mutex_.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <string>
#include <vector>

#include "kvtier/tiers.h"
#include "tier/hash_ring.h"
#include "tier/redis_cluster_slots.h"
#include "tier/redis_node.h"

namespace kvtier {

class RedisRouter {
 public:
  // For kCluster, reads the slot map from the first seed that answers: Unavailable when
  // none does, InvalidArgument when a seed is not in cluster mode. `options` are valid.
  static Result<std::unique_ptr<RedisRouter>> Create(const RemoteTierOptions& options);

  // The node serving `key`: nullptr when no node serves its slot (a cluster with uncovered
  // slots).
  std::shared_ptr<RedisNode> NodeFor(std::string_view key) const;
  // The node at `address` ("host:port", as in a redirection), added when new; nullptr when
  // the address cannot be parsed.
  std::shared_ptr<RedisNode> NodeAt(std::string_view address);

  // Follows a MOVED reply: its slot now belongs to its address. The caller then calls
  // RefreshSlots: a MOVED usually means more slots moved.
  void ApplyMoved(const Redirection& moved);
  // Re-reads the slot map (kCluster; a no-op for kHashRing). Unless `force`, runs at most once
  // per reconnect interval; skipped while another thread refreshes.
  void RefreshSlots(bool force);

  std::vector<std::shared_ptr<RedisNode>> nodes() const;
  bool cluster() const { return options_.topology == RemoteTopology::kCluster; }

 private:
  using Clock = std::chrono::steady_clock;

  explicit RedisRouter(const RemoteTierOptions& options) : options_(options) {}
  std::shared_ptr<RedisNode> NodeAtLocked(const RedisEndpoint& endpoint);
  // CLUSTER SLOTS from `node`, applied to the map.
  Status LoadSlotsFrom(RedisNode& node);

  const RemoteTierOptions options_;
  std::optional<HashRing> ring_;  // kHashRing; immutable after Create

  mutable std::shared_mutex map_mutex_;
  std::vector<std::shared_ptr<RedisNode>> nodes_;  // GUARDED_BY(map_mutex_): append-only
  std::array<int32_t, kClusterSlots> slot_owner_{};  // GUARDED_BY(map_mutex_): index into nodes_, -1 none

  std::mutex refresh_mutex_;
  Clock::time_point last_refresh_;  // GUARDED_BY(refresh_mutex_)
};

}  // namespace kvtier
