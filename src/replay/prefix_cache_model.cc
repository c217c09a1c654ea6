#include "replay/prefix_cache_model.h"

#include <algorithm>
#include <limits>

#include "policy/flat_key_map.h"

namespace kvtier::replay_internal {
namespace {

constexpr std::size_t kDemotionBatch = 16;  // victims per batch, as the store's movers take them
// The replay's one tier makes room only on demand (policy_run.cc): its low watermark.
constexpr double kLowWatermark = 1.0 - 1e-12;

}  // namespace

Result<ReplayIds> NumberBlocks(const std::vector<ReplayRequest>& requests) {
  ReplayIds out;
  policy_internal::FlatKeyMap<uint32_t> ids;
  out.starts.reserve(requests.size() + 1);
  auto number = [&](const ReplayBlock& b) {
    const uint32_t next = static_cast<uint32_t>(out.keys.size());
    const uint32_t* known = ids.Find(b.key);
    if (known == nullptr) {
      ids.Put(b.key, next);
      out.keys.push_back(b.key);
    }
    out.ids.push_back(known == nullptr ? next : *known);
    out.blocks.push_back(&b);
  };
  for (const ReplayRequest& r : requests) {
    out.starts.push_back(out.ids.size());
    if (out.keys.size() + r.prompt.size() + r.output.size() >= std::numeric_limits<uint32_t>::max()) {
      return Status::InvalidArgument("replay: more than 2^32 - 1 distinct blocks");
    }
    for (const ReplayBlock& b : r.prompt) number(b);
    for (const ReplayBlock& b : r.output) number(b);
  }
  out.starts.push_back(out.ids.size());
  return out;
}

PrefixCacheModel::PrefixCacheModel(std::unique_ptr<EvictionPolicy> policy, std::size_t blocks, uint64_t capacity_bytes)
    : policy_(std::move(policy)), nodes_(blocks), capacity_(capacity_bytes) {}

std::size_t PrefixCacheModel::Lookup(std::span<const uint32_t> chain) const {
  uint32_t previous = kNoParent;
  std::size_t hit = 0;
  for (uint32_t id : chain) {
    const Node& n = nodes_[id];
    if (!n.resident || n.parent != previous) break;
    previous = id;
    ++hit;
  }
  return hit;
}

void PrefixCacheModel::Read(std::span<const uint32_t> hit, TransitionType transition, double now) {
  // TieredStore::Pin, then Get: every block is pinned before the first is touched.
  for (uint32_t id : hit) {
    ++nodes_[id].pins;
    Refresh(id);
  }
  for (uint32_t id : hit) policy_->Touch(PolicyKey(id), transition, now);
}

void PrefixCacheModel::Release(std::span<const uint32_t> hit) {
  for (uint32_t id : hit) {
    Node& n = nodes_[id];
    if (n.pins > 0) --n.pins;
    Refresh(id);
  }
}

void PrefixCacheModel::Refresh(uint32_t id) {
  Node& n = nodes_[id];
  if (!n.resident) return;
  const bool evictable = n.pins == 0 && !n.moving && n.children == 0;
  if (evictable == n.evictable) return;  // the store would repeat it; policies ignore a repeat
  n.evictable = evictable;
  policy_->SetEvictable(PolicyKey(id), evictable);
}

void PrefixCacheModel::Put(std::span<const uint32_t> chain, std::span<const ReplayBlock* const> blocks, uint32_t parent,
                           const ModelBlockFacts& facts, double now) {
  // The chain stays pinned until its end: room for block i + 1 must not come from block i.
  pinned_.clear();
  uint32_t previous = parent;
  for (std::size_t i = 0; i < chain.size(); ++i) {
    const uint32_t id = chain[i];
    Node& n = nodes_[id];
    if (n.resident) {
      if (n.parent != previous) break;  // stored under another parent: a hash collision
      policy_->Touch(PolicyKey(id), facts.transition, now);
      ++n.pins;
      pinned_.push_back(id);
      Refresh(id);
      previous = id;
      continue;
    }
    // Indexed under `previous` first (the room made for it must not take its parent), which
    // the index must hold: an output whose prompt has left is not stored.
    if (previous != kNoParent && !nodes_[previous].indexed) break;
    n.indexed = true;
    n.parent = previous;
    n.bytes = static_cast<uint32_t>(blocks[i]->tokens * facts.kv_bytes_per_token);
    if (previous != kNoParent) {
      ++nodes_[previous].children;
      Refresh(previous);
    }
    if (!StoreNew(id, *blocks[i], facts, now)) break;
    previous = id;
  }
  for (uint32_t id : pinned_) {
    Node& n = nodes_[id];
    if (n.pins > 0) --n.pins;
    Refresh(id);
  }
}

bool PrefixCacheModel::StoreNew(uint32_t id, const ReplayBlock& block, const ModelBlockFacts& facts, double now) {
  Node& n = nodes_[id];
  const ResidentBlock resident{.key = PolicyKey(id),
                               .bytes = n.bytes,
                               .tokens = block.tokens,
                               .type = block.type,
                               .transition = facts.transition,
                               .recompute_seconds = block.tokens * facts.recompute_seconds_per_token,
                               .expected_order = expected_.Soonest(PolicyKey(id))};
  const bool full = used_ + n.bytes > capacity_;
  if (full && policy_->ShouldAdmit(resident, now)) MakeRoom(n.bytes, now);
  if (used_ + n.bytes > capacity_) {  // refused, or no room could be made
    Forget(id);
    return false;
  }
  ++n.pins;
  pinned_.push_back(id);
  n.resident = true;
  used_ += n.bytes;
  policy_->Admit(resident, now);
  n.evictable = true;  // an admitted block starts evictable (eviction_policy.h)
  Refresh(id);
  return true;
}

uint64_t PrefixCacheModel::Expect(std::span<const uint32_t> chain) {
  const uint64_t order = ++expect_sequence_;
  // Orders only grow, so a block's soonest read changes only when this is its first.
  for (uint32_t id : chain) {
    if (expected_.Add(PolicyKey(id), order) == order && nodes_[id].resident) policy_->Expect(PolicyKey(id), order);
  }
  return order;
}

void PrefixCacheModel::Unexpect(std::span<const uint32_t> chain, uint64_t order) {
  for (uint32_t id : chain) {
    const bool was_soonest = expected_.Soonest(PolicyKey(id)) == order;
    const std::optional<uint64_t> soonest = expected_.Remove(PolicyKey(id), order);
    if (was_soonest && nodes_[id].resident) policy_->Expect(PolicyKey(id), soonest);
  }
}

void PrefixCacheModel::MakeRoom(uint64_t need, double now) {
  for (;;) {
    PlanVictims(need);
    if (batch_.empty()) return;
    DropVictims(now);
  }
}

void PrefixCacheModel::PlanVictims(uint64_t need) {
  batch_.clear();
  const double target = kLowWatermark * static_cast<double>(capacity_);
  uint64_t planned = 0;
  while (batch_.size() < kDemotionBatch) {
    const uint64_t remaining = used_ - std::min(used_, planned);
    if (static_cast<double>(remaining) <= target && remaining + need <= capacity_) break;
    const std::optional<BlockKey> victim = policy_->Victim();
    if (!victim) break;
    const auto id = static_cast<uint32_t>(victim->lo - 1);  // PolicyKey(id)
    Node& v = nodes_[id];
    v.moving = true;
    Refresh(id);
    if (v.children != 0) {  // not a leaf, so in the one tier it has nowhere to go: the store stops
      v.moving = false;
      Refresh(id);
      break;
    }
    planned += v.bytes;
    batch_.push_back(id);
  }
}

void PrefixCacheModel::DropVictims(double now) {
  for (uint32_t id : batch_) {
    Node& v = nodes_[id];
    // The store ends the victim's move first, telling the policy it is evictable again, then
    // removes it; the policy's state after the Remove is the same without that.
    v.moving = false;
    v.resident = false;
    used_ -= std::min<uint64_t>(used_, v.bytes);
    policy_->Remove(PolicyKey(id), now);
  }
  for (uint32_t id : batch_) Forget(id);
}

void PrefixCacheModel::Forget(uint32_t id) {
  for (uint32_t next = id; next != kNoParent;) {
    Node& n = nodes_[next];
    if (!n.indexed || n.resident || n.children != 0 || n.pins > 0 || n.moving) return;
    n.indexed = false;
    n.evictable = false;
    if (n.parent != kNoParent) {
      --nodes_[n.parent].children;
      Refresh(n.parent);
    }
    next = n.parent;
  }
}

}  // namespace kvtier::replay_internal
