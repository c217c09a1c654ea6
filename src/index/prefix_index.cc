#include "kvtier/prefix_index.h"

#include "util/huge_page_memory.h"
#include "util/profiled_rw_mutex.h"

#include <algorithm>
#include <bit>
#include <chrono>
#include <mutex>
#include <shared_mutex>
#include <unordered_map>

namespace kvtier {
namespace {

__extension__ using Int128Unsigned = unsigned __int128;

constexpr uint32_t kNoNode = 0xffffffffu;
constexpr std::size_t kChunkBits = 16;
constexpr std::size_t kChunkSize = std::size_t{1} << kChunkBits;

// What a slot keeps of its key: both words mixed into one. The low word alone was enough
// for keys that are hashes, but a caller's structured keys (a counter in `lo`, an id in
// `hi`) then shared a handful of home slots, and every probe walked one long cluster.
uint64_t SlotHash(const BlockKey& key) { return BlockKeyHash{}(key); }

// The home slot of a slot hash in a table of `slots` slots: mixed again and mapped onto
// [0, slots) by a multiply, which lets the table grow by 1.5x instead of doubling and keeps
// its load between 1/2 and 3/4.
std::size_t Home(uint64_t hash, std::size_t slots) {
  const Int128Unsigned mixed = hash * 0x9E3779B97F4A7C15ull;
  return static_cast<std::size_t>((mixed * slots) >> 64);
}

std::size_t Next(std::size_t i, std::size_t slots) { return i + 1 == slots ? 0 : i + 1; }

// A walk of a chain prefetches the table slot of the block this many ahead of the one it checks.
constexpr std::size_t kSlotDistance = 8;

}  // namespace

// A slot holds what a longest-prefix walk needs, so that the walk reads one cache line per
// block and only writes the node: the key's SlotHash, the node, and the node's parent
// (kNoNode when the slot is empty / the block is first).
struct Slot {
  uint64_t hash;
  uint32_t node;
  uint32_t parent;
};
static_assert(sizeof(Slot) == 16);

class PrefixIndex::SlotArray : public HugePageArray<Slot> {
 public:
  using HugePageArray<Slot>::HugePageArray;
};

struct PrefixIndex::Node {
  BlockKey key;
  uint64_t fingerprint = 0;
  uint32_t parent = kNoNode;
  // Changed by a child's insert under this node's shard held shared (which keeps an evict of
  // this node out) and by a child's evict after the child is gone.
  std::atomic<uint32_t> children{0};
  uint32_t size_bytes = 0;
  mutable std::atomic<uint32_t> pins{0};  // Pin and Unpin are const: pins change no lookup
  std::atomic<uint64_t> last_access{0};
  std::atomic<uint32_t> access_count{0};
  std::atomic<TierMask> tiers{0};
  uint8_t tags = 0;                          // block type in bits 0-1, transition in bits 2-3

  BlockMeta Meta() const {
    return {size_bytes, static_cast<BlockType>(tags & 3), static_cast<TransitionType>((tags >> 2) & 3), fingerprint,
            tiers.load(std::memory_order_relaxed)};
  }
  // Statistics, not synchronization: concurrent touches may lose a count, which costs less
  // than a locked read-modify-write on every block of every lookup.
  void Touch(uint64_t now) {
    last_access.store(now, std::memory_order_relaxed);
    access_count.store(access_count.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  }
};

// Nodes in fixed chunks, so that their addresses never move (they hold atomics) and a node
// id is 32 bits. One arena serves every shard: the nodes of a chain inserted in one go lie
// side by side whatever shards its keys fall in, so a walk of the chain reads memory the
// hardware prefetcher follows (with an arena per shard, the walks of `kvtier bench index`
// ran at 0.55x). A fresh id is a fetch-and-add; a freed one goes back to its shard's free
// list (Shard::free), which that shard's exclusive lock guards.
//
// The chunks for the expected blocks are allocated up front: a chunk's first touch faults in
// two huge pages, which the kernel may first have to compact (tens of milliseconds, measured
// on the first lookup of a node reading a shared pool), and an insert holds a shard
// exclusively. Past them a chunk is added on demand, under `grow_mu_`. The list of chunks has
// room for the most the index may hold from the start, so it never moves under a reader.
class PrefixIndex::NodeArena {
  static_assert(sizeof(Node) == 56, "prefix_index.h and docs/index.md give a node's size");

