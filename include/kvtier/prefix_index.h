// PrefixIndex: which blocks of which prefixes are cached, where, and how they are used.
//
// A tree of blocks: each block's parent is the block before it in its request. Because a
// BlockKey is a chained hash (block.h) it already names the whole prefix, so the tree is
// held as one open-addressing hash table from key to node, each node pointing at its parent
// and counting its children: the child maps of a radix tree without their memory. A
// longest-prefix lookup walks a request's keys in O(its blocks); a key found under a
// different parent (or with a different token fingerprint) is a hash collision and ends the
// prefix as a miss, counted in Stats::collisions.
//
// Per node: the key, its parent, children count, size, the tiers holding it (a bit per
// tier), a pin count, last access time and access count, the predictor's tags (block type,
// transition) and a token fingerprint: 64 bytes, about 80 per block with the table
// (`MemoryBytes()`). Placement per head group (head-granular eviction) will live in a side
// table that only blocks split across tiers use.
//
// Eviction only removes unpinned leaves (a child is useless without its parent).
// EvictableLeaves() walks a list of the current leaves in the order they became leaves, so
// leaf-first candidates cost O(candidates), not O(blocks).
//
// Thread-safety and locking: one reader-writer lock (`mutex_`; writers first, so that a
// stream of lookups cannot keep an insert waiting; profiled, Stats::lock). Lookups, Find,
// Pin/unpin, Touch, tier updates and iteration take it shared; node fields they change are
// atomics. Insert, Evict and SetTags take it exclusive: the serial part of a store whose
// puts run side by side (docs/store.md, "Locking"). Nothing else is locked while it is held,
// and no callback runs under it except ForEachBlock's visitor (which must not call the index).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "kvtier/block.h"
#include "kvtier/lock_profile.h"
#include "kvtier/status.h"

namespace kvtier {

// Tiers are numbered 0..7 (T0 GPU HBM ... T5 parallel filesystem); a mask holds one bit each.
using TierMask = uint8_t;
inline constexpr int kMaxTiers = 8;

// What a caller states about a block when it inserts it.
struct BlockMeta {
  uint32_t size_bytes = 0;
  BlockType type = BlockType::kUserContext;
  TransitionType transition = TransitionType::kSameToolRepeat;
  uint64_t fingerprint = 0;  // BlockHasher::TokenFingerprint; 0 = unknown (not checked)
  TierMask tiers = 0;        // where the payload already is
};

// A snapshot of one node.
struct BlockInfo {
  BlockKey key;
  std::optional<BlockKey> parent;  // nullopt for a first block
  BlockMeta meta;
  uint32_t children = 0;
  uint32_t pins = 0;
  uint64_t last_access = 0;  // caller's clock (Insert/Touch `now`)
  uint32_t access_count = 0;
};

struct PrefixIndexOptions {
  // Default: 65536. The table and the nodes for them are allocated (and faulted in) at
  // construction; both grow past it, under the index's lock.
  std::size_t expected_blocks = 1 << 16;
  Status Validate() const;
};

class PrefixIndex;
class ProfiledRwMutex;

// Keeps blocks pinned (not evictable) while it lives. Move-only.
class PinnedBlocks {
 public:
  PinnedBlocks() = default;
  PinnedBlocks(PinnedBlocks&& other) noexcept;
  PinnedBlocks& operator=(PinnedBlocks&& other) noexcept;
  PinnedBlocks(const PinnedBlocks&) = delete;
  PinnedBlocks& operator=(const PinnedBlocks&) = delete;
  ~PinnedBlocks();

  std::size_t size() const { return nodes_.size(); }
  void Release();

 private:
  friend class PrefixIndex;
  PinnedBlocks(const PrefixIndex* index, std::vector<uint32_t> nodes) : index_(index), nodes_(std::move(nodes)) {}

  const PrefixIndex* index_ = nullptr;
  std::vector<uint32_t> nodes_;
};

class PrefixIndex {
 public:
  struct Stats {
    uint64_t blocks = 0;
    uint64_t leaves = 0;
    uint64_t lookups = 0;
    uint64_t hit_blocks = 0;
    uint64_t collisions = 0;
    uint64_t evictions = 0;
    LockProfile lock;  // the index's lock: how long inserts and evictions held it
  };

