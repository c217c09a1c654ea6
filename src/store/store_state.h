// The tiered store's shared state (TieredStore::Impl; store.h), private to src/store/. Each
// part of the store adds one job to it:
//   store_state.cc    the bookkeeping of blocks and tiers; tier I/O; making room in a tier
//   store_put.cc      the put path: placing a chain's blocks in the fastest tier that admits them
//   store_read.cc     Lookup, Get, and reads that gather a split block
//   store_moves.cc    the movers: Rebalance (demotion, drops, head splits), promotion, prefetch
//   store_persist.cc  the journal, write-through, Flush, and recovery at Open
//   tiered_store.cc   options, Open, pins and stats; the public methods forward to the parts
//
// Structure: the prefix index (prefix_index.h) holds the tree of blocks, their sizes, tags and
// tier masks; `blocks` beside it holds what only the store needs (pins, moves in flight,
// prefetch marks, recompute cost).
//
// Locking. `mu_` is the store-wide reader-writer lock (util/rw_mutex.h, writers first;
// profiled, StoreStats::metadata_lock). Held exclusively (ExclusiveLock) it owns all of the
// state: the index, `blocks`, `stats`, `tiers` (all of each TierState but its `tier`, which is
// thread-safe itself and set only in Open), `expected`, and no other lock below is needed.
// Held shared, it lets threads work side by side, each taking the finer locks of what it
// touches:
//   - `blocks` is split into shards by key (block_table.h), each with its own lock: a thread
//     under `mu_` shared reads a block's record with its shard shared and changes it with
//     its shard exclusive (BlockGuard; a block and its parent at most, in shard order);
//   - each tier's policy is thread-safe itself, split into shards by key with a lock each
//     (StoreOptions::policy_options.shards; src/policy/sharded_policy.h), and its accounting
//     (`used`, `blocks`, its counters) is atomics (TierState::Accounts);
//   - `write_counters` and `read_counters` are atomics; `pending_mu_` guards
//     `pending_evictions`.
// So lookups, the planning half of reads, promotions, prefetches, demotion (Rebalance's
// planning and settling, dropped blocks forgotten a block and its parent at a time) and in
// the common case a put's sections (indexing its blocks, recording their writes, letting
// its pins go) run under `mu_` shared: operations on different chains touch different
// shards and contend only for a policy shard's lock, held for the policy's few calls. What
// is rare or changes many blocks at once takes `mu_` exclusively: a put's refusals and errors (which
// forget the blocks of its batch), a put that must wait for a block a mover holds, reads
// that find a copy corrupt or gone, recovery, pins, expectations, retags, the shared tier's
// indexing, and applying kMaxDeferredHits at once.
// Lock order: `mu_`, then shards (ascending, at most two), then the leaf locks (a policy
// shard's, `pending_mu_`, `hits_mu_`, the index's shards and the journal's own locks); a
// policy and the index call nothing while they hold a shard of their own.
// A Get takes `mu_` only shared: the hits it read are deferred (DeferHits, under `hits_mu_`)
// and applied to the policies and counters by the next put's section or exclusive section,
// before it does anything else (ApplyDeferredHitsLocked), so a policy sees the hits before
// the put's admissions that follow them (the replay's order, prefix_cache_model_test) and
// never picks a victim or refuses an admission without them; a Get that finds
// kMaxDeferredHits waiting applies them itself. A policy shard is told the time of each call
// through its own clock, which never goes back (two threads' sections apply and admit side
// by side).
// The index is thread-safe itself; a block is added to it and to `blocks` under its shard's
// exclusive lock and becomes visible to reads only once a tier holds it (its tier bit).
// Methods whose names end in `Locked` need `mu_` held exclusively, unless they say "shared is
// enough" (with what else they need); every other method takes what it needs and is called
// with `mu_` released. `mu_` is never taken twice by one thread, in either mode. No tier I/O
// and no journal call runs under `mu_` (a tier may be slow; the journal has its own lock): a
// method reads what it needs under the lock, marks the block `moving` when it moves or copies
// it (so no mover picks it as well), does the I/O with the lock released, and takes the lock
// again to record the outcome, checking that the block is still there (BeginMoveLocked /
// EndMoveLocked). A Put holds the same way the blocks it indexed for writing until it
// records their writes, a batch at a time (Put); a Put that must write a block a mover or
// another Put holds waits on `move_done_` (with `mu_` exclusive) until it is let go. A Get
// plans its chain's reads under one shared section, reads, and defers its hits (above).
// `flight_mu_` guards `in_flight` only and is never held together with `mu_`. `hits_mu_`
// guards `deferred_hits` only; it is taken with `mu_` held or not, and nothing is taken
// while it is held.
// `prefetch_window`, `movers` and `journal` are thread-safe themselves.
#pragma once

#include <algorithm>
#include <atomic>
#include <bit>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <span>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "kvtier/prefix_index.h"
#include "kvtier/store.h"
#include "policy/sharded_policy.h"
#include "store/block_journal.h"
#include "store/block_table.h"
#include "store/expected_reads.h"
#include "store/shared_card.h"
#include "tier/aligned_buffer_pool.h"
#include "util/profiled_rw_mutex.h"
#include "util/task_pool.h"