 public:
  explicit NodeArena(std::size_t expected_blocks) {
    chunks_.reserve(kMaxChunks);
    for (std::size_t n = 0; n < expected_blocks; n += kChunkSize) chunks_.emplace_back(kChunkSize);
    capacity_.store(chunks_.size() * kChunkSize, std::memory_order_release);
  }

  Node& at(uint32_t id) { return chunks_[id >> kChunkBits][id & (kChunkSize - 1)]; }
  const Node& at(uint32_t id) const { return chunks_[id >> kChunkBits][id & (kChunkSize - 1)]; }

  // A node never used yet. Thread-safe.
  Result<uint32_t> AllocateFresh() {
    const uint64_t id = next_.fetch_add(1, std::memory_order_relaxed);
    if (id >= kMaxChunks * kChunkSize) {
      return Status::ResourceExhausted("the prefix index holds its maximum of " + std::to_string(kMaxChunks * kChunkSize) +
                                       " blocks");
    }
    if (id >= capacity_.load(std::memory_order_acquire)) {
      const std::lock_guard lock(grow_mu_);
      while (chunks_.size() * kChunkSize <= id) chunks_.emplace_back(kChunkSize);
      capacity_.store(chunks_.size() * kChunkSize, std::memory_order_release);
    }
    return static_cast<uint32_t>(id);
  }

  // Clears what a node's next user must find zero; the caller keeps the id for reuse.
  void Clear(uint32_t id) {
    Node& node = at(id);
    node.pins.store(0, std::memory_order_relaxed);
    node.access_count.store(0, std::memory_order_relaxed);
    node.tiers.store(0, std::memory_order_relaxed);
    node.children.store(0, std::memory_order_relaxed);
  }

  std::size_t MemoryBytes() const { return capacity_.load(std::memory_order_acquire) * sizeof(Node); }

 private:
  // 65,536 chunks of 65,536 nodes, less one chunk: ids stay below kNoNode.
  static constexpr std::size_t kMaxChunks = (std::size_t{1} << (32 - kChunkBits)) - 1;

  std::mutex grow_mu_;
  std::vector<HugePageArray<Node>> chunks_;  // appended under grow_mu_; never reallocated
  std::atomic<uint64_t> capacity_{0};        // nodes in chunks_, published after they are made
  std::atomic<uint64_t> next_{0};            // the next fresh id
};

// One shard: a table and its nodes, under its own lock (prefix_index.h).
struct PrefixIndex::Shard {
  Shard(std::size_t expected, std::chrono::nanoseconds spin)
      : mutex(spin), slots(NewSlots(std::max<std::size_t>(16, expected * 10 / 7 + 1))) {}

  // Room for `expected` blocks at a load of 0.7, below the 0.75 that triggers growth.
  static std::unique_ptr<SlotArray> NewSlots(std::size_t count) {
    auto slots = std::make_unique<SlotArray>(count);
    for (Slot& slot : *slots) slot = Slot{0, kNoNode, kNoNode};
    return slots;
  }

