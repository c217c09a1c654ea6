// Gap analysis: how much of the distance between LRU and the offline optimum (OPT - LRU) each
// piece of knowledge about the future is worth, on one trace at one capacity. Each piece is
// an oracle run of a unit-block prefix cache (the same model as optimal_bound.h: hits follow
// the prefix rule, blocks after a request's first miss are recomputed and stored):
//
//   lru               the baseline: least recently used first (a request's deeper blocks
//                     first among equals, so it evicts leaves first as the store's LRU does);
//   admit-reused      LRU that never admits a block that is never used again;
//   admit-within-age  LRU that never admits a block whose next use lies farther than LRU's
//                     eviction age (how long the least recent resident block has gone
//                     untouched, in accesses): a block that LRU would evict before its reuse;
//   admit-by-features what the past alone is worth to a perfect learner: LRU that bypasses a
//                     block (in a full cache) when accesses like it, by features an online
//                     policy has (previous reuse distance, access count, depth in the request,
//                     blocks after it), came back within a horizon less often than a
//                     threshold; the shares are counted over the whole trace (perfect
//                     calibration), and the best of horizons 1-8x LRU's mean eviction age and
//                     thresholds 0.01-0.5 is reported;
//   lookahead-W       the optimum allowed to see the next W requests only (what an engine's
//                     waiting queue can know): blocks whose next use lies in the window are
//                     ranked by it, the others come first in LRU order, and an incoming block
//                     is bypassed when everything resident is used sooner. With W at least the
//                     trace's length it is exactly OPT;
//   rank-next-use     LRU's order replaced by the true next use among resident blocks (Belady
//                     without bypass): ranking alone, every block admitted.
//
// Each oracle is a real (if clairvoyant) policy, so its hits never exceed OPT's.
// `gap_closed` = (oracle - lru) / (opt - lru) in hit blocks; 0 where OPT does not beat LRU.
//
// Cost: the trace's preparation once (O(N log N)), then O(N log C) per oracle and capacity
// (admit-by-features: 28 runs, one per horizon and threshold).
//
// Thread-safety: pure functions over values.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "kvtier/optimal_bound.h"
#include "kvtier/status.h"

namespace kvtier {

struct GapAnalysisOptions {
  // Window sizes, in requests after the current one, of the lookahead oracles.
  std::vector<uint64_t> lookahead_requests = {8, 32, 128, 512};  // Default: 8, 32, 128, 512
};

struct GapOracle {
  std::string name;  // "admit-reused", "admit-within-age", "admit-by-features", "lookahead-8", ..., "rank-next-use"
  HitStats hits;
  double gap_closed = 0;  // share of OPT - LRU this oracle closes (negative: worse than LRU)
};

struct GapAnalysis {
  uint64_t capacity_blocks = 0;
  HitStats lru;
  HitStats opt;
  std::vector<GapOracle> oracles;  // in the order listed above
};

// One analysis per capacity, in the order given. InvalidArgument when the trace is malformed
// (optimal_bound.h's rules).
Result<std::vector<GapAnalysis>> AnalyzeGap(const PrefixTrace& trace, std::span<const uint64_t> capacities,
                                            const GapAnalysisOptions& options = {});

}  // namespace kvtier
