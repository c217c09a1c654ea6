// The store's bookkeeping of blocks and tiers, its tier I/O and making room in a full tier
// (store_state.h).
#include "store/store_state.h"

#include <algorithm>

namespace kvtier {
namespace {

constexpr uint32_t kReclaimBlocks = 8;  // blocks' worth a full tier frees past its watermark

}  // namespace

std::pair<int, BlockKey> TieredStore::Impl::ForgetSplitLocked(const BlockKey& key, Block& b) {
  const Block::Split split = *b.split;
  TierState& lower = tier_state(split.lower_tier);
  lower.used -= std::min<uint64_t>(lower.used, split.lower_bytes);
  b.split.reset();
  return {split.lower_tier, PartKey(key)};
}

bool TieredStore::Impl::EvictableLocked(const BlockInfo& info, const Block& b, int t) const {
  if (b.pins > 0 || b.moving) return false;
  return t < last_tier() || info.children == 0;
}

void TieredStore::Impl::RefreshEvictableLocked(const BlockKey& key) {
  const std::optional<BlockInfo> info = index.Find(key);
  auto it = blocks.find(key);
  if (!info || it == blocks.end()) return;
  for (int t = 0; t <= last_tier(); ++t) {
    if (info->meta.tiers & (1u << t)) {
      tier_state(t).policy->SetEvictable(key, EvictableLocked(*info, it->second, t));
    }
  }
}

void TieredStore::Impl::AddToTierLocked(const BlockKey& key, int t, const BlockMeta& meta, const Block& b) {
  TierState& ts = tier_state(t);
  (void)index.SetTier(key, t, true);
  ts.used += meta.size_bytes;
  ++ts.blocks;
  ts.policy->Admit(Resident(key, meta, b), Now());
}

void TieredStore::Impl::TellExpectedLocked(const BlockKey& key, std::optional<uint64_t> order) {
  const std::optional<BlockInfo> info = index.Find(key);
  if (!info) return;
  for (int t = 0; t <= last_tier(); ++t) {
    if (info->meta.tiers & (1u << t)) tier_state(t).policy->Expect(key, order);
  }
}

void TieredStore::Impl::RemoveFromTierLocked(const BlockKey& key, int t, uint32_t bytes) {
  TierState& ts = tier_state(t);
  (void)index.SetTier(key, t, false);
  ts.used -= std::min<uint64_t>(ts.used, bytes);
  if (ts.blocks > 0) --ts.blocks;
  ts.policy->Remove(key, Now());
  auto it = blocks.find(key);
  if (t == 0 && it != blocks.end() && it->second.prefetched) {
    it->second.prefetched = false;
    ++stats.prefetch_wasted;
    stats.prefetch_wasted_bytes += bytes;
    prefetch_window->OnWasted(1, bytes);
  }
}

void TieredStore::Impl::ForgetLocked(const BlockKey& key) {
  const std::optional<BlockInfo> info = index.Find(key);
  if (!info || info->meta.tiers != 0 || info->children != 0) return;
  if (!index.Evict(key).ok()) return;
  blocks.erase(key);
  if (info->parent) RefreshEvictableLocked(*info->parent);
}

bool TieredStore::Impl::OverHighWatermarkLocked(int t) const {
  const TierState& ts = tier_state(t);
  return ts.capacity > 0 && static_cast<double>(ts.used) > options.high_watermark * static_cast<double>(ts.capacity);
}

Status TieredStore::Impl::WriteTo(int t, const BlockKey& key, std::span<const std::byte> payload, uint32_t bytes) {
  TierState& ts = tier_state(t);
  if (t == persist_tier) KVTIER_RETURN_IF_ERROR(JournalPuts({&key, 1}));
  if (!options.metadata_only) return ts.tier->Write(key, payload);
  std::lock_guard lock(mu_);
  if (ts.capacity > 0 && ts.used + bytes > ts.capacity) return Status::ResourceExhausted(ts.stats.name + " is full");
  return Status::Ok();
}

std::vector<Status> TieredStore::Impl::WriteBatchTo(int t, std::span<const Tier::WriteOp> writes) {
  if (t == persist_tier) {
    std::vector<BlockKey> keys;
    for (const Tier::WriteOp& w : writes) keys.push_back(w.key);
    if (Status journaled = JournalPuts(keys); !journaled.ok()) return std::vector<Status>(writes.size(), journaled);
  }
  return tier_state(t).tier->WriteBatch(writes);
}

Status TieredStore::Impl::ReadFrom(int t, const BlockKey& key, std::span<std::byte> out) {
  if (options.metadata_only) return Status::Ok();
  KVTIER_ASSIGN_OR_RETURN(std::size_t n, tier_state(t).tier->Read(key, out));
  if (n != out.size()) return Status::NotFound("block " + key.ToHex() + " changed while it was read");
  return Status::Ok();
}

void TieredStore::Impl::EvictFrom(int t, const BlockKey& key) {
  if (!options.metadata_only) (void)tier_state(t).tier->Evict(key);
  // After the eviction: a crash between the two leaves a put record whose block recovery
  // does not find (dropped then), never a block in the tier that no record lists.
  if (t == persist_tier) {
    const JournalRecord drop{.kind = JournalRecord::Kind::kDrop, .key = key};
    (void)journal->Append({&drop, 1}, /*durable=*/false);  // at worst recovery finds the block gone
  }
}

Status TieredStore::Impl::WriteMakingRoom(int t, const BlockKey& key, std::span<const std::byte> payload,
                                          uint32_t bytes) {
  return RetryMakingRoom(t, key, payload, bytes, WriteTo(t, key, payload, bytes));
}

Status TieredStore::Impl::RetryMakingRoom(int t, const BlockKey& key, std::span<const std::byte> payload,
                                          uint32_t bytes, Status first) {
  const TierState& ts = tier_state(t);  // `capacity` is set once, in Open
  if (first.code() != StatusCode::kResourceExhausted || ts.capacity == 0) return first;
  Rebalance(t, bytes);
  Status s = WriteTo(t, key, payload, bytes);
  if (s.code() != StatusCode::kResourceExhausted) return s;
  {
    std::lock_guard lock(mu_);
    if (ts.used + bytes > ts.capacity) return s;
  }
  Rebalance(t, bytes, uint64_t{kReclaimBlocks} * bytes);
  return WriteTo(t, key, payload, bytes);
}

}  // namespace kvtier
