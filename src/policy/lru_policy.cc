// LRU, leaf-first: the least recently used evictable block goes first, as in SGLang's radix
// cache (a heap of leaves by last access time): a RankedHeapPolicy (ranked_heap_policy.h)
// ordered by LruRanking (lru_ranking.h).
#include "policy/lru_ranking.h"
#include "policy/ranked_heap_policy.h"

namespace kvtier::policy_internal {

std::unique_ptr<EvictionPolicy> NewLruPolicy(const PolicyOptions& /*options*/) {
  return std::make_unique<RankedHeapPolicy<LruRanking>>(LruRanking{});
}

}  // namespace kvtier::policy_internal