namespace kvtier {

struct TieredStore::Impl {
  explicit Impl(PrefixIndexOptions index_options) : index(index_options) {}

  struct Block {
    uint32_t tokens = 0;
    uint64_t tokens_before = 0;  // in the chain before this block (its attention context)
    double recompute_s = 0;
    uint32_t pins = 0;
    bool moving = false;      // a mover holds it: not a victim, not moved again
    // Changes whenever a copy is added, removed, or moved (BeginMoveLocked, EndMoveLocked):
    // a read that misses a copy whose placement did not change meanwhile knows the tier lost it.
    uint64_t placement = 0;
    bool prefetched = false;  // brought up by prefetch and not used since
    // A promotion through a gate (promotion_gate.h) placed it in tier `promoted_to` from
    // `promoted_from`, and it was not read from there since; -1 otherwise. Its first read
    // there or its leaving settles the promotion with that gate.
    int8_t promoted_to = -1;
    int8_t promoted_from = -1;
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
    // Thread-safe itself: StoreOptions::policy_options.shards policies by key, each with its
    // own lock and clock (src/policy/sharded_policy.h).
    std::unique_ptr<ShardedPolicy> policy;
    uint64_t capacity = 0;  // 0: unbounded, never demoted from
    TierCost cost;
    // What sections under `mu_` shared count side by side: atomics, no lock. In one allocation
    // so that a TierState moves.
    struct Accounts {
      std::atomic<uint64_t> used{0};  // bytes of blocks the store placed here
      std::atomic<uint64_t> blocks{0};
      std::atomic<uint64_t> hits{0}, promotions{0}, demotions{0}, drops{0}, refused{0};  // StoreTierStats'
      std::atomic<bool> rebalance_queued{false};
    };
    std::unique_ptr<Accounts> accounts = std::make_unique<Accounts>();
    std::string name;  // the tier's, set in Open
    TierKind kind = TierKind::kCpuDram;

    uint64_t used() const { return accounts->used.load(std::memory_order_relaxed); }
    void Place(uint64_t bytes) { accounts->used.fetch_add(bytes, std::memory_order_relaxed); }
    void Release(uint64_t bytes) { Subtract(accounts->used, bytes); }
    // Never below zero: an accounting slip must not make a tier look full forever.
    static void Subtract(std::atomic<uint64_t>& counter, uint64_t amount) {
      uint64_t now = counter.load(std::memory_order_relaxed);
      while (!counter.compare_exchange_weak(now, now - std::min(now, amount), std::memory_order_relaxed)) {
      }
    }
  };

  StoreOptions options;
  std::shared_ptr<ReusePredictor> predictor;
  std::function<double()> clock;

  mutable ProfiledRwMutex mu_;
  // The counters that Lookup and Get, which hold `mu_` shared, add to; GetStats folds them into `stats`.
  struct ReadCounters {
    std::atomic<uint64_t> lookups{0}, lookup_blocks{0}, lookup_hit_blocks{0}, recompute_preferred{0};
    std::atomic<uint64_t> gets{0}, get_blocks{0}, get_misses{0};
    std::atomic<uint64_t> head_split_reads{0}, prefetch_used{0};  // counted as deferred hits are applied
  };
  ReadCounters read_counters;
  // What puts and the movers count under `mu_` shared; GetStats folds it into `stats` too.
  struct WriteCounters {
    std::atomic<uint64_t> puts{0}, put_blocks{0}, prefetch_issued{0}, prefetch_wasted{0}, prefetch_wasted_bytes{0};
    std::atomic<uint64_t> head_splits{0};
    std::atomic<bool> head_importance_assumed{false};
  };
  WriteCounters write_counters;
  // Hits that Gets read and the policies have not seen yet (the locking comment above).
  struct DeferredHit {
    BlockKey key;
    int tier = 0;
    TransitionType transition{};
    bool gathered = false;
    double at = 0;  // the store's clock when the Get read it: what the policies are told
  };
  // Enough to keep a Get off the exclusive lock between writers, few enough that applying
  // them holds it for about 1 ms at worst.
  static constexpr std::size_t kMaxDeferredHits = 4096;
  std::mutex hits_mu_;
  std::vector<DeferredHit> deferred_hits;      // GUARDED_BY(hits_mu_)
  std::atomic<bool> hits_deferred{false};      // deferred_hits is not empty: lets sections skip hits_mu_

  // `mu_` held shared by a section that changes blocks and tiers under their own locks (a
  // put's, a promotion's, demotion's), the hits Gets deferred applied first, as ExclusiveLock
  // does: the policies see them before what the section does. Readers that change nothing
  // take `mu_` shared directly.
  class SharedSection {
   public:
    explicit SharedSection(Impl& s) : lock_(s.mu_) { s.ApplyDeferredHitsLocked(); }

   private:
    std::shared_lock<ProfiledRwMutex> lock_;
  };

