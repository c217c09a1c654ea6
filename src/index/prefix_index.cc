#include "kvtier/prefix_index.h"

#include "util/huge_page_memory.h"
#include "util/profiled_rw_mutex.h"

#include <algorithm>
#include <mutex>
#include <shared_mutex>

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
  uint32_t children = 0;                     // changed only under the exclusive lock
  uint32_t leaf_prev = kNoNode, leaf_next = kNoNode;
  uint32_t size_bytes = 0;
  std::atomic<uint32_t> pins{0};
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
// id is 32 bits. The chunks for the blocks the index expects are allocated up front: a
// chunk's first touch faults in two huge pages, which the kernel may first have to compact
// (tens of milliseconds, measured on the first lookup of a node reading a shared pool), and
// Allocate runs under the store's exclusive lock. Past the expected blocks a chunk is still
// added on demand, under that lock.
class PrefixIndex::NodeArena {
 public:
  explicit NodeArena(std::size_t expected_blocks) {
    for (std::size_t n = 0; n < expected_blocks; n += kChunkSize) chunks_.emplace_back(kChunkSize);
  }

  Node& at(uint32_t id) { return chunks_[id >> kChunkBits][id & (kChunkSize - 1)]; }
  const Node& at(uint32_t id) const { return chunks_[id >> kChunkBits][id & (kChunkSize - 1)]; }

  Result<uint32_t> Allocate() {
    if (!free_.empty()) {
      const uint32_t id = free_.back();
      free_.pop_back();
      return id;
    }
    if (next_ == chunks_.size() * kChunkSize) {
      if (chunks_.size() == (std::size_t{kNoNode} >> kChunkBits)) {
        return Status::ResourceExhausted("the prefix index holds its maximum of 2^32 - 65536 blocks");
      }
      chunks_.emplace_back(kChunkSize);
    }
    return static_cast<uint32_t>(next_++);
  }

  void Free(uint32_t id) {
    Node& node = at(id);
    node.pins.store(0, std::memory_order_relaxed);
    node.access_count.store(0, std::memory_order_relaxed);
    node.tiers.store(0, std::memory_order_relaxed);
    node.children = 0;
    node.leaf_prev = node.leaf_next = kNoNode;
    free_.push_back(id);
  }

  std::size_t capacity() const { return chunks_.size() * kChunkSize; }
  std::size_t MemoryBytes() const { return chunks_.size() * kChunkSize * sizeof(Node) + free_.capacity() * sizeof(uint32_t); }
  // Chunks are 4 MiB: two huge pages each.

 private:
  std::vector<HugePageArray<Node>> chunks_;
  std::vector<uint32_t> free_;
  std::size_t next_ = 0;
};

