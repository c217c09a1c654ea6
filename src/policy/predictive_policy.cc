// The predictive policy: LRU, leaf-first (lru_policy.cc), except that a block a queued request
// will read leaves only after every block no queued request needs, and among those the one
// needed last leaves first. The order is (expected?, latest expected order first, last
// access, access sequence): a RankedHeapPolicy (ranked_heap_policy.h).
//
// Why this and not a model of the past: on the bundled traces the gap analysis
// (docs/gap_analysis.md) prices knowing the next 8 requests at 50-100% of OPT - LRU on the
// agent traces, while every learned-from-the-past variant tried (reuse-time distributions per
// category against the eviction age, for admission and for eviction order; second-access
// admission; bimodal insertion) stayed within about a point of LRU there: turns arrive after
// memoryless think times, so the past does not say which session comes next
// (docs/policies.md, "The predictive policy", has the measurements). The waiting queue does.
//
// Benefits: every hit LRU gets on blocks no request waits for; blocks of queued requests
// survive a burst of other requests' puts. Costs: as LRU, O(log n) per call, 40 bytes per
// block; an Expect per block of a queued request when it is queued and when it starts.
#include <limits>
#include <optional>

#include "policy/lru_ranking.h"
#include "policy/ranked_heap_policy.h"

namespace kvtier::policy_internal {
namespace {

// LRU's order behind the expected reads: Access is LRU's.
struct PredictiveRanking : LruRanking {
  static constexpr uint64_t kNotExpected = std::numeric_limits<uint64_t>::max();
  struct Entry : LruRanking::Entry {
    uint64_t expected_order = kNotExpected;  // earliest queued read of it, or none
  };
  static constexpr std::string_view kName = "predictive";

  void Expect(Entry& entry, std::optional<uint64_t> order) const { entry.expected_order = order.value_or(kNotExpected); }
  // A full tier whose next victim a queued request will read takes no block that none will:
  // making room would drop a block known to be wanted for one only hoped to be.
  bool Admits(const ResidentBlock& block, const Entry* victim) const {
    return block.expected_order || victim == nullptr || victim->expected_order == kNotExpected;
  }
  // Expected blocks after all others, the latest needed first; the rest as LRU.
  VictimStanding Standing(const Entry& entry) const {
    if (entry.expected_order == kNotExpected) return LruRanking::Standing(entry);
    return {.reluctance = 1, .rank = -static_cast<double>(entry.expected_order), .last_access = entry.last_access};
  }
  bool Before(const Entry& a, const Entry& b) const {
    if (a.expected_order != b.expected_order) return a.expected_order > b.expected_order;
    return LruRanking::Before(a, b);
  }
};

}  // namespace

std::unique_ptr<EvictionPolicy> NewPredictivePolicy(const PolicyOptions& /*options*/) {
  return std::make_unique<RankedHeapPolicy<PredictiveRanking>>(PredictiveRanking{});
}

}  // namespace kvtier::policy_internal