  // `mu_` held exclusively, the hits Gets deferred applied first (the locking comment above).
  // Meets BasicLockable, so that move_done_ can wait on it; a wait's relock applies nothing.
  class ExclusiveLock {
   public:
    explicit ExclusiveLock(Impl& s) : s_(s) {
      s_.mu_.lock();
      s_.ApplyDeferredHitsLocked();
    }
    ~ExclusiveLock() {
      if (held_) s_.mu_.unlock();
    }
    ExclusiveLock(const ExclusiveLock&) = delete;
    ExclusiveLock& operator=(const ExclusiveLock&) = delete;
    void lock() {
      s_.mu_.lock();
      held_ = true;
    }
    void unlock() {
      held_ = false;
      s_.mu_.unlock();
    }

   private:
    Impl& s_;
    bool held_ = true;
  };
  PrefixIndex index;                                         // thread-safe itself, in shards
  using BlockGuard = store_internal::BlockTable<Block>::Guard;
  store_internal::BlockTable<Block> blocks;                  // GUARDED_BY(mu_, or its shard's lock)
  std::vector<TierState> tiers;  // set in Open; `policy` and `accounts` thread-safe, `tier` too
  StoreStats stats;                                          // GUARDED_BY(mu_): the store-wide counters
  std::unique_ptr<PrefetchWindow> prefetch_window;           // thread-safe itself
  // Per tier, a gate for each networked one (null for the others): which of the blocks read
  // from there are promoted. Set in Open; the gates are thread-safe themselves.
  std::vector<std::unique_ptr<PromotionGate>> promotion_gates;
  store_internal::ExpectedReads expected;                    // GUARDED_BY(mu_)
  uint64_t expect_sequence = 0;                              // GUARDED_BY(mu_): the last Expect's order

  // Persistence: the persist tier's index (-1 without); the durable tiers, whose copies the
  // journal records (the persist tier and each tier below it whose blocks survive a restart:
  // nvme, remote_pool, parallel_fs); the journal (thread-safe itself, called with `mu_`
  // released). All set in Open.
  int persist_tier = -1;
  TierMask durable = 0;
  std::unique_ptr<BlockJournal> journal;
  // The tier other nodes share (Tier::shared), -1 without; the networked tiers (remote pool,
  // parallel FS), whose blocks a Get reads in batches (ReadBatchedFromBelow). Set in Open.
  int shared_tier = -1;
  TierMask networked = 0;

  // A block's mover (or put) let it go (EndMoveLocked, under `mu_` in either mode); waited on
  // with `mu_` held exclusively.
  std::condition_variable_any move_done_;
  // Evictions a tier refused (a remote pool that is down), retried by KickRebalances until
  // they succeed; a write of the block into that tier cancels its entry.
  mutable std::mutex pending_mu_;
  std::unordered_map<BlockKey, TierMask, BlockKeyHash> pending_evictions;  // GUARDED_BY(pending_mu_)
  std::atomic<bool> compaction_queued{false};  // a journal compaction is scheduled or running
  std::atomic<uint64_t> compaction_floor{0};   // after a failed compaction: records before the next try

  std::unique_ptr<TaskPool> movers;
  // A Put's private copy of a payload that two tiers get (Put): reused, so that a put does not
  // fault in a fresh block-sized buffer each time. Thread-safe itself; up to 64 MiB kept.
  AlignedBufferPool payload_copies{64u << 20};
  std::mutex flight_mu_;
  std::condition_variable flight_cv_;
  uint64_t in_flight = 0;  // GUARDED_BY(flight_mu_): moves queued or running

  double Now() const { return clock(); }
  int last_tier() const { return static_cast<int>(tiers.size()) - 1; }
  TierState& tier_state(int t) { return tiers[static_cast<std::size_t>(t)]; }
  const TierState& tier_state(int t) const { return tiers[static_cast<std::size_t>(t)]; }
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

  ResidentBlock Resident(const BlockKey& key, const BlockMeta& meta, const Block& b) const {
    return {.key = key,
            .bytes = meta.size_bytes,
            .tokens = b.tokens,
            .type = meta.type,
            .transition = meta.transition,
            .recompute_seconds = b.recompute_s,
            .expected_order = expected.Soonest(key)};
  }

  // Whether a block continues a run (store.h, Lookup): every key after the first must be the
  // child of the key before it; the first must be a chain's first block unless keys name
  // their prefix (StoreOptions::keys_name_prefix).
  bool ContinuesRun(const BlockInfo& info, const std::optional<BlockKey>& previous) const {
    return previous || !options.keys_name_prefix ? info.parent == previous : true;
  }
  // The leading blocks of `keys` that the read path may use: a run in the index (ContinuesRun
  // for each) whose blocks each have a copy in some tier. Requires `mu_` (any mode). The view
  // is this thread's, valid until its next call.
  // Block i of the run is keys[i].
  std::span<const PrefixIndex::RunPlacement> IndexedRunLocked(std::span<const BlockKey> keys) const;

  // The share of promotions from tier `t` into the fastest tier that must be read again for
  // them to pay (PromotionGate::Admit): loading `bytes` from the fastest tier (what the copy
  // up costs) over what loading them from there saves against tier `t`, by the tiers' costs
  // (set only in Open: no lock needed). Infinite when tier `t` is no slower.
  double PromotionBreakEven(int t, std::size_t bytes) const;
  // Settles a gated promotion of `b` (Block::promoted_to) as used or wasted.
  void SettlePromotionLocked(Block& b, bool used);

