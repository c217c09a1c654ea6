// The tiered store (store.h). Structure: the prefix index (prefix_index.h) holds the tree of
// blocks, their sizes, tags and tier masks; `blocks_` beside it holds what only the store
// needs (pins, moves in flight, prefetch marks, recompute cost). Both change only under
// `mu_`, so they always agree; the index's own lock is then uncontended. With persistence,
// the block journal (block_journal.h) has its own lock and is never called under `mu_`.
#include "kvtier/store.h"

#include <algorithm>
#include <atomic>
#include <bit>
#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <mutex>
#include <unordered_map>

#include "kvtier/prefix_index.h"
#include "store/block_journal.h"
#include "store/expected_reads.h"
#include "util/task_pool.h"

namespace kvtier {
namespace {

constexpr std::size_t kDemotionBatch = 16;  // victims moved per batch
constexpr uint32_t kReclaimBlocks = 8;     // blocks' worth a full tier frees past its watermark
constexpr int kReadAttempts = 4;            // a read racing a move retries at the new place
// Recovery verifies journaled blocks this many (or this many bytes) per ReadBatch.
constexpr std::size_t kRecoveryBatch = 64;
constexpr std::size_t kRecoveryBatchBytes = 64u << 20;

}  // namespace

Status StoreOptions::Validate() const {
  if (!(high_watermark > 0 && high_watermark <= 1)) return Status::InvalidArgument("store: high_watermark must be in (0, 1]");
  if (!(low_watermark > 0 && low_watermark < high_watermark)) {
    return Status::InvalidArgument("store: low_watermark must be in (0, high_watermark)");
  }
  if (!(drop_below_p_reuse >= 0 && drop_below_p_reuse <= 1)) {
    return Status::InvalidArgument("store: drop_below_p_reuse must be in [0, 1]");
  }
  KVTIER_RETURN_IF_ERROR(prefetch_window.Validate().WithContext("store: prefetch_window"));
  for (const TierCost& cost : tier_costs) KVTIER_RETURN_IF_ERROR(cost.Validate().WithContext("store: tier_costs"));
  if (mover_threads < 1 || mover_threads > 256) return Status::InvalidArgument("store: mover_threads must be 1 to 256");
  if (max_queued_moves < 1) return Status::InvalidArgument("store: max_queued_moves must be at least 1");
  if (!(recompute_seconds_per_token >= 0)) return Status::InvalidArgument("store: recompute_seconds_per_token must be >= 0");
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

struct TieredStore::Impl {
  struct Block {
    uint32_t tokens = 0;
    uint64_t tokens_before = 0;  // in the chain before this block (its attention context)
    double recompute_s = 0;
    uint32_t pins = 0;
    bool moving = false;      // a mover holds it: not a victim, not moved again
    bool prefetched = false;  // brought up by prefetch and not used since
    // Head-granular: the copy in `upper_tier` holds only the units not in `lower`, packed;
    // the `lower` units are packed under PartKey(key) in `lower_tier`.
    struct Split {
      int upper_tier = 0;
      int lower_tier = 0;
      HeadUnitMask lower;
      uint32_t upper_bytes = 0;
      uint32_t lower_bytes = 0;
    };
    std::optional<Split> split;
  };
  struct TierState {
    std::unique_ptr<Tier> tier;
    std::unique_ptr<EvictionPolicy> policy;
    uint64_t capacity = 0;  // 0: unbounded, never demoted from
    TierCost cost;
    uint64_t used = 0;      // bytes of blocks the store placed here
    uint64_t blocks = 0;
    bool rebalance_queued = false;
    StoreTierStats stats;
  };

  StoreOptions options;
  std::shared_ptr<ReusePredictor> predictor;
  std::function<double()> clock;

  mutable std::mutex mu_;
  PrefixIndex index;                                       // mutated only under mu_
  std::unordered_map<BlockKey, Block, BlockKeyHash> blocks;  // GUARDED_BY(mu_)
  std::vector<TierState> tiers;                            // GUARDED_BY(mu_) except `tier`
  StoreStats stats;                                        // GUARDED_BY(mu_): the store-wide counters
  std::unique_ptr<PrefetchWindow> prefetch_window;         // thread-safe itself
  store_internal::ExpectedReads expected;                  // GUARDED_BY(mu_)
  uint64_t expect_sequence = 0;                            // GUARDED_BY(mu_): the last Expect's order

  // Persistence: the persist tier's index (-1 without) and the journal (thread-safe itself,
  // called with `mu_` released). Both set in Open.
  int persist_tier = -1;
  std::unique_ptr<BlockJournal> journal;

  std::unique_ptr<TaskPool> movers;
  std::mutex flight_mu_;
  std::condition_variable flight_cv_;
  uint64_t in_flight = 0;  // GUARDED_BY(flight_mu_): moves queued or running

  double Now() const { return clock(); }
  int last_tier() const { return static_cast<int>(tiers.size()) - 1; }
  bool write_through() const {
    return journal != nullptr && options.persistence->mode == PersistenceOptions::PersistMode::kWriteThrough;
  }

  double RecomputeSeconds(double given, uint32_t tokens, uint64_t tokens_before) const {
    if (given > 0) return given;
    if (options.cost_model) return options.cost_model->RecomputeSeconds(tokens, tokens_before);
    return tokens * options.recompute_seconds_per_token;
  }

  static int FastestTier(TierMask mask) { return mask == 0 ? -1 : std::countr_zero(static_cast<unsigned>(mask)); }

  // Where a split block's demoted head units are stored (never a real block's key: chained
  // keys are hashes, and this flips fixed bits of one).
  static BlockKey PartKey(const BlockKey& key) { return {key.hi ^ 0x6865616470617274ull, key.lo ^ 1}; }

  // The split of `b`'s copy in tier `t`, when that copy is split.
  static std::optional<Block::Split> SplitIn(const Block& b, int t) {
    return b.split && b.split->upper_tier == t ? b.split : std::nullopt;
  }

  // The bytes tier `t` holds of a block of `full` bytes.
  static uint32_t BytesIn(const Block& b, int t, uint32_t full) {
    return b.split && b.split->upper_tier == t ? b.split->upper_bytes : full;
  }

  // Forgets a block's split: its lower part's bytes leave the lower tier's accounting, and
  // the part's (tier, key) is returned for the caller to evict once `mu_` is released.
  std::pair<int, BlockKey> ForgetSplitLocked(const BlockKey& key, Block& b) {
    const Block::Split split = *b.split;
    TierState& lower = tiers[static_cast<std::size_t>(split.lower_tier)];
    lower.used -= std::min<uint64_t>(lower.used, split.lower_bytes);
    b.split.reset();
    return {split.lower_tier, PartKey(key)};
  }

  bool SplittableLocked(const BlockMeta& meta, const Block& b, int t, TierMask below) const {
    return options.head_layout && t < last_tier() && !b.split && below == 0 &&
           meta.size_bytes == options.head_layout->block_bytes();
  }

  ResidentBlock Resident(const BlockKey& key, const BlockMeta& meta, const Block& b) const {
    return {.key = key,
            .bytes = meta.size_bytes,
            .tokens = b.tokens,
            .type = meta.type,
            .transition = meta.transition,
            .recompute_seconds = b.recompute_s,
            .expected_order = expected.Soonest(key)};
  }

  // Whether `key` may leave tier `t` now: unpinned, not moving, and (in the last tier, where
  // leaving means a drop) a leaf.
  bool EvictableLocked(const BlockInfo& info, const Block& b, int t) const {
    if (b.pins > 0 || b.moving) return false;
    return t < last_tier() || info.children == 0;
  }

  void RefreshEvictableLocked(const BlockKey& key) {
    const std::optional<BlockInfo> info = index.Find(key);
    auto it = blocks.find(key);
    if (!info || it == blocks.end()) return;
    for (int t = 0; t <= last_tier(); ++t) {
      if (info->meta.tiers & (1u << t)) {
        tiers[static_cast<std::size_t>(t)].policy->SetEvictable(key, EvictableLocked(*info, it->second, t));
      }
    }
  }

  void AddToTierLocked(const BlockKey& key, int t, const BlockMeta& meta, const Block& b) {
    TierState& ts = tiers[static_cast<std::size_t>(t)];
    (void)index.SetTier(key, t, true);
    ts.used += meta.size_bytes;
    ++ts.blocks;
    ts.policy->Admit(Resident(key, meta, b), Now());
  }

  // Tells the policies of every tier holding `key` when a queued request reads it next.
  void TellExpectedLocked(const BlockKey& key, std::optional<uint64_t> order) {
    const std::optional<BlockInfo> info = index.Find(key);
    if (!info) return;
    for (int t = 0; t <= last_tier(); ++t) {
      if (info->meta.tiers & (1u << t)) tiers[static_cast<std::size_t>(t)].policy->Expect(key, order);
    }
  }

  void RemoveFromTierLocked(const BlockKey& key, int t, uint32_t bytes) {
    TierState& ts = tiers[static_cast<std::size_t>(t)];
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

  // Forgets a block held by no tier: out of the index (it is a leaf) and the table; its
  // parent may have become a leaf.
  void ForgetLocked(const BlockKey& key) {
    const std::optional<BlockInfo> info = index.Find(key);
    if (!info || info->meta.tiers != 0 || info->children != 0) return;
    if (!index.Evict(key).ok()) return;
    blocks.erase(key);
    if (info->parent) RefreshEvictableLocked(*info->parent);
  }

  bool OverHighWatermarkLocked(int t) const {
    const TierState& ts = tiers[static_cast<std::size_t>(t)];
    return ts.capacity > 0 && static_cast<double>(ts.used) > options.high_watermark * static_cast<double>(ts.capacity);
  }

  // --- Moves -------------------------------------------------------------------------
  void Schedule(std::function<void()> move) {
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

  // Starts a rebalance of every tier over its high watermark that has none running. Called
  // with `mu_` released: scheduling may wait for room in the movers' queue.
  void KickRebalances() {
    std::vector<int> due;
    {
      std::lock_guard lock(mu_);
      for (int t = 0; t <= last_tier(); ++t) {
        TierState& ts = tiers[static_cast<std::size_t>(t)];
        if (OverHighWatermarkLocked(t) && !ts.rebalance_queued) {
          ts.rebalance_queued = true;
          due.push_back(t);
        }
      }
    }
    for (int t : due) Schedule([this, t] { Rebalance(t, 0); });
  }

  // --- I/O, or its accounting in a metadata-only store ---------------------------------
  Status WriteTo(int t, const BlockKey& key, std::span<const std::byte> payload, uint32_t bytes) {
    TierState& ts = tiers[static_cast<std::size_t>(t)];
    if (t == persist_tier) KVTIER_RETURN_IF_ERROR(JournalPuts({&key, 1}));
    if (!options.metadata_only) return ts.tier->Write(key, payload);
    std::lock_guard lock(mu_);
    if (ts.capacity > 0 && ts.used + bytes > ts.capacity) return Status::ResourceExhausted(ts.stats.name + " is full");
    return Status::Ok();
  }
  // Reads exactly out.size() bytes: a block of another size was rewritten meanwhile (a head
  // split), which the caller sees as NotFound and retries against the store's new record.
  Status ReadFrom(int t, const BlockKey& key, std::span<std::byte> out) {
    if (options.metadata_only) return Status::Ok();
    KVTIER_ASSIGN_OR_RETURN(std::size_t n, tiers[static_cast<std::size_t>(t)].tier->Read(key, out));
    if (n != out.size()) return Status::NotFound("block " + key.ToHex() + " changed while it was read");
    return Status::Ok();
  }
  void EvictFrom(int t, const BlockKey& key) {
    if (!options.metadata_only) (void)tiers[static_cast<std::size_t>(t)].tier->Evict(key);
    // After the eviction: a crash between the two leaves a put record whose block recovery
    // does not find (dropped then), never a block in the tier that no record lists.
    if (t == persist_tier) {
      const JournalRecord drop{.kind = JournalRecord::Kind::kDrop, .key = key};
      (void)journal->Append({&drop, 1}, /*durable=*/false);  // at worst recovery finds the block gone
    }
  }

  // --- Persistence ---------------------------------------------------------------------
  // Journals blocks about to be written into the persist tier, before the write: a crash
  // between the two leaves a record whose block recovery does not find (and drops), never a
  // block in the tier that no record lists. NotFound when a block left the store meanwhile.
  Status JournalPuts(std::span<const BlockKey> keys) {
    std::vector<JournalRecord> records;
    {
      std::lock_guard lock(mu_);
      for (const BlockKey& key : keys) {
        const std::optional<BlockInfo> info = index.Find(key);
        auto it = blocks.find(key);
        if (!info || it == blocks.end()) return Status::NotFound("store: block " + key.ToHex() + " left the store");
        records.push_back({.kind = JournalRecord::Kind::kPut,
                           .key = key,
                           .parent = info->parent,
                           .tokens = it->second.tokens,
                           .bytes = info->meta.size_bytes,
                           .type = info->meta.type,
                           .transition = info->meta.transition,
                           .recompute_seconds = it->second.recompute_s});
      }
    }
    return journal->Append(records, /*durable=*/true);
  }

  // Writes a new block into the persist tier (journaled by WriteTo), making room there the
  // way Place does. The persist tier's policy is not asked to admit it: it only picks victims.
  Status Persist(const BlockKey& key, std::span<const std::byte> payload, uint32_t bytes) {
    return WriteMakingRoom(persist_tier, key, payload, bytes);
  }

  // Writes into tier `t`, making room when it is full: demotion down to its watermark first,
  // then, when its accounting has room for the block and the tier still refuses it (its free
  // space lies in slots of other sizes), a few blocks' worth more. A tier full of pinned
  // blocks is left alone: moving other blocks out would not make room.
  Status WriteMakingRoom(int t, const BlockKey& key, std::span<const std::byte> payload, uint32_t bytes) {
    const TierState& ts = tiers[static_cast<std::size_t>(t)];
    Status s = WriteTo(t, key, payload, bytes);
    if (s.code() != StatusCode::kResourceExhausted || ts.capacity == 0) return s;
    Rebalance(t, bytes);
    s = WriteTo(t, key, payload, bytes);
    if (s.code() != StatusCode::kResourceExhausted) return s;
    {
      std::lock_guard lock(mu_);
      if (ts.used + bytes > ts.capacity) return s;
    }
    Rebalance(t, bytes, uint64_t{kReclaimBlocks} * bytes);
    return WriteTo(t, key, payload, bytes);
  }

  // Flush: copies one stored block into the persist tier unless it is there already.
  // `buffer` is reused between calls.
  Status CopyToPersistTier(const BlockKey& key, std::vector<std::byte>& buffer) {
    int from = -1;
    BlockMeta meta;
    {
      std::lock_guard lock(mu_);
      const std::optional<BlockInfo> info = index.Find(key);
      auto it = blocks.find(key);
      if (!info || it == blocks.end() || info->meta.tiers == 0 || (info->meta.tiers & (1u << persist_tier))) {
        return Status::Ok();  // dropped meanwhile, or persisted already
      }
      if (it->second.moving) return Status::Unavailable("store: block " + key.ToHex() + " was moving; Flush again");
      from = FastestTier(info->meta.tiers);
      meta = info->meta;
      it->second.moving = true;  // stays where it is until it is copied
      RefreshEvictableLocked(key);
    }
    buffer.resize(meta.size_bytes);
    Status s = ReadFrom(from, key, buffer);
    if (s.ok()) s = Persist(key, buffer, meta.size_bytes);
    std::lock_guard lock(mu_);
    auto it = blocks.find(key);
    if (it == blocks.end()) return s;
    it->second.moving = false;
    if (s.ok()) AddToTierLocked(key, persist_tier, meta, it->second);
    RefreshEvictableLocked(key);
    return s.WithContext("store: flushing block " + key.ToHex());
  }

  // Open: indexes the blocks the journal lists that the persist tier still holds intact,
  // parents first, then compacts the journal to them.
  Status Recover() {
    const PersistenceOptions& po = *options.persistence;
    Tier& tier = *tiers[static_cast<std::size_t>(persist_tier)].tier;
    std::vector<JournalRecord> live;  // the last record of each key, when it is a put
    uint64_t ignored_bytes = 0;
    if (Result<BlockJournal::Contents> read = BlockJournal::Read(po.journal_path); read.ok()) {
      ignored_bytes = read->ignored_bytes;
      std::unordered_map<BlockKey, std::size_t, BlockKeyHash> last;
      for (std::size_t i = 0; i < read->records.size(); ++i) last[read->records[i].key] = i;
      for (std::size_t i = 0; i < read->records.size(); ++i) {
        const JournalRecord& r = read->records[i];
        if (last[r.key] == i && r.kind == JournalRecord::Kind::kPut) live.push_back(r);
      }
    } else if (read.status().code() != StatusCode::kNotFound) {
      return read.status().WithContext("store: persistence");
    }
    // Parents first: walk up from each block to the first one already ordered. A parent
    // the journal does not list (or a cycle, which only a forged journal holds) fails below.
    std::unordered_map<BlockKey, std::size_t, BlockKeyHash> by_key;
    for (std::size_t i = 0; i < live.size(); ++i) by_key[live[i].key] = i;
    std::vector<std::size_t> order;
    std::vector<bool> visited(live.size());
    for (std::size_t i = 0; i < live.size(); ++i) {
      std::vector<std::size_t> up;
      for (std::size_t j = i; !visited[j];) {
        visited[j] = true;
        up.push_back(j);
        auto parent = live[j].parent ? by_key.find(*live[j].parent) : by_key.end();
        if (parent == by_key.end()) break;
        j = parent->second;
      }
      order.insert(order.end(), up.rbegin(), up.rend());
    }
    // Present at the journaled size and, with verify_checksums, read back intact.
    std::vector<bool> intact(live.size());
    for (std::size_t i : order) intact[i] = tier.Size(live[i].key) == live[i].bytes;
    if (po.verify_checksums) {
      std::vector<std::byte> buffer;
      std::vector<Tier::ReadOp> ops;
      std::vector<std::size_t> batch;
      auto verify = [&] {
        std::size_t at = 0;
        for (std::size_t k = 0; k < batch.size(); ++k) {
          ops.push_back({live[batch[k]].key, std::span(buffer).subspan(at, live[batch[k]].bytes)});
          at += live[batch[k]].bytes;
        }
        const std::vector<Result<std::size_t>> got = tier.ReadBatch(ops);
        for (std::size_t k = 0; k < batch.size(); ++k) intact[batch[k]] = got[k].ok() && *got[k] == ops[k].out.size();
        ops.clear();
        batch.clear();
      };
      std::size_t batch_bytes = 0;
      for (std::size_t i : order) {
        if (!intact[i]) continue;
        if (!batch.empty() && (batch.size() == kRecoveryBatch || batch_bytes + live[i].bytes > kRecoveryBatchBytes)) {
          verify();
          batch_bytes = 0;
        }
        batch.push_back(i);
        batch_bytes += live[i].bytes;
        if (buffer.size() < batch_bytes) buffer.resize(batch_bytes);
      }
      if (!batch.empty()) verify();
    }
    std::vector<JournalRecord> recovered;
    {
      std::lock_guard lock(mu_);
      for (std::size_t i : order) {
        const JournalRecord& r = live[i];
        if (!intact[i] || (r.parent && !blocks.contains(*r.parent))) {
          intact[i] = false;
          continue;
        }
        const BlockMeta meta{.size_bytes = r.bytes, .type = r.type, .transition = r.transition};
        uint64_t tokens_before = 0;
        if (r.parent) tokens_before = blocks[*r.parent].tokens_before + blocks[*r.parent].tokens;
        if (!index.Insert({&r.key, 1}, {&meta, 1}, static_cast<uint64_t>(Now() * 1e6), r.parent).ok()) {
          intact[i] = false;  // listed twice under different parents: only a forged journal does that
          continue;
        }
        const Block b{.tokens = r.tokens,
                      .tokens_before = tokens_before,
                      .recompute_s = RecomputeSeconds(r.recompute_seconds, r.tokens, tokens_before)};
        blocks[r.key] = b;
        AddToTierLocked(r.key, persist_tier, meta, b);
        if (r.parent) RefreshEvictableLocked(*r.parent);
        RefreshEvictableLocked(r.key);
        recovered.push_back(r);
      }
      stats.journal_ignored_bytes = ignored_bytes;
      stats.recovered_blocks = recovered.size();
      stats.recovery_dropped_blocks = live.size() - recovered.size();
    }
    // What was not recovered leaves the tier too (a block whose parent was dropped is of no use).
    for (std::size_t i = 0; i < live.size(); ++i) {
      if (!intact[i]) (void)tier.Evict(live[i].key);
    }
    Result<std::unique_ptr<BlockJournal>> compacted = BlockJournal::Create(po.journal_path, recovered, po.sync);
    if (compacted.ok()) {
      journal = std::move(*compacted);
      return Status::Ok();
    }
    // No room for the compacted copy (a full disk): a store that serves what it recovered
    // beats one that does not start, so go on with the journal as it is. Its records of the
    // blocks just dropped are harmless: the next recovery finds them gone from the tier.
    std::error_code ignored;
    std::filesystem::remove(po.journal_path + ".tmp", ignored);
    if (!std::filesystem::exists(po.journal_path)) return compacted.status();
    Result<std::unique_ptr<BlockJournal>> existing = BlockJournal::OpenExisting(po.journal_path, po.sync);
    if (!existing.ok()) return compacted.status();
    journal = std::move(*existing);
    return Status::Ok();
  }

  // Moves victims out of tier `t` until it is under its low watermark and `need` more bytes
  // fit (a Put waiting for room passes its block's size), and at least `force_bytes` have
  // been planned out whatever the watermark says (free space stranded in other size classes).
  void Rebalance(int t, uint64_t need, uint64_t force_bytes = 0) {
    for (;;) {
      struct Victim {
        BlockKey key;
        BlockMeta meta;
        enum class Action { kLeave, kDrop, kDemote, kSplit } action;
        HeadUnitMask lower;  // kSplit: the units that go down
        std::optional<Block::Split> split;  // kDemote: its copy here is split, to be gathered
      };
      std::vector<Victim> batch;
      {
        std::lock_guard lock(mu_);
        TierState& ts = tiers[static_cast<std::size_t>(t)];
        const double target = options.low_watermark * static_cast<double>(ts.capacity);
        uint64_t planned = 0;
        while (batch.size() < kDemotionBatch) {
          const uint64_t remaining = ts.used - std::min(ts.used, planned);
          if (ts.capacity == 0 ||
              (planned >= force_bytes && static_cast<double>(remaining) <= target && remaining + need <= ts.capacity)) {
            break;
          }
          const std::optional<BlockKey> victim = ts.policy->Victim();
          if (!victim) break;
          const std::optional<BlockInfo> info = index.Find(*victim);
          auto it = blocks.find(*victim);
          if (!info || it == blocks.end()) {  // cannot happen; keep the policy consistent
            ts.policy->Remove(*victim, Now());
            continue;
          }
          it->second.moving = true;
          RefreshEvictableLocked(*victim);
          Victim v{*victim, info->meta, Victim::Action::kDemote, {}, SplitIn(it->second, t)};
          const TierMask below = static_cast<TierMask>(info->meta.tiers & ~((2u << t) - 1));
          if (SplittableLocked(info->meta, it->second, t, below)) {
            const uint64_t bytes = static_cast<uint64_t>(options.head_demotion_fraction * info->meta.size_bytes);
            Result<HeadSelection> plan = options.head_importance->PlanDemotion(*options.head_layout, bytes);
            if (plan.ok() && !plan->units.None() && plan->units.Count() < options.head_layout->unit_count()) {
              v.action = Victim::Action::kSplit;
              v.lower = plan->units;
              stats.head_importance_assumed = plan->assumed_importance;
            }
          }
          if (v.action == Victim::Action::kSplit) {
            // decided above
          } else if (below != 0) {
            v.action = Victim::Action::kLeave;  // a copy below already: write-back costs nothing
          } else if (t == last_tier() ||
                     (options.policy == PolicyKind::kBayes && info->children == 0 &&
                      predictor->PReuse(info->meta.type, info->meta.transition) < options.drop_below_p_reuse)) {
            v.action = info->children == 0 ? Victim::Action::kDrop : Victim::Action::kDemote;
          }
          if (v.action == Victim::Action::kDemote && t == last_tier()) {
            it->second.moving = false;  // an interior block of the last tier: nowhere to go
            RefreshEvictableLocked(*victim);
            break;
          }
          planned += v.action == Victim::Action::kSplit ? options.head_layout->PackedBytes(v.lower)
                                                        : BytesIn(it->second, t, info->meta.size_bytes);
          batch.push_back(std::move(v));
        }
        if (batch.empty()) {
          ts.rebalance_queued = false;
          return;
        }
        force_bytes -= std::min(force_bytes, planned);
      }
      // Demotions: read the victims here, write them below (I/O outside the lock).
      std::vector<std::vector<std::byte>> payloads(batch.size());
      std::vector<Status> moved(batch.size());
      std::vector<Tier::ReadOp> reads;
      std::vector<std::size_t> read_index;
      for (std::size_t i = 0; i < batch.size(); ++i) {
        if (batch[i].action == Victim::Action::kSplit) {
          Result<bool> split = SplitOut(batch[i].key, batch[i].meta, batch[i].lower, t);
          moved[i] = split.status();
          if (split.ok() && !*split) batch[i].action = Victim::Action::kDemote;  // it went down whole
          continue;
        }
        if (batch[i].action != Victim::Action::kDemote) continue;
        if (batch[i].split) {  // gather the parts, then move the whole block down
          payloads[i].resize(batch[i].meta.size_bytes);
          moved[i] = ReadGathered(batch[i].key, t, batch[i].split, payloads[i]);
          if (moved[i].ok()) moved[i] = WriteTo(t + 1, batch[i].key, payloads[i], batch[i].meta.size_bytes);
          continue;
        }
        if (options.metadata_only) {
          moved[i] = WriteTo(t + 1, batch[i].key, {}, batch[i].meta.size_bytes);
          if (moved[i].code() == StatusCode::kResourceExhausted) {
            Rebalance(t + 1, batch[i].meta.size_bytes);
            moved[i] = WriteTo(t + 1, batch[i].key, {}, batch[i].meta.size_bytes);
          }
          continue;
        }
        payloads[i].resize(batch[i].meta.size_bytes);
        reads.push_back({batch[i].key, payloads[i]});
        read_index.push_back(i);
      }
      if (!reads.empty()) {
        const std::vector<Result<std::size_t>> got = tiers[static_cast<std::size_t>(t)].tier->ReadBatch(reads);
        for (std::size_t k = 0; k < got.size(); ++k) {
          moved[read_index[k]] = !got[k].ok() ? got[k].status()
                                 : *got[k] == reads[k].out.size() ? Status::Ok()
                                                                   : Status::NotFound("block changed while read");
        }
        std::vector<Tier::WriteOp> writes;
        std::vector<std::size_t> write_index;
        for (std::size_t i : read_index) {
          if (!moved[i].ok()) continue;
          writes.push_back({batch[i].key, payloads[i]});
          write_index.push_back(i);
        }
        if (!writes.empty()) {
          std::vector<Status> written;
          Status journaled = Status::Ok();
          if (t + 1 == persist_tier) {
            std::vector<BlockKey> keys;
            for (const Tier::WriteOp& w : writes) keys.push_back(w.key);
            journaled = JournalPuts(keys);
          }
          if (journaled.ok()) {
            written = tiers[static_cast<std::size_t>(t + 1)].tier->WriteBatch(writes);
          } else {
            written.assign(writes.size(), journaled);
          }
          for (std::size_t k = 0; k < written.size(); ++k) {
            if (written[k].code() == StatusCode::kResourceExhausted) {
              Rebalance(t + 1, writes[k].payload.size());  // make room below, then once more
              written[k] = WriteTo(t + 1, writes[k].key, writes[k].payload, static_cast<uint32_t>(writes[k].payload.size()));
            }
            moved[write_index[k]] = written[k];
          }
        }
      }
      std::vector<BlockKey> leaving;
      std::vector<std::pair<int, BlockKey>> parts_leaving;
      bool progressed = false;
      {
        std::lock_guard lock(mu_);
        for (std::size_t i = 0; i < batch.size(); ++i) {
          const Victim& v = batch[i];
          auto it = blocks.find(v.key);
          if (it == blocks.end()) continue;
          it->second.moving = false;
          const std::optional<BlockInfo> info = index.Find(v.key);
          if (!info || !(info->meta.tiers & (1u << t))) continue;
          TierState& ts = tiers[static_cast<std::size_t>(t)];
          if (v.action == Victim::Action::kSplit) {
            // Failed: the block is whole in this tier still (SplitOut restored it).
            if (moved[i].ok()) {
              const uint32_t lower_bytes = static_cast<uint32_t>(options.head_layout->PackedBytes(v.lower));
              it->second.split = Block::Split{.upper_tier = t,
                                              .lower_tier = t + 1,
                                              .lower = v.lower,
                                              .upper_bytes = v.meta.size_bytes - lower_bytes,
                                              .lower_bytes = lower_bytes};
              ts.used -= std::min<uint64_t>(ts.used, lower_bytes);
              tiers[static_cast<std::size_t>(t + 1)].used += lower_bytes;
              ++stats.head_splits;
              ++ts.stats.demotions;
              progressed = true;
            }
            RefreshEvictableLocked(v.key);
            continue;
          }
          const uint32_t here = BytesIn(it->second, t, v.meta.size_bytes);
          if (v.action == Victim::Action::kDemote) {
            if (!moved[i].ok()) {
              // Could not move it (the lower tier failed): drop it if it is a leaf, else keep
              // it here; either way the next victim is tried.
              if (info->children == 0 && it->second.pins == 0) {
                ++ts.stats.drops;
                if (it->second.split) parts_leaving.push_back(ForgetSplitLocked(v.key, it->second));
                RemoveFromTierLocked(v.key, t, here);
                leaving.push_back(v.key);
                ForgetLocked(v.key);
              } else {
                RefreshEvictableLocked(v.key);
              }
              continue;
            }
            AddToTierLocked(v.key, t + 1, v.meta, it->second);
            ++ts.stats.demotions;
          } else if (v.action == Victim::Action::kDrop) {
            if (it->second.pins > 0 || info->children > 0) {  // pinned or extended meanwhile
              RefreshEvictableLocked(v.key);
              continue;
            }
            ++ts.stats.drops;
          }
          // The copy here leaves (moved down whole, dropped, or held below already): so does
          // the lower half of its split, if it had one.
          if (it->second.split && it->second.split->upper_tier == t) {
            parts_leaving.push_back(ForgetSplitLocked(v.key, it->second));
          }
          RemoveFromTierLocked(v.key, t, here);
          leaving.push_back(v.key);
          if (v.action == Victim::Action::kDrop) ForgetLocked(v.key);
          RefreshEvictableLocked(v.key);
        }
      }
      for (const BlockKey& key : leaving) EvictFrom(t, key);
      for (const auto& [tier, part] : parts_leaving) EvictFrom(tier, part);
      KickRebalances();  // the tier below may be over its watermark now
      if (leaving.empty() && !progressed) {  // nothing could leave (pinned, interior, lower tiers failing)
        std::lock_guard lock(mu_);
        tiers[static_cast<std::size_t>(t)].rebalance_queued = false;
        return;
      }
    }
  }

  // Head-granular demotion of a whole block in tier `t`: its `lower` units go to tier t + 1
  // under PartKey and the rest replaces the whole block in tier t. The whole block's slot is
  // freed first, so that the smaller part can take space a size class released (slab
  // rebalancing); when tier t still has no room for the part, the block moves down whole
  // instead. Returns whether it was split (false: moved whole). A read racing this sees the
  // block missing or of another size for a moment and retries (ReadFrom).
  Result<bool> SplitOut(const BlockKey& key, const BlockMeta& meta, const HeadUnitMask& lower, int t) {
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
    Status s = WriteTo(t + 1, PartKey(key), part, lower_bytes);
    if (s.code() == StatusCode::kResourceExhausted) {
      Rebalance(t + 1, lower_bytes);
      s = WriteTo(t + 1, PartKey(key), part, lower_bytes);
    }
    KVTIER_RETURN_IF_ERROR(s);
    const HeadUnitMask upper = lower.Complement();
    std::vector<std::byte> kept(layout.PackedBytes(upper));
    KVTIER_RETURN_IF_ERROR(PackUnitsInto(layout, block, upper, kept));
    Tier& here = *tiers[static_cast<std::size_t>(t)].tier;
    (void)here.Evict(key);
    if (here.Write(key, kept).ok()) return true;
    // No room for the part here: the block goes down whole, or failing that back up whole.
    EvictFrom(t + 1, PartKey(key));
    if (WriteTo(t + 1, key, block, meta.size_bytes).ok()) return false;
    KVTIER_RETURN_IF_ERROR(here.Write(key, block).WithContext("store: a failed head split could not restore block " +
                                                               key.ToHex()));
    return Status::Unavailable("store: no room below for block " + key.ToHex());
  }

  // Reads a block from tier `t`, gathering its parts when its copy there is split (`split`,
  // SplitIn as the caller saw it under `mu_`: a split that changes meanwhile shows as a size
  // mismatch, which ReadFrom reports for a retry).
  Status ReadGathered(const BlockKey& key, int t, const std::optional<Block::Split>& split, std::span<std::byte> out) {
    if (!split) return ReadFrom(t, key, out);
    if (options.metadata_only) return Status::Ok();
    const KvBlockLayout& layout = *options.head_layout;
    const HeadUnitMask upper = split->lower.Complement();
    std::vector<std::byte> part(std::max(split->upper_bytes, split->lower_bytes));
    KVTIER_RETURN_IF_ERROR(ReadFrom(t, key, std::span(part).first(split->upper_bytes)));
    KVTIER_RETURN_IF_ERROR(UnpackUnits(layout, std::span(part).first(split->upper_bytes), upper, out));
    KVTIER_RETURN_IF_ERROR(ReadFrom(split->lower_tier, PartKey(key), std::span(part).first(split->lower_bytes)));
    return UnpackUnits(layout, std::span(part).first(split->lower_bytes), split->lower, out);
  }

  // Writes the block into the fastest tier before `end` that admits it, making room by
  // demotion when a tier is full. Returns the tier, or -1 when every tier refused it.
  Result<int> Place(const BlockKey& key, const BlockMeta& meta, const Block& b, std::span<const std::byte> payload,
                    int end) {
    Status last_error = Status::Ok();
    for (int t = 0; t < end; ++t) {
      TierState& ts = tiers[static_cast<std::size_t>(t)];
      {
        std::lock_guard lock(mu_);
        const bool full = ts.capacity > 0 && ts.used + meta.size_bytes > ts.capacity;
        if (full && !ts.policy->ShouldAdmit(Resident(key, meta, b), Now())) {
          ++ts.stats.refused;
          continue;
        }
      }
      const Status s = WriteMakingRoom(t, key, payload, meta.size_bytes);
      if (s.ok()) return t;
      last_error = s;
    }
    if (!last_error.ok()) return last_error;
    return -1;
  }
};

Result<std::unique_ptr<TieredStore>> TieredStore::Open(std::vector<std::unique_ptr<Tier>> tiers, StoreOptions options) {
  KVTIER_RETURN_IF_ERROR(options.Validate());
  if (tiers.empty() || tiers.size() > static_cast<std::size_t>(kMaxTiers)) {
    return Status::InvalidArgument("store: needs 1 to " + std::to_string(kMaxTiers) + " tiers, got " +
                                   std::to_string(tiers.size()));
  }
  auto impl = std::make_unique<Impl>();
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
    if (po.tier_bandwidth_bytes_per_s == defaults.tier_bandwidth_bytes_per_s) po.tier_bandwidth_bytes_per_s = cost.bandwidth_bytes_per_s;
    if (po.tier_latency_s == defaults.tier_latency_s) po.tier_latency_s = cost.latency_s;
    po.bayes_learn = t == 0;  // every access goes through the fastest tier's policy once
    KVTIER_ASSIGN_OR_RETURN(std::unique_ptr<EvictionPolicy> policy,
                            NewEvictionPolicy(options.policy, po, impl->predictor));
    Impl::TierState ts;
    ts.capacity = tiers[t]->GetStats().capacity_bytes;
    ts.cost = cost;
    ts.stats.name = tiers[t]->name();
    ts.stats.kind = tiers[t]->kind();
    ts.tier = std::move(tiers[t]);
    ts.policy = std::move(policy);
    impl->tiers.push_back(std::move(ts));
  }
  impl->options = std::move(options);
  if (impl->options.persistence) {
    impl->persist_tier = static_cast<int>(impl->options.persistence->tier);
    KVTIER_RETURN_IF_ERROR(impl->Recover());
  }
  if (!impl->options.synchronous_moves) {
    impl->movers = std::make_unique<TaskPool>(impl->options.mover_threads, impl->options.max_queued_moves);
  }
  impl->KickRebalances();  // recovered blocks may fill the persist tier past its watermark
  return std::unique_ptr<TieredStore>(new TieredStore(std::move(impl)));
}

TieredStore::TieredStore(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

TieredStore::~TieredStore() {
  Drain();
  impl_->movers.reset();
}

void TieredStore::Drain() {
  if (impl_->options.synchronous_moves) return;
  std::unique_lock lock(impl_->flight_mu_);
  impl_->flight_cv_.wait(lock, [&] { return impl_->in_flight == 0; });
}

Result<PutResult> TieredStore::Put(std::span<const BlockPut> blocks, const std::optional<BlockKey>& parent) {
  Impl& s = *impl_;
  if (blocks.empty()) return Status::InvalidArgument("store: Put of an empty chain");
  for (std::size_t i = 0; i < blocks.size(); ++i) {
    const uint64_t bytes = blocks[i].bytes != 0 ? blocks[i].bytes : blocks[i].payload.size();
    if (bytes == 0) return Status::InvalidArgument("store: block " + std::to_string(i) + " has no payload and no size");
    if (!blocks[i].payload.empty() && blocks[i].payload.size() != bytes) {
      return Status::InvalidArgument("store: block " + std::to_string(i) + " states " + std::to_string(bytes) +
                                     " bytes but carries " + std::to_string(blocks[i].payload.size()));
    }
  }
  for (std::size_t i = 0; i < blocks.size(); ++i) {
    if (s.options.metadata_only != blocks[i].payload.empty()) {
      return Status::InvalidArgument(std::string("store: block ") + std::to_string(i) +
                                     (s.options.metadata_only ? " carries a payload into a metadata-only store"
                                                              : " has no payload"));
    }
  }
  PutResult result;
  // The chain's blocks stay pinned until the whole chain is in: room for block i + 1 must not
  // come from evicting block i. Unpinned on every way out.
  struct ChainPins {
    Impl& s;
    std::vector<BlockKey> keys;
    ~ChainPins() {
      {
        std::lock_guard lock(s.mu_);
        for (const BlockKey& key : keys) {
          auto it = s.blocks.find(key);
          if (it != s.blocks.end() && it->second.pins > 0) --it->second.pins;
          s.RefreshEvictableLocked(key);
        }
      }
      s.KickRebalances();
    }
  } putting{s, {}};
  std::optional<BlockKey> previous = parent;
  uint64_t tokens_before = 0;
  if (parent) {
    std::lock_guard lock(s.mu_);
    auto it = s.blocks.find(*parent);
    if (it != s.blocks.end()) tokens_before = it->second.tokens_before + it->second.tokens;
  }
  for (std::size_t i = 0; i < blocks.size(); ++i) {
    const BlockPut& p = blocks[i];
    const uint32_t bytes = p.bytes != 0 ? p.bytes : static_cast<uint32_t>(p.payload.size());
    BlockMeta meta{.size_bytes = bytes, .type = p.type, .transition = p.transition};
    const Impl::Block b{.tokens = p.tokens,
                        .tokens_before = tokens_before,
                        .recompute_s = s.RecomputeSeconds(p.recompute_seconds, p.tokens, tokens_before)};
    tokens_before += p.tokens;
    bool repersist = false;  // stored, but the persist tier let it go: write-through writes it again
    {
      std::lock_guard lock(s.mu_);
      ++s.stats.put_blocks;
      const std::optional<BlockInfo> info = s.index.Find(p.key);
      if (info && info->meta.tiers != 0) {
        if (info->parent != previous) {
          return Status::AlreadyExists("store: block " + p.key.ToHex() + " is stored under another parent (a hash collision)");
        }
        s.index.Touch({&p.key, 1}, static_cast<uint64_t>(s.Now() * 1e6));
        const int t = Impl::FastestTier(info->meta.tiers);
        s.tiers[static_cast<std::size_t>(t)].policy->Touch(p.key, p.transition, s.Now());
        if (auto it = s.blocks.find(p.key); it != s.blocks.end()) {
          ++it->second.pins;
          putting.keys.push_back(p.key);
          // A block a mover holds is left to it.
          repersist = s.write_through() && !(info->meta.tiers & (1u << s.persist_tier)) && !it->second.moving &&
                      info->meta.size_bytes == bytes;
          it->second.moving = repersist;
          s.RefreshEvictableLocked(p.key);
        }
        meta = info->meta;
        if (!repersist) {
          ++result.present_blocks;
          previous = p.key;
          continue;
        }
      }
      if (!info) {
        Result<std::size_t> inserted = s.index.Insert({&p.key, 1}, {&meta, 1}, static_cast<uint64_t>(s.Now() * 1e6), previous);
        if (!inserted.ok()) return inserted.status().WithContext("store: block " + std::to_string(i));
        s.blocks[p.key] = b;
        if (previous) s.RefreshEvictableLocked(*previous);  // it has a child now
      }
    }
    if (repersist) {
      const Status persisted = s.Persist(p.key, p.payload, bytes);
      std::lock_guard lock(s.mu_);
      if (auto it = s.blocks.find(p.key); it != s.blocks.end()) {
        it->second.moving = false;
        if (persisted.ok()) s.AddToTierLocked(p.key, s.persist_tier, meta, it->second);
        s.RefreshEvictableLocked(p.key);
      }
      if (!persisted.ok()) {
        if (persisted.code() != StatusCode::kResourceExhausted) {
          return persisted.WithContext("store: persisting block " + std::to_string(i));
        }
        ++s.tiers[static_cast<std::size_t>(s.persist_tier)].stats.refused;
        result.refused_blocks += blocks.size() - i;
        break;
      }
      ++result.present_blocks;
      previous = p.key;
      continue;
    }
    // Write-through: the persist tier's copy (with its journal record) first, then a copy in
    // a faster tier that admits it; the block is stored once the persist tier holds it.
    Result<int> placed = -1;
    Status persisted = Status::Ok();
    if (s.write_through()) {
      persisted = s.Persist(p.key, p.payload, bytes);
      if (persisted.ok()) placed = s.Place(p.key, meta, b, p.payload, s.persist_tier);
    } else {
      placed = s.Place(p.key, meta, b, p.payload, s.last_tier() + 1);
    }
    std::lock_guard lock(s.mu_);
    const bool stored = s.write_through() ? persisted.ok() : placed.ok() && *placed >= 0;
    if (!stored) {
      s.ForgetLocked(p.key);
      if (!persisted.ok() && persisted.code() != StatusCode::kResourceExhausted) {
        return persisted.WithContext("store: persisting block " + std::to_string(i));
      }
      if (!persisted.ok()) ++s.tiers[static_cast<std::size_t>(s.persist_tier)].stats.refused;
      result.refused_blocks += blocks.size() - i;
      // A tier that is full even after making room, or down (a remote pool), refuses: for a
      // cache, a block it cannot hold now is a miss later, not a failure of the request.
      if (!placed.ok() && placed.status().code() != StatusCode::kUnavailable &&
          placed.status().code() != StatusCode::kResourceExhausted && result.new_blocks + result.present_blocks == 0) {
        return placed.status();
      }
      break;
    }
    auto it = s.blocks.find(p.key);
    ++it->second.pins;
    putting.keys.push_back(p.key);
    if (s.write_through()) s.AddToTierLocked(p.key, s.persist_tier, meta, it->second);
    if (placed.ok() && *placed >= 0) s.AddToTierLocked(p.key, *placed, meta, it->second);
    s.RefreshEvictableLocked(p.key);
    ++result.new_blocks;
    previous = p.key;
  }
  {
    std::lock_guard lock(s.mu_);
    ++s.stats.puts;
  }
  return result;
}

LookupResult TieredStore::Lookup(std::span<const BlockKey> keys) const {
  Impl& s = *impl_;
  LookupResult result;
  std::lock_guard lock(s.mu_);
  ++s.stats.lookups;
  s.stats.lookup_blocks += keys.size();
  std::optional<BlockKey> previous;
  for (const BlockKey& key : keys) {
    const std::optional<BlockInfo> info = s.index.Find(key);
    if (!info || info->meta.tiers == 0 || info->parent != previous) break;
    const int t = Impl::FastestTier(info->meta.tiers);
    result.tier.push_back(t);
    result.bytes.push_back(info->meta.size_bytes);
    if (s.options.cost_model) {
      auto it = s.blocks.find(key);
      const uint64_t tokens = it == s.blocks.end() ? 0 : it->second.tokens;
      const uint64_t before = it == s.blocks.end() ? 0 : it->second.tokens_before;
      result.decisions.push_back(DecideLoad(*s.options.cost_model, s.tiers[static_cast<std::size_t>(t)].cost,
                                            info->meta.size_bytes, tokens, before));
    }
    previous = key;
  }
  result.prefix_blocks = result.tier.size();
  result.load_blocks = result.prefix_blocks;
  for (std::size_t i = 0; i < result.decisions.size(); ++i) {
    if (!result.decisions[i].load) {
      result.load_blocks = i;
      ++s.stats.recompute_preferred;
      break;
    }
  }
  s.stats.lookup_hit_blocks += result.prefix_blocks;
  return result;
}

Result<std::size_t> TieredStore::Get(std::span<const BlockKey> keys, std::span<const std::span<std::byte>> outs,
                                     TransitionType transition, std::span<std::size_t> sizes) {
  Impl& s = *impl_;
  if (!s.options.metadata_only && outs.size() < keys.size()) {
    return Status::InvalidArgument("store: Get needs one buffer per key");
  }
  if (!sizes.empty() && sizes.size() < keys.size()) {
    return Status::InvalidArgument("store: Get needs one size slot per key");
  }
  std::size_t read = 0;
  std::vector<BlockKey> from_below;  // promoted once the request has its bytes
  std::vector<std::pair<int, BlockKey>> corrupt_parts, corrupt_copies;  // evicted after the reads
  std::vector<BlockKey> prefetch;
  std::size_t prefetched_until = 0;
  std::optional<BlockKey> previous;
  for (std::size_t i = 0; i < keys.size(); ++i) {
    const BlockKey& key = keys[i];
    bool done = false;
    for (int attempt = 0; attempt < kReadAttempts && !done; ++attempt) {
      int t = -1;
      std::size_t size = 0;
      std::optional<Impl::Block::Split> split;
      {
        std::lock_guard lock(s.mu_);
        const std::optional<BlockInfo> info = s.index.Find(key);
        if (!info || info->meta.tiers == 0 || info->parent != previous) break;
        if (!s.options.metadata_only && outs[i].size() < info->meta.size_bytes) {
          return Status::InvalidArgument("store: the buffer for block " + std::to_string(i) + " holds " +
                                         std::to_string(outs[i].size()) + " bytes, the block " +
                                         std::to_string(info->meta.size_bytes));
        }
        t = Impl::FastestTier(info->meta.tiers);
        size = info->meta.size_bytes;
        if (auto it = s.blocks.find(key); it != s.blocks.end()) split = Impl::SplitIn(it->second, t);
      }
      Impl::TierState& ts = s.tiers[static_cast<std::size_t>(t)];
      const Status n =
          s.ReadGathered(key, t, split, s.options.metadata_only ? std::span<std::byte>() : outs[i].first(size));
      std::lock_guard lock(s.mu_);
      if (n.ok()) {
        if (split) ++s.stats.head_split_reads;
        if (!sizes.empty()) sizes[i] = size;
        ++ts.stats.hits;
        ts.policy->Touch(key, transition, s.Now());
        s.index.Touch({&key, 1}, static_cast<uint64_t>(s.Now() * 1e6));
        auto it = s.blocks.find(key);
        if (t == 0 && it != s.blocks.end() && it->second.prefetched) {
          it->second.prefetched = false;
          ++s.stats.prefetch_used;
          s.prefetch_window->OnUsed(1);
        }
        if (t > 0) {
          from_below.push_back(key);
          // RoPE-aware prefetch: attention will want the blocks right after this one next;
          // start loading the window after it while this request goes on reading.
          if (s.options.prefetch && i + 1 > prefetched_until) {
            const std::size_t end = std::min(keys.size(), i + 1 + static_cast<std::size_t>(s.prefetch_window->window()));
            prefetch.assign(keys.begin() + static_cast<std::ptrdiff_t>(i + 1), keys.begin() + static_cast<std::ptrdiff_t>(end));
            prefetched_until = end;
          }
        }
        done = true;
      } else if (n.code() == StatusCode::kCorruption) {
        // The tier dropped the block: forget that copy and try the next one.
        ++s.stats.corrupt_blocks;
        const std::optional<BlockInfo> info = s.index.Find(key);
        auto it = s.blocks.find(key);
        if (info && it != s.blocks.end() && (info->meta.tiers & (1u << t))) {
          const uint32_t here = Impl::BytesIn(it->second, t, info->meta.size_bytes);
          if (it->second.split && it->second.split->upper_tier == t) {
            corrupt_parts.push_back(s.ForgetSplitLocked(key, it->second));
          }
          s.RemoveFromTierLocked(key, t, here);
          corrupt_copies.push_back({t, key});
        }
      } else if (n.code() == StatusCode::kUnavailable) {
        break;  // its tier is down (a remote pool): a miss from here on, not an error
      } else if (n.code() != StatusCode::kNotFound) {
        return n.WithContext("store: reading block " + std::to_string(i));
      }
      // NotFound: a move took it from that tier meanwhile; look again.
    }
    if (!done) break;
    ++read;
    previous = key;
    if (!prefetch.empty()) PromoteOrPrefetch(std::exchange(prefetch, {}), /*prefetch=*/true);
  }
  {
    std::lock_guard lock(s.mu_);
    ++s.stats.gets;
    s.stats.get_blocks += read;
    if (read < keys.size()) ++s.stats.get_misses;
  }
  // A tier drops a block whose checksum failed; the halves of a split one are dropped here.
  for (const auto& [t, key] : corrupt_parts) s.EvictFrom(t, key);
  for (const auto& [t, key] : corrupt_copies) s.EvictFrom(t, key);
  if (s.options.promote_on_read && !from_below.empty()) PromoteOrPrefetch(std::move(from_below), /*prefetch=*/false);
  s.KickRebalances();
  return read;
}

void TieredStore::Retag(std::span<const BlockTags> updates) {
  Impl& s = *impl_;
  std::lock_guard lock(s.mu_);
  for (const BlockTags& u : updates) {
    auto it = s.blocks.find(u.key);
    if (it == s.blocks.end() || !s.index.SetTags(u.key, u.type, u.transition).ok()) continue;
    const std::optional<BlockInfo> info = s.index.Find(u.key);
    if (!info) continue;
    // Policies take a block's tags when it is admitted: re-admit it where it is resident.
    for (int t = 0; t <= s.last_tier(); ++t) {
      if ((info->meta.tiers & (1u << t)) == 0) continue;
      EvictionPolicy& policy = *s.tiers[static_cast<std::size_t>(t)].policy;
      policy.Remove(u.key, s.Now());
      policy.Admit(s.Resident(u.key, info->meta, it->second), s.Now());
    }
    s.RefreshEvictableLocked(u.key);
  }
}

void TieredStore::Prefetch(std::span<const BlockKey> keys) { PromoteOrPrefetch({keys.begin(), keys.end()}, true); }

void TieredStore::PromoteOrPrefetch(std::vector<BlockKey> keys, bool prefetch) {
  Impl& s = *impl_;
  s.Schedule([this, keys = std::move(keys), prefetch] {
    Impl& st = *impl_;
    for (const BlockKey& key : keys) {
      int from = -1;
      BlockMeta meta;
      Impl::Block b;
      {
        std::lock_guard lock(st.mu_);
        const std::optional<BlockInfo> info = st.index.Find(key);
        auto it = st.blocks.find(key);
        if (!info || it == st.blocks.end() || it->second.moving) continue;
        from = Impl::FastestTier(info->meta.tiers);
        if (from <= 0) continue;  // absent, or in the fastest tier already
        meta = info->meta;
        b = it->second;
        it->second.moving = true;
        st.RefreshEvictableLocked(key);
        if (prefetch) ++st.stats.prefetch_issued;
      }
      std::vector<std::byte> payload(st.options.metadata_only ? 0 : meta.size_bytes);
      const Status n = st.ReadGathered(key, from, Impl::SplitIn(b, from), payload);
      Result<int> placed = n.ok() ? st.Place(key, meta, b, payload, from) : Result<int>(n);
      std::lock_guard lock(st.mu_);
      auto it = st.blocks.find(key);
      if (it == st.blocks.end()) continue;
      it->second.moving = false;
      if (placed.ok() && *placed >= 0) {
        st.AddToTierLocked(key, *placed, meta, it->second);
        ++st.tiers[static_cast<std::size_t>(*placed)].stats.promotions;
        if (prefetch && *placed == 0) {
          it->second.prefetched = true;
          st.prefetch_window->OnPrefetched(1, meta.size_bytes);
        }
      }
      st.RefreshEvictableLocked(key);
    }
    st.KickRebalances();
  });
}

Result<StorePin> TieredStore::Pin(std::span<const BlockKey> keys) {
  Impl& s = *impl_;
  std::vector<BlockKey> pinned;
  std::lock_guard lock(s.mu_);
  std::optional<BlockKey> previous;
  for (const BlockKey& key : keys) {
    const std::optional<BlockInfo> info = s.index.Find(key);
    auto it = s.blocks.find(key);
    if (!info || it == s.blocks.end() || info->meta.tiers == 0 || info->parent != previous) break;
    ++it->second.pins;
    s.RefreshEvictableLocked(key);
    pinned.push_back(key);
    previous = key;
  }
  s.stats.pinned_blocks += pinned.size();
  return StorePin(this, std::move(pinned));
}

StoreExpectation TieredStore::Expect(std::span<const BlockKey> keys) {
  Impl& s = *impl_;
  std::lock_guard lock(s.mu_);
  const uint64_t order = ++s.expect_sequence;
  for (const BlockKey& key : keys) s.TellExpectedLocked(key, s.expected.Add(key, order));
  return StoreExpectation(this, {keys.begin(), keys.end()}, order);
}

void TieredStore::Unexpect(std::span<const BlockKey> keys, uint64_t order) {
  Impl& s = *impl_;
  std::lock_guard lock(s.mu_);
  for (const BlockKey& key : keys) s.TellExpectedLocked(key, s.expected.Remove(key, order));
}

void TieredStore::Unpin(std::span<const BlockKey> keys) {
  Impl& s = *impl_;
  {
    std::lock_guard lock(s.mu_);
    for (const BlockKey& key : keys) {
      auto it = s.blocks.find(key);
      if (it == s.blocks.end() || it->second.pins == 0) continue;
      --it->second.pins;
      --s.stats.pinned_blocks;
      s.RefreshEvictableLocked(key);
    }
  }
  s.KickRebalances();  // pinned blocks may have held a tier over its watermark
}

Status TieredStore::Flush() {
  Impl& s = *impl_;
  if (!s.journal) return Status::FailedPrecondition("store: Flush needs StoreOptions::persistence");
  Status first = Status::Ok();
  if (!s.write_through()) {
    Drain();  // blocks a mover holds are skipped below
    const TierMask persisted = static_cast<TierMask>(1u << s.persist_tier);
    std::vector<BlockKey> keys;
    {
      std::lock_guard lock(s.mu_);
      s.index.ForEachBlock([&](const BlockInfo& info) {
        if (info.meta.tiers != 0 && !(info.meta.tiers & persisted)) keys.push_back(info.key);
      });
    }
    std::vector<std::byte> buffer;
    uint64_t failed = 0;
    for (const BlockKey& key : keys) {
      Status copied = s.CopyToPersistTier(key, buffer);
      if (copied.ok()) continue;
      if (first.ok()) first = copied;
      ++failed;
    }
    s.KickRebalances();
    if (!first.ok()) first = first.WithContext("store: Flush left " + std::to_string(failed) + " blocks unpersisted");
  }
  const Status synced = s.journal->Sync();
  return first.ok() ? synced : first;
}

StoreStats TieredStore::GetStats() const {
  Impl& s = *impl_;
  const uint64_t journal_records = s.journal ? s.journal->records() : 0;
  std::lock_guard lock(s.mu_);
  StoreStats out = s.stats;
  out.journal_records = journal_records;
  for (const Impl::TierState& ts : s.tiers) {
    StoreTierStats t = ts.stats;
    t.capacity_bytes = ts.capacity;
    t.used_bytes = ts.used;
    t.blocks = ts.blocks;
    out.tiers.push_back(t);
  }
  out.prefetch_window = s.prefetch_window->window();
  out.queued_moves = s.movers ? s.movers->queued() : 0;
  out.index_blocks = s.index.size();
  out.expected_blocks = s.expected.size();
  return out;
}

std::string TieredStore::PredictorJson() const { return impl_->predictor->ToJson(); }
const ReusePredictor& TieredStore::predictor() const { return *impl_->predictor; }
std::size_t TieredStore::tier_count() const { return impl_->tiers.size(); }
Tier& TieredStore::tier(std::size_t i) { return *impl_->tiers[i].tier; }

StorePin::StorePin(StorePin&& other) noexcept : store_(std::exchange(other.store_, nullptr)), keys_(std::move(other.keys_)) {}

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
