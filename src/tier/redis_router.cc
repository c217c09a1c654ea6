#include "tier/redis_router.h"

namespace kvtier {

Result<std::unique_ptr<RedisRouter>> RedisRouter::Create(const RemoteTierOptions& options) {
  auto router = std::unique_ptr<RedisRouter>(new RedisRouter(options));
  router->slot_owner_.fill(-1);
  const bool allow_unix = options.topology == RemoteTopology::kHashRing;
  {
    std::unique_lock lock(router->map_mutex_);
    for (const std::string& text : options.endpoints) {
      KVTIER_ASSIGN_OR_RETURN(RedisEndpoint endpoint, ParseRedisEndpoint(text, allow_unix));
      router->NodeAtLocked(endpoint);
    }
  }
  if (!router->cluster()) {
    router->ring_.emplace(options.endpoints, options.virtual_nodes);
    return router;
  }
  std::string failures;
  for (const std::shared_ptr<RedisNode>& seed : router->nodes()) {
    const Status status = router->LoadSlotsFrom(*seed);
    if (status.ok()) {
      router->last_refresh_ = Clock::now();
      return router;
    }
    if (status.message().find("cluster support disabled") != std::string::npos) {
      return Status::InvalidArgument("remote tier '" + options.name + "': " + seed->address() +
                                     " is not in cluster mode; use the hash-ring topology for standalone servers");
    }
    failures += (failures.empty() ? "" : "; ") + status.message();
  }
  return Status::Unavailable("remote tier '" + options.name + "': no cluster seed answered CLUSTER SLOTS (" + failures +
                             ")");
}

std::shared_ptr<RedisNode> RedisRouter::NodeAtLocked(const RedisEndpoint& endpoint) {
  const std::string address = endpoint.ToString();
  for (const std::shared_ptr<RedisNode>& node : nodes_) {
    if (node->address() == address) return node;
  }
  nodes_.push_back(std::make_shared<RedisNode>(RedisNode::Options{
      .endpoint = endpoint,
      .auth = {.username = options_.username, .password = options_.password},
      .connections = options_.connections_per_node,
      .timeout = std::chrono::milliseconds(options_.timeout_ms),
      .reconnect_interval = std::chrono::milliseconds(options_.reconnect_interval_ms)}));
  return nodes_.back();
}

std::shared_ptr<RedisNode> RedisRouter::NodeFor(std::string_view key) const {
  std::shared_lock lock(map_mutex_);
  if (ring_) return nodes_[ring_->NodeFor(key)];
  const int32_t owner = slot_owner_[ClusterKeySlot(key)];
  return owner < 0 ? nullptr : nodes_[static_cast<std::size_t>(owner)];
}

std::shared_ptr<RedisNode> RedisRouter::NodeAt(std::string_view address) {
  Result<RedisEndpoint> endpoint = ParseRedisEndpoint(address, /*allow_unix=*/false);
  if (!endpoint.ok()) return nullptr;
  std::unique_lock lock(map_mutex_);
  return NodeAtLocked(*endpoint);
}

void RedisRouter::ApplyMoved(const Redirection& moved) {
  Result<RedisEndpoint> endpoint = ParseRedisEndpoint(moved.address, /*allow_unix=*/false);
  if (!endpoint.ok()) return;
  std::unique_lock lock(map_mutex_);
  const std::shared_ptr<RedisNode> node = NodeAtLocked(*endpoint);
  for (std::size_t i = 0; i < nodes_.size(); ++i) {
    if (nodes_[i] == node) slot_owner_[moved.slot] = static_cast<int32_t>(i);
  }
}

Status RedisRouter::LoadSlotsFrom(RedisNode& node) {
  KVTIER_ASSIGN_OR_RETURN(RedisNode::Lease lease, node.Borrow());
  RedisArgs command;
  command.Add("CLUSTER").Add("SLOTS");
  Result<RedisReply> reply = lease.connection().Command(command);
  if (!reply.ok()) {
    lease.Fail();
    return reply.status();
  }
  const std::string host = node.address().substr(0, node.address().rfind(':'));
  KVTIER_ASSIGN_OR_RETURN(std::vector<SlotRange> ranges, ParseClusterSlots(**reply, host));
  std::vector<std::pair<SlotRange, RedisEndpoint>> owners;
  for (SlotRange& range : ranges) {
    KVTIER_ASSIGN_OR_RETURN(RedisEndpoint endpoint, ParseRedisEndpoint(range.master, /*allow_unix=*/false));
    owners.emplace_back(std::move(range), std::move(endpoint));
  }
  std::unique_lock lock(map_mutex_);
  slot_owner_.fill(-1);
  for (const auto& [range, endpoint] : owners) {
    const std::shared_ptr<RedisNode> owner = NodeAtLocked(endpoint);
    int32_t index = 0;
    while (nodes_[static_cast<std::size_t>(index)] != owner) ++index;
    for (int slot = range.first; slot <= range.last; ++slot) slot_owner_[static_cast<std::size_t>(slot)] = index;
  }
  return Status::Ok();
}

void RedisRouter::RefreshSlots(bool force) {
  if (!cluster()) return;
  std::unique_lock refresh(refresh_mutex_, std::try_to_lock);
  if (!refresh.owns_lock()) return;
  const Clock::time_point now = Clock::now();
  if (!force && now - last_refresh_ < std::chrono::milliseconds(options_.reconnect_interval_ms)) return;
  last_refresh_ = now;
  for (const std::shared_ptr<RedisNode>& node : nodes()) {
    if (LoadSlotsFrom(*node).ok()) return;
  }
}

std::vector<std::shared_ptr<RedisNode>> RedisRouter::nodes() const {
  std::shared_lock lock(map_mutex_);
  return nodes_;
}

}  // namespace kvtier