  // --- Bookkeeping under `mu_` (store_state.cc) -----------------------------------------
  // Forgets a block's split: its lower part's bytes leave the lower tier's accounting, and
  // the part's (tier, key) is returned for the caller to evict once `mu_` is released.
  std::pair<int, BlockKey> ForgetSplitLocked(const BlockKey& key, Block& b);
  // Whether `key` may leave tier `t` now: unpinned, not moving, and (in the last tier, where
  // leaving means a drop) a leaf.
  bool EvictableLocked(const BlockInfo& info, const Block& b, int t) const;
  // Tells each policy holding `key` whether it may pick it as a victim now. Shared is enough
  // with `key`'s shard held exclusively (it takes the tiers' locks).
  void RefreshEvictableLocked(const BlockKey& key);
  // A mover takes `key` (`b`): no other mover picks it, no policy offers it as a victim. Every
  // way out of a move ends it with EndMoveLocked, which wakes Puts waiting for the block.
  // Both: shared is enough with `key`'s shard held exclusively.
  void BeginMoveLocked(const BlockKey& key, Block& b);
  void EndMoveLocked(const BlockKey& key, Block& b);
  // Forgets tier `t`'s copy of `key` (corrupt, or lost by the tier), with the lower half of a
  // split copy; `evict` gets the copies to evict once `mu_` is released. A block left with no
  // copy is forgotten when it is a leaf.
  void DropCopyLocked(const BlockKey& key, int t, std::vector<std::pair<int, BlockKey>>& evict);
  // Shared is enough with `key`'s shard held exclusively (it takes tier t's lock).
  void AddToTierLocked(const BlockKey& key, int t, const BlockMeta& meta, const Block& b);
  // Tells the policies of every tier holding `key` when a queued request reads it next.
  void TellExpectedLocked(const BlockKey& key, std::optional<uint64_t> order);
  void RemoveFromTierLocked(const BlockKey& key, int t, uint32_t bytes);
  // Forgets a block held by no tier: out of the index (it is a leaf) and the table; so are
  // its ancestors held by no tier that it leaves without children (copies a tier lost).
  void ForgetLocked(const BlockKey& key);
  // ForgetLocked with `mu_` held shared and no shard: each block under its and its parent's.
  void ForgetUnderShards(const BlockKey& key);
  // One step of both: forgets `key` if it may go; returns its parent, to look at next.
  std::optional<BlockKey> ForgetOneLocked(const BlockKey& key);
  bool OverHighWatermark(int t) const;  // no lock needed (the tier's accounts)
  // Adds one to tier t's counter `field` (an atomic: `mu_` in either mode, or none).
  void CountInTier(int t, std::atomic<uint64_t> TierState::Accounts::*field) {
    (tier_state(t).accounts.get()->*field).fetch_add(1, std::memory_order_relaxed);
  }

  // --- I/O, or its accounting in a metadata-only store (store_state.cc) ------------------
  // Journals the block first when `t` is the persist tier, then WriteBytes.
  // `checksum` throughout: the writer's PayloadChecksum of the payload (BlockPut::checksum),
  // which the tier stores and checks (Tier::WriteOp::checksum); none for the store's own moves.
  Status WriteTo(int t, const BlockKey& key, std::span<const std::byte> payload, uint32_t bytes,
                 std::optional<uint64_t> checksum = std::nullopt);
  // The write alone: into the tier, or its accounting in a metadata-only store.
  Status WriteBytes(int t, const BlockKey& key, std::span<const std::byte> payload, uint32_t bytes,
                    std::optional<uint64_t> checksum = std::nullopt);
  // WriteTo for a batch (not in a metadata-only store): into the persist tier, one journal
  // append first for all of them; one status per op.
  std::vector<Status> WriteBatchTo(int t, std::span<const Tier::WriteOp> writes);
  // Reads exactly out.size() bytes: a block of another size was rewritten meanwhile (a head
  // split), which the caller sees as NotFound and retries against the store's new record.
  // `checksum`, when set, receives the block's stored checksum (Tier::ReadOp::checksum).
  Status ReadFrom(int t, const BlockKey& key, std::span<std::byte> out, uint64_t* checksum = nullptr);
  // Evicts a copy the store no longer lists. One the tier refuses (a remote pool that is
  // down) waits in `pending_evictions`: the store never leaves a value behind for good.
  void EvictFrom(int t, const BlockKey& key);
  // Retries the pending evictions, stopping at the first the tier refuses again. Takes `mu_`.
  void RetryPendingEvictions();
  // Writes into tier `t`, making room when it is full (RetryMakingRoom).
  Status WriteMakingRoom(int t, const BlockKey& key, std::span<const std::byte> payload, uint32_t bytes,
                         std::optional<uint64_t> checksum = std::nullopt);
  // The one place that makes room in a full tier. `first` is the outcome of a write of `key`
  // into tier `t` (WriteTo, or one op of a WriteBatch), which journaled it; unless the tier
  // refused it as full, it is returned as it is. Retries write the bytes only (WriteBytes). Otherwise demotion takes the tier down to its watermark and the
  // write is tried again; then, when its accounting has room for the block and the tier still
  // refuses it (its free space lies in slots of other sizes), a few blocks' worth more are
  // moved out past the watermark and the write is tried once more. A tier full of pinned
  // blocks is left alone: moving other blocks out would not make room.
  // A write that fails for good withdraws its journal record (JournalEviction).
  Status RetryMakingRoom(int t, const BlockKey& key, std::span<const std::byte> payload, uint32_t bytes, Status first,
                         std::optional<uint64_t> checksum = std::nullopt);
  Status RetryWriteMakingRoom(int t, const BlockKey& key, std::span<const std::byte> payload, uint32_t bytes,
                              Status first, std::optional<uint64_t> checksum);

