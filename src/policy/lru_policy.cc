// LRU, leaf-first: the least recently used evictable block goes first, as in SGLang's radix
// cache (a heap of leaves by last access time).
//
// Evictable blocks sit in an indexed heap keyed by (last access, access sequence); a block
// that is pinned or has a cached child is out of the heap until SetEvictable puts it back,
// at the place its last access gives it. Every operation is O(log n).
//
// Ties in time (a trace's virtual clock stamps a whole request with one `now`) go to the
// block touched or admitted later: the store touches a request's blocks head to tail, so
// its tail leaves before its head, vLLM's order (it frees a finished request's blocks in
// reverse so the tail is reused first).
#include <string_view>

#include "policy/entry_table.h"
#include "policy/indexed_heap.h"
#include "policy/policies.h"

namespace kvtier::policy_internal {
namespace {

struct LruEntry {
  BlockKey key;
  double last_access = 0;
  uint64_t sequence = 0;  // order of the last Admit/Touch among all blocks
  uint32_t heap_pos = kNotInHeap;
  bool evictable = true;
};

class LruPolicy final : public EvictionPolicy {
 public:
  LruPolicy() : heap_(Older{table_.entries()}, HeapPos{table_.entries()}) {}

  std::string_view name() const override { return "lru"; }

  void Admit(const ResidentBlock& block, double now_s) override {
    if (table_.Find(block.key) != kNoId) return Touch(block.key, block.transition, now_s);
    const uint32_t id = table_.Insert(block.key);
    Stamp(table_[id], now_s);
    heap_.Push(id);
  }

  void Touch(const BlockKey& key, TransitionType /*transition*/, double now_s) override {
    const uint32_t id = table_.Find(key);
    if (id == kNoId) return;
    Stamp(table_[id], now_s);
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
  struct Older {
    std::vector<LruEntry>* entries;
    bool operator()(uint32_t a, uint32_t b) const {
      const LruEntry& x = (*entries)[a];
      const LruEntry& y = (*entries)[b];
      if (x.last_access != y.last_access) return x.last_access < y.last_access;
      return x.sequence > y.sequence;
    }
  };
  struct HeapPos {
    std::vector<LruEntry>* entries;
    uint32_t& operator()(uint32_t id) const { return (*entries)[id].heap_pos; }
  };

  void Stamp(LruEntry& entry, double now_s) {
    entry.last_access = now_s;
    entry.sequence = ++sequence_;
  }

  EntryTable<LruEntry> table_;
  IndexedHeap<Older, HeapPos> heap_;
  uint64_t sequence_ = 0;
};

}  // namespace

std::unique_ptr<EvictionPolicy> NewLruPolicy(const PolicyOptions& /*options*/) { return std::make_unique<LruPolicy>(); }

}  // namespace kvtier::policy_internal
