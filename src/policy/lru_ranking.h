// LRU's order for a RankedHeapPolicy (ranked_heap_policy.h): least recently used first, and
// on a tie in time (a trace's virtual clock stamps a whole request with one `now`) the block
// touched or admitted later first. The store touches a request's blocks head to tail, so its
// tail leaves before its head, vLLM's order (it frees a finished request's blocks in reverse
// so the tail is reused first). LRU uses it as it is; the predictive policy puts expected
// reads in front of it.
//
// Thread-safety: none (eviction_policy.h).
#pragma once

#include <cstdint>
#include <string_view>

#include "kvtier/block.h"
#include "kvtier/eviction_policy.h"
#include "policy/indexed_heap.h"

namespace kvtier::policy_internal {

struct LruRanking {
  struct Entry {
    BlockKey key;
    double last_access = 0;
    uint64_t sequence = 0;  // order of the last Admit/Touch among all blocks
    uint32_t heap_pos = kNotInHeap;
    bool evictable = true;
  };
  static constexpr std::string_view kName = "lru";

  void Access(Entry& entry, double now_s, uint64_t sequence) const {
    entry.last_access = now_s;
    entry.sequence = sequence;
  }
  VictimStanding Standing(const Entry& entry) const { return {.rank = entry.last_access, .last_access = entry.last_access}; }
  bool Before(const Entry& a, const Entry& b) const {
    if (a.last_access != b.last_access) return a.last_access < b.last_access;
    return a.sequence > b.sequence;
  }
};

}  // namespace kvtier::policy_internal
