// TieredStore: one KV-block store over all of a node's tiers, whose placement decisions come
// from an eviction policy per tier (by default the paper's Bayesian policy: reuse predicted
// per (block type, transition) pair), not from recency alone.
//
// Blocks are identified by chained BlockKeys (block.h): a key names its whole prefix, so a
// request's cached prefix is found by walking its keys in the prefix index (prefix_index.h).
// Tiers are ordered fastest first (tier_config.h). A block lives in one or more tiers:
//  - Put writes a chain's new blocks into the fastest tier that admits them.
//  - When a tier passes its high watermark, the mover demotes its policy's victims to the
//    next tier (write-back: a block already held below just leaves), in batches, until the
//    tier is under its low watermark. A victim the policy predicts no reuse for, or one in
//    the last tier, is dropped instead; a drop removes the block from the index, so only
//    leaves (blocks with no cached child) are dropped.
//  - Get reads each block from the fastest tier holding it. A block read from a lower tier
//    is promoted (copied up; the lower copy stays) and the blocks after it in the request
//    are prefetched into the fastest tier (RoPE-aware window, prefetch_window.h).
//  - A pinned block is never demoted or dropped; a block acknowledged by Put stays readable
//    until the policy drops it from every tier.
//  - With `persistence`, the blocks of one NVMe or parallel-FS tier are journaled, and Open
//    indexes them again after a restart or a kill -9 (docs/store.md, "Persistence").
//
// Data movement runs on the store's mover threads through bounded queues: when they are
// full, the producer (a Put that needs room, a Get's promotion) waits, which is the
// back-pressure. Lookup and the metadata part of Put never wait on I/O. With
// `synchronous_moves` every move runs inline instead, which trace replay uses for
// determinism.
//
// Thread-safety: every public method may be called concurrently. One mutex (`mu_`) guards
// the store's block table, the policies (not thread-safe themselves) and the accounting; I/O
// never runs under it. Tier I/O of a block that is being moved is retried against the block's
// new location.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "kvtier/block.h"
#include "kvtier/cost_model.h"
#include "kvtier/eviction_policy.h"
#include "kvtier/head_importance.h"
#include "kvtier/kv_block_layout.h"
#include "kvtier/lock_profile.h"
#include "kvtier/prefetch_window.h"
#include "kvtier/promotion_gate.h"
#include "kvtier/reuse_predictor.h"
#include "kvtier/status.h"
#include "kvtier/tier.h"