  explicit PrefixIndex(PrefixIndexOptions options = {});
  ~PrefixIndex();
  PrefixIndex(const PrefixIndex&) = delete;
  PrefixIndex& operator=(const PrefixIndex&) = delete;

  // Inserts the chain `keys` (block i's parent is block i-1; block 0's is `parent`, or none).
  // Blocks already present are touched and keep their meta; new ones take `meta[i]`.
  // Returns how many blocks were new. A key already present under another parent, or with
  // another fingerprint, is a collision: AlreadyExists, and the blocks before it stay inserted.
  // NotFound when `parent` is given but not present.
  Result<std::size_t> Insert(std::span<const BlockKey> keys, std::span<const BlockMeta> meta, uint64_t now,
                             const std::optional<BlockKey>& parent = std::nullopt);

  // Number of leading keys of `keys` that are present, each under the one before it.
  // `fingerprints`, when given, are checked too. Read-only: a scheduler probes many requests
  // it does not run, so only Touch (when the blocks are used) updates access statistics.
  std::size_t LongestPrefix(std::span<const BlockKey> keys, std::span<const uint64_t> fingerprints = {}) const;

  // Records a use of the present blocks among `keys`: last access `now`, count + 1.
  void Touch(std::span<const BlockKey> keys, uint64_t now);

  std::optional<BlockInfo> Find(const BlockKey& key) const;

  // Where a run of blocks may begin: only at a chain's first block, or at any stored block.
  enum class RunStart { kChainStart, kAnyBlock };
  // Snapshots of the leading blocks of `keys` that form a run, into `out` (cleared first):
  // each present, each after the first stored under the one before it, the first one
  // allowed by `start`. The read path's walk of a chain: one lock for the whole run and the
  // probes of later keys prefetched, where a Find per key pays a lock and a cache miss each.
  void FindRun(std::span<const BlockKey> keys, RunStart start, std::vector<BlockInfo>& out) const;

  // Pins the first `keys.size()` blocks of a chain; NotFound if one is missing.
  Result<PinnedBlocks> Pin(std::span<const BlockKey> keys) const;

  // Records that `tier` does / does not hold the block. NotFound if absent.
  Status SetTier(const BlockKey& key, int tier, bool present);

  // Records the block's type and the transition of its last access. NotFound if absent.
  Status SetTags(const BlockKey& key, BlockType type, TransitionType transition);

  // Removes an unpinned leaf. FailedPrecondition when it has children or pins.
  Status Evict(const BlockKey& key);

  // Up to `max` unpinned leaves, oldest leaf first.
  std::vector<BlockKey> EvictableLeaves(std::size_t max) const;

  // Every block, each after its parent. The visitor must not call the index.
  void ForEachBlock(const std::function<void(const BlockInfo&)>& visitor) const;

  Stats GetStats() const;
  std::size_t size() const;
  std::size_t MemoryBytes() const;  // table and nodes, as allocated

 private:
  friend class PinnedBlocks;
  struct Node;
  class NodeArena;

  void Unpin(std::span<const uint32_t> nodes) const;
  BlockInfo InfoLocked(uint32_t id) const;
  void InsertSlotLocked(uint64_t hash, uint32_t id);
  void EraseSlotLocked(std::size_t slot);
  void GrowTableLocked();
  void AppendLeafLocked(uint32_t id);
  void UnlinkLeafLocked(uint32_t id);

  std::unique_ptr<ProfiledRwMutex> mutex_;
  std::unique_ptr<NodeArena> arena_;  // GUARDED_BY(mutex_) for structure; node atomics are lock-free
  // Open addressing with linear probing over 16-byte slots (a hash of the key, node id,
  // parent id) in huge pages. GUARDED_BY(mutex_).
  class SlotArray;
  static std::unique_ptr<SlotArray> NewSlots(std::size_t count);
  std::unique_ptr<SlotArray> slots_;
  std::size_t used_ = 0;             // GUARDED_BY(mutex_)
  uint32_t leaf_head_;               // oldest leaf; GUARDED_BY(mutex_)
  uint32_t leaf_tail_;               // GUARDED_BY(mutex_)
  std::size_t leaves_ = 0;           // GUARDED_BY(mutex_)
  mutable std::atomic<uint64_t> lookups_{0}, hit_blocks_{0}, collisions_{0};
  uint64_t evictions_ = 0;           // GUARDED_BY(mutex_)
};

}  // namespace kvtier
