#include "policy/sharded_policy.h"

#include <algorithm>
#include <array>
#include <bit>
#include <functional>
#include <mutex>
#include <utility>

namespace kvtier {

Result<std::unique_ptr<ShardedPolicy>> ShardedPolicy::Create(PolicyKind kind, const PolicyOptions& options,
                                                             std::shared_ptr<ReusePredictor> predictor) {
  KVTIER_RETURN_IF_ERROR(options.Validate());
  PolicyOptions each = options;
  each.shards = 1;
  // An even share, rounded up: a shard may fill a little past its share before the tier does.
  if (options.capacity_blocks > 0) each.capacity_blocks = (options.capacity_blocks + options.shards - 1) / options.shards;
  std::vector<std::unique_ptr<EvictionPolicy>> policies;
  for (uint32_t i = 0; i < options.shards; ++i) {
    KVTIER_ASSIGN_OR_RETURN(std::unique_ptr<EvictionPolicy> policy, NewEvictionPolicy(kind, each, predictor));
    policies.push_back(std::move(policy));
  }
  return std::unique_ptr<ShardedPolicy>(new ShardedPolicy(std::move(policies)));
}

ShardedPolicy::ShardedPolicy(std::vector<std::unique_ptr<EvictionPolicy>> policies)
    : shift_(64 - std::countr_zero(policies.size())) {
  for (auto& policy : policies) {
    shards_.push_back(std::make_unique<Shard>());
    shards_.back()->policy = std::move(policy);
  }
}

std::string_view ShardedPolicy::name() const { return shards_.front()->policy->name(); }

void ShardedPolicy::AdmitAs(const ResidentBlock& block, double now_s, bool evictable) {
  Shard& shard = ShardOf(block.key);
  std::lock_guard lock(shard.lock);
  shard.policy->Admit(block, shard.Tell(now_s));
  if (!evictable) shard.policy->SetEvictable(block.key, false);
  shard.resident.store(shard.policy->size(), std::memory_order_relaxed);
}

void ShardedPolicy::Touch(const BlockKey& key, TransitionType transition, double now_s) {
  Shard& shard = ShardOf(key);
  std::lock_guard lock(shard.lock);
  shard.policy->Touch(key, transition, shard.Tell(now_s));
}

void ShardedPolicy::TouchAll(std::span<const Hit> hits) {
  // One pass per shard that has hits, each in the hits' order; a bit per shard marks the ones
  // still to do.
  uint64_t pending = 0;
  for (const Hit& hit : hits) pending |= uint64_t{1} << IndexOf(hit.key);
  while (pending != 0) {
    const std::size_t index = static_cast<std::size_t>(std::countr_zero(pending));
    pending &= pending - 1;
    Shard& shard = *shards_[index];
    std::lock_guard lock(shard.lock);
    for (const Hit& hit : hits) {
      if (IndexOf(hit.key) == index) shard.policy->Touch(hit.key, hit.transition, shard.Tell(hit.at));
    }
  }
}

void ShardedPolicy::Remove(const BlockKey& key, double now_s) {
  Shard& shard = ShardOf(key);
  std::lock_guard lock(shard.lock);
  shard.policy->Remove(key, shard.Tell(now_s));
  shard.resident.store(shard.policy->size(), std::memory_order_relaxed);
}

void ShardedPolicy::SetEvictable(const BlockKey& key, bool evictable) {
  Shard& shard = ShardOf(key);
  std::lock_guard lock(shard.lock);
  shard.policy->SetEvictable(key, evictable);
}

void ShardedPolicy::Expect(const BlockKey& key, std::optional<uint64_t> order) {
  Shard& shard = ShardOf(key);
  std::lock_guard lock(shard.lock);
  shard.policy->Expect(key, order);
}

std::optional<ShardedPolicy::Picked> ShardedPolicy::PickVictim() {
  const std::size_t n = shards_.size();
  // Fullest first (sizes read without the locks: a snapshot may be stale by a block), then the
  // lower index: each entry is resident << 6 | (63 - index), sorted descending. A policy whose
  // victims have a standing is asked in every shard and gives the lowest (the fuller shard's on
  // a tie); one without gives the fullest shard's victim.
  std::array<uint64_t, kMaxShards> order;  // only the first n are set
  for (std::size_t i = 0; i < n; ++i) {
    order[i] = (uint64_t{shards_[i]->resident.load(std::memory_order_relaxed)} << 6) | (kMaxShards - 1 - i);
  }
  if (n > 1) std::sort(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(n), std::greater<>());
  std::optional<Picked> best;
  for (std::size_t k = 0; k < n; ++k) {
    Shard& shard = *shards_[kMaxShards - 1 - (order[k] & (kMaxShards - 1))];
    std::lock_guard lock(shard.lock);
    std::optional<StandingVictim> victim = shard.policy->VictimWithStanding();
    if (!victim) continue;
    if (!victim->standing) return Picked{&shard, *victim};
    if (!best || *victim->standing < *best->victim.standing) best = Picked{&shard, *victim};
  }
  return best;
}

std::optional<BlockKey> ShardedPolicy::Victim() {
  const std::optional<Picked> picked = PickVictim();
  if (!picked) return std::nullopt;
  return picked->victim.key;
}

bool ShardedPolicy::ShouldAdmit(const ResidentBlock& block, double now_s) {
  // One shard is asked as the policy alone would be: no Victim call first (S3-FIFO's and ARC's
  // advance their queues).
  const std::optional<Picked> picked = shards_.size() == 1 ? std::nullopt : PickVictim();
  Shard& shard = picked ? *picked->shard : ShardOf(block.key);
  std::lock_guard lock(shard.lock);
  return shard.policy->ShouldAdmit(block, shard.Tell(now_s));
}

std::optional<EvictionPolicy::StandingVictim> ShardedPolicy::VictimWithStanding() {
  const std::optional<Picked> picked = PickVictim();
  if (!picked) return std::nullopt;
  return picked->victim;
}

std::size_t ShardedPolicy::size() const {
  std::size_t total = 0;
  for (const auto& shard : shards_) total += shard->resident.load(std::memory_order_relaxed);
  return total;
}

std::vector<LockProfile> ShardedPolicy::ShardProfiles() const {
  std::vector<LockProfile> profiles;
  for (const auto& shard : shards_) profiles.push_back(shard->lock.Profile());
  return profiles;
}

LockProfile ShardedPolicy::Profile() const {
  LockProfile sum;
  for (const LockProfile& p : ShardProfiles()) sum += p;
  return sum;
}

}  // namespace kvtier