  // --- Moves (store_moves.cc) -------------------------------------------------------------
  // Runs `move` on a mover thread, or inline with `synchronous_moves`.
  void Schedule(std::function<void()> move);
  // Waits until every scheduled move has run.
  void Drain();
  // Starts a rebalance of every tier over its high watermark that has none running. Called
  // with `mu_` released: scheduling may wait for room in the movers' queue.
  void KickRebalances();
  // Moves victims out of tier `t` until it is under its low watermark and `need` more bytes
  // fit (a Put waiting for room passes its block's size), and at least `force_bytes` have
  // been planned out whatever the watermark says (free space stranded in other size classes).
  void Rebalance(int t, uint64_t need, uint64_t force_bytes = 0);
  // Rebalance's steps, one batch of victims at a time.
  struct Victim {
    BlockKey key;
    BlockMeta meta;
    enum class Action { kLeave, kDrop, kDemote, kSplit } action;
    HeadUnitMask lower;                 // kSplit: the units that go down
    std::optional<Block::Split> split;  // kDemote: its copy here is split, to be gathered
  };
  // Picks the next batch of victims of tier `t` and marks them moving; an empty batch when
  // the tier has room enough (or nothing can leave), which ends the rebalance. Takes `mu_`.
  std::vector<Victim> PlanVictims(int t, uint64_t need, uint64_t& force_bytes);
  // What becomes of tier `t`'s victim: a drop (the last tier, or a leaf predicted not to be
  // reused), a head split, leaving (a copy below already) or a demotion.
  Victim ChooseActionLocked(const BlockKey& key, const BlockInfo& info, const Block& b, int t);
  // The I/O of a batch (with `mu_` released): one status per victim. A split that went down
  // whole becomes a kDemote.
  std::vector<Status> MoveVictims(int t, std::span<Victim> batch);
  // Moves `batch[whole[k]]` down whole with one ReadBatch from tier `t` and one WriteBatch
  // into the tier below, setting their `moved` statuses.
  void DemoteWhole(int t, std::span<const Victim> batch, std::span<const std::size_t> whole, std::span<Status> moved);
  // Records the outcome of a batch, then evicts the copies that left. Returns whether any
  // victim left tier `t` (or was split): when none did, rebalancing again would not help.
  bool SettleVictims(int t, std::span<const Victim> batch, std::span<const Status> moved);
  // SettleVictims for one victim: the copies to evict once `mu_` is released are added to
  // `leaving` (from tier `t`) and `parts_leaving` (split parts, with their tier). A victim in
  // `leaving` stays claimed (moving) until SettleVictims has evicted its copy.
  bool SettleVictimLocked(int t, const Victim& v, const Status& moved, std::vector<BlockKey>& leaving,
                          std::vector<std::pair<int, BlockKey>>& parts_leaving);
  // Whether tier `t`'s victim `b` may leave it head-granular: its least important heads
  // alone go down (it has a full layout and no copy below).
  bool SplittableLocked(const BlockMeta& meta, const Block& b, int t, TierMask below) const;
  // Head-granular demotion of a whole block in tier `t`: its `lower` units go to tier t + 1
  // under PartKey and the rest replaces the whole block in tier t. The whole block's slot is
  // freed first, so that the smaller part can take space a size class released (slab
  // rebalancing); when tier t still has no room for the part, the block moves down whole
  // instead. Returns whether it was split (false: moved whole). A read racing this sees the
  // block missing or of another size for a moment and retries (ReadFrom).
  Result<bool> SplitOut(const BlockKey& key, const BlockMeta& meta, const HeadUnitMask& lower, int t);
  // The bytes of the blocks a Get read from a networked tier, copied out of the caller's
  // buffer: their promotion places these instead of reading them from the network again.
  // One buffer for the chain: a few large allocations that the allocator keeps, not one
  // small one per block that it hands back to the kernel and faults in again.
  struct HeldPayloads {
    struct Entry {
      BlockKey key;
      int tier = -1;  // where they were read: used only while the block's fastest copy is still there
      std::size_t offset = 0;
      std::size_t size = 0;
      uint64_t checksum = 0;  // what they matched; Place checks them against it again
    };
    std::vector<std::byte> buffer;
    std::vector<Entry> entries;

