#include "kvtier/gap_analysis.h"

#include <algorithm>
#include <bit>
#include <limits>
#include <set>
#include <utility>

#include "replay/prepared_trace.h"

namespace kvtier {
namespace {

using replay_internal::FinishHitStats;
using replay_internal::Prepare;
using replay_internal::Prepared;

constexpr uint64_t kWholeTrace = std::numeric_limits<uint64_t>::max();

enum class Ranking {
  kRecency,  // least recently used first
  kNextUse,  // blocks with no known next use first (least recent first), then the farthest use
};

enum class Admission {
  kAll,              // every missed block, evicting the victim when full
  kOnlyReused,       // not a block that is never used again
  kWithinLruAge,     // not a block whose next use lies beyond the victim's age
  kUnlessUsedLater,  // not a block used later than every resident one (Belady's bypass)
  kByFeatures,       // not a block whose past-only features say "reused within the age" rarely
};

struct OracleSpec {
  Ranking ranking = Ranking::kRecency;
  Admission admission = Admission::kAll;
  uint64_t window_requests = kWholeTrace;  // with kNextUse: requests after the current one it sees
  // With kByFeatures: per access, the calibrated chance that its block's next use comes within
  // LRU's eviction age, and the threshold below which a full cache bypasses it.
  const std::vector<double>* reuse_within_age = nullptr;
  double threshold = 0;
};

// What an online predictor could know of an access from the past alone, as one category:
// the block's previous reuse distance (log2 buckets, 0 for a first access), how often it was
// accessed (0-3+), its depth in the request and the blocks after it (log2 buckets). Per
// access, in trace order.
std::vector<uint32_t> PastFeatureCategories(const PrefixTrace& trace, const Prepared& p) {
  auto log_bucket = [](uint64_t x, uint32_t cap) { return static_cast<uint32_t>(std::min<uint64_t>(std::bit_width(x), cap)); };
  std::vector<uint64_t> last(p.unique_blocks, p.never);
  std::vector<uint8_t> count(p.unique_blocks, 0);
  std::vector<uint32_t> out(p.dense.size());
  uint64_t begin = 0;
  for (uint64_t end : trace.request_end) {
    for (uint64_t i = begin; i < end; ++i) {
      const uint32_t b = p.dense[i];
      const uint32_t gap = last[b] == p.never ? 0 : 1 + log_bucket(i - last[b], 24);
      const uint32_t depth = log_bucket(i - begin, 10);
      const uint32_t after = log_bucket(end - 1 - i, 6);
      out[i] = ((gap * 4 + count[b]) * 11 + depth) * 7 + after;
      last[b] = i;
      count[b] = static_cast<uint8_t>(std::min(3, count[b] + 1));
    }
    begin = end;
  }
  return out;
}

// Per access: the share of accesses of its category whose next use came within `age`
// accesses, over the whole trace. A perfectly calibrated learner of those features.
std::vector<double> CalibratedReuseWithinAge(const Prepared& p, const std::vector<uint32_t>& category, double age) {
  const uint32_t categories = category.empty() ? 0 : *std::max_element(category.begin(), category.end()) + 1;
  std::vector<uint64_t> seen(categories, 0), within(categories, 0);
  for (std::size_t i = 0; i < category.size(); ++i) {
    ++seen[category[i]];
    if (p.next_use[i] != p.never && static_cast<double>(p.next_use[i] - i) <= age) ++within[category[i]];
  }
  std::vector<double> out(category.size());
  for (std::size_t i = 0; i < category.size(); ++i) {
    out[i] = static_cast<double>(within[category[i]]) / static_cast<double>(seen[category[i]]);
  }
  return out;
}

// A unit-block prefix cache run over the prepared trace under one oracle. Residents sit in one
// of two ordered sets: `by_recency_` (next use unknown or never) and `by_next_use_` (next use
// inside the window). The window's edge moves forward a request at a time; a resident block
// whose next access it reaches moves from the first set to the second.
class PrefixCacheSim {
 public:
  PrefixCacheSim(const PrefixTrace& trace, const Prepared& p, uint64_t capacity, OracleSpec spec)
      : trace_(trace), p_(p), capacity_(capacity), spec_(spec), blocks_(p.unique_blocks) {}

  // LRU's mean eviction age over the run: accesses between a victim's last access and its eviction.
  double mean_eviction_age() const { return evictions_ == 0 ? 0 : eviction_age_sum_ / static_cast<double>(evictions_); }

