// BlockTable: the store's per-block records (store_state.h's Block), split by key into shards
// with a reader-writer lock each, so that operations on different chains do not contend for
// one table. Keys are hashes (block.h), so the top bits of a key spread blocks evenly.
//
// The table itself locks nothing: the caller holds the shard of each key it touches
// (`Guard`), in the mode it needs, or holds the whole store exclusively (the store's `mu_`:
// then no one else can be holding a shard, and shards need not be taken). References to
// records stay valid until the record is erased (std::unordered_map keeps its nodes in place
// when it grows).
//
// Locking order: shards in ascending index, at most two at a time (a block and its parent);
// a thread holding shards takes no other shard later. Guard does that.
//
// Thread-safety: each shard's map is guarded by its shard's lock (above); `Guard` is one
// thread's.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <optional>
#include <shared_mutex>
#include <unordered_map>
#include <utility>

#include "kvtier/block.h"

namespace kvtier::store_internal {

template <typename Record>
class BlockTable {
 public:
  static constexpr std::size_t kShardBits = 6;
  static constexpr std::size_t kShards = std::size_t{1} << kShardBits;  // 64: a 64-block chain spans most

  static std::size_t ShardOf(const BlockKey& key) { return static_cast<std::size_t>(key.hi >> (64 - kShardBits)); }

  Record* Find(const BlockKey& key) {
    Map& map = shards_[ShardOf(key)].map;
    auto it = map.find(key);
    return it == map.end() ? nullptr : &it->second;
  }
  const Record* Find(const BlockKey& key) const { return const_cast<BlockTable*>(this)->Find(key); }
  bool Contains(const BlockKey& key) const { return Find(key) != nullptr; }
  // The record of `key`, made (default) when there is none.
  Record& operator[](const BlockKey& key) { return shards_[ShardOf(key)].map[key]; }
  void Erase(const BlockKey& key) { shards_[ShardOf(key)].map.erase(key); }

  // Holds the shards of one or two keys, exclusively or shared, taken in ascending order.
  class Guard {
   public:
    enum class Mode { kShared, kExclusive };
    Guard(const BlockTable& table, Mode mode, const BlockKey& key, const std::optional<BlockKey>& other = std::nullopt)
        : table_(table), mode_(mode) {
      first_ = ShardOf(key);
      second_ = other ? ShardOf(*other) : first_;
      if (second_ < first_) std::swap(first_, second_);
      Lock(first_);
      if (second_ != first_) Lock(second_);
    }
    ~Guard() {
      if (second_ != first_) Unlock(second_);
      Unlock(first_);
    }
    Guard(const Guard&) = delete;
    Guard& operator=(const Guard&) = delete;

   private:
    void Lock(std::size_t i) {
      mode_ == Mode::kShared ? table_.shards_[i].mu.lock_shared() : table_.shards_[i].mu.lock();
    }
    void Unlock(std::size_t i) {
      mode_ == Mode::kShared ? table_.shards_[i].mu.unlock_shared() : table_.shards_[i].mu.unlock();
    }
    const BlockTable& table_;
    Mode mode_;
    std::size_t first_ = 0;
    std::size_t second_ = 0;
  };

 private:
  using Map = std::unordered_map<BlockKey, Record, BlockKeyHash>;
  struct alignas(64) Shard {
    mutable std::shared_mutex mu;
    Map map;  // GUARDED_BY(mu), or by the store's `mu_` held exclusively
  };
  std::array<Shard, kShards> shards_;
};

}  // namespace kvtier::store_internal