    void Add(const BlockKey& key, int tier, std::span<const std::byte> bytes, uint64_t checksum) {
      entries.push_back({.key = key, .tier = tier, .offset = buffer.size(), .size = bytes.size(), .checksum = checksum});
      buffer.insert(buffer.end(), bytes.begin(), bytes.end());
    }
  };
  // Copies stored blocks into the fastest tier (a mover's job; `prefetch` marks them so
  // that their use or waste is counted). `held`: bytes some of them already have.
  void PromoteOrPrefetch(std::vector<BlockKey> keys, bool prefetch, HeldPayloads held = {});
  // Its steps: take the blocks that are below the fastest tier and not moving (one section
  // under `mu_` shared, each block under its shard); take the held bytes, read the others,
  // those in a networked tier in one batch per tier; place each and let it go (under `mu_`
  // shared and its shard too).
  struct Promotion {
    BlockKey key;
    int from = -1;
    BlockMeta meta;
    Block block;
    std::vector<std::byte> payload;  // read here, unless:
    std::span<const std::byte> held;  // bytes the Get already held (in its HeldPayloads)
    uint64_t checksum = 0;
    Status read;
    bool read_done = false;
  };
  std::vector<Promotion> BeginPromotions(std::span<const BlockKey> keys, bool prefetch);
  static void TakeHeldPayloads(std::vector<Promotion>& moves, const HeldPayloads& held);
  void ReadPromotions(std::vector<Promotion>& moves);
  void FinishPromotion(Promotion& move, bool prefetch);

  // --- Placement and the put path (store_put.cc) -----------------------------------------
  // Writes the block into the fastest tier before `end` that admits it, making room by
  // demotion when a tier is full. Returns the tier, or -1 when every tier refused it;
  // Corruption at once when the payload does not match the writer's `checksum`.
  Result<int> Place(const BlockKey& key, const BlockMeta& meta, const Block& b, std::span<const std::byte> payload,
                    int end, std::optional<uint64_t> checksum = std::nullopt);
  // Stores a chain (TieredStore::Put) in batches of blocks: one section records the last
  // batch's writes and indexes the next batch (IndexBatchLocked), whose blocks are then
  // written with the lock released (WriteForPut). A chain whose blocks fit in one batch
  // takes two sections, not one per block. A section runs under `mu_` shared, each block
  // under its shard, unless the last batch was not all stored or the section must wait for
  // a block another holds or forget blocks after an error: then (or from there on) it runs
  // under the exclusive lock.
  Result<PutResult> Put(std::span<const BlockPut> chain, const std::optional<BlockKey>& parent);
  // Each block's metadata and table entry as the put will store them (its tokens before it
  // counted from `parent`'s). Takes `mu_` shared.
  void DescribeChain(std::span<const BlockPut> chain, const std::optional<BlockKey>& parent,
                     std::span<BlockMeta> metas, std::span<Block> blocks_to_put) const;
  enum class PutAction {
    kPresent,    // stored already: touched and pinned, nothing to write
    kRepersist,  // stored, but the persist tier let it go: write-through writes it again
    kNew,        // indexed now: to be written
    kWait,       // to be written again, but a mover (or another put) holds it: wait on `move_done_`, then ask again
  };
  // Touches and pins chain[i] (`p`) when it is stored already, else indexes it under
  // `previous`. `meta` becomes the stored block's when it is present. A block to write
  // (kNew, kRepersist) is held (Block::moving) until its write is recorded, so that no mover
  // picks it and no other put writes it meanwhile. Shared is enough with the shards of
  // `p.key` and `previous` held exclusively.
  Result<PutAction> IndexForPutLocked(const BlockPut& p, std::size_t i, const std::optional<BlockKey>& previous,
                                      BlockMeta& meta, const Block& b, std::vector<BlockKey>& pinned);
  // The bytes a put writes before it records them (and so before the tiers' accounting and
  // policies see them): the headroom the high watermark leaves in the smallest bounded tier,
  // so that a batch in flight never takes more than demotion keeps free. 0 (one block at a
  // time) in a metadata-only store, whose accounting is its only record of room.
  uint64_t PutBatchBytesLocked() const;  // shared is enough
  // A put's blocks: those pinned until the whole chain is in, and those it holds (indexed
  // for a write not yet recorded).
  struct PutProgress {
    std::vector<BlockKey> pinned;
    std::vector<std::pair<BlockKey, PutAction>> held;
  };
  // Indexes chain[next...] for writing (IndexForPutLocked) until the blocks to write reach
  // PutBatchBytesLocked, or until a block another holds is reached after some to write
  // (those go first; at the batch's start it waits on `move_done_` through `lock`, or with
  // `lock` null, under `mu_` shared, sets `must_wait` and returns). Appends the blocks to
  // write to `batch`; advances `next` and `previous`. Shared is enough: it takes each
  // block's shard (and its parent's) while it indexes it.
  Status IndexBatchLocked(std::span<const BlockPut> chain, std::span<BlockMeta> metas, std::span<const Block> blocks_to_put,
                          std::size_t& next, std::optional<BlockKey>& previous, PutResult& result,
                          PutProgress& progress, std::vector<std::pair<std::size_t, PutAction>>& batch,
                          ExclusiveLock* lock, bool& must_wait);
  // Lets go of the blocks a put still holds, newest first: a new one is forgotten (with it
  // written nowhere, the index must not list it), a re-persisted one stays as it was.
  // Needs `mu_` exclusive unless nothing is held.
  void ReleaseHeldLocked(PutProgress& progress);
  // A block of a Put written (or refused) by its tiers, its outcome not yet recorded.
  struct PutWrite {
    std::size_t i = 0;  // its place in the chain
    PutAction action = PutAction::kNew;  // kNew or kRepersist
    BlockMeta meta;
    Status persisted = Status::Ok();  // the persist tier's write, with write-through
    Result<int> placed = -1;          // the tier Place chose (kNew), -1: none admitted it
    // The bytes the tiers got: a private copy where two tiers (or a publish) read them. Kept
    // past the writes only for a publish (a shared tier); otherwise empty once written.
    std::shared_ptr<AlignedBufferPool::Buffer> copy;
    std::span<const std::byte> payload;
  };
  // Whether a tier took the block: the persist tier with write-through, else the tier Place chose.
  bool Stored(const PutWrite& w) const {
    if (w.action == PutAction::kRepersist || write_through()) return w.persisted.ok();
    return w.placed.ok() && *w.placed >= 0;
  }
  // Writes chain[i] (`p`, indexed as `action`: kNew or kRepersist) into its tiers, `mu_`
  // released. An error only when its private copy cannot be allocated.
  Result<PutWrite> WriteForPut(const BlockPut& p, std::size_t i, PutAction action, const BlockMeta& meta,
                               const Block& b);
  // Records where a written block went, pinned, or forgets a new one no tier took, and lets
  // it go (the put held it). False: refused; an error only when nothing of the chain is
  // stored yet (`so_far`) or the persist tier failed. Shared is enough with `p.key`'s shard
  // held exclusively when the write was stored (Stored); forgetting needs `mu_` exclusive.
  Result<bool> RecordPutWriteLocked(const BlockPut& p, const PutWrite& w, const PutResult& so_far,
                                    std::vector<BlockKey>& pinned);
  // Records a batch's writes in order (RecordPutWriteLocked) and counts them in `result`.
  // False when one was refused (the rest of the chain counted as refused) or failed (`failed`
  // set): it is the batch's last write, and the put ends. Shared is enough when every write
  // was stored: it takes each block's shard while it records it.
  bool RecordBatchLocked(std::span<const BlockPut> chain, std::span<const PutWrite> written, PutResult& result,
                         PutProgress& progress, Status& failed);
  // Publishes a new block the put stored into the shared tier (in the background when the
  // options say so).
  void PublishPutWrite(const BlockPut& p, const PutWrite& w);

