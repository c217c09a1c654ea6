// Trace replay: the store's policies measured on a request trace, on a virtual clock, next to
// the offline optimum and the infinite-cache ceiling (optimal_bound.h).
//
// Each request is a chain of blocks (chained keys: equal keys are equal prefixes). In turn, at
// its arrival time, a request looks up its longest cached prefix (its hit: prefix rule),
// reads it (which touches the blocks and, with several tiers, promotes and prefetches), then
// stores the rest of its chain, and its generated blocks after it when the trace has them
// (engines keep decode KV). The store is the real TieredStore with the real policies, run
// with synchronous moves so that a replay is deterministic; in metadata mode (the default)
// no bytes move, in data mode every block's bytes go through the configured tiers. In the
// default setting (one tier, metadata mode, with or without the engine model) a model of
// the store that makes the store's policy calls in its order stands in for it: same hits,
// several times faster (ReplayOptions::through_store).
//
// Thread-safety: Replay is a pure function of its inputs; calls may run concurrently.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "kvtier/block.h"
#include "kvtier/cost_model.h"
#include "kvtier/engine_model.h"
#include "kvtier/eviction_policy.h"
#include "kvtier/gap_analysis.h"
#include "kvtier/status.h"
#include "kvtier/tier_config.h"

namespace kvtier {

struct ReplayBlock {
  BlockKey key;
  uint32_t tokens = 0;
  BlockType type = BlockType::kUserContext;
};

struct ReplayRequest {
  double arrival_s = 0;
  TransitionType transition = TransitionType::kSameToolRepeat;
  std::vector<ReplayBlock> prompt;  // chained, root first
  std::vector<ReplayBlock> output;  // generated blocks, chained after the prompt; may be empty
};

struct ReplayOptions {
  std::vector<PolicyKind> policies = {PolicyKind::kLru, PolicyKind::kEma, PolicyKind::kS3Fifo, PolicyKind::kArc,
                                      PolicyKind::kBayes, PolicyKind::kPredictive};
  // Capacity of the single replay tier in blocks (0: use capacity_fraction).
  uint64_t capacity_blocks = 0;
  double capacity_fraction = 0.05;  // Default: 5% of the trace's unique blocks
  // A block's bytes: its tokens times this (the served model's KV bytes per token), so a
  // partial last block is smaller. Default: 64 KiB per token (1 MiB blocks of 16 tokens).
  uint32_t kv_bytes_per_token = 64u << 10;
  bool cache_output = true;         // Default: true (generated blocks are stored too)
  // Recompute cost per token (cost_model.h) for the Bayesian policy's value; 0: one unit per
  // token, so values are proportional to tokens.
  double recompute_seconds_per_token = 1e-4;  // Default: 1e-4 s
  double predictor_horizon_s = 0;             // Default: 0 = the predictor's default
  // Each policy split by block key into this many shards (PolicyOptions::shards: a power of
  // two, 1 to 64), as a sharded tier runs it: its victim order is the one policy's only
  // approximately (docs/policies.md, "Sharded policies"). Applies to every tier of the run;
  // the "opt" and "ceiling" bounds are unaffected. Above 1 the run goes through TieredStore,
  // not its model (which names blocks by ids of its own: other shards). Default: 1 = one
  // policy, exact.
  uint32_t policy_shards = 1;
  // Several tiers (their capacities replace capacity_blocks): in metadata mode they are
  // capacities of their kinds; with `move_bytes` real bytes go through them (NVMe files are
  // formatted afresh and parallel-FS directories emptied for each policy).
  std::optional<TierConfig> tiers;
  bool move_bytes = false;  // Default: false (metadata mode)
  // The default setting (one tier, metadata mode) runs on a model of the store's
  // prefix cache that makes the store's policy calls in the store's order (same hits, several
  // times faster; docs/replay.md "Speed"). True runs it through TieredStore itself: to check
  // the model, or to time the store. Default: false.
  bool through_store = false;
  // Projected time to first token (docs/replay.md): each request loads its hit blocks from
  // the tiers they are in (DefaultTierCost of the tier's kind) and recomputes the rest of its
  // prompt (this model's prefill on its GPU). Default: none (no projection).
  std::optional<PrefillCostModel> cost_model;
  // The engine model (engine_model.h): requests queue for prefill and decode on engines of
  // the cost model's GPU, and reach the store when an engine starts their prefill (prompt
  // stored when it ends, output when the last token is out). Needs cost_model. The queueing
  // TTFT is in the results' `engine`. Default: none (each request served as it arrives).
  std::optional<EngineOptions> engine;

