// The paper's Bayesian policy: evict the block whose keeping is expected to save the least
// time per byte.
//
//   score = P_reuse(type, transition) * max(0, recompute_seconds - load_seconds(bytes)) / bytes
//           * exp(-(now - last_access) / tau)
//   load_seconds(bytes) = tier_latency_s + bytes / tier_bandwidth_bytes_per_s
//
// P_reuse comes from the shared ReusePredictor, for the block's type and the transition of
// the access that last touched it: the chance that the next access comes within the
// predictor's horizon. The middle factor, the block's "value", is fixed per block and tier.
//
// The last factor discounts staleness: the longer a block has waited without its predicted
// reuse, the less of that reuse is still to come. Without it all blocks of a pair score
// alike however long ago they were used, so a small gap between two pairs' P_reuse (0.80
// against 0.81) evicts the whole lower pair, hot blocks first among them; on a hot/cold mix
// whose pairs carry no signal that cut the hit rate from 79% (LRU) to 24%. With it, equal
// P_reuse falls back to LRU weighted by value, and P_reuse decides when it differs by more
// than the age gap (a factor e per tau). tau = PolicyOptions::bayes_staleness_tau_s, by
// default a quarter of the horizon. A block whose horizon has passed without an access has
// failed the predicted event: it is "expired" and scores 0 (it goes first, least recently
// used first); an access makes it live again.
//
// Victim() is exact in O(16 log n). ln(score) = ln P_reuse + rank - now / tau, with
// rank = ln(value) + last_access / tau fixed between accesses, and now / tau common to all.
// The evictable blocks of each of the 16 pairs sit in a heap by rank; within a pair P_reuse
// is common, so the heap's top is the pair's lowest score, and the lowest of the 16 tops,
// each weighed by its pair's current P_reuse, is the lowest overall. Neither time passing nor
// posteriors moving reorders anything. A 17th heap holds the expired blocks by age. Expiry
// is found in O(1) amortized per access from a list of live blocks in access order.
//
#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <string_view>
#include <vector>

#include "policy/entry_table.h"
#include "policy/ghost_queue.h"
#include "policy/id_list.h"
#include "policy/indexed_heap.h"
#include "policy/policies.h"

namespace kvtier::policy_internal {
namespace {

constexpr std::size_t kExpiredBucket = kReusePairCount;

struct BayesEntry {
  BlockKey key;
  ListLink link;             // in the live list while not expired
  double log_value = 0;      // ln(seconds saved per byte if reused here); -inf for none
  double rank = 0;           // log_value + last_access / tau
  double last_access = 0;
  double predicted = 0;      // P_reuse when the current interval opened
  uint64_t sequence = 0;
  uint32_t heap_pos = kNotInHeap;
  BlockType type = BlockType::kUserContext;
  TransitionType transition = TransitionType::kSameToolRepeat;
  bool evictable = true;
  bool expired = false;
};

// What a removed block leaves behind until its interval's outcome is known.
struct BayesGhost {
  BlockType type = BlockType::kUserContext;
  TransitionType transition = TransitionType::kSameToolRepeat;
  double last_access = 0;
  double predicted = 0;
};

class BayesPolicy final : public EvictionPolicy {
 public:
  BayesPolicy(const PolicyOptions& options, std::shared_ptr<ReusePredictor> predictor)
      : options_(options),
        predictor_(std::move(predictor)),
        horizon_s_(predictor_->horizon_s()),
        tau_s_(options.bayes_staleness_tau_s > 0 ? options.bayes_staleness_tau_s : horizon_s_ / 4),
        live_(Link{table_.entries()}) {
    heaps_.reserve(kExpiredBucket + 1);
    for (std::size_t i = 0; i <= kExpiredBucket; ++i) {
      heaps_.emplace_back(Lower{table_.entries(), i != kExpiredBucket}, HeapPos{table_.entries()});
    }
  }

  std::string_view name() const override { return "bayes"; }

  void Admit(const ResidentBlock& block, double now_s) override {
    Advance(now_s);
    if (table_.Find(block.key) != kNoId) return Touch(block.key, block.transition, now_s);
    if (options_.bayes_learn) {
      if (std::optional<BayesGhost> ghost = ghost_.Take(block.key)) {
        Record(ghost->type, ghost->transition, ghost->predicted, now_ - ghost->last_access <= horizon_s_);
      }
    }
    const uint32_t id = table_.Insert(block.key);
    BayesEntry& entry = table_[id];
    entry.type = block.type;
    const double bytes = std::max(1.0, static_cast<double>(block.bytes));
    const double load_s = options_.tier_latency_s + bytes / options_.tier_bandwidth_bytes_per_s;
    const double value = (block.recompute_seconds - load_s) / bytes;
    entry.log_value = value > 0 ? std::log(value) : -std::numeric_limits<double>::infinity();
    Open(id, block.transition);
  }