  HitStats Run() {
    HitStats stats;
    const std::vector<uint64_t>& ends = trace_.request_end;
    uint64_t request = 0, begin = 0;
    bool prefix_alive = false;
    AdvanceWindow(0);
    for (uint64_t i = 0; i < p_.dense.size(); ++i) {
      while (i >= ends[request]) {
        begin = ends[request++];
        AdvanceWindow(request);
      }
      const uint32_t b = p_.dense[i];
      if (p_.request_start[i]) prefix_alive = true;
      const bool counted = trace_.counted.empty() || trace_.counted[i] != 0;
      if (counted) {
        ++stats.accesses;
        stats.tokens += trace_.tokens[i];
      }
      const uint64_t recency = RecencyKey(request, i - begin);
      if (blocks_[b].resident) {
        // Storing a cached block touches it, as the store does; its next use stays the next
        // lookup, so only recency changes.
        if (counted && prefix_alive) {
          ++stats.hits;
          stats.hit_tokens += trace_.tokens[i];
        }
        Unplace(b);
        Place(b, i, recency);
      } else {
        prefix_alive = false;
        if (ShouldAdmit(i, request)) {
          if (resident_count_ == capacity_) {
            const uint32_t victim = Victim();
            eviction_age_sum_ += static_cast<double>(i - blocks_[victim].last_access);
            ++evictions_;
            Evict(victim);
          }
          blocks_[b].resident = true;
          ++resident_count_;
          Place(b, i, recency);
        }
      }
    }
    return FinishHitStats(stats);
  }

 private:
  struct Block {
    bool resident = false;
    bool known = false;     // in by_next_use_
    uint64_t next_use = 0;  // position of its next access (p_.never: none)
    uint64_t recency = 0;   // RecencyKey of its last access
    uint64_t last_access = 0;
  };

  // Older requests first; within a request its deeper blocks first, so that LRU drains a
  // chain from its leaf (the store's tie rule).
  static uint64_t RecencyKey(uint64_t request, uint64_t depth) {
    return (request << 32) | (0xFFFFFFFFu - std::min<uint64_t>(depth, 0xFFFFFFFFu));
  }

  void AdvanceWindow(uint64_t request) {
    if (spec_.ranking != Ranking::kNextUse) return;
    const std::vector<uint64_t>& ends = trace_.request_end;
    if (ends.empty()) return;
    const uint64_t last = spec_.window_requests >= ends.size() - std::min<uint64_t>(request, ends.size())
                              ? ends.size() - 1
                              : request + spec_.window_requests;
    const uint64_t edge = ends[last];
    for (; horizon_ < edge; ++horizon_) {
      Block& blk = blocks_[p_.dense[horizon_]];
      if (blk.resident && !blk.known && blk.next_use == horizon_) {
        by_recency_.erase({blk.recency, p_.dense[horizon_]});
        blk.known = true;
        by_next_use_.insert({blk.next_use, p_.dense[horizon_]});
      }
    }
  }

  void Place(uint32_t b, uint64_t i, uint64_t recency) {
    Block& blk = blocks_[b];
    blk.next_use = p_.next_use[i];
    blk.recency = recency;
    blk.last_access = i;
    blk.known = spec_.ranking == Ranking::kNextUse && blk.next_use < horizon_;
    if (blk.known) {
      by_next_use_.insert({blk.next_use, b});
    } else {
      by_recency_.insert({blk.recency, b});
    }
  }

  void Unplace(uint32_t b) {
    const Block& blk = blocks_[b];
    if (blk.known) {
      by_next_use_.erase({blk.next_use, b});
    } else {
      by_recency_.erase({blk.recency, b});
    }
  }

  void Evict(uint32_t b) {
    Unplace(b);
    blocks_[b].resident = false;
    --resident_count_;
  }

  // Blocks with no known next use go first, least recent first; then the one used farthest away.
  uint32_t Victim() const {
    return by_recency_.empty() ? by_next_use_.rbegin()->second : by_recency_.begin()->second;
  }