namespace kvtier {

// Durable blocks (docs/store.md, "Persistence"): the store journals every block it puts into
// one persistent tier, and Open indexes them again from the journal and that tier.
struct PersistenceOptions {
  enum class PersistMode : uint8_t {
    // Put writes each new block into the persist tier too (besides a faster tier that admits
    // it) and journals it before it returns: an acknowledged block survives a killed process.
    kWriteThrough = 0,
    // Put places blocks as without persistence; only blocks that reach the persist tier
    // (demoted there, or copied by TieredStore::Flush) survive a restart.
    kOnFlush = 1,
  };
  std::size_t tier = 0;      // Required: index of an NVMe or parallel-filesystem tier
  std::string journal_path;  // Required: the block journal (created if absent)
  PersistMode mode = PersistMode::kWriteThrough;  // Default: kWriteThrough
  // Default: false: the journal is written (write(2)) before a Put returns, which survives a
  // killed process; true also fdatasyncs it, which survives a power loss (the persist
  // tier's own durability permitting, e.g. ParallelFsTierOptions::fsync).
  bool sync = false;
  // Default: true: Open reads every journaled block back (the tier verifies its checksum)
  // and drops those that fail; false only checks that the tier holds it at its size.
  bool verify_checksums = true;
  // Default: 65,536. The journal is rewritten to its live records (on a mover thread) once it
  // holds more than twice as many records as it lists blocks, plus this many: a journal grows
  // with the blocks the persist tier holds, not with the puts and drops it has seen.
  uint64_t compact_journal_min_records = 65536;
};

struct StoreOptions {
  PolicyKind policy = PolicyKind::kBayes;  // Default: the paper's Bayesian policy
  // Per-tier knobs; tier_bandwidth_bytes_per_s / tier_latency_s are set per tier from
  // `tier_costs` when left at their defaults.
  PolicyOptions policy_options;
  // What loading a block from each tier costs, fastest tier first. Default: empty, the
  // paper's table for each tier's kind (DefaultTierCost); `kvtier bench tiers` measures them.
  std::vector<TierCost> tier_costs;
  // The served model on its GPUs: recompute time of a block (the Bayesian policy's value) and
  // the load-or-recompute decision of Lookup. Default: none (recompute_seconds_per_token).
  std::optional<PrefillCostModel> cost_model;
  ReusePredictorOptions predictor;
  double high_watermark = 0.95;  // Default: 0.95 of a tier's capacity starts demotion
  double low_watermark = 0.85;   // Default: demotion stops at 0.85
  // Bayes only: a demotion victim whose P_reuse is below this is dropped, not moved down.
  double drop_below_p_reuse = 0.02;  // Default: 0.02
  bool promote_on_read = true;       // Default: true
  // Which blocks read from a networked tier are promoted: as many as are read again often
  // enough to pay for their copy (promotion_gate.h; one gate per networked tier). Default:
  // adaptive.
  PromotionGateOptions promotion_gate;
  bool prefetch = true;              // Default: true (RoPE-aware, adaptive window)
  PrefetchWindowOptions prefetch_window;  // Default: prefetch_window.h's
  int mover_threads = 2;             // Default: 2
  // Blocks the prefix index is sized for: its table and nodes are allocated at Open. Past it
  // they grow on demand, under the metadata lock (a pause of milliseconds per step for large
  // indexes): set it to the blocks the tiers hold when full. Default: 65,536; at most 2^31.
  std::size_t expected_blocks = std::size_t{1} << 16;
  // Shards of the prefix index, each with its own lock (prefix_index.h): puts of different
  // chains index their blocks side by side. A power of two from 1 to 64. Default: 1 (`kvtier
  // serve`: kServeIndexShards).
  uint32_t index_shards = 1;
  std::size_t max_queued_moves = 1024;  // Default: 1024 moves waiting, then producers wait
  bool synchronous_moves = false;    // Default: false (trace replay sets it: deterministic)
  // With a shared tier (Tier::shared): publish a put there in the background, on the movers
  // (whose bounded queue is the back-pressure), instead of before the put is acknowledged.
  // Default: false: other nodes can read a block once its put returns.
  bool publish_in_background = false;
  // Keys name their whole prefix (engine block hashes and kvtier.chain_keys do: a key hashes
  // the key before it), so Lookup, Get and Pin may take a run that starts at any stored block
  // (an engine holding a chain's first blocks asks for the rest); each key after the first must
  // still be the child of the one before it. Off, a run must start at a chain's first block:
  // the guard for ids that may repeat under another prefix (some traces). `kvtier serve` sets
  // it. Default: false.
  bool keys_name_prefix = false;
  // Recompute cost per token when the block's own estimate is not given (Put's
  // recompute_seconds); from the cost model (cost_model.h) for the served model and GPU.
  double recompute_seconds_per_token = 0;  // Default: 0 (unknown)
  // The store's clock in seconds; trace replay passes its virtual clock.
  std::function<double()> clock;  // Default: steady clock since the store opened
  // Sizes only, no bytes: tiers are capacities, Put carries no payloads and Get copies
  // nothing. Trace replay's fast mode; the decisions are those of a store with data.
  bool metadata_only = false;  // Default: false
  // Head-granular eviction (docs/head_granular.md): a block of exactly
  // head_layout->block_bytes() bytes leaves a tier in two steps. Its first demotion moves
  // only its least important head units (`head_demotion_fraction` of its bytes, chosen by
  // `head_importance`) to the next tier and keeps the rest in place; its next demotion moves
  // the rest. A read gathers the parts and reassembles the block bit-exactly. Without engine
  // reports the importance is a prior: decisions are then labelled "assumed importance"
  // (StoreStats::head_importance_assumed). Default: off (no layout).
  std::optional<KvBlockLayout> head_layout;
  std::shared_ptr<HeadImportance> head_importance;  // required with head_layout
  double head_demotion_fraction = 0.5;              // Default: half of a block's bytes
  // Default: none (nothing survives the store). Not with metadata_only or head_layout.
  std::optional<PersistenceOptions> persistence;