  mutable ProfiledRwMutex mutex;  // spins when there are several shards (the constructor's)
  std::vector<uint32_t> free;       // ids of its evicted nodes, for its next inserts; GUARDED_BY(mutex)
  // Open addressing with linear probing over 16-byte slots (a hash of the key, node id,
  // parent id) in huge pages. GUARDED_BY(mutex).
  std::unique_ptr<SlotArray> slots;
  std::size_t used = 0;             // GUARDED_BY(mutex)
  uint64_t evictions = 0;           // GUARDED_BY(mutex)
  // Its nodes without children: changed by other shards' inserts and evicts too.
  std::atomic<uint64_t> leaves{0};
};

// The shards of a call's keys held shared, in ascending order, for the call.
class PrefixIndex::SharedShards {
 public:
  SharedShards(const PrefixIndex& index, uint64_t mask) : index_(index), mask_(mask) {
    for (uint64_t m = mask_; m != 0; m &= m - 1) index_.shards_[static_cast<std::size_t>(std::countr_zero(m))]->mutex.lock_shared();
  }
  SharedShards(const PrefixIndex& index, std::span<const BlockKey> keys) : SharedShards(index, index.MaskOf(keys)) {}
  ~SharedShards() {
    for (uint64_t m = mask_; m != 0; m &= m - 1) index_.shards_[static_cast<std::size_t>(std::countr_zero(m))]->mutex.unlock_shared();
  }
  SharedShards(const SharedShards&) = delete;
  SharedShards& operator=(const SharedShards&) = delete;

