// Sharing a tier with other nodes (store_state.h, docs/cluster.md): every block written into
// the shared tier gets a card beside it (shared_card.h); a lookup that runs out of indexed
// blocks reads the cards of the rest of the chain and indexes what other nodes put; a put is
// published there. The shared tier never deletes a block for this store (Tier::shared): a
// copy the store drops there is only forgotten, and the pool evicts by its own rules.
#include <array>

#include "store/store_state.h"

namespace kvtier {
namespace {

// A lookup reads the cards of at most this many keys past its indexed prefix: one batch,
// bounded, whatever a client sends.
constexpr std::size_t kMaxCardsPerLookup = 4096;

}  // namespace

Status TieredStore::Impl::FindSharedTier() {
  for (int t = 0; t <= last_tier(); ++t) {
    const TierKind kind = tier_state(t).kind;
    if (kind == TierKind::kRemotePool || kind == TierKind::kParallelFs) networked |= static_cast<TierMask>(1u << t);
    if (!tier_state(t).tier->shared()) continue;
    if (shared_tier >= 0) {
      return Status::InvalidArgument("store: tiers '" + tier_state(shared_tier).name + "' and '" +
                                     tier_state(t).name + "' are both shared; share one tier");
    }
    if (options.metadata_only) {
      return Status::InvalidArgument("store: tier '" + tier_state(t).name +
                                     "' is shared, but a metadata-only store writes no blocks to share");
    }
    shared_tier = t;
  }
  return Status::Ok();
}

void TieredStore::Impl::WriteCards(std::span<const BlockKey> written) {
  std::vector<std::array<std::byte, kBlockCardBytes>> cards;
  std::vector<Tier::WriteOp> ops;
  cards.reserve(written.size());
  {
    ExclusiveLock lock(*this);
    for (const BlockKey& key : written) {
      const std::optional<BlockInfo> info = index.Find(key);
      Block* entry = blocks.Find(key);
      if (!info || entry == nullptr) continue;  // forgotten meanwhile: nobody should find it
      cards.push_back(EncodeBlockCard({.key = key,
                                       .parent = info->parent,
                                       .bytes = info->meta.size_bytes,
                                       .tokens = entry->tokens,
                                       .type = info->meta.type,
                                       .transition = info->meta.transition,
                                       .recompute_seconds = entry->recompute_s}));
      ops.push_back({CardKey(key), cards.back()});
    }
  }
  uint64_t failed = 0;
  for (const Status& s : tier_state(shared_tier).tier->WriteBatch(ops)) {
    if (!s.ok()) ++failed;
  }
  if (failed > 0) {
    ExclusiveLock lock(*this);
    stats.shared_publish_failures += failed;
  }
}

void TieredStore::Impl::Publish(const BlockKey& key, std::span<const std::byte> payload, const BlockMeta& meta,
                                std::optional<uint64_t> checksum) {
  {
    std::shared_lock lock(mu_);
    const std::optional<BlockInfo> info = index.Find(key);
    if (!info || (info->meta.tiers & (1u << shared_tier))) return;  // gone, or there already
  }
  const Status written = WriteMakingRoom(shared_tier, key, payload, meta.size_bytes, checksum);
  ExclusiveLock lock(*this);
  Block* entry = blocks.Find(key);
  const std::optional<BlockInfo> info = index.Find(key);
  if (!written.ok()) {
    ++stats.shared_publish_failures;
    return;
  }
  if (entry != nullptr && info && !(info->meta.tiers & (1u << shared_tier))) {
    AddToTierLocked(key, shared_tier, info->meta, *entry);
    RefreshEvictableLocked(key);
  }
}

std::size_t TieredStore::Impl::IndexSharedBlocks(std::span<const BlockKey> keys, std::size_t from,
                                                 const std::function<void()>& then) {
  const std::span<const BlockKey> rest = keys.subspan(from, std::min(keys.size() - from, kMaxCardsPerLookup));
  std::vector<std::array<std::byte, kBlockCardBytes>> buffers(rest.size());
  std::vector<Tier::ReadOp> ops;
  ops.reserve(rest.size());
  for (std::size_t i = 0; i < rest.size(); ++i) ops.push_back({CardKey(rest[i]), buffers[i]});
  const std::vector<Result<std::size_t>> read = tier_state(shared_tier).tier->ReadBatch(ops);
  std::vector<BlockCard> cards;
  for (std::size_t i = 0; i < rest.size(); ++i) {
    if (!read[i].ok() || *read[i] != kBlockCardBytes) break;
    std::optional<BlockCard> card = DecodeBlockCard(buffers[i]);
    // The card must be this key's, under the key before it in the run; a run's first key is
    // a chain's first unless keys name their prefix, and then IndexCardsLocked needs its
    // parent indexed here.
    const BlockKey* previous = from + i > 0 ? &keys[from + i - 1] : nullptr;
    if (!card || card->key != rest[i]) break;
    if (previous ? card->parent != *previous : card->parent && !options.keys_name_prefix) break;
    cards.push_back(*card);
  }
  if (cards.empty()) return 0;
  ExclusiveLock lock(*this);
  const std::size_t indexed = IndexCardsLocked(cards);
  if (indexed > 0 && then) then();
  return indexed;
}

std::size_t TieredStore::Impl::IndexCardsLocked(std::span<const BlockCard> cards) {
  std::size_t indexed = 0;
  for (const BlockCard& c : cards) {
    if (const std::optional<BlockInfo> known = index.Find(c.key)) {
      if (known->parent != c.parent) break;  // put here under another parent meanwhile
      continue;                              // put here meanwhile: its own entry serves
    }
    if (c.parent && !blocks.Contains(*c.parent)) break;
    const BlockMeta meta{.size_bytes = c.bytes, .type = c.type, .transition = c.transition};
    if (!index.Insert({&c.key, 1}, {&meta, 1}, static_cast<uint64_t>(Now() * 1e6), c.parent).ok()) break;
    const uint64_t tokens_before = c.parent ? blocks[*c.parent].tokens_before + blocks[*c.parent].tokens : 0;
    const Block b{.tokens = c.tokens,
                  .tokens_before = tokens_before,
                  .recompute_s = RecomputeSeconds(c.recompute_seconds, c.tokens, tokens_before)};
    blocks[c.key] = b;
    AddToTierLocked(c.key, shared_tier, meta, b);
    if (c.parent) RefreshEvictableLocked(*c.parent);
    RefreshEvictableLocked(c.key);
    ++indexed;
  }
  stats.shared_found_blocks += indexed;
  return indexed;
}

}  // namespace kvtier