  Status Validate() const;
};

// What a caller states about one block of a chain it puts.
struct BlockPut {
  BlockKey key;
  std::span<const std::byte> payload;  // empty in a metadata-only store (sizes come from `bytes`)
  uint32_t bytes = 0;                  // payload size; defaults to payload.size()
  uint32_t tokens = 0;
  BlockType type = BlockType::kUserContext;
  TransitionType transition = TransitionType::kSameToolRepeat;
  double recompute_seconds = 0;  // 0: tokens * StoreOptions::recompute_seconds_per_token
  // PayloadChecksum(payload) as its writer computed it (a client of `kvtier serve`, end to
  // end: docs/protocol.md). The tier the block goes into stores this value and checks the
  // bytes it copies against it in the same pass (Tier::WriteOp::checksum): a payload changed
  // after it was hashed is refused with Corruption. Default: none (the tier computes it).
  std::optional<uint64_t> checksum;
};

// An engine's correction of a stored block's tags (it learns a block's role after putting it).
struct BlockTags {
  BlockKey key;
  BlockType type = BlockType::kUserContext;
  TransitionType transition = TransitionType::kSameToolRepeat;
};

struct PutResult {
  std::size_t new_blocks = 0;     // blocks stored by this call
  std::size_t present_blocks = 0; // already stored (touched, not rewritten)
  std::size_t refused_blocks = 0; // not admitted by any tier (predicted useless or no room)
};

struct LookupResult {
  std::size_t prefix_blocks = 0;  // the longest prefix of the keys that is stored
  std::vector<int> tier;          // per prefix block: the index of the fastest tier holding it
  std::vector<uint32_t> bytes;    // per prefix block: its size
  // With a cost model: the prefix worth loading. It ends at the first block whose load from
  // its tier would take longer than recomputing it (the engine recomputes from there), and
  // each stored block's decision with its inputs is in `decisions`. Without one: prefix_blocks.
  std::size_t load_blocks = 0;
  std::vector<LoadDecision> decisions;
};

struct StoreTierStats {
  std::string name;
  TierKind kind = TierKind::kCpuDram;
  uint64_t capacity_bytes = 0, used_bytes = 0, blocks = 0;
  uint64_t hits = 0;        // blocks a Get read from this tier
  uint64_t promotions = 0;  // blocks copied into this tier from below
  uint64_t demotions = 0;   // blocks moved from this tier to a lower one
  // A networked tier's promotion gate (promotion_gate.h): blocks read from here that it left
  // here; blocks it promoted that were read from above before they left (used) or not
  // (wasted); the share of blocks it promotes now (1 for a tier without a gate).
  uint64_t promotions_declined = 0, promotions_used = 0, promotions_wasted = 0;
  double promotion_rate = 1;
  uint64_t drops = 0;       // blocks dropped from the store while in this tier
  uint64_t refused = 0;     // admissions the policy refused
  // Evictions the tier itself failed to complete (an NVMe slot header it could not zero):
  // the block is gone from the index, its bytes maybe not (TierStats::evict_failures).
  uint64_t evict_failures = 0;
  // The locks of this tier's policy, one per shard (PolicyOptions::shards), and their sum:
  // what threads working on different blocks still meet on. A shard's hold time is serial
  // with itself only: the busiest shard's is the tier's serial part, which the 64-core
  // projection counts (docs/serve.md).
  std::vector<LockProfile> shard_locks;
  LockProfile lock;
};

struct StoreStats {
  std::vector<StoreTierStats> tiers;
  uint64_t lookups = 0, lookup_blocks = 0, lookup_hit_blocks = 0;
  uint64_t gets = 0, get_blocks = 0, get_misses = 0;
  uint64_t puts = 0, put_blocks = 0;
  uint64_t corrupt_blocks = 0;  // reads a tier refused for a failed checksum
  // Copies a tier no longer held when read (a Redis TTL or restart, another process): the
  // store forgot them, as it forgets corrupt ones.
  uint64_t vanished_copies = 0;
  // Evictions a tier refused (a remote pool that is down): each is retried until it succeeds
  // (unless the block is written to that tier again meanwhile); `pending_evictions` wait now.
  uint64_t eviction_failures = 0;
  uint64_t pending_evictions = 0;
  // A shared tier (Tier::shared, docs/cluster.md): blocks lookups found there by their cards
  // and indexed (blocks other nodes put, or this node before a restart), and writes of a
  // block or its card there that failed (the block stays local; other nodes miss it).
  uint64_t shared_found_blocks = 0;
  uint64_t shared_publish_failures = 0;
  uint64_t prefetch_issued = 0, prefetch_used = 0, prefetch_wasted = 0, prefetch_wasted_bytes = 0;
  int prefetch_window = 0;
  uint64_t recompute_preferred = 0;  // lookups whose loadable prefix the cost model cut short
  uint64_t head_splits = 0;     // blocks whose least important heads were demoted alone
  uint64_t head_split_reads = 0;  // reads that gathered a block from two tiers
  bool head_importance_assumed = false;  // the importance behind the splits is a prior
  uint64_t queued_moves = 0;    // now
  uint64_t pinned_blocks = 0;   // now
  uint64_t index_blocks = 0;
  uint64_t expected_blocks = 0;  // now: blocks some queued request will read (Expect)
  // Persistence: blocks Open indexed again from the journal; journaled blocks it dropped
  // (absent from the persist tier, failing their checksum, or under a dropped parent);
  // records in the journal now; bytes of a torn or corrupt journal tail Open ignored.
  uint64_t recovered_blocks = 0;
  uint64_t recovery_dropped_blocks = 0;
  uint64_t journal_records = 0;
  uint64_t journal_ignored_bytes = 0;
  uint64_t journal_compactions = 0;  // while the store ran (Open's compaction is not counted)
  uint64_t journal_compaction_failures = 0;  // e.g. no room for the new file: the old one goes on
  // The one lock over the store's metadata (index, block table, policies): time held
  // exclusively (Put, the movers' bookkeeping, the end of a Get) and waited for.
  LockProfile metadata_lock;
  // The prefix index's own locks (prefix_index.h), one per shard (StoreOptions::index_shards):
  // every insert and eviction of a block holds its shard and its parent's exclusively, a
  // serial part that puts of different chains share only within a shard. `index_lock` adds
  // the shards up.
  LockProfile index_lock;
  std::vector<LockProfile> index_shard_locks;
};

class StorePin;
class StoreExpectation;

class TieredStore {
 public:
  // The tiers, fastest first; the store owns them. With `persistence`, the blocks its
  // journal lists are indexed again (as held by the persist tier) and the journal is
  // compacted: Corruption naming the file when it is not a block journal.
  static Result<std::unique_ptr<TieredStore>> Open(std::vector<std::unique_ptr<Tier>> tiers, StoreOptions options);
  ~TieredStore();  // finishes the moves in flight
  TieredStore(const TieredStore&) = delete;
  TieredStore& operator=(const TieredStore&) = delete;