 private:
  const PrefixIndex& index_;
  const uint64_t mask_;
};

Status PrefixIndexOptions::Validate() const {
  if (expected_blocks > (std::size_t{1} << 31)) return Status::InvalidArgument("expected_blocks must be at most 2^31");
  if (shards < 1 || shards > kMaxShards || !std::has_single_bit(shards)) {
    return Status::InvalidArgument("index shards must be a power of two from 1 to " + std::to_string(kMaxShards) +
                                   ", got " + std::to_string(shards));
  }
  return Status::Ok();
}

// ---- PinnedBlocks ----

PinnedBlocks::PinnedBlocks(PinnedBlocks&& other) noexcept : index_(other.index_), nodes_(std::move(other.nodes_)) {
  other.index_ = nullptr;
  other.nodes_.clear();
}

PinnedBlocks& PinnedBlocks::operator=(PinnedBlocks&& other) noexcept {
  if (this != &other) {
    Release();
    index_ = other.index_;
    nodes_ = std::move(other.nodes_);
    other.index_ = nullptr;
    other.nodes_.clear();
  }
  return *this;
}

PinnedBlocks::~PinnedBlocks() { Release(); }

void PinnedBlocks::Release() {
  if (index_ != nullptr && !nodes_.empty()) index_->Unpin(nodes_);
  index_ = nullptr;
  nodes_.clear();
}

// ---- PrefixIndex ----

PrefixIndex::PrefixIndex(PrefixIndexOptions options) {
  const uint32_t count = std::bit_floor(std::clamp<uint32_t>(options.shards, 1, PrefixIndexOptions::kMaxShards));
  shard_bits_ = static_cast<uint32_t>(std::countr_zero(count));
  const std::size_t expected = std::min<std::size_t>(options.expected_blocks, std::size_t{1} << 31);
  arena_ = std::make_unique<NodeArena>(expected);
  // Keys split over the shards unevenly: each table is sized for an eighth more than its share.
  const std::size_t per_shard = count == 1 ? expected : (expected + count - 1) / count * 9 / 8;
  // With several shards a writer holds one for a block, a fraction of a microsecond: one that
  // finds it taken spins 2 us before it sleeps. One shard is held for a whole chain's insert,
  // where spinning only costs (docs/index.md, "Shards").
  const std::chrono::nanoseconds spin = count > 1 ? std::chrono::microseconds(2) : std::chrono::nanoseconds(0);
  for (uint32_t i = 0; i < count; ++i) shards_.push_back(std::make_unique<Shard>(per_shard, spin));
}

PrefixIndex::~PrefixIndex() = default;

uint32_t PrefixIndex::ShardOfKey(const BlockKey& key) const {
  if (shard_bits_ == 0) return 0;
  // Another multiplier than Home's, so that a shard's keys still spread over its table.
  return static_cast<uint32_t>((SlotHash(key) * 0xD6E8FEB86659FD93ull) >> (64 - shard_bits_));
}

// The node's key is stable while the caller keeps it from being evicted (prefix_index.h).
uint32_t PrefixIndex::ShardOfNode(uint32_t id) const { return ShardOfKey(arena_->at(id).key); }

uint64_t PrefixIndex::MaskOf(std::span<const BlockKey> keys) const {
  if (shard_bits_ == 0) return 1;
  uint64_t mask = 0;
  for (const BlockKey& key : keys) mask |= uint64_t{1} << ShardOfKey(key);
  return mask;
}

PrefixIndex::Node& PrefixIndex::NodeAt(uint32_t id) { return arena_->at(id); }
const PrefixIndex::Node& PrefixIndex::NodeAt(uint32_t id) const { return arena_->at(id); }

// The slot holding `key`, or the slot count when absent. Requires the shard's lock (any mode).
static std::size_t FindSlot(const auto& slots, const auto& node_key, const BlockKey& key) {
  const uint64_t hash = SlotHash(key);
  for (std::size_t i = Home(hash, slots.size());; i = Next(i, slots.size())) {
    const uint32_t id = slots[i].node;
    if (id == kNoNode) return slots.size();
    if (slots[i].hash == hash && node_key(id) == key) return i;
  }
}

void PrefixIndex::PrefetchHomeSlot(const BlockKey& key) const {
  const SlotArray& slots = *shards_[ShardOfKey(key)]->slots;
  __builtin_prefetch(&slots[Home(SlotHash(key), slots.size())]);
}

std::size_t PrefixIndex::FindSlotIn(const Shard& shard, const BlockKey& key) const {
  auto node_key = [this](uint32_t id) -> const BlockKey& { return arena_->at(id).key; };
  return FindSlot(*shard.slots, node_key, key);
}

uint32_t PrefixIndex::FindNode(const Shard& shard, const BlockKey& key) const {
  const std::size_t slot = FindSlotIn(shard, key);
  return slot == shard.slots->size() ? kNoNode : (*shard.slots)[slot].node;
}

std::size_t PrefixIndex::LongestPrefix(std::span<const BlockKey> keys, std::span<const uint64_t> fingerprints) const {
  const SharedShards locked(*this, keys);
  lookups_.fetch_add(1, std::memory_order_relaxed);
  uint32_t previous = kNoNode;
  std::size_t found = 0;
  // All keys are known up front, so the table probes of later blocks are independent of
  // earlier ones: prefetching them overlaps their cache misses, which a chain of
  // std::unordered_map lookups cannot do.
  // The walk reads only table slots (key word, node, parent): one cache line per block, and
  // none of the nodes unless fingerprints are checked. All keys are known up front, so the
  // slots of block i + 8 are prefetched while block i is checked.
  for (std::size_t i = 0; i < std::min(kSlotDistance, keys.size()); ++i) PrefetchHomeSlot(keys[i]);
  for (; found < keys.size(); ++found) {
    if (found + kSlotDistance < keys.size()) PrefetchHomeSlot(keys[found + kSlotDistance]);
    // Match on the key's 64-bit SlotHash plus the parent link: a false match needs two keys
    // with equal hashes under the same parent (2^-64), and stored payloads are fetched by the
    // full 128-bit key, so such a match can only turn into a miss there, never wrong data.
    const SlotArray& slots = *shards_[ShardOfKey(keys[found])]->slots;
    const std::size_t n = slots.size();
    const uint64_t hash = SlotHash(keys[found]);
    std::size_t i = Home(hash, n);
    while (slots[i].node != kNoNode && slots[i].hash != hash) i = Next(i, n);
    const Slot& slot = slots[i];
    if (slot.node == kNoNode) break;
    const uint64_t fingerprint = found < fingerprints.size() ? fingerprints[found] : 0;
    if ((found > 0 && slot.parent != previous) ||
        (fingerprint != 0 && NodeAt(slot.node).fingerprint != 0 && fingerprint != NodeAt(slot.node).fingerprint)) {
      collisions_.fetch_add(1, std::memory_order_relaxed);
      break;
    }
    previous = slot.node;
  }
  hit_blocks_.fetch_add(found, std::memory_order_relaxed);
  return found;
}

Result<std::size_t> PrefixIndex::Insert(std::span<const BlockKey> keys, std::span<const BlockMeta> meta, uint64_t now,
                                        const std::optional<BlockKey>& parent) {
  if (meta.size() != keys.size()) {
    return Status::InvalidArgument("Insert: " + std::to_string(keys.size()) + " keys but " + std::to_string(meta.size()) + " metas");
  }
  // A block at a time, one lock at a time. First its parent is claimed: found, and its count
  // of children raised (so that nothing evicts it now), under the parent's shard shared, which
  // the puts of other chains under the same parent (a system prompt's last block) share.
  // Then the block is indexed under its own shard exclusively: puts of different chains meet
  // only where their blocks fall in the same shard. A block whose parent's shard is the one
  // the block before it held exclusively claims it there (one shard: the whole chain under
  // one hold).
  std::unique_lock<ProfiledRwMutex> own;
  uint32_t own_shard = 0;
  uint32_t previous = kNoNode;
  std::size_t inserted = 0;
  for (std::size_t i = 0; i < keys.size(); ++i) {
    const BlockKey* up = i > 0 ? &keys[i - 1] : parent ? &*parent : nullptr;
    const uint32_t shard = ShardOfKey(keys[i]);
    uint32_t claimed = kNoNode;
    if (up != nullptr) {
      const uint32_t up_shard = ShardOfKey(*up);
      if (own.owns_lock() && own_shard == up_shard) {
        ClaimChild(previous, up_shard);  // the block before, its shard held since
      } else {
        if (own.owns_lock()) own.unlock();
        const std::shared_lock read(shards_[up_shard]->mutex);
        previous = FindNode(*shards_[up_shard], *up);
        if (previous != kNoNode) ClaimChild(previous, up_shard);
      }
      if (previous == kNoNode) {
        return Status::NotFound(i == 0 ? "Insert: parent block " + up->ToHex() + " is not in the index"
                                       : "Insert: block " + up->ToHex() + " (position " + std::to_string(i - 1) +
                                             ") was evicted while its chain was inserted; the " +
                                             std::to_string(inserted) + " new blocks before it were inserted");
      }
      claimed = previous;
    }
    if (!own.owns_lock() || own_shard != shard) {
      if (own.owns_lock()) own.unlock();
      own = std::unique_lock(shards_[shard]->mutex);
      own_shard = shard;
    }
    Result<Indexed> block = InsertOneLocked(*shards_[shard], keys[i], meta[i], now, claimed, i, inserted);
    if (claimed != kNoNode && !(block.ok() && block->added)) ReleaseChild(claimed, ShardOfKey(*up));
    if (!block.ok()) return block.status();
    if (block->added) ++inserted;
    previous = block->id;
  }
  return inserted;
}

void PrefixIndex::ClaimChild(uint32_t parent, uint32_t parent_shard) {
  if (NodeAt(parent).children.fetch_add(1, std::memory_order_acq_rel) == 0) {
    shards_[parent_shard]->leaves.fetch_sub(1, std::memory_order_relaxed);
  }
}

void PrefixIndex::ReleaseChild(uint32_t parent, uint32_t parent_shard) {
  if (NodeAt(parent).children.fetch_sub(1, std::memory_order_acq_rel) == 1) {
    shards_[parent_shard]->leaves.fetch_add(1, std::memory_order_relaxed);
  }
}

Result<PrefixIndex::Indexed> PrefixIndex::InsertOneLocked(Shard& shard, const BlockKey& key, const BlockMeta& meta,
                                                          uint64_t now, uint32_t parent, std::size_t position,
                                                          std::size_t inserted_before) {
  if (const uint32_t present = FindNode(shard, key); present != kNoNode) {
    Node& node = NodeAt(present);
    if (node.parent != parent || (meta.fingerprint != 0 && node.fingerprint != 0 && meta.fingerprint != node.fingerprint)) {
      collisions_.fetch_add(1, std::memory_order_relaxed);
      return Status::AlreadyExists("block key " + key.ToHex() + " (position " + std::to_string(position) +
                                   ") is already indexed for a different prefix: a hash collision; the " +
                                   std::to_string(inserted_before) + " new blocks before it were inserted");
    }
    node.Touch(now);
    return Indexed{present, false};
  }
  if ((shard.used + 1) * 4 > shard.slots->size() * 3) GrowTableLocked(shard);
  uint32_t id = kNoNode;
  if (!shard.free.empty()) {
    id = shard.free.back();
    shard.free.pop_back();
  } else {
    KVTIER_ASSIGN_OR_RETURN(id, arena_->AllocateFresh());
  }
  Node& node = NodeAt(id);
  node.key = key;
  node.fingerprint = meta.fingerprint;
  node.parent = parent;
  node.size_bytes = meta.size_bytes;
  node.tags = static_cast<uint8_t>(static_cast<unsigned>(meta.type) | (static_cast<unsigned>(meta.transition) << 2));
  node.tiers.store(meta.tiers, std::memory_order_relaxed);
  node.last_access.store(now, std::memory_order_relaxed);
  node.access_count.store(1, std::memory_order_relaxed);
  InsertSlotLocked(shard, SlotHash(key), id);
  shard.leaves.fetch_add(1, std::memory_order_relaxed);
  return Indexed{id, true};
}

void PrefixIndex::Touch(std::span<const BlockKey> keys, uint64_t now) {
  const SharedShards locked(*this, keys);
  for (const BlockKey& key : keys) {
    if (const uint32_t id = FindNode(*shards_[ShardOfKey(key)], key); id != kNoNode) NodeAt(id).Touch(now);
  }
}

std::optional<BlockInfo> PrefixIndex::Find(const BlockKey& key) const {
  const SharedShards locked(*this, {&key, 1});
  const uint32_t id = FindNode(*shards_[ShardOfKey(key)], key);
  if (id == kNoNode) return std::nullopt;
  return InfoLocked(id);
}

template <typename Emit>
void PrefixIndex::WalkRun(std::span<const BlockKey> keys, RunStart start, Emit&& emit) const {
  const SharedShards locked(*this, keys);
  // As LongestPrefix: the slots of block i + 8 are prefetched while block i is checked.
  for (std::size_t i = 0; i < std::min(kSlotDistance, keys.size()); ++i) PrefetchHomeSlot(keys[i]);
  uint32_t previous = kNoNode;
  for (std::size_t k = 0; k < keys.size(); ++k) {
    if (k + kSlotDistance < keys.size()) PrefetchHomeSlot(keys[k + kSlotDistance]);
    const uint32_t id = FindNode(*shards_[ShardOfKey(keys[k])], keys[k]);
    if (id == kNoNode) break;
    const uint32_t parent = NodeAt(id).parent;
    const bool continues = k > 0 ? parent == previous : start == RunStart::kAnyBlock || parent == kNoNode;
    if (!continues) break;
    emit(id);
    previous = id;
  }
}

void PrefixIndex::FindRun(std::span<const BlockKey> keys, RunStart start, std::vector<BlockInfo>& out) const {
  out.clear();
  WalkRun(keys, start, [&](uint32_t id) { out.push_back(InfoLocked(id)); });
}

void PrefixIndex::FindRunPlacement(std::span<const BlockKey> keys, RunStart start, std::vector<RunPlacement>& out) const {
  out.clear();
  WalkRun(keys, start, [&](uint32_t id) {
    const Node& node = NodeAt(id);
    out.push_back({node.size_bytes, node.tiers.load(std::memory_order_relaxed)});
  });
}

// Needs the node's shard held (any mode); its parent's key is read as prefix_index.h allows.
BlockInfo PrefixIndex::InfoLocked(uint32_t id) const {
  const Node& node = NodeAt(id);
  BlockInfo info;
  info.key = node.key;
  if (node.parent != kNoNode) info.parent = NodeAt(node.parent).key;
  info.meta = node.Meta();
  info.children = node.children.load(std::memory_order_relaxed);
  info.pins = node.pins.load(std::memory_order_relaxed);
  info.last_access = node.last_access.load(std::memory_order_relaxed);
  info.access_count = node.access_count.load(std::memory_order_relaxed);
  return info;
}

Result<PinnedBlocks> PrefixIndex::Pin(std::span<const BlockKey> keys) const {
  const SharedShards locked(*this, keys);
  std::vector<uint32_t> nodes;
  nodes.reserve(keys.size());
  for (const BlockKey& key : keys) {
    const uint32_t id = FindNode(*shards_[ShardOfKey(key)], key);
    if (id == kNoNode) {
      for (uint32_t pinned : nodes) NodeAt(pinned).pins.fetch_sub(1, std::memory_order_acq_rel);
      return Status::NotFound("Pin: block " + key.ToHex() + " is not in the index");
    }
    NodeAt(id).pins.fetch_add(1, std::memory_order_acq_rel);
    nodes.push_back(id);
  }
  return PinnedBlocks(this, std::move(nodes));
}

void PrefixIndex::Unpin(std::span<const uint32_t> nodes) const {
  uint64_t mask = 0;
  for (uint32_t id : nodes) mask |= uint64_t{1} << ShardOfNode(id);
  const SharedShards locked(*this, mask);
  for (uint32_t id : nodes) NodeAt(id).pins.fetch_sub(1, std::memory_order_acq_rel);
}

Status PrefixIndex::SetTier(const BlockKey& key, int tier, bool present) {
  if (tier < 0 || tier >= kMaxTiers) return Status::InvalidArgument("tier " + std::to_string(tier) + " is not in 0..7");
  const SharedShards locked(*this, {&key, 1});
  const uint32_t id = FindNode(*shards_[ShardOfKey(key)], key);
  if (id == kNoNode) return Status::NotFound("SetTier: block " + key.ToHex() + " is not in the index");
  const auto bit = static_cast<TierMask>(1u << tier);
  std::atomic<TierMask>& tiers = NodeAt(id).tiers;
  if (present) {
    tiers.fetch_or(bit, std::memory_order_relaxed);
  } else {
    tiers.fetch_and(static_cast<TierMask>(~bit), std::memory_order_relaxed);
  }
  return Status::Ok();
}

Status PrefixIndex::SetTags(const BlockKey& key, BlockType type, TransitionType transition) {
  Shard& shard = *shards_[ShardOfKey(key)];
  const std::unique_lock locked(shard.mutex);  // tags are plain bytes, read under the shared lock
  const uint32_t id = FindNode(shard, key);
  if (id == kNoNode) return Status::NotFound("SetTags: block " + key.ToHex() + " is not in the index");
  NodeAt(id).tags = static_cast<uint8_t>(static_cast<unsigned>(type) | (static_cast<unsigned>(transition) << 2));
  return Status::Ok();
}

Status PrefixIndex::Evict(const BlockKey& key) {
  Shard& home = *shards_[ShardOfKey(key)];
  const std::unique_lock locked(home.mutex);
  const std::size_t slot = FindSlotIn(home, key);
  if (slot == home.slots->size()) return Status::NotFound("Evict: block " + key.ToHex() + " is not in the index");
  const uint32_t id = (*home.slots)[slot].node;
  Node& node = NodeAt(id);
  // A child's insert claims its parent (adds to `children`) under this shard shared: not now.
  if (const uint32_t children = node.children.load(std::memory_order_relaxed); children > 0) {
    return Status::FailedPrecondition("Evict: block " + key.ToHex() + " has " + std::to_string(children) +
                                      " children; evict leaves first");
  }
  if (node.pins.load(std::memory_order_acquire) > 0) {
    return Status::FailedPrecondition("Evict: block " + key.ToHex() + " is pinned");
  }
  const uint32_t parent = node.parent;
  // Its shard read while this block still keeps it (its key then cannot change).
  const uint32_t parent_shard = parent != kNoNode ? ShardOfNode(parent) : 0;
  EraseSlotLocked(home, slot);
  arena_->Clear(id);
  home.free.push_back(id);
  home.leaves.fetch_sub(1, std::memory_order_relaxed);
  ++home.evictions;
  // Last, once the block can no longer be found: the parent may be evicted from here on, so
  // it is not touched after.
  if (parent != kNoNode) ReleaseChild(parent, parent_shard);
  return Status::Ok();
}

void PrefixIndex::ForEachBlock(const std::function<void(const BlockInfo&)>& visitor) const {
  const SharedShards locked(*this, shards_.size() == 64 ? ~uint64_t{0} : (uint64_t{1} << shards_.size()) - 1);
  // Order by depth so that every parent comes before its children.
  std::unordered_map<uint32_t, uint32_t> depth;
  std::vector<std::vector<uint32_t>> by_depth;
  std::vector<uint32_t> path;
  for (const auto& shard : shards_) {
    for (const Slot& slot : *shard->slots) {
      const uint32_t start = slot.node;
      if (start == kNoNode || depth.contains(start)) continue;
      for (uint32_t id = start; id != kNoNode && !depth.contains(id); id = NodeAt(id).parent) path.push_back(id);
      const uint32_t top_parent = NodeAt(path.back()).parent;
      uint32_t d = top_parent == kNoNode ? 0 : depth[top_parent] + 1;
      for (auto it = path.rbegin(); it != path.rend(); ++it, ++d) {
        depth[*it] = d;
        if (by_depth.size() <= d) by_depth.resize(d + 1);
        by_depth[d].push_back(*it);
      }
      path.clear();
    }
  }
  for (const auto& level : by_depth) {
    for (uint32_t id : level) visitor(InfoLocked(id));
  }
}

PrefixIndex::Stats PrefixIndex::GetStats() const {
  Stats stats{.lookups = lookups_.load(), .hit_blocks = hit_blocks_.load(), .collisions = collisions_.load()};
  for (const auto& shard : shards_) {
    std::shared_lock lock(shard->mutex);
    stats.blocks += shard->used;
    stats.leaves += shard->leaves.load(std::memory_order_relaxed);
    stats.evictions += shard->evictions;
    stats.shard_locks.push_back(shard->mutex.Profile());
  }
  for (const LockProfile& lock : stats.shard_locks) stats.lock += lock;
  return stats;
}

std::size_t PrefixIndex::size() const {
  std::size_t used = 0;
  for (const auto& shard : shards_) {
    std::shared_lock lock(shard->mutex);
    used += shard->used;
  }
  return used;
}

std::size_t PrefixIndex::MemoryBytes() const {
  std::size_t bytes = 0;
  for (const auto& shard : shards_) {
    std::shared_lock lock(shard->mutex);
    bytes += shard->slots->bytes() + shard->free.capacity() * sizeof(uint32_t);
  }
  return bytes + arena_->MemoryBytes();
}

// ---- table maintenance (the shard held exclusively) ----

void PrefixIndex::InsertSlotLocked(Shard& shard, uint64_t hash, uint32_t id) {
  SlotArray& slots = *shard.slots;
  std::size_t i = Home(hash, slots.size());
  while (slots[i].node != kNoNode) i = Next(i, slots.size());
  slots[i] = Slot{hash, id, NodeAt(id).parent};
  ++shard.used;
}

// Backward-shift deletion keeps every probe sequence unbroken without tombstones.
void PrefixIndex::EraseSlotLocked(Shard& shard, std::size_t hole) {
  SlotArray& slots = *shard.slots;
  const std::size_t n = slots.size();
  for (std::size_t j = Next(hole, n); slots[j].node != kNoNode; j = Next(j, n)) {
    const std::size_t home = Home(slots[j].hash, n);
    // Move j into the hole unless its home lies cyclically in (hole, j].
    const bool stays = hole <= j ? (hole < home && home <= j) : (hole < home || home <= j);
    if (!stays) {
      slots[hole] = slots[j];
      hole = j;
    }
  }
  slots[hole] = Slot{0, kNoNode, kNoNode};
  --shard.used;
}

void PrefixIndex::GrowTableLocked(Shard& shard) {
  std::unique_ptr<SlotArray> old = std::move(shard.slots);
  shard.slots = Shard::NewSlots(old->size() + old->size() / 2);
  shard.used = 0;
  for (const Slot& slot : *old) {
    if (slot.node != kNoNode) InsertSlotLocked(shard, slot.hash, slot.node);
  }
}

}  // namespace kvtier
