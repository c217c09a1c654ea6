// EMA: an exponentially decayed access count per block, lowest first (the paper's second
// baseline). On each access score = score * exp(-dt / tau) + 1, dt the time since the
// block's previous access; admission counts as the first access.
//
// Scores decay with time, yet the order never changes while nobody is accessed: at time t a
// block's current score is s_i * exp(-(t - t_i) / tau), and comparing two of them is
// comparing ln(s_i) + t_i / tau, which does not depend on t. So the heap is keyed by that
// constant rank, computed on each access, and stays exact with no periodic re-decay: every
// operation is O(log n). (A large tau counts accesses, LFU-like; a tau far below the gaps
// between accesses makes every score about 1 plus a recency term, i.e. LRU, which is why LRU
// and EMA can report identical hit rates, as in the paper's table.)
//
// Evictable filter and ties: a RankedHeapPolicy (ranked_heap_policy.h) as LRU is:
// non-evictable blocks are out of the heap; equal ranks go to the later-touched block.
#include <cmath>

#include "policy/ranked_heap_policy.h"

namespace kvtier::policy_internal {
namespace {

struct EmaRanking {
  struct Entry {
    BlockKey key;
    double last_access = 0;
    double score = 0;  // decayed count as of last_access
    double rank = 0;   // ln(score) + last_access / tau
    uint64_t sequence = 0;
    uint32_t heap_pos = kNotInHeap;
    bool evictable = true;
  };
  static constexpr std::string_view kName = "ema";

  void Access(Entry& entry, double now_s, uint64_t sequence) const {
    const bool first = entry.sequence == 0;
    entry.score = first ? 1.0 : entry.score * std::exp(-(now_s - entry.last_access) / tau_s) + 1.0;
    entry.last_access = now_s;
    entry.rank = std::log(entry.score) + now_s / tau_s;
    entry.sequence = sequence;
  }
  VictimStanding Standing(const Entry& entry) const { return {.rank = entry.rank, .last_access = entry.last_access}; }
  bool Before(const Entry& a, const Entry& b) const {
    if (a.rank != b.rank) return a.rank < b.rank;
    return a.sequence > b.sequence;
  }

  double tau_s;
};

}  // namespace

std::unique_ptr<EvictionPolicy> NewEmaPolicy(const PolicyOptions& options) {
  return std::make_unique<RankedHeapPolicy<EmaRanking>>(EmaRanking{.tau_s = options.ema_tau_s});
}

}  // namespace kvtier::policy_internal
