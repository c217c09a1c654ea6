// GhostQueue: keys (and a small value each) of blocks that recently left, oldest first, for
// S3-FIFO's ghost, ARC's B1/B2 and Bayes's unresolved evictions. The ghosts are entries of an
// EntryTable linked in an intrusive list in the order they were pushed, so a hit takes a key
// out of the middle in O(1) and the oldest ghost is the list's front, read without a lookup
// (Bayes peeks at it on every call; a FIFO of stamped records checked against the map cost a
// cache miss there, and more for the stale records a hit left behind). Every operation is
// O(1); no allocation once the table has grown.
//
// Thread-safety: none (owned by one policy).
#pragma once

#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

#include "kvtier/block.h"
#include "policy/entry_table.h"
#include "policy/id_list.h"

namespace kvtier::policy_internal {

template <typename V>
class GhostQueue {
 public:
  GhostQueue() : order_(Link{table_.entries()}) {}
  // The list links into the table's own vector.
  GhostQueue(const GhostQueue&) = delete;
  GhostQueue& operator=(const GhostQueue&) = delete;

  std::size_t size() const { return table_.size(); }

  // Adds `key` as the newest ghost (replacing an older ghost of the same key).
  void Push(const BlockKey& key, const V& value) {
    if (const uint32_t old = table_.Find(key); old != kNoId) Forget(old);
    const uint32_t id = table_.Insert(key);
    table_[id].value = value;
    order_.PushBack(id);
  }

  // Removes and returns the ghost of `key`, if any.
  std::optional<V> Take(const BlockKey& key) {
    const uint32_t id = table_.Find(key);
    if (id == kNoId) return std::nullopt;
    const V value = table_[id].value;
    Forget(id);
    return value;
  }

  bool Contains(const BlockKey& key) const { return table_.Find(key) != kNoId; }

  // Removes and returns the oldest ghost.
  std::optional<std::pair<BlockKey, V>> PopOldest() {
    std::optional<std::pair<BlockKey, V>> oldest = PeekOldest();
    if (oldest) Forget(order_.front());
    return oldest;
  }

  // The oldest ghost, not removed.
  std::optional<std::pair<BlockKey, V>> PeekOldest() const {
    if (order_.empty()) return std::nullopt;
    const Ghost& ghost = table_[order_.front()];
    return std::pair<BlockKey, V>{ghost.key, ghost.value};
  }

  void TrimTo(std::size_t max_size) {
    while (size() > max_size) Forget(order_.front());
  }

 private:
  struct Ghost {
    BlockKey key;
    V value{};
    ListLink link;
  };
  struct Link {
    std::vector<Ghost>* entries;
    ListLink& operator()(uint32_t id) const { return (*entries)[id].link; }
  };

  void Forget(uint32_t id) {
    order_.Unlink(id);
    table_.Erase(id);
  }

  EntryTable<Ghost> table_;
  IdList<Link> order_;
};

}  // namespace kvtier::policy_internal
