// EvictionPolicy: which resident block of one tier to evict or demote next.
//
// The store keeps one policy per tier and tells it what happens to the tier's blocks (Admit,
// Touch, Remove) and which of them may leave now (SetEvictable): the prefix index evicts
// leaf-first, so a block with a cached child, or one pinned by a running request, is not
// evictable. Victim() names the best evictable block; the store moves or drops it and then
// calls Remove. Policies see metadata only, never payloads, and take `now_s` from the
// caller (wall clock or a trace's virtual clock), so replays are deterministic. `now_s`
// must not decrease from one call to the next.
//
// Kinds (docs/policies.md compares them):
//  - kLru: least recently used evictable block first (SGLang's radix-cache order).
//  - kEma: lowest exponentially decayed access frequency first (the paper's EMA baseline).
//  - kS3Fifo: S3-FIFO (Yang et al., SOSP'23): a small probationary FIFO, a main FIFO with
//    2-bit frequencies, a ghost queue.
//  - kArc: ARC (Megiddo & Modha, FAST'03): recency and frequency lists, adaptive split.
//  - kBayes: the paper's policy: lowest expected saving per byte, P_reuse x (recompute time -
//    load time) / bytes, discounted by staleness, with P_reuse from a shared ReusePredictor
//    (reuse_predictor.h).
//  - kPredictive: least recently used first, except that blocks a queued request will read
//    (Expect) leave only after every other block, the latest-needed of them first. It acts on
//    the engine's known future, its waiting queue: docs/policies.md and docs/gap_analysis.md
//    say what that is worth and why the trace's past alone is worth little more than LRU.
//
// Costs: every operation is O(1) (S3-FIFO, ARC; amortized) or O(log n) (LRU, EMA, Bayes);
// about 100-130 bytes per resident block (entry, key table at half load, heap slot), plus
// ghosts for S3-FIFO, ARC and Bayes; no allocation per operation once tables have grown.
//
// Thread-safety: a policy is not thread-safe; the store serializes the calls for one tier.
// Different policies may be used from different threads (they share only the predictor,
// which is thread-safe).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string_view>

#include "kvtier/block.h"
#include "kvtier/status.h"

namespace kvtier {

class ReusePredictor;

// What the store knows about a block when it becomes resident in a tier.
struct ResidentBlock {
  BlockKey key;
  uint32_t bytes = 0;   // payload size in this tier
  uint32_t tokens = 0;  // tokens it covers
  BlockType type = BlockType::kUserContext;
  TransitionType transition = TransitionType::kSameToolRepeat;  // of the access that brought it here
  double recompute_seconds = 0;  // prefill time to rebuild it if it is lost from every tier
  // When a queued request will read it, the order of the soonest such read (Expect).
  std::optional<uint64_t> expected_order;
};

// A victim's place in its policy's order, comparable across policies of one kind and options:
// the lower leaves first, field by field. Ties are the shards' own business (the policy's
// access sequence is its own).
struct VictimStanding {
  int reluctance = 0;       // 1: a block a queued request will read (the predictive policy)
  double rank = 0;          // the policy's order: last access (LRU), ln decayed count (EMA), ...
  double last_access = 0;   // then the least recently used first
  friend auto operator<=>(const VictimStanding&, const VictimStanding&) = default;
};

class EvictionPolicy {
 public:
  virtual ~EvictionPolicy() = default;

  virtual std::string_view name() const = 0;

  // `block` became resident; it starts evictable. Admitting a key that is already resident
  // counts as a Touch with the block's transition.
  virtual void Admit(const ResidentBlock& block, double now_s) = 0;

  // A hit on a resident block. Ignored for a key that is not resident.
  virtual void Touch(const BlockKey& key, TransitionType transition, double now_s) = 0;

  // The block left the tier (evicted, demoted or invalidated). Ignored when not resident.
  virtual void Remove(const BlockKey& key, double now_s) = 0;

  // Only evictable blocks are ever victims. Ignored for a key that is not resident.
  virtual void SetEvictable(const BlockKey& key, bool evictable) = 0;

  // The block to evict next: resident and evictable, or nullopt when none is. Not removed:
  // the store calls Remove once the block is moved or dropped. Calling Victim again without
  // a Remove in between returns the same block. Not const: S3-FIFO and ARC advance their
  // queues and Bayes settles expired predictions here.
  virtual std::optional<BlockKey> Victim() = 0;

  // Asked before admitting into a full tier: false when the block should bypass the tier
  // (Bayes refuses blocks predicted useless; the predictive policy refuses a block no queued
  // request will read when the block that would leave is one a queued request will read).
  // The others admit everything.
  virtual bool ShouldAdmit(const ResidentBlock& /*block*/, double /*now_s*/) { return true; }