  Status Validate() const;
};

struct ReplayPolicyResult {
  std::string policy;              // "lru", ..., "opt", "ceiling"
  uint64_t accesses = 0;           // blocks looked up
  uint64_t hit_blocks = 0;
  uint64_t tokens = 0;
  uint64_t hit_tokens = 0;
  double block_hit_rate = 0;
  double token_hit_rate = 0;
  double accesses_per_s = 0;       // replay speed (0 for the bounds)
  std::vector<uint64_t> tier_hits;  // per tier (data mode with several tiers)
  // With a cost model: projected TTFT over the requests, and the same with no cache at all.
  double ttft_mean_s = 0, ttft_p50_s = 0, ttft_p99_s = 0;
  double ttft_no_cache_mean_s = 0;
  // The paper's way to turn it into throughput and cost: prompt tokens served per second of
  // projected prefill (one GPU, requests one after another), at $2 per GPU-hour.
  double prefill_tokens_per_s = 0, no_cache_prefill_tokens_per_s = 0;
  double dollars_per_mtok = 0, no_cache_dollars_per_mtok = 0;
  // With the engine model: its summary (TTFT with queueing; per-request vectors left empty).
  std::optional<EngineReport> engine;
};

struct ReplayReport {
  uint64_t block_bytes = 0;  // of a full block: the largest block's tokens x kv_bytes_per_token
  uint64_t requests = 0;
  uint64_t accesses = 0;
  uint64_t unique_blocks = 0;
  uint64_t capacity_blocks = 0;
  std::vector<ReplayPolicyResult> results;  // the policies in order, then "opt" and "ceiling" (optimal_bound.h)
};

Result<ReplayReport> Replay(const std::vector<ReplayRequest>& requests, const ReplayOptions& options);

// The gap analysis (gap_analysis.h) of the requests at the options' capacity (one tier, unit
// blocks), beside the store's own LRU on the same capacity: the analysis's `lru` is its model
// of that policy, and the two should agree closely (docs/gap_analysis.md).
struct ReplayGapReport {
  uint64_t requests = 0;
  uint64_t unique_blocks = 0;
  uint64_t capacity_blocks = 0;
  ReplayPolicyResult store_lru;
  GapAnalysis gap;
};

// The replay's block accesses, for other simulators to run the same sequence (libCacheSim:
// tools/replay_speed.py). One record per prompt block of every request in arrival order: the
// accesses a replay counts (generated blocks are stored, never looked up, so they are not
// accesses). `obj_id` numbers blocks in order of first appearance (generated blocks take
// numbers too), `obj_size` is 1 so that a capacity in blocks is one in "bytes",
// `clock_time` is the request's arrival in whole seconds, `next_access_vtime` the position
// of the block's next access (-1: none), as libCacheSim's oracleGeneral format has them.
struct ReplayAccess {
  uint32_t clock_time = 0;
  uint64_t obj_id = 0;
  uint32_t obj_size = 1;
  int64_t next_access_vtime = -1;
};
Result<std::vector<ReplayAccess>> ReplayAccesses(const std::vector<ReplayRequest>& requests);
// libCacheSim's oracleGeneral binary trace: 24-byte little-endian packed records in the
// field order above. IoError when the file cannot be written or read; InvalidArgument when
// its size is not a whole number of records.
Status WriteOracleGeneralTrace(const std::vector<ReplayAccess>& accesses, const std::string& path);
Result<std::vector<ReplayAccess>> ReadOracleGeneralTrace(const std::string& path);

Result<ReplayGapReport> AnalyzeReplayGap(const std::vector<ReplayRequest>& requests, const ReplayOptions& options,
                                         const GapAnalysisOptions& gap_options = {});

}  // namespace kvtier