Status PrefixIndexOptions::Validate() const {
  if (expected_blocks > (std::size_t{1} << 31)) return Status::InvalidArgument("expected_blocks must be at most 2^31");
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

std::unique_ptr<PrefixIndex::SlotArray> PrefixIndex::NewSlots(std::size_t count) {
  auto slots = std::make_unique<SlotArray>(count);
  for (Slot& slot : *slots) slot = Slot{0, kNoNode, kNoNode};
  return slots;
}

PrefixIndex::PrefixIndex(PrefixIndexOptions options)
    : mutex_(std::make_unique<ProfiledRwMutex>()), leaf_head_(kNoNode), leaf_tail_(kNoNode) {
  const std::size_t expected = std::min<std::size_t>(options.expected_blocks, std::size_t{1} << 31);
  arena_ = std::make_unique<NodeArena>(expected);
  // Room for expected_blocks at a load of 0.7, below the 0.75 that triggers growth.
  slots_ = NewSlots(std::max<std::size_t>(16, expected * 10 / 7 + 1));
}

PrefixIndex::~PrefixIndex() = default;

// The slot holding `key`, or the slot count when absent. Requires mutex_ (any mode).
static std::size_t FindSlot(const auto& slots, const auto& node_key, const BlockKey& key) {
  const uint64_t hash = SlotHash(key);
  for (std::size_t i = Home(hash, slots.size());; i = Next(i, slots.size())) {
    const uint32_t id = slots[i].node;
    if (id == kNoNode) return slots.size();
    if (slots[i].hash == hash && node_key(id) == key) return i;
  }
}

std::size_t PrefixIndex::LongestPrefix(std::span<const BlockKey> keys, std::span<const uint64_t> fingerprints) const {
  std::shared_lock lock(*mutex_);
  lookups_.fetch_add(1, std::memory_order_relaxed);
  uint32_t previous = kNoNode;
  std::size_t found = 0;
  // All keys are known up front, so the table probes of later blocks are independent of
  // earlier ones: prefetching them overlaps their cache misses, which a chain of
  // std::unordered_map lookups cannot do.
  // The walk reads only table slots (key word, node, parent): one cache line per block, and
  // none of the nodes unless fingerprints are checked. All keys are known up front, so the
  // slots of block i + 8 are prefetched while block i is checked.
  constexpr std::size_t kSlotDistance = 8;
  const SlotArray& slots = *slots_;
  const std::size_t n = slots.size();
  auto prefetch_slot = [&](std::size_t i) { __builtin_prefetch(&slots[Home(SlotHash(keys[i]), n)]); };
  for (std::size_t i = 0; i < std::min(kSlotDistance, keys.size()); ++i) prefetch_slot(i);
  for (; found < keys.size(); ++found) {
    if (found + kSlotDistance < keys.size()) prefetch_slot(found + kSlotDistance);
    // Match on the key's 64-bit SlotHash plus the parent link: a false match needs two keys
    // with equal hashes under the same parent (2^-64), and stored payloads are fetched by the
    // full 128-bit key, so such a match can only turn into a miss there, never wrong data.
    const uint64_t hash = SlotHash(keys[found]);
    std::size_t i = Home(hash, n);
    while (slots[i].node != kNoNode && slots[i].hash != hash) i = Next(i, n);
    const Slot& slot = slots[i];
    if (slot.node == kNoNode) break;
    const uint64_t fingerprint = found < fingerprints.size() ? fingerprints[found] : 0;
    if ((found > 0 && slot.parent != previous) ||
        (fingerprint != 0 && arena_->at(slot.node).fingerprint != 0 && fingerprint != arena_->at(slot.node).fingerprint)) {
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
  std::unique_lock lock(*mutex_);
  auto node_key = [this](uint32_t id) -> const BlockKey& { return arena_->at(id).key; };
  uint32_t previous = kNoNode;
  if (parent) {
    const std::size_t slot = FindSlot(*slots_, node_key, *parent);
    if (slot == slots_->size()) return Status::NotFound("Insert: parent block " + parent->ToHex() + " is not in the index");
    previous = (*slots_)[slot].node;
  }
  std::size_t inserted = 0;
  for (std::size_t i = 0; i < keys.size(); ++i) {
    const BlockKey& key = keys[i];
    const std::size_t slot = FindSlot(*slots_, node_key, key);
    if (slot != slots_->size()) {
      Node& node = arena_->at((*slots_)[slot].node);
      if (node.parent != previous ||
          (meta[i].fingerprint != 0 && node.fingerprint != 0 && meta[i].fingerprint != node.fingerprint)) {
        collisions_.fetch_add(1, std::memory_order_relaxed);
        return Status::AlreadyExists("block key " + key.ToHex() + " (position " + std::to_string(i) +
                                     ") is already indexed for a different prefix: a hash collision; the " +
                                     std::to_string(inserted) + " new blocks before it were inserted");
      }
      node.Touch(now);
      previous = (*slots_)[slot].node;
      continue;
    }
    if ((used_ + 1) * 4 > slots_->size() * 3) GrowTableLocked();
    KVTIER_ASSIGN_OR_RETURN(const uint32_t id, arena_->Allocate());
    Node& node = arena_->at(id);
    node.key = key;
    node.fingerprint = meta[i].fingerprint;
    node.parent = previous;
    node.size_bytes = meta[i].size_bytes;
    node.tags = static_cast<uint8_t>(static_cast<unsigned>(meta[i].type) | (static_cast<unsigned>(meta[i].transition) << 2));
    node.tiers.store(meta[i].tiers, std::memory_order_relaxed);
    node.last_access.store(now, std::memory_order_relaxed);
    node.access_count.store(1, std::memory_order_relaxed);
    InsertSlotLocked(SlotHash(key), id);
    if (previous != kNoNode) {
      Node& up = arena_->at(previous);
      if (up.children++ == 0) UnlinkLeafLocked(previous);
    }
    AppendLeafLocked(id);
    previous = id;
    ++inserted;
  }
  return inserted;
}

void PrefixIndex::Touch(std::span<const BlockKey> keys, uint64_t now) {
  std::shared_lock lock(*mutex_);
  auto node_key = [this](uint32_t id) -> const BlockKey& { return arena_->at(id).key; };
  for (const BlockKey& key : keys) {
    const std::size_t slot = FindSlot(*slots_, node_key, key);
    if (slot != slots_->size()) arena_->at((*slots_)[slot].node).Touch(now);
  }
}

std::optional<BlockInfo> PrefixIndex::Find(const BlockKey& key) const {
  std::shared_lock lock(*mutex_);
  auto node_key = [this](uint32_t id) -> const BlockKey& { return arena_->at(id).key; };
  const std::size_t slot = FindSlot(*slots_, node_key, key);
  if (slot == slots_->size()) return std::nullopt;
  return InfoLocked((*slots_)[slot].node);
}

void PrefixIndex::FindRun(std::span<const BlockKey> keys, RunStart start, std::vector<BlockInfo>& out) const {
  out.clear();
  std::shared_lock lock(*mutex_);
  const SlotArray& slots = *slots_;
  const std::size_t n = slots.size();
  // As LongestPrefix: the slots of block i + 8 are prefetched while block i is checked.
  constexpr std::size_t kSlotDistance = 8;
  auto prefetch_slot = [&](std::size_t i) { __builtin_prefetch(&slots[Home(SlotHash(keys[i]), n)]); };
  auto node_key = [this](uint32_t id) -> const BlockKey& { return arena_->at(id).key; };
  for (std::size_t i = 0; i < std::min(kSlotDistance, keys.size()); ++i) prefetch_slot(i);
  uint32_t previous = kNoNode;
  for (std::size_t k = 0; k < keys.size(); ++k) {
    if (k + kSlotDistance < keys.size()) prefetch_slot(k + kSlotDistance);
    const std::size_t i = FindSlot(slots, node_key, keys[k]);
    if (i == n) break;
    const Slot& slot = slots[i];
    const bool continues = k > 0 ? slot.parent == previous : start == RunStart::kAnyBlock || slot.parent == kNoNode;
    if (!continues) break;
    out.push_back(InfoLocked(slot.node));
    previous = slot.node;
  }
}

BlockInfo PrefixIndex::InfoLocked(uint32_t id) const {
  const Node& node = arena_->at(id);
  BlockInfo info;
  info.key = node.key;
  if (node.parent != kNoNode) info.parent = arena_->at(node.parent).key;
  info.meta = node.Meta();
  info.children = node.children;
  info.pins = node.pins.load(std::memory_order_relaxed);
  info.last_access = node.last_access.load(std::memory_order_relaxed);
  info.access_count = node.access_count.load(std::memory_order_relaxed);
  return info;
}

Result<PinnedBlocks> PrefixIndex::Pin(std::span<const BlockKey> keys) const {
  std::shared_lock lock(*mutex_);
  auto node_key = [this](uint32_t id) -> const BlockKey& { return arena_->at(id).key; };
  std::vector<uint32_t> nodes;
  nodes.reserve(keys.size());
  for (const BlockKey& key : keys) {
    const std::size_t slot = FindSlot(*slots_, node_key, key);
    if (slot == slots_->size()) {
      for (uint32_t id : nodes) arena_->at(id).pins.fetch_sub(1, std::memory_order_acq_rel);
      return Status::NotFound("Pin: block " + key.ToHex() + " is not in the index");
    }
    arena_->at((*slots_)[slot].node).pins.fetch_add(1, std::memory_order_acq_rel);
    nodes.push_back((*slots_)[slot].node);
  }
  return PinnedBlocks(this, std::move(nodes));
}

void PrefixIndex::Unpin(std::span<const uint32_t> nodes) const {
  std::shared_lock lock(*mutex_);
  for (uint32_t id : nodes) arena_->at(id).pins.fetch_sub(1, std::memory_order_acq_rel);
}

Status PrefixIndex::SetTier(const BlockKey& key, int tier, bool present) {
  if (tier < 0 || tier >= kMaxTiers) return Status::InvalidArgument("tier " + std::to_string(tier) + " is not in 0..7");
  std::shared_lock lock(*mutex_);
  auto node_key = [this](uint32_t id) -> const BlockKey& { return arena_->at(id).key; };
  const std::size_t slot = FindSlot(*slots_, node_key, key);
  if (slot == slots_->size()) return Status::NotFound("SetTier: block " + key.ToHex() + " is not in the index");
  const auto bit = static_cast<TierMask>(1u << tier);
  std::atomic<TierMask>& tiers = arena_->at((*slots_)[slot].node).tiers;
  if (present) {
    tiers.fetch_or(bit, std::memory_order_relaxed);
  } else {
    tiers.fetch_and(static_cast<TierMask>(~bit), std::memory_order_relaxed);
  }
  return Status::Ok();
}

Status PrefixIndex::SetTags(const BlockKey& key, BlockType type, TransitionType transition) {
  std::unique_lock lock(*mutex_);  // tags are plain bytes, read under the shared lock
  auto node_key = [this](uint32_t id) -> const BlockKey& { return arena_->at(id).key; };
  const std::size_t slot = FindSlot(*slots_, node_key, key);
  if (slot == slots_->size()) return Status::NotFound("SetTags: block " + key.ToHex() + " is not in the index");
  arena_->at((*slots_)[slot].node).tags = static_cast<uint8_t>(static_cast<unsigned>(type) | (static_cast<unsigned>(transition) << 2));
  return Status::Ok();
}

Status PrefixIndex::Evict(const BlockKey& key) {
  std::unique_lock lock(*mutex_);
  auto node_key = [this](uint32_t id) -> const BlockKey& { return arena_->at(id).key; };
  const std::size_t slot = FindSlot(*slots_, node_key, key);
  if (slot == slots_->size()) return Status::NotFound("Evict: block " + key.ToHex() + " is not in the index");
  const uint32_t id = (*slots_)[slot].node;
  Node& node = arena_->at(id);
  if (node.children > 0) {
    return Status::FailedPrecondition("Evict: block " + key.ToHex() + " has " + std::to_string(node.children) +
                                      " children; evict leaves first");
  }
  if (node.pins.load(std::memory_order_acquire) > 0) {
    return Status::FailedPrecondition("Evict: block " + key.ToHex() + " is pinned");
  }
  EraseSlotLocked(slot);
  UnlinkLeafLocked(id);
  if (node.parent != kNoNode) {
    Node& up = arena_->at(node.parent);
    if (--up.children == 0) AppendLeafLocked(node.parent);
  }
  arena_->Free(id);
  ++evictions_;
  return Status::Ok();
}

std::vector<BlockKey> PrefixIndex::EvictableLeaves(std::size_t max) const {
  std::shared_lock lock(*mutex_);
  std::vector<BlockKey> out;
  for (uint32_t id = leaf_head_; id != kNoNode && out.size() < max; id = arena_->at(id).leaf_next) {
    const Node& node = arena_->at(id);
    if (node.pins.load(std::memory_order_acquire) == 0) out.push_back(node.key);
  }
  return out;
}

void PrefixIndex::ForEachBlock(const std::function<void(const BlockInfo&)>& visitor) const {
  std::shared_lock lock(*mutex_);
  // Order by depth so that every parent comes before its children.
  std::vector<uint32_t> depth(arena_->capacity(), kNoNode);
  std::vector<std::vector<uint32_t>> by_depth;
  std::vector<uint32_t> path;
  for (const Slot& slot : *slots_) {
    const uint32_t start = slot.node;
    if (start == kNoNode || depth[start] != kNoNode) continue;
    for (uint32_t id = start; id != kNoNode && depth[id] == kNoNode; id = arena_->at(id).parent) path.push_back(id);
    uint32_t d = arena_->at(path.back()).parent == kNoNode ? 0 : depth[arena_->at(path.back()).parent] + 1;
    for (auto it = path.rbegin(); it != path.rend(); ++it, ++d) {
      depth[*it] = d;
      if (by_depth.size() <= d) by_depth.resize(d + 1);
      by_depth[d].push_back(*it);
    }
    path.clear();
  }
  for (const auto& level : by_depth) {
    for (uint32_t id : level) visitor(InfoLocked(id));
  }
}

PrefixIndex::Stats PrefixIndex::GetStats() const {
  std::shared_lock lock(*mutex_);
  return {used_, leaves_, lookups_.load(), hit_blocks_.load(), collisions_.load(), evictions_, mutex_->Profile()};
}

std::size_t PrefixIndex::size() const {
  std::shared_lock lock(*mutex_);
  return used_;
}

std::size_t PrefixIndex::MemoryBytes() const {
  std::shared_lock lock(*mutex_);
  return slots_->bytes() + arena_->MemoryBytes();
}

// ---- table and leaf-list maintenance (mutex_ held exclusively) ----

void PrefixIndex::InsertSlotLocked(uint64_t hash, uint32_t id) {
  SlotArray& slots = *slots_;
  std::size_t i = Home(hash, slots.size());
  while (slots[i].node != kNoNode) i = Next(i, slots.size());
  slots[i] = Slot{hash, id, arena_->at(id).parent};
  ++used_;
}

// Backward-shift deletion keeps every probe sequence unbroken without tombstones.
void PrefixIndex::EraseSlotLocked(std::size_t hole) {
  SlotArray& slots = *slots_;
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
  --used_;
}

void PrefixIndex::GrowTableLocked() {
  std::unique_ptr<SlotArray> old = std::move(slots_);
  slots_ = NewSlots(old->size() + old->size() / 2);
  used_ = 0;
  for (const Slot& slot : *old) {
    if (slot.node != kNoNode) InsertSlotLocked(slot.hash, slot.node);
  }
}

void PrefixIndex::AppendLeafLocked(uint32_t id) {
  Node& node = arena_->at(id);
  node.leaf_prev = leaf_tail_;
  node.leaf_next = kNoNode;
  if (leaf_tail_ != kNoNode) {
    arena_->at(leaf_tail_).leaf_next = id;
  } else {
    leaf_head_ = id;
  }
  leaf_tail_ = id;
  ++leaves_;
}

void PrefixIndex::UnlinkLeafLocked(uint32_t id) {
  Node& node = arena_->at(id);
  if (node.leaf_prev != kNoNode) {
    arena_->at(node.leaf_prev).leaf_next = node.leaf_next;
  } else {
    leaf_head_ = node.leaf_next;
  }
  if (node.leaf_next != kNoNode) {
    arena_->at(node.leaf_next).leaf_prev = node.leaf_prev;
  } else {
    leaf_tail_ = node.leaf_prev;
  }
  node.leaf_prev = node.leaf_next = kNoNode;
  --leaves_;
}

}  // namespace kvtier
