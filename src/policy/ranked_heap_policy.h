// RankedHeapPolicy: a policy whose victim is the evictable block that comes first in one
// total order, kept in an indexed heap; LRU (lru_policy.cc) and EMA (ema_policy.cc) differ
// only in that order. A block that is pinned or has a cached child is out of the heap until
// SetEvictable puts it back, at the place its rank gives it. Every operation is O(log n).
//
// `Ranking` supplies:
//   struct Entry { BlockKey key; uint64_t sequence; uint32_t heap_pos; bool evictable; ... };
//   static constexpr std::string_view kName;
//   void Access(Entry&, double now_s, uint64_t sequence) const;  // admission or hit
//   bool Before(const Entry& a, const Entry& b) const;            // a leaves first
// and, when the order depends on expected reads (EvictionPolicy::Expect):
//   void Expect(Entry&, std::optional<uint64_t> order) const;
//   bool Admits(const ResidentBlock&, const Entry* victim) const;  // into a full tier, given who would leave
//   VictimStanding Standing(const Entry&) const;  // EvictionPolicy::VictimWithStanding: Before's order
//
// Thread-safety: none (eviction_policy.h: the store serializes a tier's calls).
#pragma once

#include <string_view>
#include <vector>

#include "policy/entry_table.h"
#include "policy/indexed_heap.h"
#include "policy/policies.h"

namespace kvtier::policy_internal {

template <typename Ranking>
class RankedHeapPolicy final : public EvictionPolicy {
  using Entry = typename Ranking::Entry;

 public:
  explicit RankedHeapPolicy(Ranking ranking)
      : ranking_(ranking), heap_(First{table_.entries(), &ranking_}, HeapPos{table_.entries()}) {}

  std::string_view name() const override { return Ranking::kName; }

  void Admit(const ResidentBlock& block, double now_s) override {
    if (table_.Find(block.key) != kNoId) return Touch(block.key, block.transition, now_s);
    const uint32_t id = table_.Insert(block.key);
    ranking_.Access(table_[id], now_s, ++sequence_);
    if constexpr (requires(Entry& e) { ranking_.Expect(e, block.expected_order); }) {
      ranking_.Expect(table_[id], block.expected_order);
    }
    heap_.Push(id);
  }

  void Touch(const BlockKey& key, TransitionType /*transition*/, double now_s) override {
    const uint32_t id = table_.Find(key);
    if (id == kNoId) return;
    ranking_.Access(table_[id], now_s, ++sequence_);
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

  void Expect(const BlockKey& key, std::optional<uint64_t> order) override {
    if constexpr (requires(Entry& e) { ranking_.Expect(e, order); }) {
      const uint32_t id = table_.Find(key);
      if (id == kNoId) return;
      ranking_.Expect(table_[id], order);
      if (heap_.Contains(id)) heap_.Update(id);
    }
  }

  bool ShouldAdmit(const ResidentBlock& block, double /*now_s*/) override {
    if constexpr (requires(const Entry* e) { ranking_.Admits(block, e); }) {
      return ranking_.Admits(block, heap_.empty() ? nullptr : &table_[heap_.top()]);
    }
    return true;
  }

  std::optional<BlockKey> Victim() override {
    if (heap_.empty()) return std::nullopt;
    return table_[heap_.top()].key;
  }

  std::optional<StandingVictim> VictimWithStanding() override {
    if (heap_.empty()) return std::nullopt;
    const Entry& victim = table_[heap_.top()];
    return StandingVictim{.key = victim.key, .standing = ranking_.Standing(victim)};
  }

  std::size_t size() const override { return table_.size(); }

 private:
  struct First {
    std::vector<Entry>* entries;
    const Ranking* ranking;
    bool operator()(uint32_t a, uint32_t b) const { return ranking->Before((*entries)[a], (*entries)[b]); }
  };
  struct HeapPos {
    std::vector<Entry>* entries;
    uint32_t& operator()(uint32_t id) const { return (*entries)[id].heap_pos; }
  };

  const Ranking ranking_;
  EntryTable<Entry> table_;
  IndexedHeap<First, HeapPos> heap_;
  uint64_t sequence_ = 0;
};

}  // namespace kvtier::policy_internal
