// ShardedPolicy: one tier's eviction policy split by key into shards, each a policy of the
// same kind under its own lock, so that threads admitting, touching and removing blocks of
// different chains do not queue on one lock (issue 19: on many cores one policy's lock is the
// store's serial part, docs/serve.md).
//
// Keys are hashes (block.h), so each shard holds an even sample of the tier's blocks. The
// tier's victim is the lowest of the shards' victims by their standing
// (EvictionPolicy::VictimWithStanding: last access for LRU, the expected saving for Bayes, the
// decayed count for EMA, expected reads last for the predictive policy), which is the victim
// one policy over all the blocks would pick, up to ties in the standing (broken toward the
// fuller shard, where one policy breaks them by its access sequence). It costs a hold of every
// shard per victim, one at a time. S3-FIFO and ARC order by their queues and have no such
// standing: their victim comes from the fullest shard, so their order is only approximately
// the one policy's (docs/policies.md, "Sharded policies", measures the hit rates). With one
// shard it is the policy itself behind one lock (the default: a replay's hit rates are those
// of the policy it names).
// ShouldAdmit asks the shard the next victim would come from, about the block that would leave.
//
// Time: each shard tells its policy a `now_s` that never goes back (the latest it was told),
// since two threads may call with times taken in either order.
//
// Thread-safety: every method may be called from any thread at any time. A call locks one
// shard (Victim and ShouldAdmit lock shards one after another, never two at once), so a
// caller may hold its own locks around it; it calls nothing outside the policies.
#pragma once

#include <algorithm>
#include <atomic>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "kvtier/eviction_policy.h"
#include "kvtier/lock_profile.h"
#include "util/profiled_rw_mutex.h"

namespace kvtier {

class ShardedPolicy final : public EvictionPolicy {
 public:
  static constexpr uint32_t kMaxShards = 64;  // a power of two: PickVictim masks indices with it
  static_assert(std::has_single_bit(kMaxShards));

  // `options.shards` policies of `kind` (a power of two, 1 to kMaxShards), each with an even
  // share of `options.capacity_blocks`. `predictor` as NewEvictionPolicy takes it.
  static Result<std::unique_ptr<ShardedPolicy>> Create(PolicyKind kind, const PolicyOptions& options,
                                                       std::shared_ptr<ReusePredictor> predictor);

  std::string_view name() const override;
  void Admit(const ResidentBlock& block, double now_s) override { AdmitAs(block, now_s, /*evictable=*/true); }
  // Admit, then SetEvictable(key, false) unless `evictable`, under one hold: no victim pick
  // sees the block evictable in between.
  void AdmitAs(const ResidentBlock& block, double now_s, bool evictable);
  void Touch(const BlockKey& key, TransitionType transition, double now_s) override;
  struct Hit {
    BlockKey key;
    TransitionType transition = TransitionType::kSameToolRepeat;
    double at = 0;
  };
  // Touches every hit, in order within each shard, with one hold of each shard they fall in.
  void TouchAll(std::span<const Hit> hits);
  void Remove(const BlockKey& key, double now_s) override;
  void SetEvictable(const BlockKey& key, bool evictable) override;
  std::optional<BlockKey> Victim() override;
  bool ShouldAdmit(const ResidentBlock& block, double now_s) override;
  void Expect(const BlockKey& key, std::optional<uint64_t> order) override;
  std::optional<StandingVictim> VictimWithStanding() override;
  std::size_t size() const override;

  uint32_t shards() const { return static_cast<uint32_t>(shards_.size()); }
  // Each shard's lock, in shard order: a shard's hold time is serial only with itself, so
  // the busiest shard's is the policy's serial part.
  std::vector<LockProfile> ShardProfiles() const;
  // Counts and times summed over the shards.
  LockProfile Profile() const;

 private:
  struct Shard {
    mutable ProfiledRwMutex lock;
    std::unique_ptr<EvictionPolicy> policy;  // guarded by `lock`
    double clock = 0;                        // guarded by `lock`: the latest `now_s` told
    std::atomic<std::size_t> resident{0};    // policy->size(), written under `lock`

    double Tell(double now_s) { return clock = std::max(clock, now_s); }
  };

  explicit ShardedPolicy(std::vector<std::unique_ptr<EvictionPolicy>> policies);
  Shard& ShardOf(const BlockKey& key) { return *shards_[IndexOf(key)]; }
  // A mix of both halves, unlike the policies' own tables (flat_key_map.h), so that the keys
  // of one shard still spread over a table's slots, and structured keys (tests) over shards.
  std::size_t IndexOf(const BlockKey& key) const {
    const uint64_t mixed = (key.hi ^ (key.lo * 0xff51afd7ed558ccdull)) * 0xc4ceb9fe1a85ec53ull;
    return shards_.size() == 1 ? 0 : static_cast<std::size_t>(mixed >> shift_);
  }
  // The shard to take the next victim from, and that victim; nullopt when no shard has one.
  struct Picked {
    Shard* shard = nullptr;
    StandingVictim victim;
  };
  std::optional<Picked> PickVictim();

  std::vector<std::unique_ptr<Shard>> shards_;
  int shift_ = 64;  // 64 - log2(shards)
};

}  // namespace kvtier
