// The two reference lines a trace replay prints next to every policy, for a prefix cache of
// unit-size blocks:
//  - the ceiling: an infinite cache, which misses only the first access of each block, so its
//    block hit rate is 1 - unique / total;
//  - the offline optimum at a given capacity: the requests' blocks serialized root to leaf
//    and replayed under Belady's MIN with bypass. On a miss with a full cache, the cached
//    block whose next use is farthest is evicted only if that use is farther than the
//    incoming block's next use; otherwise the incoming block is not admitted.
//
// Hits follow the prefix rule: a request hits its longest cached prefix; a block after its
// request's first miss is recomputed, so it is a miss even if cached. Under that rule the
// optimum here is exact, not a bound: Belady's cache stays closed under "parent of a block
// that will be used again", so every access it hits lies in a hit prefix, and no policy can
// hit more prefix blocks than the per-access optimum (docs/optimal_bound.md has the proof;
// optimal_bound_test.cc checks it against exhaustive search). The run verifies the closure
// as it goes: per-access and prefix hits must agree, or it returns Internal.
//
// The optimum maximizes hit blocks. Its token hit rate is that schedule's, a lower bound on
// the best token hit rate when blocks hold different token counts (e.g. partial last blocks).
//
// Cost: O(N log N) for N accesses, once, to map ids to dense indices (a sort), check the
// tree and find each next use; then O(N log C) per capacity C. About 13 bytes per access
// beside the trace (16 more while sorting). 5 M accesses take a few seconds on a loaded
// 2-core machine.
//
// Thread-safety: pure functions over values.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "kvtier/status.h"

namespace kvtier {

// Requests, each a chain of block ids from the root: equal ids mean equal prefixes, so an
// id has the same parent wherever it appears. Stored flat for traces of millions of blocks.
struct PrefixTrace {
  std::vector<uint64_t> blocks;       // every request's block ids, request after request
  std::vector<uint32_t> tokens;       // tokens held by each block (one per entry of `blocks`)
  std::vector<uint64_t> request_end;  // one past each request's last block in `blocks`
  // Per entry of `blocks`: 0 for a block the request stores without looking it up (its
  // generated blocks, chained after its prompt); empty when every block is looked up. Such an
  // insertion is a chance to admit (or readmit) the block for free, never a hit, an access or
  // a use: Belady's next uses count lookups only.
  std::vector<uint8_t> counted;

  // Appends one request: `ids` and `block_tokens` (one per block), the last `inserted_tail`
  // of them stored without a lookup. InvalidArgument when the spans differ in length.
  Status AddRequest(std::span<const uint64_t> ids, std::span<const uint32_t> block_tokens,
                    std::size_t inserted_tail = 0);
  uint64_t requests() const { return request_end.size(); }
};

struct HitStats {
  uint64_t accesses = 0;  // blocks requested
  uint64_t hits = 0;      // of them, in a cached prefix
  uint64_t tokens = 0;
  uint64_t hit_tokens = 0;
  double block_hit_rate = 0;  // hits / accesses (0 for an empty trace)
  double token_hit_rate = 0;  // hit_tokens / tokens
};

struct OptimalBound {
  uint64_t capacity_blocks = 0;
  uint64_t requests = 0;
  uint64_t unique_blocks = 0;
  HitStats optimal;  // Belady with bypass at capacity_blocks
  HitStats ceiling;  // an infinite cache
};

// InvalidArgument when the trace is malformed (lengths disagree, request_end not ascending,
// an id seen with two different parents: a hash collision or a trace that is not a prefix
// tree); Internal if the closure invariant fails, which the proof says it cannot.
Result<OptimalBound> ComputeOptimalBound(const PrefixTrace& trace, uint64_t capacity_blocks);

// The same for several capacities, sharing the pass over the trace. In the order given.
Result<std::vector<OptimalBound>> ComputeOptimalBounds(const PrefixTrace& trace,
                                                       std::span<const uint64_t> capacities);

}  // namespace kvtier
