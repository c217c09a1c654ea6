// One policy's run of a replay (replay.h): the real TieredStore on a virtual clock, fed the
// requests either the instant they arrive or, with an engine model (engine_model.h), when an
// engine starts their prefill, with their prompt stored when the prefill ends and their output
// when the last token is generated.
//
// Thread-safety: none; one run is one thread's.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <vector>

#include "kvtier/engine_model.h"
#include "kvtier/kv_block_layout.h"
#include "kvtier/replay.h"
#include "kvtier/store.h"
#include "replay/prefix_cache_model.h"

namespace kvtier::replay_internal {

// Changes to the store a run opens, each the removal or addition of one of the paper's parts
// (ablation.h). The defaults are the store's own settings.
struct StoreTweaks {
  bool prefetch = true;  // Default: true (RoPE-aware prefetch; a one-tier run has none anyway)
  // Head-granular eviction with a uniform prior importance (no engine reports in a replay).
  // Only blocks of exactly layout.block_bytes() split. Default: none.
  std::optional<KvBlockLayout> head_layout;
};

class PolicyRun : public EngineCache {
 public:
  // With `ids` (the requests' blocks numbered, which must outlive the run), a run of one
  // tier evicting on demand in metadata mode, without tweaks, goes through PrefixCacheModel,
  // which replays it as the store does, several times faster.
  static Result<std::unique_ptr<PolicyRun>> Open(const std::vector<ReplayRequest>& requests, PolicyKind policy,
                                                 uint64_t capacity_blocks, uint64_t block_bytes,
                                                 const ReplayOptions& options, const StoreTweaks& tweaks = {},
                                                 const ReplayIds* ids = nullptr);

  // Every request served the instant it arrives, in order: the counts, rates, speed and the
  // projected TTFT without queueing.
  Result<ReplayPolicyResult> ServeInstantly();

  // The requests through the engine model; the result also carries its report.
  Result<ReplayPolicyResult> ServeThroughEngine(const EngineOptions& engine);

  // EngineCache. A store error is kept and ends the run with it (the engine model cannot).
  Hit StartPrefill(std::size_t request, double now, std::span<const std::size_t> waiting) override;
  void PrefillDone(std::size_t request, double now) override;
  void Finished(std::size_t request, double now) override;

 private:
  PolicyRun(const std::vector<ReplayRequest>& requests, PolicyKind policy, const ReplayOptions& options);
  Status OpenStore(uint64_t capacity_blocks, uint64_t block_bytes, const StoreTweaks& tweaks);
  // Whether the model can replay this run as the store would.
  bool ModelFits(const ReplayIds& ids, const StoreTweaks& tweaks) const;
  // The policy with the options TieredStore gives the policy of its one tier.
  Status OpenModel(const ReplayIds& ids, uint64_t capacity_blocks, uint64_t block_bytes);

  // What a request found when it started.
  struct Started {
    std::size_t hit_blocks = 0;
    uint64_t hit_tokens = 0;
    uint64_t prompt_tokens = 0;
    double load_seconds = 0;  // of its hit, from the tiers it is in
  };
  // Looks the request's prompt up and reads its hit prefix, which stays pinned (in `pins_`)
  // until its prompt is stored. Counts the accesses and hits.
  Result<Started> Start(std::size_t request);
  // Start, StoreRest (its hit released after it), StoreOutput and StartPrefill on the model.
  Started StartOnModel(std::size_t request);
  void StoreOnModel(std::size_t request, std::size_t hit, bool with_output);
  void StoreOutputOnModel(std::size_t request);
  Hit StartPrefillOnModel(std::size_t request, std::span<const std::size_t> waiting);
  // One Put of the request's blocks [from, end) (prompt, then output) under the one before.
  void PutOnModel(std::size_t request, std::size_t from, std::size_t end);
  // The counts of a request that hit `hit` blocks, the i-th from tier `tiers[i]` (empty: all
  // from tier 0).
  Started CountStart(std::size_t request, std::size_t hit, std::span<const int> tiers);
  // Stores blocks [from, prompt end) of the prompt and, with `with_output`, the output.
  Status StoreRest(std::size_t request, std::size_t from, bool with_output);
  // Stores the output after the prompt's last block, if that block is still cached.
  Status StoreOutput(std::size_t request);
  Status Store(std::size_t request, std::span<const ReplayBlock> prompt_tail, std::span<const ReplayBlock> output,
               const std::optional<BlockKey>& parent);
  uint32_t BytesOf(const ReplayBlock& b) const { return static_cast<uint32_t>(b.tokens * options_.kv_bytes_per_token); }
  // What the `gathered` split blocks of a hit whose first block is in tier `tier` add to its
  // load: their lower parts come from the tier below, not from `tier` (Lookup reports only
  // the fastest tier holding a block).
  double SplitLoadSeconds(uint64_t gathered, int tier, uint32_t block_bytes) const;
  // Tells the store what the queued requests will read (the engine's known future), in
  // queue order: requests already told keep their place.
  void ExpectQueued(std::span<const std::size_t> waiting);
  // Hit rates, per-tier hits and the replay speed of a run that took `seconds`.
  void FinishResult(double seconds);

  const std::vector<ReplayRequest>& requests_;
  const PolicyKind policy_;
  const ReplayOptions& options_;
  double now_ = 0;
  std::unique_ptr<TieredStore> store_;  // or, in the default setting:
  const ReplayIds* ids_ = nullptr;
  std::unique_ptr<PrefixCacheModel> model_;
  std::vector<TierCost> costs_;
  double head_demotion_fraction_ = 0;  // 0: no head-granular eviction
  ReplayPolicyResult out_;
  std::vector<std::size_t> hit_blocks_;   // per request, once started
  std::map<std::size_t, StorePin> pins_;  // requests whose prefix is held while they prefill
  std::map<std::size_t, StoreExpectation> expectations_;  // queued requests, told to the store
  std::map<std::size_t, uint64_t> model_expectations_;     // or to the model, with their orders
  Status error_;
  // Per call scratch space, kept to save allocations.
  std::vector<BlockKey> keys_;
  std::vector<BlockPut> puts_;
  std::vector<std::vector<std::byte>> payloads_, buffers_;
  std::vector<std::span<std::byte>> outs_;
};

}  // namespace kvtier::replay_internal