  bool ShouldAdmit(uint64_t i, uint64_t request) const {
    if (capacity_ == 0) return false;
    const uint64_t next_use = p_.next_use[i];
    const bool full = resident_count_ == capacity_;
    // A request longer than an LRU cache is not stored whole: making room for its tail would
    // evict its own blocks. The store keeps its head and stores no more of it.
    if (full && spec_.ranking == Ranking::kRecency && (blocks_[Victim()].recency >> 32) == request) return false;
    switch (spec_.admission) {
      case Admission::kAll:
        return true;
      case Admission::kOnlyReused:
        return next_use != p_.never;
      case Admission::kWithinLruAge: {
        if (!full) return true;
        const uint64_t age = i - blocks_[Victim()].last_access;
        return next_use != p_.never && next_use - i <= age;
      }
      case Admission::kUnlessUsedLater: {
        if (!full || !by_recency_.empty()) return true;  // the victim's next use is unknown: the newcomer is no worse
        return next_use < horizon_ && next_use < blocks_[Victim()].next_use;
      }
      case Admission::kByFeatures:
        return !full || (*spec_.reuse_within_age)[i] >= spec_.threshold;
    }
    return true;
  }

  const PrefixTrace& trace_;
  const Prepared& p_;
  const uint64_t capacity_;
  const OracleSpec spec_;
  std::vector<Block> blocks_;
  uint64_t resident_count_ = 0;
  uint64_t horizon_ = 0;  // positions before it are inside the window
  std::set<std::pair<uint64_t, uint32_t>> by_recency_;
  std::set<std::pair<uint64_t, uint32_t>> by_next_use_;
  double eviction_age_sum_ = 0;
  uint64_t evictions_ = 0;
};

double GapClosed(const HitStats& oracle, const HitStats& lru, const HitStats& opt) {
  if (opt.hits <= lru.hits) return 0;
  return (static_cast<double>(oracle.hits) - static_cast<double>(lru.hits)) /
         static_cast<double>(opt.hits - lru.hits);
}

}  // namespace

Result<std::vector<GapAnalysis>> AnalyzeGap(const PrefixTrace& trace, std::span<const uint64_t> capacities,
                                            const GapAnalysisOptions& options) {
  for (uint64_t w : options.lookahead_requests) {
    if (w == 0) return Status::InvalidArgument("gap analysis: a lookahead window must hold at least one request");
  }
  KVTIER_ASSIGN_OR_RETURN(const Prepared prepared, Prepare(trace));
  KVTIER_ASSIGN_OR_RETURN(const std::vector<OptimalBound> bounds,
                          replay_internal::ComputeOptimalBounds(trace, prepared, capacities));
  std::vector<std::pair<std::string, OracleSpec>> oracles = {
      {"admit-reused", {.admission = Admission::kOnlyReused}},
      {"admit-within-age", {.admission = Admission::kWithinLruAge}},
  };
  for (uint64_t w : options.lookahead_requests) {
    oracles.push_back({"lookahead-" + std::to_string(w),
                       {.ranking = Ranking::kNextUse, .admission = Admission::kUnlessUsedLater, .window_requests = w}});
  }
  oracles.push_back({"rank-next-use", {.ranking = Ranking::kNextUse, .admission = Admission::kAll}});

  const std::vector<uint32_t> categories = PastFeatureCategories(trace, prepared);
  std::vector<GapAnalysis> out;
  for (std::size_t c = 0; c < capacities.size(); ++c) {
    GapAnalysis a{.capacity_blocks = capacities[c], .opt = bounds[c].optimal};
    PrefixCacheSim lru(trace, prepared, capacities[c], {});
    a.lru = lru.Run();
    for (const auto& [name, spec] : oracles) {
      const HitStats hits = PrefixCacheSim(trace, prepared, capacities[c], spec).Run();
      a.oracles.push_back({.name = name, .hits = hits, .gap_closed = GapClosed(hits, a.lru, a.opt)});
    }
    // The past, perfectly learned: admission by calibrated features, at the best horizon and
    // threshold (a selective cache keeps blocks longer than LRU, so horizons past its age count).
    HitStats best = a.lru;
    for (double horizon : {1.0, 2.0, 4.0, 8.0}) {
      const std::vector<double> within =
          CalibratedReuseWithinAge(prepared, categories, horizon * lru.mean_eviction_age());
      for (double threshold : {0.01, 0.02, 0.05, 0.1, 0.2, 0.3, 0.5}) {
        const HitStats hits = PrefixCacheSim(trace, prepared, capacities[c],
                                             {.admission = Admission::kByFeatures, .reuse_within_age = &within,
                                              .threshold = threshold})
                                  .Run();
        if (hits.hits > best.hits) best = hits;
      }
    }
    a.oracles.insert(a.oracles.begin() + 2,
                     {.name = "admit-by-features", .hits = best, .gap_closed = GapClosed(best, a.lru, a.opt)});
    out.push_back(std::move(a));
  }
  return out;
}

}  // namespace kvtier
