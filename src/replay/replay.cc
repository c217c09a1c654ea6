#include "kvtier/replay.h"

#include <algorithm>
#include <limits>
#include <cmath>
#include <unordered_map>

#include "kvtier/gap_analysis.h"
#include "kvtier/optimal_bound.h"
#include "kvtier/store.h"
#include "replay/policy_run.h"

namespace kvtier {
namespace {

// The requests as the optimum sees them: dense ids, generated blocks as insertions.
struct DenseTrace {
  PrefixTrace trace;
  uint64_t unique_blocks = 0;
  uint64_t max_block_tokens = 1;
};

Result<DenseTrace> ToPrefixTrace(const std::vector<ReplayRequest>& requests, bool cache_output) {
  DenseTrace out;
  std::unordered_map<BlockKey, uint64_t, BlockKeyHash> dense;
  std::vector<uint64_t> ids;
  std::vector<uint32_t> tokens;
  for (const ReplayRequest& r : requests) {
    ids.clear();
    tokens.clear();
    auto add = [&](const ReplayBlock& b) {
      ids.push_back(dense.try_emplace(b.key, dense.size()).first->second);
      tokens.push_back(b.tokens);
    };
    for (const ReplayBlock& b : r.prompt) {
      add(b);
      out.max_block_tokens = std::max<uint64_t>(out.max_block_tokens, b.tokens);
    }
    std::size_t inserted = 0;
    if (cache_output) {
      for (const ReplayBlock& b : r.output) add(b);
      inserted = r.output.size();
    }
    if (ids.empty()) continue;
    KVTIER_RETURN_IF_ERROR(out.trace.AddRequest(ids, tokens, inserted));
  }
  out.unique_blocks = dense.size();
  return out;
}

ReplayPolicyResult FromHitStats(const std::string& name, const HitStats& h) {
  return {.policy = name,
          .accesses = h.accesses,
          .hit_blocks = h.hits,
          .tokens = h.tokens,
          .hit_tokens = h.hit_tokens,
          .block_hit_rate = h.block_hit_rate,
          .token_hit_rate = h.token_hit_rate};
}

Result<ReplayPolicyResult> ReplayPolicy(const std::vector<ReplayRequest>& requests,
                                        const replay_internal::ReplayIds& ids, PolicyKind policy,
                                        uint64_t capacity_blocks, uint64_t block_bytes, const ReplayOptions& options) {
  KVTIER_ASSIGN_OR_RETURN(std::unique_ptr<replay_internal::PolicyRun> run,
                          replay_internal::PolicyRun::Open(requests, policy, capacity_blocks, block_bytes, options,
                                                           {}, &ids));
  return options.engine ? run->ServeThroughEngine(*options.engine) : run->ServeInstantly();
}

}  // namespace

Status ReplayOptions::Validate() const {
  if (policies.empty()) return Status::InvalidArgument("replay: no policies");
  if (capacity_blocks == 0 && !(capacity_fraction > 0 && capacity_fraction <= 1)) {
    return Status::InvalidArgument("replay: capacity_fraction must be in (0, 1] when capacity_blocks is 0");
  }
  if (kv_bytes_per_token == 0) return Status::InvalidArgument("replay: kv_bytes_per_token must be > 0");
  if (!(recompute_seconds_per_token >= 0)) return Status::InvalidArgument("replay: recompute_seconds_per_token must be >= 0");
  // The policies' own check, so that the two cannot disagree on what a shard count may be.
  KVTIER_RETURN_IF_ERROR(PolicyOptions{.shards = policy_shards}.Validate().WithContext("replay: policy_shards"));
  if (engine) {
    if (!cost_model) return Status::InvalidArgument("replay: the engine model needs a cost model (the GPU's prefill speed)");
    KVTIER_RETURN_IF_ERROR(engine->Validate());
  }
  return Status::Ok();
}

namespace {

// The trace, its block size and the capacity the options give, as Replay and AnalyzeReplayGap
// both need them.
struct Setup {
  DenseTrace dense;
  replay_internal::ReplayIds ids;  // the policies' runs number blocks their own way (prefix_cache_model.h)
  uint64_t block_bytes = 0;
  uint64_t capacity_blocks = 0;
};

Result<Setup> PrepareReplay(const std::vector<ReplayRequest>& requests, const ReplayOptions& options) {
  KVTIER_RETURN_IF_ERROR(options.Validate());
  Setup setup;
  KVTIER_ASSIGN_OR_RETURN(setup.dense, ToPrefixTrace(requests, options.cache_output));
  KVTIER_ASSIGN_OR_RETURN(setup.ids, replay_internal::NumberBlocks(requests));
  const uint64_t block_tokens = setup.dense.max_block_tokens;
  setup.block_bytes = block_tokens * options.kv_bytes_per_token;
  if (setup.block_bytes > std::numeric_limits<uint32_t>::max()) {
    return Status::InvalidArgument("replay: a block of " + std::to_string(block_tokens) + " tokens holds 4 GiB or more");
  }
  const uint64_t unique = setup.dense.unique_blocks;
  setup.capacity_blocks = options.capacity_blocks > 0
                              ? options.capacity_blocks
                              : std::max<uint64_t>(1, static_cast<uint64_t>(std::llround(
                                                          options.capacity_fraction * static_cast<double>(unique))));
  if (options.tiers) {
    // The tiers' capacities decide; the bounds use their total in blocks (unbounded: all).
    uint64_t bytes = 0;
    bool unbounded = false;
    for (const TierOptions& t : options.tiers->tiers) {
      const uint64_t capacity = std::visit([](const auto& o) { return o.capacity_bytes; }, t);
      unbounded = unbounded || capacity == 0;
      bytes += capacity;
    }
    setup.capacity_blocks = unbounded ? unique : std::max<uint64_t>(1, bytes / setup.block_bytes);
  }
  return setup;
}

}  // namespace

Result<ReplayReport> Replay(const std::vector<ReplayRequest>& requests, const ReplayOptions& options) {
  KVTIER_ASSIGN_OR_RETURN(const Setup setup, PrepareReplay(requests, options));
  ReplayReport report;
  report.requests = requests.size();
  report.block_bytes = setup.block_bytes;
  report.unique_blocks = setup.dense.unique_blocks;
  report.capacity_blocks = setup.capacity_blocks;
  for (PolicyKind policy : options.policies) {
    KVTIER_ASSIGN_OR_RETURN(ReplayPolicyResult r, ReplayPolicy(requests, setup.ids, policy, report.capacity_blocks, report.block_bytes, options));
    report.results.push_back(std::move(r));
  }
  KVTIER_ASSIGN_OR_RETURN(OptimalBound bound, ComputeOptimalBound(setup.dense.trace, report.capacity_blocks));
  report.accesses = bound.ceiling.accesses;
  report.results.push_back(FromHitStats("opt", bound.optimal));
  report.results.push_back(FromHitStats("ceiling", bound.ceiling));
  return report;
}

Result<ReplayGapReport> AnalyzeReplayGap(const std::vector<ReplayRequest>& requests, const ReplayOptions& options,
                                         const GapAnalysisOptions& gap_options) {
  KVTIER_ASSIGN_OR_RETURN(const Setup setup, PrepareReplay(requests, options));
  ReplayGapReport report;
  report.requests = requests.size();
  report.unique_blocks = setup.dense.unique_blocks;
  report.capacity_blocks = setup.capacity_blocks;
  KVTIER_ASSIGN_OR_RETURN(report.store_lru,
                          ReplayPolicy(requests, setup.ids, PolicyKind::kLru, setup.capacity_blocks, setup.block_bytes, options));
  const uint64_t capacities[] = {setup.capacity_blocks};
  KVTIER_ASSIGN_OR_RETURN(std::vector<GapAnalysis> gap, AnalyzeGap(setup.dense.trace, capacities, gap_options));
  report.gap = std::move(gap.front());
  return report;
}

}  // namespace kvtier
