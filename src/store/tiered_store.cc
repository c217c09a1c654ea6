// The tiered store (store.h): its options, Open, pins and stats. The public methods that do
// the work forward to the parts of TieredStore::Impl (store_state.h lists them).
#include <bit>
#include <chrono>
#include <new>


#include "store/store_state.h"

namespace kvtier {

Status StoreOptions::Validate() const {
  if (!(high_watermark > 0 && high_watermark <= 1)) {
    return Status::InvalidArgument("store: high_watermark must be in (0, 1]");
  }
  if (!(low_watermark > 0 && low_watermark < high_watermark)) {
    return Status::InvalidArgument("store: low_watermark must be in (0, high_watermark)");
  }
  if (!(drop_below_p_reuse >= 0 && drop_below_p_reuse <= 1)) {
    return Status::InvalidArgument("store: drop_below_p_reuse must be in [0, 1]");
  }
  KVTIER_RETURN_IF_ERROR(prefetch_window.Validate().WithContext("store: prefetch_window"));
  KVTIER_RETURN_IF_ERROR(promotion_gate.Validate().WithContext("store"));
  for (const TierCost& cost : tier_costs) KVTIER_RETURN_IF_ERROR(cost.Validate().WithContext("store: tier_costs"));
  if (mover_threads < 1 || mover_threads > 256) return Status::InvalidArgument("store: mover_threads must be 1 to 256");
  if (expected_blocks < 1) return Status::InvalidArgument("store: expected_blocks must be at least 1");
  const PrefixIndexOptions index_options{.expected_blocks = expected_blocks, .shards = index_shards};
  KVTIER_RETURN_IF_ERROR(index_options.Validate().WithContext("store"));
  if (max_queued_moves < 1) return Status::InvalidArgument("store: max_queued_moves must be at least 1");
  if (!(recompute_seconds_per_token >= 0)) {
    return Status::InvalidArgument("store: recompute_seconds_per_token must be >= 0");
  }
  if (head_layout) {
    KVTIER_RETURN_IF_ERROR(head_layout->Validate().WithContext("store: head_layout"));
    if (head_importance == nullptr) return Status::InvalidArgument("store: head_layout needs head_importance");
    if (!(head_demotion_fraction > 0 && head_demotion_fraction < 1)) {
      return Status::InvalidArgument("store: head_demotion_fraction must be in (0, 1)");
    }
  }
  if (persistence) {
    if (persistence->journal_path.empty()) return Status::InvalidArgument("store: persistence needs a journal_path");
    if (metadata_only) return Status::InvalidArgument("store: persistence needs payloads, not metadata_only");
    // A split block's parts live under derived keys the journal does not list.
    if (head_layout) return Status::InvalidArgument("store: persistence does not support head_layout yet");
  }
  KVTIER_RETURN_IF_ERROR(policy_options.Validate());
  return predictor.Validate();
}

Result<std::unique_ptr<TieredStore>> TieredStore::Open(std::vector<std::unique_ptr<Tier>> tiers, StoreOptions options) {
  KVTIER_RETURN_IF_ERROR(options.Validate());
  if (tiers.empty() || tiers.size() > static_cast<std::size_t>(kMaxTiers)) {
    return Status::InvalidArgument("store: needs 1 to " + std::to_string(kMaxTiers) + " tiers, got " +
                                   std::to_string(tiers.size()));
  }
  std::unique_ptr<Impl> impl;
  try {
    impl = std::make_unique<Impl>(
        PrefixIndexOptions{.expected_blocks = options.expected_blocks, .shards = options.index_shards});
  } catch (const std::bad_alloc&) {
    return Status::ResourceExhausted("store: no memory for an index of expected_blocks " +
                                     std::to_string(options.expected_blocks) +
                                     " (about 90 bytes each, allocated at Open); give a smaller expected_blocks");
  }
  KVTIER_ASSIGN_OR_RETURN(impl->predictor, ReusePredictor::Create(options.predictor));
  if (options.clock) {
    impl->clock = options.clock;
  } else {
    const auto start = std::chrono::steady_clock::now();
    impl->clock = [start] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(); };
  }
  if (!options.tier_costs.empty() && options.tier_costs.size() != tiers.size()) {
    return Status::InvalidArgument("store: tier_costs has " + std::to_string(options.tier_costs.size()) +
                                   " entries for " + std::to_string(tiers.size()) + " tiers");
  }
  KVTIER_ASSIGN_OR_RETURN(impl->prefetch_window, PrefetchWindow::Create(options.prefetch_window));
  if (options.persistence) {
    const std::size_t t = options.persistence->tier;
    if (t >= tiers.size()) {
      return Status::InvalidArgument("store: persistence.tier is " + std::to_string(t) + " but the store has " +
                                     std::to_string(tiers.size()) + " tiers");
    }
    if (tiers[t]->kind() != TierKind::kNvme && tiers[t]->kind() != TierKind::kParallelFs) {
      return Status::InvalidArgument("store: persistence.tier " + std::to_string(t) + " ('" + tiers[t]->name() +
                                     "') is a " + std::string(TierKindName(tiers[t]->kind())) +
                                     " tier, whose blocks do not survive a restart; use an nvme or parallel_fs tier");
    }
  }
  const PolicyOptions defaults;
  for (std::size_t t = 0; t < tiers.size(); ++t) {
    PolicyOptions po = options.policy_options;
    const TierCost cost = options.tier_costs.empty() ? DefaultTierCost(tiers[t]->kind()) : options.tier_costs[t];
    if (po.tier_bandwidth_bytes_per_s == defaults.tier_bandwidth_bytes_per_s) {
      po.tier_bandwidth_bytes_per_s = cost.bandwidth_bytes_per_s;
    }
    if (po.tier_latency_s == defaults.tier_latency_s) po.tier_latency_s = cost.latency_s;
    po.bayes_learn = t == 0;  // every access goes through the fastest tier's policy once
    Impl::TierState ts;
    KVTIER_ASSIGN_OR_RETURN(ts.policy, ShardedPolicy::Create(options.policy, po, impl->predictor));
    ts.capacity = tiers[t]->GetStats().capacity_bytes;
    ts.cost = cost;
    ts.name = tiers[t]->name();
    ts.kind = tiers[t]->kind();
    ts.tier = std::move(tiers[t]);
    impl->tiers.push_back(std::move(ts));
  }
  impl->options = std::move(options);
  KVTIER_RETURN_IF_ERROR(impl->FindSharedTier());
  impl->promotion_gates.resize(impl->tiers.size());
  for (int t = 1; t <= impl->last_tier(); ++t) {
    if ((impl->networked & (1u << t)) == 0) continue;
    KVTIER_ASSIGN_OR_RETURN(impl->promotion_gates[static_cast<std::size_t>(t)],
                            PromotionGate::Create(impl->options.promotion_gate));
  }
  if (impl->options.persistence) {
    impl->persist_tier = static_cast<int>(impl->options.persistence->tier);
    for (int t = impl->persist_tier; t <= impl->last_tier(); ++t) {
      const TierKind kind = impl->tier_state(t).kind;
      if (kind == TierKind::kNvme || kind == TierKind::kRemotePool || kind == TierKind::kParallelFs) {
        impl->durable |= static_cast<TierMask>(1u << t);
      }
    }
    KVTIER_RETURN_IF_ERROR(impl->Recover());
  }
  impl->EvictUnindexed();
  if (!impl->options.synchronous_moves) {
    impl->movers = std::make_unique<TaskPool>(impl->options.mover_threads, impl->options.max_queued_moves, "kvtier-mover");
  }
  impl->KickRebalances();  // recovered blocks may fill the persist tier past its watermark
  return std::unique_ptr<TieredStore>(new TieredStore(std::move(impl)));
}