  // A queued request will read the block: `order` ranks the expected reads (smaller is read
  // sooner); nullopt when no queued request needs it any more. Given for resident blocks and
  // again whenever one becomes resident. Policies that do not predict ignore it.
  virtual void Expect(const BlockKey& /*key*/, std::optional<uint64_t> /*order*/) {}

  // Victim(), and where it stands against the victims of other policies of the same kind and
  // options: a sharded tier (src/policy/sharded_policy.h) takes the lowest of its shards'
  // victims, which is the one policy's victim over all their blocks. The standing is nullopt
  // for a policy whose order is its queues' and has no such measure (S3-FIFO, ARC).
  struct StandingVictim {
    BlockKey key;
    std::optional<VictimStanding> standing;
  };
  virtual std::optional<StandingVictim> VictimWithStanding() {
    const std::optional<BlockKey> victim = Victim();
    if (!victim) return std::nullopt;
    return StandingVictim{.key = *victim};
  }

  // Resident blocks, evictable or not.
  virtual std::size_t size() const = 0;
};

// In configs and on the command line: "lru", "ema", "s3fifo", "arc", "bayes", "predictive".
enum class PolicyKind : uint8_t { kLru = 0, kEma = 1, kS3Fifo = 2, kArc = 3, kBayes = 4, kPredictive = 5 };
std::string_view PolicyKindName(PolicyKind kind);
// Whether a policy of `kind` split into shards gives the victims one policy would
// (VictimWithStanding): all but S3-FIFO and ARC, whose order is their queues'.
bool ShardsKeepOrder(PolicyKind kind);
Result<PolicyKind> ParsePolicyKind(std::string_view name);

struct PolicyOptions {
  // Blocks the tier holds when full: sizes S3-FIFO's small and ghost queues, ARC's c and
  // Bayes's ghost. Default: 0 = the most blocks resident at once so far (the store evicts
  // only when full, so the high-water mark is the capacity once the tier has filled).
  std::size_t capacity_blocks = 0;

  // EMA: time constant of the decay: score = score * exp(-dt / tau) + 1 per access.
  double ema_tau_s = 60;  // Default: 60 s

  // S3-FIFO: share of capacity for the small (probationary) queue.
  double s3fifo_small_fraction = 0.1;  // Default: 0.1 (the paper's 10%)
  // S3-FIFO: ghost entries kept, as a share of capacity.
  double s3fifo_ghost_fraction = 0.9;  // Default: 0.9 (as many as the main queue holds)
  // S3-FIFO: accesses (capped at 3) a small-queue block needs to move to main.
  int s3fifo_move_to_main_threshold = 1;  // Default: 1 (accessed once after admission)

  // Bayes: how fast this tier hands a block back to the GPU: load time = latency +
  // bytes / bandwidth, weighed against the block's recompute time.
  double tier_bandwidth_bytes_per_s = 204e9;  // Default: 204 GB/s (the paper's T1 pinned DRAM)
  double tier_latency_s = 2e-6;               // Default: 2 us (T1)
  // Bayes: time constant of the staleness discount exp(-(now - last access) / tau) on a
  // block's expected saving (bayes_policy.cc says why). Default: 0 = the predictor's
  // horizon / 4.
  double bayes_staleness_tau_s = 0;
  // Bayes: ShouldAdmit refuses blocks with P_reuse below this.
  double bayes_admit_threshold = 0;  // Default: 0 (admit all)
  // Bayes: feed the predictor from this tier's accesses. In a multi-tier store, enable it on
  // the tier every access goes through (T0), so each access is counted once.
  bool bayes_learn = true;  // Default: true
  // Bayes: removed blocks remembered until their horizon ends (a re-admission within the
  // horizon is the reuse their eviction prevented), as a share of capacity; about 100 bytes
  // each. When more blocks leave within one horizon, the oldest ghosts count as no-reuse.
  double bayes_ghost_fraction = 4.0;  // Default: 4 (a tier turning over 4 times per horizon)

  // Independent shards of the policy, each under its own lock, by key (a power of two, 1 to
  // 64): threads working on different blocks meet less, and the victim order is the one
  // policy's only approximately (src/policy/sharded_policy.h; docs/policies.md measures the
  // hit rates). Default: 1 (one policy over the whole tier, exactly its order). `kvtier serve`
  // chooses its own default (docs/serve.md, `store.policy_shards`).
  uint32_t shards = 1;

  Status Validate() const;
};

// A new policy of `kind`. `predictor` is required for kBayes (InvalidArgument without one)
// and ignored by the others. With `options.shards` above 1, a thread-safe ShardedPolicy of
// that many policies of `kind`.
Result<std::unique_ptr<EvictionPolicy>> NewEvictionPolicy(PolicyKind kind, const PolicyOptions& options,
                                                          std::shared_ptr<ReusePredictor> predictor = nullptr);

}  // namespace kvtier
