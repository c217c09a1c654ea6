#include "kvtier/optimal_bound.h"

#include <algorithm>
#include <limits>
#include <string>
#include <utility>

#include "replay/prepared_trace.h"

namespace kvtier {
namespace {

using replay_internal::Prepared;
using replay_internal::FinishHitStats;
using replay_internal::Prepare;

// An infinite cache holds every block once seen: all blocks are cached before any descendant
// is accessed, so every access after the first to a block lies in a hit prefix.
HitStats Ceiling(const PrefixTrace& trace, const Prepared& p) {
  HitStats stats;
  std::vector<bool> seen(p.unique_blocks, false);
  for (std::size_t i = 0; i < p.dense.size(); ++i) {
    if (!trace.counted.empty() && !trace.counted[i]) {
      seen[p.dense[i]] = true;
      continue;
    }
    ++stats.accesses;
    stats.tokens += trace.tokens[i];
    if (seen[p.dense[i]]) {
      ++stats.hits;
      stats.hit_tokens += trace.tokens[i];
    }
    seen[p.dense[i]] = true;
  }
  return FinishHitStats(stats);
}

// Belady's MIN with bypass. Each cached block sits in a max-heap under the key of its next
// use: the position of that access, or never + (position of its last access) when it has
// none, which sorts after every real use and keeps keys distinct. A hit re-keys the block by
// pushing its new key; the old one (== the current position) goes stale and is skipped, as
// is any finite key not after the current position. Stale keys are never on top while a
// block is cached: every live key is after the current position, every stale one is not.
Result<HitStats> Belady(const PrefixTrace& trace, const Prepared& p, uint64_t capacity) {
  HitStats stats;
  const uint64_t never = p.never;
  std::vector<bool> cached(p.unique_blocks, false);
  std::vector<uint64_t> heap;
  uint64_t cached_count = 0, per_access_hits = 0;
  bool prefix_alive = false;
  auto key_of = [&](uint64_t i) { return p.next_use[i] == never ? never + i : p.next_use[i]; };
  auto block_of = [&](uint64_t key) { return p.dense[key >= never ? key - never : key]; };
  auto push = [&](uint64_t key) {
    heap.push_back(key);
    std::push_heap(heap.begin(), heap.end());
  };

  for (uint64_t i = 0; i < p.dense.size(); ++i) {
    const uint32_t block = p.dense[i];
    if (p.request_start[i]) prefix_alive = true;
    const bool counted = trace.counted.empty() || trace.counted[i] != 0;
    if (counted) {
      ++stats.accesses;
      stats.tokens += trace.tokens[i];
    }
    if (cached[block] && !counted) continue;  // an insertion of a cached block changes nothing
    if (cached[block]) {
      ++per_access_hits;
      if (prefix_alive) {
        ++stats.hits;
        stats.hit_tokens += trace.tokens[i];
      }
      push(key_of(i));
    } else {
      prefix_alive = false;
      const uint64_t key = key_of(i);
      if (cached_count < capacity) {
        cached[block] = true;
        ++cached_count;
        push(key);
      } else if (capacity > 0 && heap.front() > key) {
        cached[block_of(heap.front())] = false;
        std::pop_heap(heap.begin(), heap.end());
        heap.pop_back();
        cached[block] = true;
        push(key);
      }  // else bypass: the incoming block is the one used farthest away
    }
    // Drop stale keys once they outnumber live ones: amortized O(1), heap size O(capacity).
    if (heap.size() > 2 * cached_count + 64) {
      std::erase_if(heap, [&](uint64_t k) { return k < never && k <= i; });
      std::make_heap(heap.begin(), heap.end());
    }
  }
  if (per_access_hits != stats.hits) {
    return Status::Internal("optimal bound: Belady's cache lost prefix closure (" + std::to_string(per_access_hits) +
                            " hits per access, " + std::to_string(stats.hits) + " in prefixes)");
  }
  return FinishHitStats(stats);
}

}  // namespace

Status PrefixTrace::AddRequest(std::span<const uint64_t> ids, std::span<const uint32_t> block_tokens,
                               std::size_t inserted_tail) {
  if (ids.size() != block_tokens.size()) {
    return Status::InvalidArgument("prefix trace: a request has " + std::to_string(ids.size()) + " blocks but " +
                                   std::to_string(block_tokens.size()) + " token counts");
  }
  if (inserted_tail > ids.size()) return Status::InvalidArgument("prefix trace: inserted_tail exceeds the request");
  if (inserted_tail > 0 || !counted.empty()) {
    counted.resize(blocks.size(), 1);  // the requests before were all looked up
    counted.insert(counted.end(), ids.size() - inserted_tail, 1);
    counted.insert(counted.end(), inserted_tail, 0);
  }
  blocks.insert(blocks.end(), ids.begin(), ids.end());
  tokens.insert(tokens.end(), block_tokens.begin(), block_tokens.end());
  request_end.push_back(blocks.size());
  return Status::Ok();
}

namespace replay_internal {

Result<std::vector<OptimalBound>> ComputeOptimalBounds(const PrefixTrace& trace, const Prepared& prepared,
                                                       std::span<const uint64_t> capacities) {
  const HitStats ceiling = Ceiling(trace, prepared);
  std::vector<OptimalBound> out;
  for (uint64_t capacity : capacities) {
    KVTIER_ASSIGN_OR_RETURN(HitStats optimal, Belady(trace, prepared, capacity));
    out.push_back({.capacity_blocks = capacity,
                   .requests = trace.requests(),
                   .unique_blocks = prepared.unique_blocks,
                   .optimal = optimal,
                   .ceiling = ceiling});
  }
  return out;
}

}  // namespace replay_internal

Result<std::vector<OptimalBound>> ComputeOptimalBounds(const PrefixTrace& trace,
                                                       std::span<const uint64_t> capacities) {
  KVTIER_ASSIGN_OR_RETURN(const Prepared prepared, Prepare(trace));
  return replay_internal::ComputeOptimalBounds(trace, prepared, capacities);
}

Result<OptimalBound> ComputeOptimalBound(const PrefixTrace& trace, uint64_t capacity_blocks) {
  const uint64_t capacities[] = {capacity_blocks};
  KVTIER_ASSIGN_OR_RETURN(std::vector<OptimalBound> bounds, ComputeOptimalBounds(trace, capacities));
  return bounds.front();
}

}  // namespace kvtier
