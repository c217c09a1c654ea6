// PrefixCacheModel: the replay's default setting (one tier that evicts on demand, metadata
// only; served on arrival or through the engine model) without the store. TieredStore does there what an engine's prefix
// cache does, but through a mutex, a prefix index behind a reader-writer lock, a hash map of
// 16-byte keys and a few vectors per call; this model keeps the same facts per block in
// arrays indexed by dense ids (ReplayIds, numbered once per replay) and so replays several
// times faster (docs/replay.md, "Speed").
//
// It makes the same calls on the same policy (NewEvictionPolicy with the store's options for
// that tier), in the same order, as TieredStore does in that setting: Pin and Get of a
// request's hit (store_read.cc, tiered_store.cc), Put of the rest with its chain pinned,
// making room one batch of victims at a time (store_put.cc, store_moves.cc), leaf-first
// forgetting (store_state.cc). Three differences, none of which changes a policy's choices:
// it tells the policy a block's evictability only when it changes, where the store repeats
// it (every policy ignores a repeat: SetEvictable sets a state); it leaves out the
// SetEvictable(true) the store makes right before it removes a victim (the policy is in the
// same state after the Remove either way); and it names blocks by their dense ids
// (PolicyKey), which saves a map from keys to ids (policies use keys only to look entries up,
// never to order them). So hit rates are the store's bit for bit;
// prefix_cache_model_test.cc checks that against the store for every policy.
//
// Thread-safety: none; one run is one thread's.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "kvtier/eviction_policy.h"
#include "kvtier/replay.h"
#include "store/expected_reads.h"

namespace kvtier::replay_internal {

// The trace's block keys as dense ids, in order of first appearance (prompt, then output, of
// each request in turn).
struct ReplayIds {
  std::vector<BlockKey> keys;       // by id
  std::vector<uint32_t> ids;        // every request's prompt ids, then its output ids
  std::vector<const ReplayBlock*> blocks;  // in parallel: the block of the request (its tokens and type)
  std::vector<std::size_t> starts;  // per request, where its ids start in `ids`; one more at the end

  // Request `request`'s ids from position `from` of its prompt, its output included.
  std::span<const uint32_t> From(std::size_t request, std::size_t from) const {
    return std::span(ids).subspan(starts[request] + from, starts[request + 1] - starts[request] - from);
  }
};

// InvalidArgument past 2^32 - 1 distinct blocks (the ids are 32-bit).
Result<ReplayIds> NumberBlocks(const std::vector<ReplayRequest>& requests);

// What a Put needs of each block besides its id.
struct ModelBlockFacts {
  uint32_t kv_bytes_per_token = 0;
  double recompute_seconds_per_token = 0;
  TransitionType transition = TransitionType::kSameToolRepeat;  // of the request storing it
};

class PrefixCacheModel {
 public:
  // A model of `blocks` blocks (ids 0 to blocks - 1) in a tier of `capacity_bytes`.
  PrefixCacheModel(std::unique_ptr<EvictionPolicy> policy, std::size_t blocks, uint64_t capacity_bytes);

  // The longest prefix of `chain` that is cached, each block under the one before it.
  std::size_t Lookup(std::span<const uint32_t> chain) const;
  // A request reads its hit (a prefix Lookup returned): pins it, then touches it.
  void Read(std::span<const uint32_t> hit, TransitionType transition, double now);
  // Unpins a hit once its request has stored its blocks.
  void Release(std::span<const uint32_t> hit);
  // Stores `chain` (`blocks` in parallel) under `parent` (kNoParent for a first block), as
  // TieredStore::Put: present blocks are touched, new ones admitted while there is room;
  // the first block refused, or stored under another parent (a collision in the trace's
  // hashes), ends the chain.
  void Put(std::span<const uint32_t> chain, std::span<const ReplayBlock* const> blocks, uint32_t parent,
           const ModelBlockFacts& facts, double now);
  // A queued request will read `chain` (TieredStore::Expect): returns the order that ranks
  // it, which Unexpect takes when the request no longer waits. The policy hears of each
  // block's soonest expected read whenever it changes or the block becomes resident.
  uint64_t Expect(std::span<const uint32_t> chain);
  void Unexpect(std::span<const uint32_t> chain, uint64_t order);

  static constexpr uint32_t kNoParent = UINT32_MAX;
  // The key the policy knows block `id` by (never {0, 0}, a key tests like to leave unused).
  static BlockKey PolicyKey(uint32_t id) { return {0, uint64_t{id} + 1}; }

 private:
  struct Node {
    uint32_t parent = kNoParent;
    uint32_t children = 0;
    uint32_t pins = 0;
    uint32_t bytes = 0;
    bool indexed = false;    // in the store's prefix index
    bool resident = false;   // and held by the tier
    bool moving = false;     // a victim being dropped
    bool evictable = false;  // as the policy was last told
  };

  // Tells the policy whether a resident block may leave now, when that changed.
  void Refresh(uint32_t id);
  // StoreNew for one block already indexed: false when it is refused (and forgotten again).
  bool StoreNew(uint32_t id, const ReplayBlock& block, const ModelBlockFacts& facts, double now);
  // The store's Rebalance of its one tier until `need` more bytes fit (or nothing can leave).
  void MakeRoom(uint64_t need, double now);
  // PlanVictims: the next batch of victims (marked moving) into `batch_`.
  void PlanVictims(uint64_t need);
  // SettleVictims: the batch leaves the tier, and each is forgotten with the ancestors it
  // leaves childless and unheld.
  void DropVictims(double now);
  void Forget(uint32_t id);

  std::unique_ptr<EvictionPolicy> policy_;
  store_internal::ExpectedReads expected_;  // by PolicyKey
  uint64_t expect_sequence_ = 0;            // the last Expect's order
  std::vector<Node> nodes_;
  const uint64_t capacity_;
  uint64_t used_ = 0;
  std::vector<uint32_t> pinned_, batch_;  // scratch, kept to save allocations
};

}  // namespace kvtier::replay_internal
