// The prefix trace (optimal_bound.h) reduced to what a simulation of a unit-block prefix cache
// needs: dense block indices, each access's next use, request starts. Shared by the offline
// optimum and the gap analysis (gap_analysis.h), so both see one reading of the trace.
//
// Thread-safety: pure functions over values.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "kvtier/optimal_bound.h"
#include "kvtier/status.h"

namespace kvtier::replay_internal {

// The trace reduced to what the simulation needs: dense block indices and next uses.
struct Prepared {
  std::vector<uint32_t> dense;      // per access: the block's dense index
  std::vector<uint64_t> next_use;   // per access: the position of the block's next access, or `never`;
                                    // lookups only: an insertion is not a use
  std::vector<bool> request_start;  // per access: the first block of its request
  uint64_t unique_blocks = 0;
  uint64_t never = 0;  // the trace length: past every position
};

// Checks the trace's shape and that it is a prefix tree (each id under one parent), then
// computes dense indices and next uses. O(N log N). InvalidArgument on a malformed trace.
Result<Prepared> Prepare(const PrefixTrace& trace);

// optimal_bound.h's ComputeOptimalBounds over a trace already prepared, so that a caller that
// needs the preparation too (the gap analysis) does it once. Defined in optimal_bound.cc.
Result<std::vector<OptimalBound>> ComputeOptimalBounds(const PrefixTrace& trace, const Prepared& prepared,
                                                       std::span<const uint64_t> capacities);

// `stats` with its hit rates computed from its counts (0 where nothing was counted).
HitStats FinishHitStats(HitStats stats);

}  // namespace kvtier::replay_internal
