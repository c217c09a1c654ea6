// The store's movers (store_state.h): Rebalance demotes or drops a full tier's victims (and,
// head-granular, splits a block's least important heads out to the tier below); promotion
// and prefetch copy blocks up into the fastest tier.
#include <algorithm>

#include "store/store_state.h"

namespace kvtier {
namespace {

constexpr std::size_t kDemotionBatch = 16;  // victims moved per batch

}  // namespace

void TieredStore::Impl::Schedule(std::function<void()> move) {
  if (options.synchronous_moves) {
    move();
    return;
  }
  {
    std::lock_guard lock(flight_mu_);
    ++in_flight;
  }
  // The movers' queue is where prefetches wait for bandwidth: its occupancy stops the
  // window from growing when the tiers are busy.
  prefetch_window->SetBandwidthUtilization(static_cast<double>(movers->queued()) /
                                           static_cast<double>(options.max_queued_moves));
  movers->Submit([this, move = std::move(move)] {
    move();
    std::lock_guard lock(flight_mu_);
    if (--in_flight == 0) flight_cv_.notify_all();
  });
}

void TieredStore::Impl::Drain() {
  if (options.synchronous_moves) return;
  std::unique_lock lock(flight_mu_);
  flight_cv_.wait(lock, [&] { return in_flight == 0; });
}

void TieredStore::Impl::KickRebalances() {
  RetryPendingEvictions();
  // Every Put and Get ends here, and nearly all find no tier to queue. A tier's flag is
  // claimed by one thread: the one that queues its rebalance (which clears it when it ends).
  std::vector<int> due;
  for (int t = 0; t <= last_tier(); ++t) {
    if (OverHighWatermark(t) && !tier_state(t).accounts->rebalance_queued.exchange(true)) due.push_back(t);
  }
  for (int t : due) Schedule([this, t] { Rebalance(t, 0); });
}

void TieredStore::Impl::Rebalance(int t, uint64_t need, uint64_t force_bytes) {
  for (;;) {
    std::vector<Victim> batch = PlanVictims(t, need, force_bytes);
    if (batch.empty()) return;
    const std::vector<Status> moved = MoveVictims(t, batch);
    if (!SettleVictims(t, batch, moved)) {  // nothing could leave (pinned, interior, lower tiers failing)
      tier_state(t).accounts->rebalance_queued.store(false);
      return;
    }
  }
}

std::vector<TieredStore::Impl::Victim> TieredStore::Impl::PlanVictims(int t, uint64_t need, uint64_t& force_bytes) {
  std::vector<Victim> batch;
  // Shared: each victim is taken under its shard (the policy locks its own).
  SharedSection section(*this);
  TierState& ts = tier_state(t);
  const double target = options.low_watermark * static_cast<double>(ts.capacity);
  uint64_t planned = 0;
  while (batch.size() < kDemotionBatch) {
    const uint64_t used = ts.used();
    const uint64_t remaining = used - std::min(used, planned);
    if (ts.capacity == 0 ||
        (planned >= force_bytes && static_cast<double>(remaining) <= target && remaining + need <= ts.capacity)) {
      break;
    }
    const std::optional<BlockKey> victim = ts.policy->Victim();
    if (!victim) break;
    BlockGuard guard(blocks, BlockGuard::Mode::kExclusive, *victim);
    const std::optional<BlockInfo> info = index.Find(*victim);
    Block* entry = blocks.Find(*victim);
    if (!info || entry == nullptr) {  // cannot happen; keep the policy consistent
      ts.policy->Remove(*victim, Now());
      continue;
    }
    // Between the policy's answer and this shard another thread may have pinned it, moved it
    // or taken it out of this tier, and told the policy under this shard: its next answer is
    // another block. Telling it again here costs little and makes sure of that, so this
    // loop cannot ask for the same block forever.
    if (!(info->meta.tiers & (1u << t))) {
      ts.policy->Remove(*victim, Now());
      continue;
    }
    if (!EvictableLocked(*info, *entry, t)) {
      RefreshEvictableLocked(*victim);
      continue;
    }
    BeginMoveLocked(*victim, *entry);
    Victim v = ChooseActionLocked(*victim, *info, *entry, t);
    if (v.action == Victim::Action::kDemote && t == last_tier()) {
      EndMoveLocked(*victim, *entry);  // an interior block of the last tier: nowhere to go
      break;
    }
    planned += v.action == Victim::Action::kSplit ? options.head_layout->PackedBytes(v.lower)
                                                  : BytesIn(*entry, t, info->meta.size_bytes);
    batch.push_back(std::move(v));
  }
  if (batch.empty()) ts.accounts->rebalance_queued.store(false);  // nothing (more) to move: this rebalance ends
  force_bytes -= std::min(force_bytes, planned);
  return batch;
}

TieredStore::Impl::Victim TieredStore::Impl::ChooseActionLocked(const BlockKey& key, const BlockInfo& info,
                                                                const Block& b, int t) {
  Victim v{key, info.meta, Victim::Action::kDemote, {}, SplitIn(b, t)};
  const TierMask below = static_cast<TierMask>(info.meta.tiers & ~((2u << t) - 1));
  if (SplittableLocked(info.meta, b, t, below)) {
    const uint64_t bytes = static_cast<uint64_t>(options.head_demotion_fraction * info.meta.size_bytes);
    Result<HeadSelection> plan = options.head_importance->PlanDemotion(*options.head_layout, bytes);
    if (plan.ok() && !plan->units.None() && plan->units.Count() < options.head_layout->unit_count()) {
      v.action = Victim::Action::kSplit;
      v.lower = plan->units;
      write_counters.head_importance_assumed.store(plan->assumed_importance, std::memory_order_relaxed);
      return v;
    }
  }
  if (below != 0) {
    v.action = Victim::Action::kLeave;  // a copy below already: write-back costs nothing
  } else if (t == last_tier() ||
             (options.policy == PolicyKind::kBayes && info.children == 0 &&
              predictor->PReuse(info.meta.type, info.meta.transition) < options.drop_below_p_reuse)) {
    v.action = info.children == 0 ? Victim::Action::kDrop : Victim::Action::kDemote;
  }
  return v;
}

std::vector<Status> TieredStore::Impl::MoveVictims(int t, std::span<Victim> batch) {
  std::vector<Status> moved(batch.size());
  std::vector<std::size_t> whole;  // moved down whole, in batches
  for (std::size_t i = 0; i < batch.size(); ++i) {
    Victim& v = batch[i];
    if (v.action == Victim::Action::kSplit) {
      Result<bool> split = SplitOut(v.key, v.meta, v.lower, t);
      moved[i] = split.status();
      if (split.ok() && !*split) v.action = Victim::Action::kDemote;  // it went down whole
    } else if (v.action != Victim::Action::kDemote) {
      continue;            // left (held below already) or dropped: nothing to write
    } else if (options.metadata_only) {  // no bytes to gather or copy, split or not
      moved[i] = WriteMakingRoom(t + 1, v.key, {}, v.meta.size_bytes);
    } else if (v.split) {  // gather the parts, then move the whole block down
      std::vector<std::byte> payload(v.meta.size_bytes);
      uint64_t checksum = 0;
      moved[i] = ReadGathered(v.key, t, v.split, payload, &checksum);
      if (moved[i].ok()) moved[i] = WriteTo(t + 1, v.key, payload, v.meta.size_bytes, checksum);
    } else {
      whole.push_back(i);
    }
  }
  if (!whole.empty()) DemoteWhole(t, batch, whole, moved);
  return moved;
}

void TieredStore::Impl::DemoteWhole(int t, std::span<const Victim> batch, std::span<const std::size_t> whole,
                                    std::span<Status> moved) {
  std::vector<std::vector<std::byte>> payloads(whole.size());
  // Each block's stored checksum travels with it: the tier below checks the bytes it copies
  // against the one they were written with, so a flip in this buffer is caught there.
  std::vector<uint64_t> checksums(whole.size());
  std::vector<Tier::ReadOp> reads;
  for (std::size_t k = 0; k < whole.size(); ++k) {
    payloads[k].resize(batch[whole[k]].meta.size_bytes);
    reads.push_back({batch[whole[k]].key, payloads[k], &checksums[k]});
  }
  const std::vector<Result<std::size_t>> got = tier_state(t).tier->ReadBatch(reads);
  std::vector<Tier::WriteOp> writes;
  std::vector<std::size_t> write_index;  // into `batch`
  for (std::size_t k = 0; k < got.size(); ++k) {
    Status& m = moved[whole[k]];
    m = !got[k].ok()                     ? got[k].status()
        : *got[k] == reads[k].out.size() ? Status::Ok()
                                         : Status::NotFound("block changed while read");
    if (!m.ok()) continue;
    writes.push_back({.key = reads[k].key, .payload = payloads[k], .checksum = checksums[k]});
    write_index.push_back(whole[k]);
  }
  if (writes.empty()) return;
  const std::vector<Status> written = WriteBatchTo(t + 1, writes);
  for (std::size_t k = 0; k < written.size(); ++k) {
    moved[write_index[k]] = RetryMakingRoom(t + 1, writes[k].key, writes[k].payload,
                                            static_cast<uint32_t>(writes[k].payload.size()), written[k],
                                            writes[k].checksum);
  }
}

bool TieredStore::Impl::SettleVictims(int t, std::span<const Victim> batch, std::span<const Status> moved) {
  std::vector<BlockKey> leaving;
  std::vector<std::pair<int, BlockKey>> parts_leaving;
  bool progressed = false;
  {
    SharedSection section(*this);  // each victim is this mover's: its shard is enough
    for (std::size_t i = 0; i < batch.size(); ++i) {
      BlockGuard guard(blocks, BlockGuard::Mode::kExclusive, batch[i].key);
      if (SettleVictimLocked(t, batch[i], moved[i], leaving, parts_leaving)) progressed = true;
    }
  }
  for (const BlockKey& key : leaving) EvictFrom(t, key);
  for (const auto& [tier, part] : parts_leaving) EvictFrom(tier, part);
  {
    // A block stays claimed while its copy leaves, so that no write of the key (a Put of a
    // block just dropped, say) lands before the eviction and is deleted by it.
    std::shared_lock lock(mu_);
    for (const BlockKey& key : leaving) {
      const std::optional<BlockInfo> info = index.Find(key);
      std::optional<BlockKey> parent;
      {
        // Let go and forgotten under one hold of its shard (and its parent's): no put of the
        // key comes in between to find it neither held nor gone.
        BlockGuard guard(blocks, BlockGuard::Mode::kExclusive, key, info ? info->parent : std::nullopt);
        if (Block* entry = blocks.Find(key); entry != nullptr) EndMoveLocked(key, *entry);
        parent = ForgetOneLocked(key);  // dropped: held by no tier now
      }
      if (parent) ForgetUnderShards(*parent);
    }
  }
  KickRebalances();  // the tier below may be over its watermark now
  return progressed;
}

bool TieredStore::Impl::SettleVictimLocked(int t, const Victim& v, const Status& moved, std::vector<BlockKey>& leaving,
                                           std::vector<std::pair<int, BlockKey>>& parts_leaving) {
  Block* entry = blocks.Find(v.key);
  if (entry == nullptr) return false;
  Block& b = *entry;
  EndMoveLocked(v.key, b);
  const std::optional<BlockInfo> info = index.Find(v.key);
  if (!info || !(info->meta.tiers & (1u << t))) return false;
  TierState& ts = tier_state(t);
  if (v.action == Victim::Action::kSplit) {
    // Failed: the block is whole in this tier still (SplitOut restored it).
    if (moved.ok()) {
      const uint32_t lower_bytes = static_cast<uint32_t>(options.head_layout->PackedBytes(v.lower));
      b.split = Block::Split{.upper_tier = t,
                             .lower_tier = t + 1,
                             .lower = v.lower,
                             .upper_bytes = v.meta.size_bytes - lower_bytes,
                             .lower_bytes = lower_bytes};
      ts.Release(lower_bytes);
      CountInTier(t, &TierState::Accounts::demotions);
      tier_state(t + 1).Place(lower_bytes);
      write_counters.head_splits.fetch_add(1, std::memory_order_relaxed);
    }
    RefreshEvictableLocked(v.key);
    return moved.ok();
  }
  const uint32_t here = BytesIn(b, t, v.meta.size_bytes);
  if (v.action == Victim::Action::kDemote && !moved.ok()) {
    // Could not move it (the lower tier failed): drop it if it is a leaf, else keep it
    // here; either way the next victim is tried.
    if (info->children != 0 || b.pins != 0) {
      RefreshEvictableLocked(v.key);
      return false;
    }
    CountInTier(t, &TierState::Accounts::drops);
    if (b.split) parts_leaving.push_back(ForgetSplitLocked(v.key, b));
    RemoveFromTierLocked(v.key, t, here);
    leaving.push_back(v.key);
    BeginMoveLocked(v.key, b);  // until its copy is evicted; then it is forgotten
    return true;
  }
  if (v.action == Victim::Action::kDemote) {
    AddToTierLocked(v.key, t + 1, v.meta, b);
    CountInTier(t, &TierState::Accounts::demotions);
  } else if (v.action == Victim::Action::kDrop) {
    if (b.pins > 0 || info->children > 0) {  // pinned or extended meanwhile
      RefreshEvictableLocked(v.key);
      return false;
    }
    CountInTier(t, &TierState::Accounts::drops);
  }
  // The copy here leaves (moved down whole, dropped, or held below already): so does the
  // lower half of its split, if it had one.
  if (b.split && b.split->upper_tier == t) parts_leaving.push_back(ForgetSplitLocked(v.key, b));
  RemoveFromTierLocked(v.key, t, here);
  leaving.push_back(v.key);
  BeginMoveLocked(v.key, b);  // until its copy is evicted (a dropped block is forgotten then)
  return true;
}

bool TieredStore::Impl::SplittableLocked(const BlockMeta& meta, const Block& b, int t, TierMask below) const {
  return options.head_layout && t < last_tier() && !b.split && below == 0 &&
         meta.size_bytes == options.head_layout->block_bytes();
}

Result<bool> TieredStore::Impl::SplitOut(const BlockKey& key, const BlockMeta& meta, const HeadUnitMask& lower, int t) {
  const KvBlockLayout& layout = *options.head_layout;
  const uint32_t lower_bytes = static_cast<uint32_t>(layout.PackedBytes(lower));
  if (options.metadata_only) {
    KVTIER_RETURN_IF_ERROR(WriteTo(t + 1, PartKey(key), {}, lower_bytes));
    return true;
  }
  std::vector<std::byte> block(meta.size_bytes);
  KVTIER_RETURN_IF_ERROR(ReadFrom(t, key, block));
  std::vector<std::byte> part(lower_bytes);
  KVTIER_RETURN_IF_ERROR(PackUnitsInto(layout, block, lower, part));
  KVTIER_RETURN_IF_ERROR(WriteMakingRoom(t + 1, PartKey(key), part, lower_bytes));
  const HeadUnitMask upper = lower.Complement();
  std::vector<std::byte> kept(layout.PackedBytes(upper));
  KVTIER_RETURN_IF_ERROR(PackUnitsInto(layout, block, upper, kept));
  Tier& here = *tier_state(t).tier;
  if (Status evicted = here.Evict(key); !evicted.ok()) {
    EvictFrom(t + 1, PartKey(key));  // the block stays whole where it is
    return evicted.WithContext("store: a head split could not free block " + key.ToHex());
  }
  if (here.Write(key, kept).ok()) return true;
  // No room for the part here: the block goes down whole, or failing that back up whole.
  EvictFrom(t + 1, PartKey(key));
  if (WriteTo(t + 1, key, block, meta.size_bytes).ok()) return false;
  KVTIER_RETURN_IF_ERROR(
      here.Write(key, block).WithContext("store: a failed head split could not restore block " + key.ToHex()));
  return Status::Unavailable("store: no room below for block " + key.ToHex());
}

void TieredStore::Impl::PromoteOrPrefetch(std::vector<BlockKey> keys, bool prefetch, HeldPayloads held) {
  Schedule([this, keys = std::move(keys), prefetch, held = std::move(held)] {
    std::vector<Promotion> moves = BeginPromotions(keys, prefetch);
    TakeHeldPayloads(moves, held);
    ReadPromotions(moves);
    for (Promotion& move : moves) FinishPromotion(move, prefetch);
    KickRebalances();
  });
}

std::vector<TieredStore::Impl::Promotion> TieredStore::Impl::BeginPromotions(std::span<const BlockKey> keys,
                                                                               bool prefetch) {
  std::vector<Promotion> moves;
  // Shared: each block is taken under its shard (most prefetches find their blocks in the
  // fastest tier already, and take nothing).
  SharedSection section(*this);
  for (const BlockKey& key : keys) {
    BlockGuard guard(blocks, BlockGuard::Mode::kExclusive, key);
    const std::optional<BlockInfo> info = index.Find(key);
    Block* entry = blocks.Find(key);
    if (!info || entry == nullptr || entry->moving) continue;
    const int from = FastestTier(info->meta.tiers);
    if (from <= 0) continue;  // absent, or in the fastest tier already
    moves.push_back({.key = key, .from = from, .meta = info->meta, .block = *entry});
    BeginMoveLocked(key, *entry);
    if (prefetch) write_counters.prefetch_issued.fetch_add(1, std::memory_order_relaxed);
  }
  return moves;
}

void TieredStore::Impl::TakeHeldPayloads(std::vector<Promotion>& moves, const HeldPayloads& held) {
  if (held.entries.empty()) return;
  std::unordered_map<BlockKey, const HeldPayloads::Entry*, BlockKeyHash> by_key;
  for (const HeldPayloads::Entry& h : held.entries) by_key.emplace(h.key, &h);
  for (Promotion& move : moves) {
    auto it = by_key.find(move.key);
    // Bytes of another size, or from a copy that has moved since, are read afresh.
    if (it == by_key.end() || it->second->tier != move.from || it->second->size != move.meta.size_bytes) continue;
    move.held = std::span(held.buffer).subspan(it->second->offset, it->second->size);
    move.checksum = it->second->checksum;
    move.read_done = true;
  }
}

void TieredStore::Impl::ReadPromotions(std::vector<Promotion>& moves) {
  if (options.metadata_only) return;
  for (Promotion& move : moves) {
    if (!move.read_done) move.payload.resize(move.meta.size_bytes);
  }
  // From a networked tier, one ReadBatch per tier: one round trip per node, not per block.
  for (int t = 1; t <= last_tier(); ++t) {
    if ((networked & (1u << t)) == 0) continue;
    std::vector<Tier::ReadOp> ops;
    std::vector<Promotion*> which;
    for (Promotion& move : moves) {
      if (move.read_done || move.from != t || SplitIn(move.block, t)) continue;
      ops.push_back({move.key, move.payload, &move.checksum});
      which.push_back(&move);
    }
    if (ops.size() < 2) continue;
    const std::vector<Result<std::size_t>> done = tier_state(t).tier->ReadBatch(ops);
    for (std::size_t k = 0; k < ops.size(); ++k) {
      which[k]->read = !done[k].ok()                         ? done[k].status()
                       : *done[k] == which[k]->payload.size() ? Status::Ok()
                                                              : Status::NotFound("block changed while it was read");
      which[k]->read_done = true;
    }
  }
  for (Promotion& move : moves) {
    if (move.read_done) continue;
    move.read = ReadGathered(move.key, move.from, SplitIn(move.block, move.from), move.payload, &move.checksum);
  }
}

void TieredStore::Impl::FinishPromotion(Promotion& move, bool prefetch) {
  const std::optional<uint64_t> carried = options.metadata_only ? std::nullopt : std::optional(move.checksum);
  const std::span<const std::byte> payload = move.held.empty() ? std::span<const std::byte>(move.payload) : move.held;
  Result<int> placed = move.read.ok() ? Place(move.key, move.meta, move.block, payload, move.from, carried)
                                      : Result<int>(move.read);
  SharedSection section(*this);  // the block is this mover's: its shard is enough
  BlockGuard guard(blocks, BlockGuard::Mode::kExclusive, move.key);
  Block* entry = blocks.Find(move.key);
  if (entry == nullptr) return;
  EndMoveLocked(move.key, *entry);
  if (placed.ok() && *placed >= 0) {
    AddToTierLocked(move.key, *placed, move.meta, *entry);
    CountInTier(*placed, &TierState::Accounts::promotions);
    // A Get's promotions from a networked tier went through its gate; their outcome settles it.
    if (!prefetch && promotion_gates[static_cast<std::size_t>(move.from)] != nullptr) {
      entry->promoted_to = static_cast<int8_t>(*placed);
      entry->promoted_from = static_cast<int8_t>(move.from);
    }
    if (prefetch && *placed == 0) {
      entry->prefetched = true;
      prefetch_window->OnPrefetched(1, move.meta.size_bytes);
    }
  }
  RefreshEvictableLocked(move.key);
}

}  // namespace kvtier