  // --- Sharing a tier with other nodes (store_shared.cc, docs/cluster.md) ----------------
  // Sets `networked` and shared_tier: at most one tier may be shared, and not in a
  // metadata-only store.
  Status FindSharedTier();
  // Writes the cards of blocks just written into the shared tier (`written`: their keys).
  void WriteCards(std::span<const BlockKey> written);
  // Writes a block just stored here into the shared tier too, so other nodes find it (with
  // the writer's checksum, when the put carried one).
  void Publish(const BlockKey& key, std::span<const std::byte> payload, const BlockMeta& meta,
               std::optional<uint64_t> checksum);
  // Reads the cards of keys[from..] from the shared tier (one batch, `mu_` released) and
  // indexes the blocks of the longest run that continues the chain: blocks another node put.
  // Returns how many it indexed. When it indexed any, `then` runs in the same exclusive
  // section: what it reads of them cannot have been dropped meanwhile by a mover making
  // room in this node's share of the pool.
  std::size_t IndexSharedBlocks(std::span<const BlockKey> keys, std::size_t from,
                                const std::function<void()>& then = nullptr);
  std::size_t IndexCardsLocked(std::span<const BlockCard> cards);

  // --- The read path (store_read.cc) ------------------------------------------------------
  LookupResult Lookup(std::span<const BlockKey> keys);
  // The longest stored prefix of `keys` the index lists, without counting it in the stats.
  // Shared is enough.
  LookupResult LookupIndexedLocked(std::span<const BlockKey> keys);
  Result<std::size_t> Get(std::span<const BlockKey> keys, std::span<const std::span<std::byte>> outs,
                          TransitionType transition, std::span<std::size_t> sizes, std::span<uint64_t> checksums);
  // Get's steps for the block keys[i] (`key`, whose parent is `previous`): reads it into
  // `out` from the fastest tier holding it, retrying when a move takes it meanwhile. The copy
  // of a tier that finds it corrupt, or no longer has it though no move took it, is forgotten
  // (and added to `evict`, to be evicted once `mu_` is released) and the next copy read.
  // nullopt: a miss. A hit is not recorded here: Get records its chain's hits together.
  struct ReadHit {
    int tier = -1;
    std::size_t bytes = 0;
    uint64_t checksum = 0;  // what the bytes read matched (0 in a metadata-only store)
    bool gathered = false;  // from a split copy, its two parts
  };
  // Where a Get finds a block: its fastest copy as the index lists it when the Get begins.
  struct PlannedRead {
    int tier = -1;
    std::size_t bytes = 0;
    uint64_t placement = 0;  // Block::placement then: a miss with it unchanged is a lost copy
    std::optional<Block::Split> split;
  };
  // The reads of the indexed prefix of `keys`, under one shared lock for the whole chain (not
  // one per block): most reads go as planned; one that does not is looked up again.
  std::vector<PlannedRead> PlanReads(std::span<const BlockKey> keys) const;
  std::vector<PlannedRead> PlanReadsLocked(std::span<const BlockKey> keys) const;  // shared is enough
  // Get's first step: the blocks of the chain's indexed prefix that networked tiers (a remote
  // pool, a parallel FS) hold, read in one ReadBatch per tier: a remote pool answers in one
  // round trip per node, not one per block, which no prefetch overlap makes up for. Local
  // tiers keep the block-by-block reads with the RoPE prefetch window ahead of them. A hit
  // here counts once Get's loop reaches it; any other outcome is left to ReadForGet. Sized to the last block it tried (empty in a metadata-only store).
  std::vector<std::optional<ReadHit>> ReadBatchedFromBelow(std::span<const BlockKey> keys,
                                                           std::span<const std::span<std::byte>> outs,
                                                           std::span<const PlannedRead> plan,
                                                           std::vector<std::pair<int, BlockKey>>& evict);
  // `planned`: where PlanReads saw the block, tried first (null: look it up).
  Result<std::optional<ReadHit>> ReadForGet(const BlockKey& key, std::size_t i, const std::optional<BlockKey>& previous,
                                            std::span<std::byte> out, const PlannedRead* planned,
                                            std::vector<std::pair<int, BlockKey>>& evict);
  // The block's side of a read from tier `t` (`gathered`: from a split copy) at `at` (the
  // store's clock): the index's touch, a promotion or prefetch it settles. (The policy's side
  // is ApplyDeferredHitsLocked's.) Shared is enough with `key`'s shard held exclusively.
  void RecordHitLocked(const BlockKey& key, int t, bool gathered, double at);
  // A Get's hits (hits[i] is keys[i]'s), for the next exclusive section to record; applies
  // them at once, taking `mu_` exclusively, when kMaxDeferredHits wait. Called with `mu_` released.
  void DeferHits(std::span<const BlockKey> keys, std::span<const ReadHit> hits, TransitionType transition);
  // Records the deferred hits (RecordHitLocked), in the order the Gets deferred them. Shared
  // is enough: it takes each block's shard.
  void ApplyDeferredHitsLocked();
  // Reads a block from tier `t`, gathering its parts when its copy there is split (`split`,
  // SplitIn as the caller saw it under `mu_`: a split that changes meanwhile shows as a size
  // mismatch, which ReadFrom reports for a retry). Sets `checksum`, when given, to the
  // checksum the bytes matched: the tier's stored one, or for a gathered block one taken
  // over the whole of it (an extra pass, for split blocks only).
  Status ReadGathered(const BlockKey& key, int t, const std::optional<Block::Split>& split, std::span<std::byte> out,
                      uint64_t* checksum = nullptr);

