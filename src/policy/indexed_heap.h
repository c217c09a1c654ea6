// IndexedHeap: a binary min-heap of entry ids that can erase or re-sift any member in
// O(log n), because each entry stores its own position (through `Pos`). LRU, EMA and Bayes
// keep their evictable blocks in one; non-evictable blocks are simply not in it, so Victim()
// is the top and never has to skip anything.
//
// `Less(a, b)` orders ids; `Pos(id)` returns a reference to the id's stored position
// (kNotInHeap when absent). Both are small functors holding a pointer to the owner's table.
//
// Thread-safety: none (owned by one policy).
#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

namespace kvtier::policy_internal {

inline constexpr uint32_t kNotInHeap = UINT32_MAX;

template <typename Less, typename Pos>
class IndexedHeap {
 public:
  IndexedHeap(Less less, Pos pos) : less_(std::move(less)), pos_(std::move(pos)) {}

  bool empty() const { return ids_.empty(); }
  std::size_t size() const { return ids_.size(); }
  uint32_t top() const { return ids_.front(); }
  bool Contains(uint32_t id) const { return pos_(id) != kNotInHeap; }

  void Push(uint32_t id) {
    ids_.push_back(id);
    pos_(id) = static_cast<uint32_t>(ids_.size() - 1);
    SiftUp(ids_.size() - 1);
  }

  void Erase(uint32_t id) {
    const std::size_t at = pos_(id);
    pos_(id) = kNotInHeap;
    const uint32_t last = ids_.back();
    ids_.pop_back();
    if (at == ids_.size()) return;
    Place(at, last);
    Fix(at);
  }

  // Restores order after the key of member `id` changed.
  void Update(uint32_t id) { Fix(pos_(id)); }

 private:
  void Place(std::size_t at, uint32_t id) {
    ids_[at] = id;
    pos_(id) = static_cast<uint32_t>(at);
  }
  void Fix(std::size_t at) {
    if (at > 0 && less_(ids_[at], ids_[(at - 1) / 2])) {
      SiftUp(at);
    } else {
      SiftDown(at);
    }
  }
  void SiftUp(std::size_t at) {
    const uint32_t id = ids_[at];
    while (at > 0) {
      const std::size_t parent = (at - 1) / 2;
      if (!less_(id, ids_[parent])) break;
      Place(at, ids_[parent]);
      at = parent;
    }
    Place(at, id);
  }
  void SiftDown(std::size_t at) {
    const uint32_t id = ids_[at];
    const std::size_t n = ids_.size();
    for (;;) {
      std::size_t child = 2 * at + 1;
      if (child >= n) break;
      if (child + 1 < n && less_(ids_[child + 1], ids_[child])) ++child;
      if (!less_(ids_[child], id)) break;
      Place(at, ids_[child]);
      at = child;
    }
    Place(at, id);
  }

  Less less_;
  Pos pos_;
  std::vector<uint32_t> ids_;
};

}  // namespace kvtier::policy_internal
