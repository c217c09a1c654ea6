// LRU, leaf-first: the least recently used evictable block goes first, as in SGLang's radix
// cache (a heap of leaves by last access time): a RankedHeapPolicy (ranked_heap_policy.h)
// ordered by (last access, access sequence).
//
// Ties in time (a trace's virtual clock stamps a whole request with one `now`) go to the
// block touched or admitted later: the store touches a request's blocks head to tail, so
// its tail leaves before its head, vLLM's order (it frees a finished request's blocks in
// reverse so the tail is reused first).
#include "policy/ranked_heap_policy.h"

namespace kvtier::policy_internal {
namespace {

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
  bool Before(const Entry& a, const Entry& b) const {
    if (a.last_access != b.last_access) return a.last_access < b.last_access;
    return a.sequence > b.sequence;
  }
};

}  // namespace

std::unique_ptr<EvictionPolicy> NewLruPolicy(const PolicyOptions& /*options*/) {
  return std::make_unique<RankedHeapPolicy<LruRanking>>(LruRanking{});
}

}  // namespace kvtier::policy_internal
