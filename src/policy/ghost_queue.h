// GhostQueue: keys (and a small value each) of blocks that recently left, oldest first, for
// S3-FIFO's ghost, ARC's B1/B2 and Bayes's unresolved evictions. A hit takes a key out of
// the middle in O(1): the map forgets it and its FIFO record turns stale (its stamp no
// longer matches) and is skipped when it reaches the front. The FIFO is compacted when
// stale records outnumber live ones, so memory stays O(live) and every operation O(1)
// amortized.
//
// Thread-safety: none (owned by one policy).
#pragma once

#include <cstdint>
#include <deque>
#include <optional>
#include <utility>

#include "kvtier/block.h"
#include "policy/flat_key_map.h"

namespace kvtier::policy_internal {

template <typename V>
class GhostQueue {
 public:
  std::size_t size() const { return live_.size(); }

  // Adds `key` as the newest ghost (replacing an older ghost of the same key).
  void Push(const BlockKey& key, const V& value) {
    const uint64_t stamp = ++stamp_;
    live_.Put(key, Live{value, stamp});
    fifo_.push_back(Record{key, stamp});
    if (fifo_.size() > 2 * live_.size() + 64) Compact();
  }

  // Removes and returns the ghost of `key`, if any.
  std::optional<V> Take(const BlockKey& key) {
    Live* live = live_.Find(key);
    if (live == nullptr) return std::nullopt;
    const V value = live->value;
    live_.Erase(key);
    return value;
  }

  bool Contains(const BlockKey& key) const { return live_.Find(key) != nullptr; }

  // Removes and returns the oldest ghost.
  std::optional<std::pair<BlockKey, V>> PopOldest() {
    while (!fifo_.empty()) {
      const Record record = fifo_.front();
      fifo_.pop_front();
      Live* live = live_.Find(record.key);
      if (live == nullptr || live->stamp != record.stamp) continue;  // stale
      std::pair<BlockKey, V> out{record.key, live->value};
      live_.Erase(record.key);
      return out;
    }
    return std::nullopt;
  }

  // The oldest ghost, not removed.
  std::optional<std::pair<BlockKey, V>> PeekOldest() {
    while (!fifo_.empty()) {
      const Record& record = fifo_.front();
      const Live* live = live_.Find(record.key);
      if (live != nullptr && live->stamp == record.stamp) return std::pair<BlockKey, V>{record.key, live->value};
      fifo_.pop_front();
    }
    return std::nullopt;
  }

  void TrimTo(std::size_t max_size) {
    while (live_.size() > max_size) (void)PopOldest();
  }

 private:
  struct Live {
    V value{};
    uint64_t stamp = 0;
  };
  struct Record {
    BlockKey key;
    uint64_t stamp = 0;
  };

  void Compact() {
    std::deque<Record> kept;
    for (const Record& record : fifo_) {
      const Live* live = live_.Find(record.key);
      if (live != nullptr && live->stamp == record.stamp) kept.push_back(record);
    }
    fifo_ = std::move(kept);
  }

  FlatKeyMap<Live> live_;
  std::deque<Record> fifo_;
  uint64_t stamp_ = 0;
};

}  // namespace kvtier::policy_internal