  // --- Persistence (store_persist.cc) -----------------------------------------------------
  // Journals blocks about to be written into durable tier `t`, before the write: a crash
  // between the two leaves a record whose block recovery does not find (and drops), never a
  // block in the tier that no record lists. NotFound when a block left the store meanwhile.
  Status JournalPuts(int t, std::span<const BlockKey> keys);
  // Journals that durable tier `t` no longer holds `key`, after its eviction: a record of the
  // durable copies left, or a drop when none is.
  void JournalEviction(int t, const BlockKey& key);
  // The journal record of a block as the store lists it, held by `tiers`. nullopt: unknown.
  // Shared is enough.
  std::optional<JournalRecord> JournalRecordLocked(const BlockKey& key, TierMask tiers) const;
  // Writes a new block into the persist tier (journaled by WriteTo), making room there the
  // way Place does. The persist tier's policy is not asked to admit it: it only picks victims.
  Status Persist(const BlockKey& key, std::span<const std::byte> payload, uint32_t bytes,
                 std::optional<uint64_t> checksum = std::nullopt);
  // Flush: copies one stored block into the persist tier unless it is there already.
  // `buffer` is reused between calls.
  Status CopyToPersistTier(const BlockKey& key, std::vector<std::byte>& buffer);
  // Open: indexes the blocks the journal lists that their durable tiers still hold intact,
  // parents first, then compacts the journal to them.
  Status Recover();
  // Schedules a compaction of the journal on a mover once it holds more than twice the
  // records the persist tier has blocks, plus compact_journal_min_records.
  void MaybeCompactJournal();
  // Recover's steps: indexes the blocks of `live` in `order` (parents first) as held by the
  // tiers where they were found intact (`intact`, one mask per record), clearing the masks of
  // those it cannot index (their parent was not recovered, or a forged journal lists them
  // twice); returns their records.
  std::vector<JournalRecord> IndexRecoveredLocked(std::span<const JournalRecord> live,
                                                  std::span<const std::size_t> order, std::vector<TierMask>& intact);
  // Replaces the journal with one that lists `recovered` only; on a disk too full for that,
  // goes on with the journal as it is.
  Status OpenCompactedJournal(std::span<const JournalRecord> recovered);
  // Open, after Recover: evicts from each tier that lists its blocks those the index does not
  // hold there (blocks the persist tier holds without a journal record, any block another
  // tier brought back from an earlier run), which would otherwise fill it unindexed.
  void EvictUnindexed();
  Status Flush();
};

}  // namespace kvtier