  void Touch(const BlockKey& key, TransitionType transition, double now_s) override {
    Advance(now_s);
    const uint32_t id = table_.Find(key);
    if (id == kNoId) return;
    BayesEntry& entry = table_[id];
    if (entry.heap_pos != kNotInHeap) Heap(entry).Erase(id);
    if (entry.expired) {
      entry.expired = false;  // its no-reuse was recorded when it expired
    } else {
      // Not expired after Advance: this access is within the horizon of the previous one.
      if (options_.bayes_learn) Record(entry.type, entry.transition, entry.predicted, true);
      live_.Unlink(id);
    }
    Open(id, transition);
  }

  void Remove(const BlockKey& key, double now_s) override {
    Advance(now_s);
    const uint32_t id = table_.Find(key);
    if (id == kNoId) return;
    BayesEntry& entry = table_[id];
    if (entry.heap_pos != kNotInHeap) Heap(entry).Erase(id);
    if (!entry.expired) {
      live_.Unlink(id);
      if (options_.bayes_learn) {
        ghost_.Push(key, BayesGhost{entry.type, entry.transition, entry.last_access, entry.predicted});
        TrimGhost();
      }
    }
    table_.Erase(id);
  }

  void SetEvictable(const BlockKey& key, bool evictable) override {
    const uint32_t id = table_.Find(key);
    if (id == kNoId || table_[id].evictable == evictable) return;
    BayesEntry& entry = table_[id];
    entry.evictable = evictable;
    if (evictable) {
      Heap(entry).Push(id);
    } else {
      Heap(entry).Erase(id);
    }
  }

  std::optional<BlockKey> Victim() override {
    const std::optional<Scored> victim = LowestScored();
    if (!victim) return std::nullopt;
    return table_[victim->id].key;
  }

  // Expired blocks first (a score of 0), then by ln(score) + now / tau: the shards of a tier
  // compare these at the same now, so the term drops out.
  std::optional<StandingVictim> VictimWithStanding() override {
    const std::optional<Scored> victim = LowestScored();
    if (!victim) return std::nullopt;
    const BayesEntry& entry = table_[victim->id];
    return StandingVictim{.key = entry.key,
                          .standing = VictimStanding{.rank = victim->log_score, .last_access = entry.last_access}};
  }

  bool ShouldAdmit(const ResidentBlock& block, double /*now_s*/) override {
    return predictor_->PReuse(block.type, block.transition) >= options_.bayes_admit_threshold;
  }

  std::size_t size() const override { return table_.size(); }

 private:
  struct Scored {
    uint32_t id = kNoId;
    double log_score = 0;  // ln(score) + now / tau; -inf when expired
  };
  std::optional<Scored> LowestScored() {
    if (!heaps_[kExpiredBucket].empty()) {
      return Scored{.id = heaps_[kExpiredBucket].top(), .log_score = -std::numeric_limits<double>::infinity()};
    }
    std::optional<Scored> best;
    for (std::size_t pair = 0; pair < kExpiredBucket; ++pair) {
      if (heaps_[pair].empty()) continue;
      const uint32_t id = heaps_[pair].top();
      const BayesEntry& entry = table_[id];
      const double score = LogPReuse(pair, entry.type, entry.transition) + entry.rank;
      if (!best || score < best->log_score || (score == best->log_score && Older(entry, table_[best->id]))) {
        best = Scored{.id = id, .log_score = score};
      }
    }
    return best;
  }

  static bool Older(const BayesEntry& x, const BayesEntry& y) {
    if (x.last_access != y.last_access) return x.last_access < y.last_access;
    return x.sequence > y.sequence;  // same instant: the later-touched (a request's tail) first
  }
  struct Lower {
    std::vector<BayesEntry>* entries;
    bool by_rank;
    bool operator()(uint32_t a, uint32_t b) const {
      const BayesEntry& x = (*entries)[a];
      const BayesEntry& y = (*entries)[b];
      if (by_rank && x.rank != y.rank) return x.rank < y.rank;
      return Older(x, y);
    }
  };
  struct HeapPos {
    std::vector<BayesEntry>* entries;
    uint32_t& operator()(uint32_t id) const { return (*entries)[id].heap_pos; }
  };
  struct Link {
    std::vector<BayesEntry>* entries;
    ListLink& operator()(uint32_t id) const { return (*entries)[id].link; }
  };
  using PairHeap = IndexedHeap<Lower, HeapPos>;

