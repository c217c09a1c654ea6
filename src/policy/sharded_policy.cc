#include "policy/sharded_policy.h"

#include <bit>
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
  if (shards_.size() == 1) {
    Shard& shard = *shards_.front();
    std::lock_guard lock(shard.lock);
    for (const Hit& hit : hits) shard.policy->Touch(hit.key, hit.transition, shard.Tell(hit.at));
    return;
  }
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

std::optional<std::pair<ShardedPolicy::Shard*, BlockKey>> ShardedPolicy::PickVictim() {
  if (shards_.size() == 1) {
    Shard& shard = *shards_.front();
    std::lock_guard lock(shard.lock);
    std::optional<BlockKey> victim = shard.policy->Victim();
    if (!victim) return std::nullopt;
    return std::pair{&shard, *victim};
  }
  // The fullest shard first; past it only when its victim is missing or reluctant. Sizes are
  // read without the locks (a snapshot may be stale by a block; the next pick corrects it).
  uint64_t unasked = shards_.size() == 64 ? ~uint64_t{0} : (uint64_t{1} << shards_.size()) - 1;
  std::optional<std::pair<Shard*, BlockKey>> best;
  int best_reluctance = 0;
  while (unasked != 0) {
    std::size_t fullest = 0, most = 0;
    bool found = false;
    for (uint64_t left = unasked; left != 0; left &= left - 1) {
      const std::size_t i = static_cast<std::size_t>(std::countr_zero(left));
      const std::size_t resident = shards_[i]->resident.load(std::memory_order_relaxed);
      if (!found || resident > most) fullest = i, most = resident, found = true;
    }
    unasked &= ~(uint64_t{1} << fullest);
    Shard& shard = *shards_[fullest];
    std::lock_guard lock(shard.lock);
    const std::optional<BlockKey> victim = shard.policy->Victim();
    if (!victim) continue;
    const int reluctance = shard.policy->VictimReluctance();
    if (reluctance == 0) return std::pair{&shard, *victim};
    if (!best || reluctance < best_reluctance) best = std::pair{&shard, *victim}, best_reluctance = reluctance;
  }
  return best;
}

std::optional<BlockKey> ShardedPolicy::Victim() {
  const auto picked = PickVictim();
  if (!picked) return std::nullopt;
  return picked->second;
}

bool ShardedPolicy::ShouldAdmit(const ResidentBlock& block, double now_s) {
  // One shard is asked as the policy alone would be: no Victim call first (S3-FIFO's and ARC's
  // advance their queues).
  const auto picked = shards_.size() == 1 ? std::nullopt : PickVictim();
  Shard& shard = picked ? *picked->first : ShardOf(block.key);
  std::lock_guard lock(shard.lock);
  return shard.policy->ShouldAdmit(block, shard.Tell(now_s));
}

int ShardedPolicy::VictimReluctance() {
  const auto picked = PickVictim();
  if (!picked) return 0;
  std::lock_guard lock(picked->first->lock);
  return picked->first->policy->VictimReluctance();
}

std::size_t ShardedPolicy::size() const {
  std::size_t total = 0;
  for (const auto& shard : shards_) total += shard->resident.load(std::memory_order_relaxed);
  return total;
}

LockProfile ShardedPolicy::Profile() const {
  LockProfile sum;
  for (const auto& shard : shards_) {
    const LockProfile p = shard->lock.Profile();
    sum.exclusive_acquisitions += p.exclusive_acquisitions;
    sum.exclusive_waits += p.exclusive_waits;
    sum.exclusive_wait_seconds += p.exclusive_wait_seconds;
    sum.exclusive_hold_seconds += p.exclusive_hold_seconds;
    sum.shared_waits += p.shared_waits;
    sum.shared_wait_seconds += p.shared_wait_seconds;
  }
  return sum;
}

double ShardedPolicy::BusiestShardHoldSeconds() const {
  double busiest = 0;
  for (const auto& shard : shards_) busiest = std::max(busiest, shard->lock.Profile().exclusive_hold_seconds);
  return busiest;
}

}  // namespace kvtier
