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
// transition) and a token fingerprint: 56 bytes, about 80 per block with the table
// (`MemoryBytes()`). Placement per head group (head-granular eviction) will live in a side
// table that only blocks split across tiers use.
//
// Eviction only removes unpinned leaves (a child is useless without its parent); which ones
// is the caller's policy (the store's eviction policies).
//
// Shards. The index is `PrefixIndexOptions::shards` tables, a key's shard chosen by a mix of
// the key, each with its own lock and the free list of its nodes; the nodes of every shard
// lie in one arena, so a chain's nodes stay side by side. A block and its parent may live in
// different shards. With one shard the index is one table under one lock, as it always was.
//
// Thread-safety and locking: each shard has one reader-writer lock (writers first, so that a
// stream of lookups cannot keep an insert waiting; profiled, Stats::shard_locks). Lookups,
// Find, Pin/unpin, Touch, tier updates and iteration take the shards of their keys shared;
// node fields they change are atomics. Inserting a block first claims its parent under the
// parent's shard shared (raises its atomic count of children, which keeps evictions off it),
// then indexes the block under its own shard exclusively; evicting a block and SetTags take
// its shard exclusively. That is the serial part of a store whose puts run side by side
// (docs/store.md, "Locking"), which puts of different chains meet in only where their blocks
// fall in one shard. Lock order: a writer holds one shard at a time; a reader takes the shards
// of one call's keys shared, in ascending order. A parent's node is read, and its count of
// children changed, without its shard held exclusively only while a claim or a child keeps
// it from being evicted. Nothing else is locked while a shard is held, and no callback runs
// under one except ForEachBlock's visitor (which must not call the index).
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
  // construction; both grow past it, under the lock of the shard that grows.
  std::size_t expected_blocks = 1 << 16;
  // Shards, each with its own lock: a power of two from 1 to kMaxShards. More let writers of
  // different chains run side by side; a lookup takes one more shared lock per shard its keys
  // fall in. Default: 1 (`kvtier serve`: kServeIndexShards).
  uint32_t shards = 1;
  static constexpr uint32_t kMaxShards = 64;
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
    LockProfile lock;  // the shards' locks added up: how long inserts and evictions held them
    std::vector<LockProfile> shard_locks;  // each shard's: the busiest one is the serial part
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
  // What the read path needs of a block of a run (its key is the caller's): its size and the
  // tiers holding it.
  struct RunPlacement {
    uint32_t size_bytes = 0;
    TierMask tiers = 0;
  };
  // FindRun's walk, keeping only each block's RunPlacement: no snapshot (88 bytes a block)
  // and no parent's key read, which a lookup of a long chain does not need.
  void FindRunPlacement(std::span<const BlockKey> keys, RunStart start, std::vector<RunPlacement>& out) const;

  // Pins the first `keys.size()` blocks of a chain; NotFound if one is missing.
  Result<PinnedBlocks> Pin(std::span<const BlockKey> keys) const;

  // Records that `tier` does / does not hold the block. NotFound if absent.
  Status SetTier(const BlockKey& key, int tier, bool present);

  // Records the block's type and the transition of its last access. NotFound if absent.
  Status SetTags(const BlockKey& key, BlockType type, TransitionType transition);

  // Removes an unpinned leaf. FailedPrecondition when it has children or pins.
  Status Evict(const BlockKey& key);

  // Every block, each after its parent. The visitor must not call the index.
  void ForEachBlock(const std::function<void(const BlockInfo&)>& visitor) const;

  Stats GetStats() const;
  std::size_t size() const;
  std::size_t MemoryBytes() const;  // table and nodes, as allocated

 private:
  friend class PinnedBlocks;
  struct Node;
  class NodeArena;
  class SlotArray;
  struct Shard;
  class SharedShards;

  uint32_t ShardOfKey(const BlockKey& key) const;
  uint64_t MaskOf(std::span<const BlockKey> keys) const;  // a bit per shard the keys fall in
  uint32_t ShardOfNode(uint32_t id) const;
  Node& NodeAt(uint32_t id);
  const Node& NodeAt(uint32_t id) const;
  // Prefetches the home slot of `key` in its shard (held in any mode).
  void PrefetchHomeSlot(const BlockKey& key) const;
  // The slot of `key` in its shard (held in any mode), or the shard's slot count.
  std::size_t FindSlotIn(const Shard& shard, const BlockKey& key) const;
  // The node of `key` in its shard (held in any mode), or kNoNode.
  uint32_t FindNode(const Shard& shard, const BlockKey& key) const;
  // One block of Insert, with its shard held exclusively and its parent claimed: its node,
  // and whether it was new.
  struct Indexed {
    uint32_t id;
    bool added;
  };
  Result<Indexed> InsertOneLocked(Shard& shard, const BlockKey& key, const BlockMeta& meta, uint64_t now,
                                  uint32_t parent, std::size_t position, std::size_t inserted_before);
  // Counts a child of `parent` (in shard `parent_shard`) in advance, with that shard held in
  // any mode, so that it is not evicted; ReleaseChild takes the count back (no lock needed:
  // the parent is not touched after, so its shard is given, not read from its node).
  void ClaimChild(uint32_t parent, uint32_t parent_shard);
  void ReleaseChild(uint32_t parent, uint32_t parent_shard);
  // The run FindRun describes, each of its blocks' nodes given to `emit`, its shards held.
  template <typename Emit>
  void WalkRun(std::span<const BlockKey> keys, RunStart start, Emit&& emit) const;
  void Unpin(std::span<const uint32_t> nodes) const;
  BlockInfo InfoLocked(uint32_t id) const;
  void InsertSlotLocked(Shard& shard, uint64_t hash, uint32_t id);
  void EraseSlotLocked(Shard& shard, std::size_t slot);
  void GrowTableLocked(Shard& shard);

  uint32_t shard_bits_ = 0;  // log2 of the shard count
  std::unique_ptr<NodeArena> arena_;  // every shard's nodes; thread-safe itself
  std::vector<std::unique_ptr<Shard>> shards_;
  mutable std::atomic<uint64_t> lookups_{0}, hit_blocks_{0}, collisions_{0};
};

}  // namespace kvtier