  PairHeap& Heap(const BayesEntry& entry) {
    return heaps_[entry.expired ? kExpiredBucket
                                : static_cast<std::size_t>(ReusePairIndex(entry.type, entry.transition))];
  }

  // ln P_reuse of pair `pair` (= ReusePairIndex(type, transition)), taken again only when the
  // predictor's estimate moved: Victim weighs up to 16 pairs per call and most calls find
  // every estimate where it was.
  double LogPReuse(std::size_t pair, BlockType type, TransitionType transition) {
    const double p = predictor_->PReuse(type, transition);
    LogP& cached = log_p_[pair];
    if (p != cached.p) cached = {.p = p, .log_p = std::log(p)};
    return cached.log_p;
  }

  // Starts the block's next interval: a live block, last accessed now, with `transition`.
  void Open(uint32_t id, TransitionType transition) {
    BayesEntry& entry = table_[id];
    entry.transition = transition;
    entry.last_access = now_;
    entry.rank = entry.log_value + now_ / tau_s_;
    entry.sequence = ++sequence_;
    entry.predicted = predictor_->PReuse(entry.type, transition);
    live_.PushBack(id);
    if (entry.evictable) Heap(entry).Push(id);
  }

  // Moves the clock to `now_s`, expiring live blocks and ghosts whose horizon has passed.
  void Advance(double now_s) {
    now_ = std::max(now_, now_s);
    while (!live_.empty()) {
      const uint32_t id = live_.front();
      BayesEntry& entry = table_[id];
      if (entry.last_access + horizon_s_ >= now_) break;
      live_.Unlink(id);
      if (options_.bayes_learn) Record(entry.type, entry.transition, entry.predicted, false);
      const bool in_heap = entry.heap_pos != kNotInHeap;
      if (in_heap) Heap(entry).Erase(id);
      entry.expired = true;
      if (in_heap) Heap(entry).Push(id);
    }
    // Ghosts leave in removal order, so one whose horizon ended may wait behind a younger
    // one; Admit compares times itself, so that delays its outcome but never changes it.
    while (std::optional<std::pair<BlockKey, BayesGhost>> oldest = ghost_.PeekOldest()) {
      if (oldest->second.last_access + horizon_s_ >= now_) break;
      (void)ghost_.PopOldest();
      Record(oldest->second.type, oldest->second.transition, oldest->second.predicted, false);
    }
  }

  void TrimGhost() {
    const double capacity =
        static_cast<double>(options_.capacity_blocks > 0 ? options_.capacity_blocks : table_.high_water());
    const auto limit = static_cast<std::size_t>(options_.bayes_ghost_fraction * capacity);
    while (ghost_.size() > limit) {
      const std::optional<std::pair<BlockKey, BayesGhost>> oldest = ghost_.PopOldest();
      Record(oldest->second.type, oldest->second.transition, oldest->second.predicted, false);
    }
  }

  void Record(BlockType type, TransitionType transition, double predicted, bool reused) {
    predictor_->RecordOutcome(type, transition, predicted, reused, now_);
  }

  const PolicyOptions options_;
  const std::shared_ptr<ReusePredictor> predictor_;
  const double horizon_s_;
  const double tau_s_;  // staleness time constant
  EntryTable<BayesEntry> table_;
  std::vector<PairHeap> heaps_;  // 16 pairs by rank, then the expired blocks by age; evictable only
  IdList<Link> live_;         // not-expired blocks, least recently accessed first
  GhostQueue<BayesGhost> ghost_;
  struct LogP {
    double p = std::numeric_limits<double>::quiet_NaN();  // unequal to any estimate: none cached
    double log_p = 0;
  };
  std::array<LogP, kReusePairCount> log_p_;
  double now_ = 0;
  uint64_t sequence_ = 0;
};

}  // namespace

std::unique_ptr<EvictionPolicy> NewBayesPolicy(const PolicyOptions& options,
                                               std::shared_ptr<ReusePredictor> predictor) {
  return std::make_unique<BayesPolicy>(options, std::move(predictor));
}

}  // namespace kvtier::policy_internal
