// The store's read path (store_state.h): Lookup, Get, and reads that gather a block split
// across two tiers.
#include <algorithm>
#include <limits>

#include "store/store_state.h"

namespace kvtier {
namespace {

constexpr int kReadAttempts = 4;  // a read racing a move retries at the new place

}  // namespace

LookupResult TieredStore::Impl::Lookup(std::span<const BlockKey> keys) {
  LookupResult result;
  {
    std::shared_lock lock(mu_);
    result = LookupIndexedLocked(keys);
  }
  std::size_t found = 0;
  if (shared_tier >= 0 && result.prefix_blocks < keys.size()) {
    // The rest of the chain may be in the shared tier, put by another node.
    found = IndexSharedBlocks(keys, result.prefix_blocks, [&] { result = LookupIndexedLocked(keys); });
  }
  read_counters.lookups.fetch_add(1, std::memory_order_relaxed);
  read_counters.lookup_blocks.fetch_add(keys.size(), std::memory_order_relaxed);
  read_counters.lookup_hit_blocks.fetch_add(result.prefix_blocks, std::memory_order_relaxed);
  if (result.load_blocks < result.prefix_blocks) {
    read_counters.recompute_preferred.fetch_add(1, std::memory_order_relaxed);
  }
  if (found > 0) KickRebalances();  // this node's share of the pool may be over its watermark now
  return result;
}

std::span<const PrefixIndex::RunPlacement> TieredStore::Impl::IndexedRunLocked(std::span<const BlockKey> keys) const {
  // Reused so that a lookup allocates nothing here: the read path runs it for every request.
  thread_local std::vector<PrefixIndex::RunPlacement> run;
  index.FindRunPlacement(
      keys, options.keys_name_prefix ? PrefixIndex::RunStart::kAnyBlock : PrefixIndex::RunStart::kChainStart, run);
  const auto uncopied = std::ranges::find_if(run, [](const PrefixIndex::RunPlacement& block) { return block.tiers == 0; });
  return std::span(run).first(static_cast<std::size_t>(uncopied - run.begin()));
}

LookupResult TieredStore::Impl::LookupIndexedLocked(std::span<const BlockKey> keys) {
  LookupResult result;
  const std::span<const PrefixIndex::RunPlacement> run = IndexedRunLocked(keys);
  result.tier.reserve(run.size());
  result.bytes.reserve(run.size());
  for (std::size_t i = 0; i < run.size(); ++i) {
    const int t = FastestTier(run[i].tiers);
    result.tier.push_back(t);
    result.bytes.push_back(run[i].size_bytes);
    if (options.cost_model) {
      BlockGuard guard(blocks, BlockGuard::Mode::kShared, keys[i]);
      const Block* entry = blocks.Find(keys[i]);
      const uint64_t tokens = entry == nullptr ? 0 : entry->tokens;
      const uint64_t before = entry == nullptr ? 0 : entry->tokens_before;
      result.decisions.push_back(DecideLoad(*options.cost_model, tier_state(t).cost, run[i].size_bytes, tokens, before));
    }
  }
  result.prefix_blocks = result.tier.size();
  result.load_blocks = result.prefix_blocks;
  for (std::size_t i = 0; i < result.decisions.size(); ++i) {
    if (!result.decisions[i].load) {
      result.load_blocks = i;
      break;
    }
  }
  return result;
}

Result<std::size_t> TieredStore::Impl::Get(std::span<const BlockKey> keys, std::span<const std::span<std::byte>> outs,
                                           TransitionType transition, std::span<std::size_t> sizes,
                                           std::span<uint64_t> checksums) {
  if (!options.metadata_only && outs.size() < keys.size()) {
    return Status::InvalidArgument("store: Get needs one buffer per key");
  }
  if (!sizes.empty() && sizes.size() < keys.size()) {
    return Status::InvalidArgument("store: Get needs one size slot per key");
  }
  if (!checksums.empty() && checksums.size() < keys.size()) {
    return Status::InvalidArgument("store: Get needs one checksum slot per key");
  }
  std::vector<PlannedRead> plan = PlanReads(keys);
  if (shared_tier >= 0 && plan.size() < keys.size()) {
    // As Lookup: the rest of the chain may be in the shared tier, put by another node.
    IndexSharedBlocks(keys, plan.size(), [&] { plan = PlanReadsLocked(keys); });
  }
  std::size_t read = 0;
  std::vector<BlockKey> from_below;               // promoted once the request has its bytes
  HeldPayloads held;                              // the bytes of those read from a networked tier
  std::vector<std::pair<int, BlockKey>> evict;  // copies found corrupt or lost, evicted after the reads
  std::vector<ReadHit> hits;                      // recorded together once the chain is read
  const std::vector<std::optional<ReadHit>> batched = ReadBatchedFromBelow(keys, outs, plan, evict);
  std::size_t prefetched_until = batched.size();  // those are read already: nothing to prefetch
  std::size_t replan_until = 0;  // blocks a prefetch may have brought up: look again, not as planned
  std::optional<BlockKey> previous;
  for (std::size_t i = 0; i < keys.size(); ++i) {
    const std::span<std::byte> out = options.metadata_only ? std::span<std::byte>() : outs[i];
    std::optional<ReadHit> hit = i < batched.size() ? batched[i] : std::nullopt;
    if (!hit) {
      const PlannedRead* planned = i < plan.size() && i >= replan_until ? &plan[i] : nullptr;
      KVTIER_ASSIGN_OR_RETURN(hit, ReadForGet(keys[i], i, previous, out, planned, evict));
    }
    if (!hit) break;
    if (!sizes.empty()) sizes[i] = hit->bytes;
    if (!checksums.empty()) checksums[i] = hit->checksum;
    hits.push_back(*hit);
    ++read;
    previous = keys[i];
    if (hit->tier == 0) continue;
    const bool from_network = (networked & (1u << hit->tier)) != 0;
    PromotionGate* const gate = promotion_gates[static_cast<std::size_t>(hit->tier)].get();
    const bool promote =
        options.promote_on_read && (gate == nullptr || gate->Admit(PromotionBreakEven(hit->tier, hit->bytes)));
    if (promote) from_below.push_back(keys[i]);
    if (promote && !options.metadata_only && !hit->gathered && from_network) {
      // A copy now costs less than reading the block over the network a second time.
      if (held.buffer.capacity() == 0) {
        // Room for the share of the blocks planned from below that the gates admit now: most
        // chains never regrow it, and a gate that admits 1/32 does not size it for all.
        double admitted_bytes = 0;
        for (const PlannedRead& p : plan) {
          if ((networked & (1u << p.tier)) == 0) continue;
          const PromotionGate* const planned_gate = promotion_gates[static_cast<std::size_t>(p.tier)].get();
          admitted_bytes += static_cast<double>(p.bytes) * (planned_gate != nullptr ? planned_gate->rate() : 1.0);
        }
        held.buffer.reserve(std::max(static_cast<std::size_t>(admitted_bytes), hit->bytes));
      }
      held.Add(keys[i], hit->tier, out.first(hit->bytes), hit->checksum);
    }
    // RoPE-aware prefetch: attention will want the blocks right after this one next; start
    // loading the window after it while this request goes on reading.
    if (options.prefetch && i + 1 > prefetched_until) {
      const std::size_t end = std::min(keys.size(), i + 1 + static_cast<std::size_t>(prefetch_window->window()));
      if (end > i + 1) {
        PromoteOrPrefetch(
            {keys.begin() + static_cast<std::ptrdiff_t>(i + 1), keys.begin() + static_cast<std::ptrdiff_t>(end)},
            /*prefetch=*/true);
      }
      prefetched_until = end;
      replan_until = end;
    }
  }
  read_counters.gets.fetch_add(1, std::memory_order_relaxed);
  read_counters.get_blocks.fetch_add(read, std::memory_order_relaxed);
  if (read < keys.size()) read_counters.get_misses.fetch_add(1, std::memory_order_relaxed);
  // No exclusive section: the policies learn of the hits, in the chain's order, from the next one.
  DeferHits(keys, hits, transition);
  // A tier drops a block whose checksum failed; the halves of a split one are dropped here.
  for (const auto& [t, key] : evict) EvictFrom(t, key);
  if (!from_below.empty()) {
    PromoteOrPrefetch(std::move(from_below), /*prefetch=*/false, std::move(held));
  }
  KickRebalances();
  return read;
}

double TieredStore::Impl::PromotionBreakEven(int t, std::size_t bytes) const {
  const double top = tier_state(0).cost.LoadSeconds(bytes);
  const double saved = tier_state(t).cost.LoadSeconds(bytes) - top;
  return saved > 0 ? top / saved : std::numeric_limits<double>::infinity();
}

std::vector<TieredStore::Impl::PlannedRead> TieredStore::Impl::PlanReads(std::span<const BlockKey> keys) const {
  std::shared_lock lock(mu_);
  return PlanReadsLocked(keys);
}

std::vector<TieredStore::Impl::PlannedRead> TieredStore::Impl::PlanReadsLocked(std::span<const BlockKey> keys) const {
  std::vector<PlannedRead> plan;
  const std::span<const PrefixIndex::RunPlacement> run = IndexedRunLocked(keys);
  plan.reserve(run.size());
  for (std::size_t i = 0; i < run.size(); ++i) {
    PlannedRead& read = plan.emplace_back();
    read.tier = FastestTier(run[i].tiers);
    read.bytes = run[i].size_bytes;
    BlockGuard guard(blocks, BlockGuard::Mode::kShared, keys[i]);
    if (const Block* entry = blocks.Find(keys[i]); entry != nullptr) {
      read.split = SplitIn(*entry, read.tier);
      read.placement = entry->placement;
    }
  }
  return plan;
}

std::vector<std::optional<TieredStore::Impl::ReadHit>> TieredStore::Impl::ReadBatchedFromBelow(
    std::span<const BlockKey> keys, std::span<const std::span<std::byte>> outs, std::span<const PlannedRead> plan,
    std::vector<std::pair<int, BlockKey>>& evict) {
  std::vector<std::optional<ReadHit>> hits;
  if (options.metadata_only || networked == 0) return hits;  // nothing to batch: no extra pass
  struct Planned {
    std::size_t i;
    int tier;
    uint32_t bytes;
  };
  std::vector<Planned> planned;
  for (std::size_t i = 0; i < plan.size() && outs[i].size() >= plan[i].bytes; ++i) {
    const int t = plan[i].tier;
    if (t > 0 && (networked & (1u << t)) && !plan[i].split) {
      planned.push_back({i, t, static_cast<uint32_t>(plan[i].bytes)});
    }
  }
  hits.resize(planned.empty() ? 0 : planned.back().i + 1);
  std::vector<uint64_t> checksums(planned.size());
  for (int t = 1; t <= last_tier(); ++t) {
    std::vector<Tier::ReadOp> ops;
    std::vector<std::size_t> which;  // into `planned`
    for (std::size_t p = 0; p < planned.size(); ++p) {
      if (planned[p].tier != t) continue;
      ops.push_back({keys[planned[p].i], outs[planned[p].i].first(planned[p].bytes), &checksums[p]});
      which.push_back(p);
    }
    if (ops.size() < 2) continue;  // one block: ReadForGet's own read is as fast
    const std::vector<Result<std::size_t>> done = tier_state(t).tier->ReadBatch(ops);
    for (std::size_t k = 0; k < ops.size(); ++k) {
      const Planned& p = planned[which[k]];
      if (done[k].ok() && *done[k] == p.bytes) {
        hits[p.i] = ReadHit{.tier = t, .bytes = p.bytes, .checksum = checksums[which[k]]};
      } else if (!done[k].ok() && done[k].status().code() == StatusCode::kCorruption) {
        ExclusiveLock lock(*this);
        ++stats.corrupt_blocks;
        DropCopyLocked(ops[k].key, t, evict);  // ReadForGet then reads the next copy
      }
      // Anything else (a miss, a move, a tier down) is ReadForGet's to sort out, one by one.
    }
  }
  return hits;
}

Result<std::optional<TieredStore::Impl::ReadHit>> TieredStore::Impl::ReadForGet(
    const BlockKey& key, std::size_t i, const std::optional<BlockKey>& previous, std::span<std::byte> out,
    const PlannedRead* planned, std::vector<std::pair<int, BlockKey>>& evict) {
  const std::optional<ReadHit> miss;
  for (int attempt = 0; attempt < kReadAttempts; ++attempt) {
    PlannedRead where;
    if (attempt == 0 && planned != nullptr) {
      where = *planned;
    } else {
      std::shared_lock lock(mu_);
      const std::optional<BlockInfo> info = index.Find(key);
      if (!info || info->meta.tiers == 0 || !ContinuesRun(*info, previous)) return miss;
      where.tier = FastestTier(info->meta.tiers);
      where.bytes = info->meta.size_bytes;
      BlockGuard guard(blocks, BlockGuard::Mode::kShared, key);
      if (const Block* entry = blocks.Find(key); entry != nullptr) {
        where.split = SplitIn(*entry, where.tier);
        where.placement = entry->placement;
      }
    }
    if (!options.metadata_only && out.size() < where.bytes) {
      return Status::InvalidArgument("store: the buffer for block " + std::to_string(i) + " holds " +
                                     std::to_string(out.size()) + " bytes, the block " + std::to_string(where.bytes));
    }
    const int t = where.tier;
    const std::size_t size = where.bytes;
    const uint64_t placement = where.placement;
    const std::optional<Block::Split>& split = where.split;
    uint64_t checksum = 0;
    const Status n = ReadGathered(key, t, split, options.metadata_only ? out : out.first(size), &checksum);
    if (n.ok()) {
      return std::optional<ReadHit>(
          ReadHit{.tier = t, .bytes = size, .checksum = checksum, .gathered = split.has_value()});
    }
    ExclusiveLock lock(*this);
    if (n.code() == StatusCode::kCorruption) {
      ++stats.corrupt_blocks;
      DropCopyLocked(key, t, evict);  // and try the next copy
    } else if (n.code() == StatusCode::kUnavailable) {
      return miss;  // its tier is down (a remote pool): a miss from here on, not an error
    } else if (n.code() != StatusCode::kNotFound) {
      return n.WithContext("store: reading block " + std::to_string(i));
    } else if (Block* entry = blocks.Find(key); entry != nullptr && !entry->moving && entry->placement == placement) {
      // Not found, and no move touched the block meanwhile: the tier lost it (a TTL, a
      // restart, another process). Forget that copy and try the next.
      ++stats.vanished_copies;
      DropCopyLocked(key, t, evict);
    }
    // Otherwise a move took it from that tier meanwhile; look again.
  }
  return miss;
}

void TieredStore::Impl::DeferHits(std::span<const BlockKey> keys, std::span<const ReadHit> hits,
                                  TransitionType transition) {
  if (hits.empty()) return;
  const double at = Now();
  bool full = false;
  {
    std::lock_guard lock(hits_mu_);
    for (std::size_t i = 0; i < hits.size(); ++i) {
      deferred_hits.push_back(
          {.key = keys[i], .tier = hits[i].tier, .transition = transition, .gathered = hits[i].gathered, .at = at});
    }
    hits_deferred.store(true, std::memory_order_release);
    full = deferred_hits.size() >= kMaxDeferredHits;
  }
  if (full) ExclusiveLock apply(*this);
}

void TieredStore::Impl::ApplyDeferredHitsLocked() {
  if (!hits_deferred.load(std::memory_order_acquire)) return;
  thread_local std::vector<DeferredHit> applying;  // keeps its capacity: no allocation per section
  applying.clear();
  {
    std::lock_guard lock(hits_mu_);
    applying.swap(deferred_hits);
    hits_deferred.store(false, std::memory_order_relaxed);
  }
  // The policies in the Gets' order, one hold of a policy shard per run of hits on a tier
  // (a chain's blocks are mostly read from one tier) and shard: not one per hit.
  thread_local std::vector<ShardedPolicy::Hit> run;
  for (std::size_t i = 0; i < applying.size();) {
    const int t = applying[i].tier;
    run.clear();
    for (; i < applying.size() && applying[i].tier == t; ++i) {
      run.push_back({.key = applying[i].key, .transition = applying[i].transition, .at = applying[i].at});
    }
    TierState& ts = tier_state(t);
    ts.accounts->hits.fetch_add(run.size(), std::memory_order_relaxed);
    ts.policy->TouchAll(run);
  }
  for (const DeferredHit& h : applying) {
    BlockGuard guard(blocks, BlockGuard::Mode::kExclusive, h.key);
    RecordHitLocked(h.key, h.tier, h.gathered, h.at);
  }
}

void TieredStore::Impl::RecordHitLocked(const BlockKey& key, int t, bool gathered, double at) {
  if (gathered) read_counters.head_split_reads.fetch_add(1, std::memory_order_relaxed);
  index.Touch({&key, 1}, static_cast<uint64_t>(at * 1e6));
  Block* entry = blocks.Find(key);
  if (entry != nullptr && entry->promoted_to >= t) SettlePromotionLocked(*entry, /*used=*/true);
  if (t == 0 && entry != nullptr && entry->prefetched) {
    entry->prefetched = false;
    read_counters.prefetch_used.fetch_add(1, std::memory_order_relaxed);
    prefetch_window->OnUsed(1);
  }
}

Status TieredStore::Impl::ReadGathered(const BlockKey& key, int t, const std::optional<Block::Split>& split,
                                       std::span<std::byte> out, uint64_t* checksum) {
  if (!split) return ReadFrom(t, key, out, checksum);
  if (options.metadata_only) return Status::Ok();
  const KvBlockLayout& layout = *options.head_layout;
  const HeadUnitMask upper = split->lower.Complement();
  std::vector<std::byte> part(std::max(split->upper_bytes, split->lower_bytes));
  KVTIER_RETURN_IF_ERROR(ReadFrom(t, key, std::span(part).first(split->upper_bytes)));
  KVTIER_RETURN_IF_ERROR(UnpackUnits(layout, std::span(part).first(split->upper_bytes), upper, out));
  KVTIER_RETURN_IF_ERROR(ReadFrom(split->lower_tier, PartKey(key), std::span(part).first(split->lower_bytes)));
  KVTIER_RETURN_IF_ERROR(UnpackUnits(layout, std::span(part).first(split->lower_bytes), split->lower, out));
  // The parts were checked against their own checksums; the whole block has none stored.
  if (checksum != nullptr) *checksum = PayloadChecksum(out);
  return Status::Ok();
}

}  // namespace kvtier