TieredStore::TieredStore(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

TieredStore::~TieredStore() {
  Drain();
  impl_->movers.reset();
}

void TieredStore::Drain() { impl_->Drain(); }

Result<PutResult> TieredStore::Put(std::span<const BlockPut> blocks, const std::optional<BlockKey>& parent) {
  return impl_->Put(blocks, parent);
}

LookupResult TieredStore::Lookup(std::span<const BlockKey> keys) const { return impl_->Lookup(keys); }

Result<std::size_t> TieredStore::Get(std::span<const BlockKey> keys, std::span<const std::span<std::byte>> outs,
                                     TransitionType transition, std::span<std::size_t> sizes,
                                     std::span<uint64_t> checksums) {
  return impl_->Get(keys, outs, transition, sizes, checksums);
}

void TieredStore::Retag(std::span<const BlockTags> updates) {
  Impl& s = *impl_;
  Impl::ExclusiveLock lock(s);
  for (const BlockTags& u : updates) {
    Impl::Block* entry = s.blocks.Find(u.key);
    if (entry == nullptr || !s.index.SetTags(u.key, u.type, u.transition).ok()) continue;
    const std::optional<BlockInfo> info = s.index.Find(u.key);
    if (!info) continue;
    // Policies take a block's tags when it is admitted: re-admit it where it is resident.
    for (int t = 0; t <= s.last_tier(); ++t) {
      if ((info->meta.tiers & (1u << t)) == 0) continue;
      Impl::TierState& ts = s.tier_state(t);
      ts.policy->Remove(u.key, s.Now());
      ts.policy->Admit(s.Resident(u.key, info->meta, *entry), s.Now());
    }
    s.RefreshEvictableLocked(u.key);
  }
}

void TieredStore::Prefetch(std::span<const BlockKey> keys) {
  impl_->PromoteOrPrefetch({keys.begin(), keys.end()}, true);
}

Result<StorePin> TieredStore::Pin(std::span<const BlockKey> keys) {
  Impl& s = *impl_;
  std::vector<BlockKey> pinned;
  Impl::ExclusiveLock lock(s);
  const std::size_t run = s.IndexedRunLocked(keys).size();
  for (const BlockKey& key : keys.first(run)) {
    Impl::Block* entry = s.blocks.Find(key);
    if (entry == nullptr) break;
    ++entry->pins;
    s.RefreshEvictableLocked(key);
    pinned.push_back(key);
  }
  s.stats.pinned_blocks += pinned.size();
  return StorePin(this, std::move(pinned));
}

StoreExpectation TieredStore::Expect(std::span<const BlockKey> keys) {
  Impl& s = *impl_;
  Impl::ExclusiveLock lock(s);
  const uint64_t order = ++s.expect_sequence;
  // Orders only grow, so a block's soonest read changes only when this is its first.
  for (const BlockKey& key : keys) {
    if (s.expected.Add(key, order) == order) s.TellExpectedLocked(key, order);
  }
  return StoreExpectation(this, {keys.begin(), keys.end()}, order);
}

void TieredStore::Unexpect(std::span<const BlockKey> keys, uint64_t order) {
  Impl& s = *impl_;
  Impl::ExclusiveLock lock(s);
  for (const BlockKey& key : keys) {
    const bool was_soonest = s.expected.Soonest(key) == order;
    const std::optional<uint64_t> soonest = s.expected.Remove(key, order);
    if (was_soonest) s.TellExpectedLocked(key, soonest);
  }
}

void TieredStore::Unpin(std::span<const BlockKey> keys) {
  Impl& s = *impl_;
  {
    Impl::ExclusiveLock lock(s);
    for (const BlockKey& key : keys) {
      Impl::Block* entry = s.blocks.Find(key);
      if (entry == nullptr || entry->pins == 0) continue;
      --entry->pins;
      --s.stats.pinned_blocks;
      s.RefreshEvictableLocked(key);
    }
  }
  s.KickRebalances();  // pinned blocks may have held a tier over its watermark
}

Status TieredStore::Flush() { return impl_->Flush(); }

StoreStats TieredStore::GetStats() const {
  Impl& s = *impl_;
  const uint64_t journal_records = s.journal ? s.journal->records() : 0;
  std::vector<uint64_t> evict_failures;  // the tiers' own counters, read without `mu_`
  for (const Impl::TierState& ts : s.tiers) evict_failures.push_back(ts.tier->GetStats().evict_failures);
  if (s.hits_deferred.load(std::memory_order_acquire)) Impl::ExclusiveLock apply(s);  // into the tiers' hit counts
  std::shared_lock lock(s.mu_);
  StoreStats out = s.stats;
  out.puts = s.write_counters.puts.load(std::memory_order_relaxed);
  out.prefetch_issued = s.write_counters.prefetch_issued.load(std::memory_order_relaxed);
  out.prefetch_wasted = s.write_counters.prefetch_wasted.load(std::memory_order_relaxed);
  out.prefetch_wasted_bytes = s.write_counters.prefetch_wasted_bytes.load(std::memory_order_relaxed);
  out.head_splits = s.write_counters.head_splits.load(std::memory_order_relaxed);
  out.head_importance_assumed = s.write_counters.head_importance_assumed.load(std::memory_order_relaxed);
  out.head_split_reads = s.read_counters.head_split_reads.load(std::memory_order_relaxed);
  out.prefetch_used = s.read_counters.prefetch_used.load(std::memory_order_relaxed);
  out.put_blocks = s.write_counters.put_blocks.load(std::memory_order_relaxed);
  out.gets = s.read_counters.gets.load(std::memory_order_relaxed);
  out.get_blocks = s.read_counters.get_blocks.load(std::memory_order_relaxed);
  out.get_misses = s.read_counters.get_misses.load(std::memory_order_relaxed);
  out.lookups = s.read_counters.lookups.load(std::memory_order_relaxed);
  out.lookup_blocks = s.read_counters.lookup_blocks.load(std::memory_order_relaxed);
  out.lookup_hit_blocks = s.read_counters.lookup_hit_blocks.load(std::memory_order_relaxed);
  out.recompute_preferred = s.read_counters.recompute_preferred.load(std::memory_order_relaxed);
  out.journal_records = journal_records;
  out.metadata_lock = s.mu_.Profile();
  for (const Impl::TierState& ts : s.tiers) {
    const Impl::TierState::Accounts& a = *ts.accounts;
    StoreTierStats t{.name = ts.name,
                     .kind = ts.kind,
                     .used_bytes = a.used.load(std::memory_order_relaxed),
                     .blocks = a.blocks.load(std::memory_order_relaxed),
                     .hits = a.hits.load(std::memory_order_relaxed),
                     .promotions = a.promotions.load(std::memory_order_relaxed),
                     .demotions = a.demotions.load(std::memory_order_relaxed),
                     .drops = a.drops.load(std::memory_order_relaxed),
                     .refused = a.refused.load(std::memory_order_relaxed),
                     .shard_locks = ts.policy->ShardProfiles(),
                     .lock = ts.policy->Profile()};
    t.evict_failures = evict_failures[out.tiers.size()];
    t.capacity_bytes = ts.capacity;
    if (const PromotionGate* gate = s.promotion_gates[out.tiers.size()].get()) {
      const PromotionGateCounters gated = gate->counters();
      t.promotions_declined = gated.declined;
      t.promotions_used = gated.used;
      t.promotions_wasted = gated.wasted;
      t.promotion_rate = gated.rate;
    }
    out.tiers.push_back(t);
  }
  out.prefetch_window = s.prefetch_window->window();
  out.queued_moves = s.movers ? s.movers->queued() : 0;
  const PrefixIndex::Stats index_stats = s.index.GetStats();
  out.index_blocks = index_stats.blocks;
  out.index_lock = index_stats.lock;
  out.index_shard_locks = index_stats.shard_locks;
  out.expected_blocks = s.expected.size();
  std::lock_guard pending(s.pending_mu_);
  for (const auto& [key, tiers] : s.pending_evictions) out.pending_evictions += static_cast<uint64_t>(std::popcount(tiers));
  return out;
}

std::string TieredStore::PredictorJson() const { return impl_->predictor->ToJson(); }
const ReusePredictor& TieredStore::predictor() const { return *impl_->predictor; }
std::size_t TieredStore::tier_count() const { return impl_->tiers.size(); }
Tier& TieredStore::tier(std::size_t i) { return *impl_->tiers[i].tier; }

StorePin::StorePin(StorePin&& other) noexcept
    : store_(std::exchange(other.store_, nullptr)), keys_(std::move(other.keys_)) {}

StorePin& StorePin::operator=(StorePin&& other) noexcept {
  if (this != &other) {
    Release();
    store_ = std::exchange(other.store_, nullptr);
    keys_ = std::move(other.keys_);
  }
  return *this;
}

StorePin::~StorePin() { Release(); }

void StorePin::Release() {
  if (store_ != nullptr && !keys_.empty()) store_->Unpin(keys_);
  store_ = nullptr;
  keys_.clear();
}

StoreExpectation::StoreExpectation(StoreExpectation&& other) noexcept
    : store_(std::exchange(other.store_, nullptr)), keys_(std::move(other.keys_)), order_(other.order_) {}

StoreExpectation& StoreExpectation::operator=(StoreExpectation&& other) noexcept {
  if (this != &other) {
    Release();
    store_ = std::exchange(other.store_, nullptr);
    keys_ = std::move(other.keys_);
    order_ = other.order_;
  }
  return *this;
}

StoreExpectation::~StoreExpectation() { Release(); }

void StoreExpectation::Release() {
  if (store_ != nullptr && !keys_.empty()) store_->Unexpect(keys_, order_);
  store_ = nullptr;
  keys_.clear();
}

}  // namespace kvtier