  // Stores a chain: blocks[i]'s parent is blocks[i-1], blocks[0]'s is `parent` (which must be
  // stored) or none. Blocks already stored are touched, not rewritten. A block no tier
  // admits is refused: it and the blocks after it are not stored (a prefix cache cannot use
  // a block after a gap). Errors: InvalidArgument for a malformed request; NotFound for an
  // unknown parent; the first tier error when a block could be written nowhere (a tier that
  // is full after making room, or Unavailable, e.g. a remote pool that is down, refuses
  // instead: a miss later). With
  // write-through persistence a block is acknowledged once it and its journal record are
  // written; a persist tier without room refuses it, and an I/O error of that tier or the
  // journal fails the Put (the chain's blocks before it stay stored and durable). A block
  // whose payload does not match its BlockPut::checksum fails the Put with Corruption: it and
  // the blocks after it are not stored, those before it stay stored.
  Result<PutResult> Put(std::span<const BlockPut> blocks, const std::optional<BlockKey>& parent = std::nullopt);

  // Lookup, Get and Pin take a run of one chain: from its first block, or from any stored
  // block with `keys_name_prefix` (StoreOptions); the run ends at the first key that is not
  // stored or is not the child of the key before it.
  //
  // The stored prefix of `keys` and where each of its blocks is. Read-only, no I/O.
  LookupResult Lookup(std::span<const BlockKey> keys) const;

