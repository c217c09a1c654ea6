#include "kvtier/optimal_bound.h"

#include <algorithm>
#include <limits>
#include <string>
#include <utility>

namespace kvtier {
namespace {

constexpr uint32_t kRoot = std::numeric_limits<uint32_t>::max();

// The trace reduced to what the simulation needs: dense block indices and next uses.
struct Prepared {
  std::vector<uint32_t> dense;      // per access: the block's dense index
  std::vector<uint64_t> next_use;   // per access: the position of the block's next access, or `never`
  std::vector<bool> request_start;  // per access: the first block of its request
  uint64_t unique_blocks = 0;
  uint64_t never = 0;  // the trace length: past every position
};

Status CheckShape(const PrefixTrace& trace) {
  if (trace.tokens.size() != trace.blocks.size()) {
    return Status::InvalidArgument("prefix trace: " + std::to_string(trace.blocks.size()) + " blocks but " +
                                   std::to_string(trace.tokens.size()) + " token counts");
  }
  uint64_t begin = 0;
  for (uint64_t end : trace.request_end) {
    if (end < begin || end > trace.blocks.size()) {
      return Status::InvalidArgument("prefix trace: request_end must ascend within the " +
                                     std::to_string(trace.blocks.size()) + " blocks");
    }
    begin = end;
  }
  if (begin != trace.blocks.size()) {
    return Status::InvalidArgument("prefix trace: the last request must end at the last block");
  }
  if (!trace.counted.empty() && trace.counted.size() != trace.blocks.size()) {
    return Status::InvalidArgument("prefix trace: `counted` must be empty or one flag per block");
  }
  return Status::Ok();
}

Result<Prepared> Prepare(const PrefixTrace& trace) {
  KVTIER_RETURN_IF_ERROR(CheckShape(trace));
  const std::size_t n = trace.blocks.size();
  if (n >= kRoot - 1) return Status::InvalidArgument("prefix trace: 4 billion blocks or more; split the trace");
  Prepared out;
  out.never = n;
  out.dense.resize(n);
  out.request_start.assign(n, false);
  // Dense indices by sorting (id, position): O(N log N) whatever the ids look like, where an
  // identity-hashed std::unordered_map slows to a crawl on structured ids.
  std::vector<std::pair<uint64_t, uint32_t>> by_id(n);
  for (std::size_t i = 0; i < n; ++i) by_id[i] = {trace.blocks[i], static_cast<uint32_t>(i)};
  std::sort(by_id.begin(), by_id.end());
  uint32_t unique = 0;
  for (std::size_t i = 0; i < n; ++i) {
    if (i > 0 && by_id[i].first != by_id[i - 1].first) ++unique;
    out.dense[by_id[i].second] = unique;
  }
  out.unique_blocks = n == 0 ? 0 : uint64_t{unique} + 1;
  by_id = {};

  // The exactness argument needs each block's parent accessed right before it, always the
  // same one.
  constexpr uint32_t kUnset = kRoot - 1;
  std::vector<uint32_t> parent(out.unique_blocks, kUnset);
  uint64_t begin = 0;
  for (std::size_t r = 0; r < trace.request_end.size(); ++r) {
    const uint64_t end = trace.request_end[r];
    if (begin < end) out.request_start[begin] = true;
    for (uint64_t i = begin; i < end; ++i) {
      const uint32_t expected = i == begin ? kRoot : out.dense[i - 1];
      uint32_t& seen = parent[out.dense[i]];
      if (seen == kUnset) {
        seen = expected;
      } else if (seen != expected) {
        return Status::InvalidArgument("prefix trace: block id " + std::to_string(trace.blocks[i]) +
                                       " appears under two different parents (request " + std::to_string(r) +
                                       "); ids must identify whole prefixes");
      }
    }
    begin = end;
  }

  // Next uses are lookups only: an insertion is a chance to (re)admit a block for free, not
  // a use worth keeping it for.
  out.next_use.resize(n);
  std::vector<uint64_t> upcoming(parent.size(), out.never);
  for (std::size_t i = n; i-- > 0;) {
    out.next_use[i] = upcoming[out.dense[i]];
    if (trace.counted.empty() || trace.counted[i]) upcoming[out.dense[i]] = i;
  }
  return out;
}

HitStats Finish(HitStats stats) {
  if (stats.accesses > 0) stats.block_hit_rate = static_cast<double>(stats.hits) / static_cast<double>(stats.accesses);
  if (stats.tokens > 0) {
    stats.token_hit_rate = static_cast<double>(stats.hit_tokens) / static_cast<double>(stats.tokens);
  }
  return stats;
}

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
  return Finish(stats);
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
  return Finish(stats);
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

Result<std::vector<OptimalBound>> ComputeOptimalBounds(const PrefixTrace& trace,
                                                       std::span<const uint64_t> capacities) {
  KVTIER_ASSIGN_OR_RETURN(const Prepared prepared, Prepare(trace));
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

Result<OptimalBound> ComputeOptimalBound(const PrefixTrace& trace, uint64_t capacity_blocks) {
  const uint64_t capacities[] = {capacity_blocks};
  KVTIER_ASSIGN_OR_RETURN(std::vector<OptimalBound> bounds, ComputeOptimalBounds(trace, capacities));
  return bounds.front();
}

}  // namespace kvtier
