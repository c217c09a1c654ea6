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
// Evictable filter and ties: as LRU (lru_policy.cc): non-evictable blocks are out of the
// heap; equal ranks go to the later-touched block.
#include <cmath>
#include <string_view>

#include "policy/entry_table.h"
#include "policy/indexed_heap.h"
#include "policy/policies.h"

namespace kvtier::policy_internal {
namespace {

struct EmaEntry {
  BlockKey key;
  double last_access = 0;
  double score = 0;  // decayed count as of last_access
  double rank = 0;   // ln(score) + last_access / tau
  uint64_t sequence = 0;
  uint32_t heap_pos = kNotInHeap;
  bool evictable = true;
};

class EmaPolicy final : public EvictionPolicy {
 public:
  explicit EmaPolicy(double tau_s) : tau_s_(tau_s), heap_(Lower{table_.entries()}, HeapPos{table_.entries()}) {}

  std::string_view name() const override { return "ema"; }

  void Admit(const ResidentBlock& block, double now_s) override {
    if (table_.Find(block.key) != kNoId) return Touch(block.key, block.transition, now_s);
    const uint32_t id = table_.Insert(block.key);
    Access(table_[id], now_s);
    heap_.Push(id);
  }

  void Touch(const BlockKey& key, TransitionType /*transition*/, double now_s) override {
    const uint32_t id = table_.Find(key);
    if (id == kNoId) return;
    Access(table_[id], now_s);
    if (heap_.Contains(id)) heap_.Update(id);
  }

  void Remove(const BlockKey& key, double /*now_s*/) override {
    const uint32_t id = table_.Find(key);
    if (id == kNoId) return;
    if (heap_.Contains(id)) heap_.Erase(id);
    table_.Erase(id);
  }

  void SetEvictable(const BlockKey& key, bool evictable) override {
    const uint32_t id = table_.Find(key);
    if (id == kNoId || table_[id].evictable == evictable) return;
    table_[id].evictable = evictable;
    if (evictable) {
      heap_.Push(id);
    } else {
      heap_.Erase(id);
    }
  }

  std::optional<BlockKey> Victim() override {
    if (heap_.empty()) return std::nullopt;
    return table_[heap_.top()].key;
  }

  std::size_t size() const override { return table_.size(); }

 private:
  struct Lower {
    std::vector<EmaEntry>* entries;
    bool operator()(uint32_t a, uint32_t b) const {
      const EmaEntry& x = (*entries)[a];
      const EmaEntry& y = (*entries)[b];
      if (x.rank != y.rank) return x.rank < y.rank;
      return x.sequence > y.sequence;
    }
  };
  struct HeapPos {
    std::vector<EmaEntry>* entries;
    uint32_t& operator()(uint32_t id) const { return (*entries)[id].heap_pos; }
  };

  void Access(EmaEntry& entry, double now_s) {
    const bool first = entry.sequence == 0;
    entry.score = first ? 1.0 : entry.score * std::exp(-(now_s - entry.last_access) / tau_s_) + 1.0;
    entry.last_access = now_s;
    entry.rank = std::log(entry.score) + now_s / tau_s_;
    entry.sequence = ++sequence_;
  }

  const double tau_s_;
  EntryTable<EmaEntry> table_;
  IndexedHeap<Lower, HeapPos> heap_;
  uint64_t sequence_ = 0;
};

}  // namespace

std::unique_ptr<EvictionPolicy> NewEmaPolicy(const PolicyOptions& options) {
  return std::make_unique<EmaPolicy>(options.ema_tau_s);
}

}  // namespace kvtier::policy_internal
