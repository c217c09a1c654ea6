// The store's bookkeeping of blocks and tiers, its tier I/O and making room in a full tier
// (store_state.h).
#include "store/store_state.h"

#include <algorithm>

namespace kvtier {
namespace {

constexpr uint32_t kReclaimBlocks = 8;  // blocks' worth a full tier frees past its watermark
// Pending evictions beyond this many are left to the tier's own expiry (a Redis maxmemory
// policy or TTL) and counted as failures: an outage must not grow the store without bound.
constexpr std::size_t kMaxPendingEvictions = 1 << 20;
constexpr int kEvictionRetriesPerCall = 256;  // a tier back after an outage is caught up gradually

}  // namespace

std::pair<int, BlockKey> TieredStore::Impl::ForgetSplitLocked(const BlockKey& key, Block& b) {
  const Block::Split split = *b.split;
  tier_state(split.lower_tier).Release(split.lower_bytes);
  b.split.reset();
  ++b.placement;
  return {split.lower_tier, PartKey(key)};
}

bool TieredStore::Impl::EvictableLocked(const BlockInfo& info, const Block& b, int t) const {
  if (b.pins > 0 || b.moving) return false;
  return t < last_tier() || info.children == 0;
}

void TieredStore::Impl::RefreshEvictableLocked(const BlockKey& key) {
  const std::optional<BlockInfo> info = index.Find(key);
  const Block* b = blocks.Find(key);
  if (!info || b == nullptr) return;
  for (int t = 0; t <= last_tier(); ++t) {
    if (info->meta.tiers & (1u << t)) {
      tier_state(t).policy->SetEvictable(key, EvictableLocked(*info, *b, t));
    }
  }
}

void TieredStore::Impl::BeginMoveLocked(const BlockKey& key, Block& b) {
  b.moving = true;
  ++b.placement;
  RefreshEvictableLocked(key);
}

void TieredStore::Impl::EndMoveLocked(const BlockKey& key, Block& b) {
  b.moving = false;
  ++b.placement;
  RefreshEvictableLocked(key);
  move_done_.notify_all();
}

void TieredStore::Impl::DropCopyLocked(const BlockKey& key, int t, std::vector<std::pair<int, BlockKey>>& evict) {
  const std::optional<BlockInfo> info = index.Find(key);
  Block* b = blocks.Find(key);
  if (!info || b == nullptr || !(info->meta.tiers & (1u << t))) return;
  const uint32_t here = BytesIn(*b, t, info->meta.size_bytes);
  if (b->split && b->split->upper_tier == t) evict.push_back(ForgetSplitLocked(key, *b));
  RemoveFromTierLocked(key, t, here);
  evict.push_back({t, key});
  ForgetLocked(key);
  RefreshEvictableLocked(key);
}

void TieredStore::Impl::AddToTierLocked(const BlockKey& key, int t, const BlockMeta& meta, const Block& b) {
  TierState& ts = tier_state(t);
  if (Block* found = blocks.Find(key)) ++found->placement;
  {
    std::lock_guard lock(pending_mu_);
    if (auto pending = pending_evictions.find(key); pending != pending_evictions.end()) {
      pending->second = static_cast<TierMask>(pending->second & ~(1u << t));  // the new copy stays
      if (pending->second == 0) pending_evictions.erase(pending);
    }
  }
  (void)index.SetTier(key, t, true);
  const ResidentBlock resident = Resident(key, meta, b);
  // A policy admits a block as evictable: told at once, under the same hold of its shard, when
  // it is not (pinned, moving, or an interior block of the last tier).
  bool evictable = b.pins == 0 && !b.moving;
  if (evictable && t == last_tier()) {
    const std::optional<BlockInfo> info = index.Find(key);
    evictable = info && info->children == 0;
  }
  ts.Place(meta.size_bytes);
  ts.accounts->blocks.fetch_add(1, std::memory_order_relaxed);
  ts.policy->AdmitAs(resident, Now(), evictable);
}

void TieredStore::Impl::TellExpectedLocked(const BlockKey& key, std::optional<uint64_t> order) {
  const std::optional<BlockInfo> info = index.Find(key);
  if (!info) return;
  for (int t = 0; t <= last_tier(); ++t) {
    if (info->meta.tiers & (1u << t)) tier_state(t).policy->Expect(key, order);
  }
}

void TieredStore::Impl::RemoveFromTierLocked(const BlockKey& key, int t, uint32_t bytes) {
  (void)index.SetTier(key, t, false);
  {
    TierState& ts = tier_state(t);
    ts.Release(bytes);
    TierState::Subtract(ts.accounts->blocks, 1);
    ts.policy->Remove(key, Now());
  }
  Block* b = blocks.Find(key);
  if (b != nullptr) ++b->placement;
  if (b != nullptr && b->promoted_to == t) SettlePromotionLocked(*b, /*used=*/false);
  if (t == 0 && b != nullptr && b->prefetched) {
    b->prefetched = false;
    write_counters.prefetch_wasted.fetch_add(1, std::memory_order_relaxed);
    write_counters.prefetch_wasted_bytes.fetch_add(bytes, std::memory_order_relaxed);
    prefetch_window->OnWasted(1, bytes);
  }
}

void TieredStore::Impl::SettlePromotionLocked(Block& b, bool used) {
  PromotionGate& gate = *promotion_gates[static_cast<std::size_t>(b.promoted_from)];
  used ? gate.OnUsed() : gate.OnWasted();
  b.promoted_to = b.promoted_from = -1;
}

void TieredStore::Impl::ForgetLocked(const BlockKey& key) {
  std::optional<BlockKey> next = key;
  while (next) next = ForgetOneLocked(*next);
}

void TieredStore::Impl::ForgetUnderShards(const BlockKey& key) {
  std::optional<BlockKey> next = key;
  while (next) {
    // A block's parent never changes: looked up first, it names the second shard to hold.
    const std::optional<BlockInfo> info = index.Find(*next);
    if (!info) return;
    BlockGuard guard(blocks, BlockGuard::Mode::kExclusive, *next, info->parent);
    next = ForgetOneLocked(*next);
  }
}

std::optional<BlockKey> TieredStore::Impl::ForgetOneLocked(const BlockKey& key) {
  const std::optional<BlockInfo> info = index.Find(key);
  if (!info || info->meta.tiers != 0 || info->children != 0) return std::nullopt;
  if (const Block* b = blocks.Find(key); b != nullptr && (b->pins > 0 || b->moving)) return std::nullopt;
  if (!index.Evict(key).ok()) return std::nullopt;
  blocks.Erase(key);
  if (info->parent) RefreshEvictableLocked(*info->parent);
  return info->parent;  // a parent a tier lost stayed listed only for this child
}

bool TieredStore::Impl::OverHighWatermark(int t) const {
  const TierState& ts = tier_state(t);
  if (ts.capacity == 0) return false;
  return static_cast<double>(ts.used()) > options.high_watermark * static_cast<double>(ts.capacity);
}

Status TieredStore::Impl::WriteTo(int t, const BlockKey& key, std::span<const std::byte> payload, uint32_t bytes,
                                  std::optional<uint64_t> checksum) {
  if (durable & (1u << t)) KVTIER_RETURN_IF_ERROR(JournalPuts(t, {&key, 1}));
  return WriteBytes(t, key, payload, bytes, checksum);
}

Status TieredStore::Impl::WriteBytes(int t, const BlockKey& key, std::span<const std::byte> payload, uint32_t bytes,
                                     std::optional<uint64_t> checksum) {
  TierState& ts = tier_state(t);
  if (!options.metadata_only) {
    KVTIER_RETURN_IF_ERROR(ts.tier->Write({.key = key, .payload = payload, .checksum = checksum}));
    if (t == shared_tier) WriteCards({&key, 1});
    return Status::Ok();
  }
  std::shared_lock lock(mu_);
  if (ts.capacity > 0 && tier_state(t).used() + bytes > ts.capacity) {
    return Status::ResourceExhausted(ts.name + " is full");
  }
  return Status::Ok();
}

std::vector<Status> TieredStore::Impl::WriteBatchTo(int t, std::span<const Tier::WriteOp> writes) {
  if (durable & (1u << t)) {
    std::vector<BlockKey> keys;
    for (const Tier::WriteOp& w : writes) keys.push_back(w.key);
    if (Status journaled = JournalPuts(t, keys); !journaled.ok()) return std::vector<Status>(writes.size(), journaled);
  }
  std::vector<Status> written = tier_state(t).tier->WriteBatch(writes);
  if (t == shared_tier) {
    std::vector<BlockKey> keys;
    for (std::size_t i = 0; i < writes.size(); ++i) {
      if (written[i].ok()) keys.push_back(writes[i].key);
    }
    WriteCards(keys);
  }
  return written;
}

Status TieredStore::Impl::ReadFrom(int t, const BlockKey& key, std::span<std::byte> out, uint64_t* checksum) {
  if (options.metadata_only) return Status::Ok();
  KVTIER_ASSIGN_OR_RETURN(std::size_t n, tier_state(t).tier->Read({.key = key, .out = out, .checksum = checksum}));
  if (n != out.size()) return Status::NotFound("block " + key.ToHex() + " changed while it was read");
  return Status::Ok();
}

void TieredStore::Impl::EvictFrom(int t, const BlockKey& key) {
  const Status evicted = options.metadata_only ? Status::Ok() : tier_state(t).tier->Evict(key);
  if (t == shared_tier) (void)tier_state(t).tier->Evict(CardKey(key));  // forgotten here, kept in the pool
  if (!evicted.ok() && evicted.code() != StatusCode::kNotFound) {
    ExclusiveLock lock(*this);
    ++stats.eviction_failures;
    const std::optional<BlockInfo> info = index.Find(key);
    std::lock_guard pending(pending_mu_);
    if (pending_evictions.size() < kMaxPendingEvictions && !(info && (info->meta.tiers & (1u << t)))) {
      pending_evictions[key] |= static_cast<TierMask>(1u << t);
    }
  }
  // After the eviction: a crash between the two leaves a record of a copy recovery does not
  // find (dropped then), never a copy in the tier that no record lists. A failed eviction is
  // journaled too: the store no longer lists the copy, and recovery does not look for it.
  if (durable & (1u << t)) JournalEviction(t, key);
}

void TieredStore::Impl::RetryPendingEvictions() {
  {
    std::lock_guard lock(pending_mu_);  // nearly always none: no exclusive section for every Put and Get
    if (pending_evictions.empty()) return;
  }
  for (int budget = kEvictionRetriesPerCall; budget > 0; --budget) {
    int t = -1;
    BlockKey key;
    {
      ExclusiveLock lock(*this);
      std::lock_guard pending(pending_mu_);
      if (pending_evictions.empty()) return;
      auto it = pending_evictions.begin();
      key = it->first;
      t = FastestTier(it->second);
      it->second = static_cast<TierMask>(it->second & ~(1u << t));
      if (it->second == 0) pending_evictions.erase(it);
      const std::optional<BlockInfo> info = index.Find(key);
      if (info && (info->meta.tiers & (1u << t))) continue;  // written there again meanwhile
    }
    const Status evicted = tier_state(t).tier->Evict(key);
    if (evicted.ok() || evicted.code() == StatusCode::kNotFound) continue;
    ExclusiveLock lock(*this);
    ++stats.eviction_failures;
    const std::optional<BlockInfo> info = index.Find(key);
    std::lock_guard pending(pending_mu_);
    if (!(info && (info->meta.tiers & (1u << t)))) pending_evictions[key] |= static_cast<TierMask>(1u << t);
    return;  // still refused: the tier is down; the next call tries again
  }
}

Status TieredStore::Impl::WriteMakingRoom(int t, const BlockKey& key, std::span<const std::byte> payload,
                                          uint32_t bytes, std::optional<uint64_t> checksum) {
  return RetryMakingRoom(t, key, payload, bytes, WriteTo(t, key, payload, bytes, checksum), checksum);
}

Status TieredStore::Impl::RetryMakingRoom(int t, const BlockKey& key, std::span<const std::byte> payload,
                                          uint32_t bytes, Status first, std::optional<uint64_t> checksum) {
  Status s = RetryWriteMakingRoom(t, key, payload, bytes, std::move(first), checksum);
  // The write into a durable tier was journaled before it; withdrawn when it failed for good,
  // or the journal would list copies that never were (and grow with every refused put).
  if (!s.ok() && (durable & (1u << t))) JournalEviction(t, key);
  return s;
}

Status TieredStore::Impl::RetryWriteMakingRoom(int t, const BlockKey& key, std::span<const std::byte> payload,
                                               uint32_t bytes, Status first, std::optional<uint64_t> checksum) {
  const TierState& ts = tier_state(t);  // `capacity` is set once, in Open
  if (first.code() != StatusCode::kResourceExhausted || ts.capacity == 0) return first;
  Rebalance(t, bytes);
  Status s = WriteBytes(t, key, payload, bytes, checksum);
  if (s.code() != StatusCode::kResourceExhausted) return s;
  {
    std::shared_lock lock(mu_);
    if (tier_state(t).used() + bytes > ts.capacity) return s;
  }
  Rebalance(t, bytes, uint64_t{kReclaimBlocks} * bytes);
  return WriteBytes(t, key, payload, bytes, checksum);
}

}  // namespace kvtier