  // Reads the stored prefix of `keys` into `outs` (one buffer per key, in order; ignored in a
  // metadata-only store), stopping at the first block that is not stored; returns the blocks
  // read, and their sizes in `sizes` when it is not empty (one entry per key). A block whose
  // copy is in a tier that is Unavailable ends the read there, as a miss. Reads from
  // lower tiers promote and prefetch as the options say. `transition` is the access's type.
  // With `checksums` (one entry per key), each block read's checksum: the one the tier
  // checked the bytes it copied against, which is the writer's BlockPut::checksum when it
  // sent one (a block gathered from two tiers gets one computed over its bytes).
  Result<std::size_t> Get(std::span<const BlockKey> keys, std::span<const std::span<std::byte>> outs,
                          TransitionType transition = TransitionType::kSameToolRepeat,
                          std::span<std::size_t> sizes = {}, std::span<uint64_t> checksums = {});

  // Sets the tags of the stored blocks among `updates` (others are ignored): the policies then
  // rank them, and the predictor learns their outcomes, under the new (type, transition) pair.
  void Retag(std::span<const BlockTags> updates);

  // Brings the stored blocks among `keys` into the fastest tier, in the background.
  void Prefetch(std::span<const BlockKey> keys);

  // Keeps the stored prefix of `keys` from being demoted or dropped while the pin lives.
  Result<StorePin> Pin(std::span<const BlockKey> keys);

  // A queued request will read `keys` (its prompt's chain, stored yet or not): while the
  // handle lives, policies that predict (PolicyKind::kPredictive) keep those blocks over every
  // block no queued request needs, and blocks of earlier expectations over those of later
  // ones (an engine serves its queue in order); a full tier whose every evictable block is
  // expected refuses blocks no queued request needs. Not a pin: an expected block still leaves
  // for a block expected sooner. Drop the handle when the request starts (pin its hit then)
  // or leaves the queue.
  StoreExpectation Expect(std::span<const BlockKey> keys);

  // Runs every queued move to completion (tests, shutdown, replay checkpoints).
  void Drain();

  // Persistence: copies every stored block the persist tier lacks into it, journals it, and
  // syncs the journal (in kWriteThrough mode only the sync is left to do). The daemon calls
  // it on SIGTERM. Errors: the first failure (the other blocks are still copied);
  // FailedPrecondition without persistence.
  Status Flush();

  StoreStats GetStats() const;
  // The predictor's posteriors and calibration (reuse_predictor.h ToJson).
  std::string PredictorJson() const;
  // The predictor itself: posteriors and calibration as values (metrics export).
  const ReusePredictor& predictor() const;
  std::size_t tier_count() const;
  Tier& tier(std::size_t i);

 private:
  friend class StorePin;
  friend class StoreExpectation;
  struct Impl;
  explicit TieredStore(std::unique_ptr<Impl> impl);
  void Unpin(std::span<const BlockKey> keys);
  void Unexpect(std::span<const BlockKey> keys, uint64_t order);

  std::unique_ptr<Impl> impl_;
};

// Unpins its blocks when destroyed. Move-only.
class StorePin {
 public:
  StorePin() = default;
  StorePin(StorePin&& other) noexcept;
  StorePin& operator=(StorePin&& other) noexcept;
  StorePin(const StorePin&) = delete;
  StorePin& operator=(const StorePin&) = delete;
  ~StorePin();

  std::size_t size() const { return keys_.size(); }
  void Release();

 private:
  friend class TieredStore;
  StorePin(TieredStore* store, std::vector<BlockKey> keys) : store_(store), keys_(std::move(keys)) {}

  TieredStore* store_ = nullptr;
  std::vector<BlockKey> keys_;
};

// Withdraws its expected reads (TieredStore::Expect) when destroyed. Move-only.
class StoreExpectation {
 public:
  StoreExpectation() = default;
  StoreExpectation(StoreExpectation&& other) noexcept;
  StoreExpectation& operator=(StoreExpectation&& other) noexcept;
  StoreExpectation(const StoreExpectation&) = delete;
  StoreExpectation& operator=(const StoreExpectation&) = delete;
  ~StoreExpectation();

  std::size_t size() const { return keys_.size(); }
  void Release();

 private:
  friend class TieredStore;
  StoreExpectation(TieredStore* store, std::vector<BlockKey> keys, uint64_t order)
      : store_(store), keys_(std::move(keys)), order_(order) {}

  TieredStore* store_ = nullptr;
  std::vector<BlockKey> keys_;
  uint64_t order_ = 0;
};

}  // namespace kvtier
