#include "kvtier/store.h"

#include <atomic>
#include <cstdio>
#include <thread>

#include <gtest/gtest.h>

#include "kvtier/model_catalog.h"
#include "kvtier/tiers.h"
#include "tier/dram_tier.h"

namespace kvtier {
namespace {

// 256 KiB: DRAM tiers round their capacity up to 2 MiB slabs, 8 of these blocks each.
constexpr uint32_t kBlockBytes = 256 << 10;

BlockKey Key(uint64_t chain, uint64_t i) { return {chain * 0x9E3779B97F4A7C15ull + 1, i + 1}; }

std::vector<std::byte> Payload(uint64_t chain, uint64_t i) {
  std::vector<std::byte> bytes(kBlockBytes);
  for (std::size_t k = 0; k < bytes.size(); ++k) bytes[k] = static_cast<std::byte>((k * 31 + chain * 7 + i * 13) & 0xff);
  return bytes;
}

std::unique_ptr<Tier> Dram(const std::string& name, uint64_t capacity) {
  Result<std::unique_ptr<Tier>> tier =
      NewDramTier({.name = name, .capacity_bytes = capacity, .lock_memory = false, .huge_pages = false, .pin_for_gpu = false});
  EXPECT_TRUE(tier.ok()) << tier.status().ToString();
  return std::move(*tier);
}

// Two DRAM tiers standing in for a fast and a slow one.
std::unique_ptr<TieredStore> TwoTierStore(uint64_t fast, uint64_t slow, StoreOptions options = {}) {
  std::vector<std::unique_ptr<Tier>> tiers;
  tiers.push_back(Dram("fast", fast));
  tiers.push_back(Dram("slow", slow));
  Result<std::unique_ptr<TieredStore>> store = TieredStore::Open(std::move(tiers), std::move(options));
  EXPECT_TRUE(store.ok()) << store.status().ToString();
  return store.ok() ? std::move(*store) : nullptr;
}

// LRU with moves run on the caller's thread: which block a full tier gives up is predictable.
StoreOptions SynchronousLru() {
  StoreOptions options;
  options.policy = PolicyKind::kLru;
  options.synchronous_moves = true;
  return options;
}

// Puts chain `chain` of `n` blocks (real payloads).
void PutChain(TieredStore& store, uint64_t chain, uint64_t n, BlockType type = BlockType::kUserContext) {
  std::vector<std::vector<std::byte>> payloads;
  std::vector<BlockPut> puts;
  for (uint64_t i = 0; i < n; ++i) payloads.push_back(Payload(chain, i));
  for (uint64_t i = 0; i < n; ++i) puts.push_back({.key = Key(chain, i), .payload = payloads[i], .tokens = 16, .type = type});
  Result<PutResult> r = store.Put(puts);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
}

// Reads chain `chain` and checks every block read is bit-exact; returns the blocks read.
std::size_t GetChain(TieredStore& store, uint64_t chain, uint64_t n) {
  std::vector<BlockKey> keys;
  std::vector<std::vector<std::byte>> buffers(n, std::vector<std::byte>(kBlockBytes));
  std::vector<std::span<std::byte>> outs;
  for (uint64_t i = 0; i < n; ++i) {
    keys.push_back(Key(chain, i));
    outs.emplace_back(buffers[i]);
  }
  Result<std::size_t> read = store.Get(keys, outs);
  EXPECT_TRUE(read.ok()) << read.status().ToString();
  if (!read.ok()) return 0;
  for (std::size_t i = 0; i < *read; ++i) EXPECT_EQ(buffers[i], Payload(chain, i)) << "chain " << chain << " block " << i;
  return *read;
}

TEST(TieredStore, PutLookupGetRoundTrip) {
  auto store = TwoTierStore(8u << 20, 8u << 20);
  ASSERT_NE(store, nullptr);
  PutChain(*store, 1, 10);
  const std::vector<BlockKey> keys = {Key(1, 0), Key(1, 1), Key(1, 2), Key(2, 0)};
  const LookupResult found = store->Lookup(keys);
  EXPECT_EQ(found.prefix_blocks, 3u);
  EXPECT_EQ(found.tier, (std::vector<int>{0, 0, 0}));
  EXPECT_EQ(found.bytes, (std::vector<uint32_t>{kBlockBytes, kBlockBytes, kBlockBytes}));
  EXPECT_EQ(GetChain(*store, 1, 10), 10u);
  // Get reports the size of each block it read; a short buffer list for sizes is refused.
  std::vector<std::byte> buffer(kBlockBytes);
  const std::vector<std::span<std::byte>> outs = {buffer, buffer};
  std::vector<std::size_t> sizes(2, 0);
  Result<std::size_t> read = store->Get(std::span(keys).first(2), outs, TransitionType::kSameToolRepeat, sizes);
  ASSERT_TRUE(read.ok());
  EXPECT_EQ(*read, 2u);
  EXPECT_EQ(sizes, (std::vector<std::size_t>{kBlockBytes, kBlockBytes}));
  std::vector<std::size_t> too_few(1);
  EXPECT_EQ(store->Get(std::span(keys).first(2), outs, TransitionType::kSameToolRepeat, too_few).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(GetChain(*store, 2, 3), 0u);
  // A second Put of the same chain stores nothing new.
  std::vector<std::byte> p0 = Payload(1, 0);
  const BlockPut again{.key = Key(1, 0), .payload = p0};
  Result<PutResult> r = store->Put({&again, 1});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->present_blocks, 1u);
  EXPECT_EQ(r->new_blocks, 0u);
}

// The metadata lock's profile (StoreStats::metadata_lock): a put of a new chain takes it only
// shared and does its policy work under the tier's own lock (StoreTierStats::lock); a pin
// takes it exclusively; lookups take it shared only, so they add no exclusive acquisition
// however many there are.
TEST(TieredStore, ReportsItsMetadataLockAndLookupsNeverTakeItExclusively) {
  auto store = TwoTierStore(8u << 20, 8u << 20);
  ASSERT_NE(store, nullptr);
  const StoreStats before = store->GetStats();
  PutChain(*store, 1, 4);
  store->Drain();  // no mover runs during the lookups below
  const StoreStats after_put = store->GetStats();
  EXPECT_EQ(after_put.metadata_lock.exclusive_acquisitions, before.metadata_lock.exclusive_acquisitions);
  EXPECT_GT(after_put.tiers[0].lock.exclusive_acquisitions, before.tiers[0].lock.exclusive_acquisitions);
  EXPECT_GT(after_put.tiers[0].lock.exclusive_hold_seconds, before.tiers[0].lock.exclusive_hold_seconds);
  const std::vector<BlockKey> keys = {Key(1, 0), Key(1, 1), Key(1, 2), Key(1, 3)};
  Result<StorePin> pin = store->Pin(keys);
  ASSERT_TRUE(pin.ok());
  const LockProfile after_pin = store->GetStats().metadata_lock;
  EXPECT_EQ(after_pin.exclusive_acquisitions, after_put.metadata_lock.exclusive_acquisitions + 1);
  EXPECT_GT(after_pin.exclusive_hold_seconds, after_put.metadata_lock.exclusive_hold_seconds);
  for (int i = 0; i < 1000; ++i) ASSERT_EQ(store->Lookup(keys).prefix_blocks, 4u);
  const LockProfile after_lookups = store->GetStats().metadata_lock;
  EXPECT_EQ(after_lookups.exclusive_acquisitions, after_pin.exclusive_acquisitions);
  EXPECT_EQ(after_lookups.exclusive_hold_seconds, after_pin.exclusive_hold_seconds);
}

// A Get takes the metadata lock only shared: its hits wait for the next exclusive section,
// which applies them before it does anything else, or for the Get that finds
// kMaxDeferredHits (4096) waiting.
TEST(TieredStore, GetsLeaveTheirHitsToTheNextWriterAndNeverTakeTheLockExclusively) {
  StoreOptions options;
  options.synchronous_moves = true;
  auto store = TwoTierStore(8u << 20, 8u << 20, options);
  ASSERT_NE(store, nullptr);
  PutChain(*store, 1, 4);
  const StoreStats before = store->GetStats();
  for (int i = 0; i < 100; ++i) ASSERT_EQ(GetChain(*store, 1, 4), 4u);
  const StoreStats after_100 = store->GetStats();  // applies the 400 hits: one exclusive section
  EXPECT_EQ(after_100.metadata_lock.exclusive_acquisitions, before.metadata_lock.exclusive_acquisitions + 1);
  EXPECT_EQ(after_100.tiers[0].hits, before.tiers[0].hits + 400);
  EXPECT_EQ(after_100.gets, before.gets + 100);
  EXPECT_EQ(after_100.get_blocks, before.get_blocks + 400);
  // 1,100 more: the Get that brings 4,096 hits applies them; GetStats applies the other 304.
  for (int i = 0; i < 1100; ++i) ASSERT_EQ(GetChain(*store, 1, 4), 4u);
  const StoreStats after_1200 = store->GetStats();
  EXPECT_EQ(after_1200.metadata_lock.exclusive_acquisitions, after_100.metadata_lock.exclusive_acquisitions + 2);
  EXPECT_EQ(after_1200.tiers[0].hits, after_100.tiers[0].hits + 4400);
}

// A put indexes its blocks in batches of up to the headroom the high watermark leaves in the
// smallest tier (5% by default), writes a batch with the lock released, and records it in the
// section that indexes the next. Those sections take the metadata lock only shared, each block
// under its shard: putting a new chain, the same chain again, or a chain in several batches
// takes it exclusively not once (it took it once per batch and once to end before).
TEST(TieredStore, APutOfNewOrPresentBlocksNeverTakesTheLockExclusively) {
  StoreOptions options;
  options.synchronous_moves = true;
  {
    auto store = TwoTierStore(64u << 20, 64u << 20, options);  // 3.2 MiB batches: the chain is one
    ASSERT_NE(store, nullptr);
    const StoreStats before = store->GetStats();
    PutChain(*store, 1, 4);
    PutChain(*store, 1, 4);  // present: every block touched and pinned, nothing written
    const StoreStats after = store->GetStats();
    EXPECT_EQ(after.metadata_lock.exclusive_acquisitions, before.metadata_lock.exclusive_acquisitions);
    EXPECT_EQ(after.puts, before.puts + 2);
    EXPECT_EQ(after.put_blocks, before.put_blocks + 8);
    EXPECT_EQ(after.tiers[0].blocks, 4u);
    EXPECT_EQ(after.tiers[0].used_bytes, 4 * kBlockBytes);
    EXPECT_EQ(GetChain(*store, 1, 4), 4u);
  }
  {
    auto store = TwoTierStore(8u << 20, 8u << 20, options);  // 410 KiB batches: two blocks of 256 KiB each
    ASSERT_NE(store, nullptr);
    const StoreStats before = store->GetStats();
    PutChain(*store, 1, 4);
    EXPECT_EQ(store->GetStats().metadata_lock.exclusive_acquisitions, before.metadata_lock.exclusive_acquisitions);
    EXPECT_EQ(GetChain(*store, 1, 4), 4u);
  }
}

// A chain longer than both tiers: its blocks stay pinned until it is in, so the tiers fill and
// refuse a block in the middle of a batch. The blocks indexed after it for the same batch
// were written nowhere and must leave the index with it: no lookup, get or later put sees them.
TEST(TieredStore, BlocksIndexedAfterARefusedOneInItsBatchAreForgotten) {
  StoreOptions options;
  options.synchronous_moves = true;
  auto store = TwoTierStore(2u << 20, 2u << 20, options);  // 128 blocks of 16 KiB each; batches of 7
  ASSERT_NE(store, nullptr);
  constexpr uint32_t kSmall = 16 << 10;
  constexpr uint64_t kBlocks = 300;
  const std::vector<std::byte> payload(kSmall, std::byte{0x5a});
  std::vector<BlockPut> puts;
  std::vector<BlockKey> keys;
  for (uint64_t i = 0; i < kBlocks; ++i) {
    keys.push_back(Key(7, i));
    puts.push_back({.key = keys.back(), .payload = payload, .tokens = 16});
  }
  Result<PutResult> put = store->Put(puts);
  ASSERT_TRUE(put.ok()) << put.status().ToString();
  const uint64_t stored = put->new_blocks;
  ASSERT_GT(stored, 0u);
  ASSERT_LT(stored, kBlocks);
  ASSERT_NE(stored % 7, 0u) << "the refusal should fall inside a batch";
  EXPECT_EQ(put->refused_blocks, kBlocks - stored);
  // Every block the index lists is a stored one of the chain's prefix (demotion may have
  // dropped some of its last ones since): none indexed and held by no tier.
  const StoreStats stats = store->GetStats();
  EXPECT_LE(stats.index_blocks, stored);
  EXPECT_EQ(store->Lookup(keys).prefix_blocks, stats.index_blocks);
  EXPECT_EQ(stats.pinned_blocks, 0u);
  // Nothing of the chain is left held: the same put again finds what is stored and goes on.
  Result<PutResult> again = store->Put(puts);
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(again->present_blocks + again->new_blocks + again->refused_blocks, kBlocks);
  EXPECT_EQ(store->Lookup(keys).prefix_blocks, store->GetStats().index_blocks);
}

TEST(TieredStore, ADeferredHitCountsBeforeTheNextVictimIsChosen) {
  auto store = TwoTierStore(8 * kBlockBytes, 64 * kBlockBytes, SynchronousLru());
  ASSERT_NE(store, nullptr);
  for (uint64_t chain = 0; chain < 8; ++chain) PutChain(*store, chain, 1);  // the fast tier is full
  ASSERT_EQ(GetChain(*store, 0, 1), 1u);  // the oldest, read again: no longer LRU's victim
  for (uint64_t chain = 8; chain < 12; ++chain) PutChain(*store, chain, 1);  // four demotions
  EXPECT_EQ(store->Lookup(std::vector<BlockKey>{Key(0, 0)}).tier, (std::vector<int>{0}));
  EXPECT_EQ(store->Lookup(std::vector<BlockKey>{Key(1, 0)}).tier, (std::vector<int>{1}));
}

// With keys_name_prefix, Lookup, Get and Pin take a run that may start mid-chain (an engine
// holding the first blocks asks for the rest); after its first key, each must continue the run.
// Without it a run must start at a chain's first block.
TEST(TieredStore, ARunMayStartMidChainWhenKeysNameTheirPrefix) {
  for (const bool named : {true, false}) {
    SCOPED_TRACE(named ? "keys name their prefix" : "ids may repeat under another prefix");
    auto store = TwoTierStore(8u << 20, 8u << 20, StoreOptions{.keys_name_prefix = named});
    ASSERT_NE(store, nullptr);
    PutChain(*store, 1, 6);
    const std::vector<BlockKey> run = {Key(1, 2), Key(1, 3), Key(1, 4)};
    const std::size_t expected = named ? 3 : 0;
    EXPECT_EQ(store->Lookup(run).prefix_blocks, expected);
    std::vector<std::vector<std::byte>> buffers(3, std::vector<std::byte>(kBlockBytes));
    const std::vector<std::span<std::byte>> outs = {buffers[0], buffers[1], buffers[2]};
    Result<std::size_t> read = store->Get(run, outs);
    ASSERT_TRUE(read.ok()) << read.status().ToString();
    ASSERT_EQ(*read, expected);
    for (uint64_t i = 0; i < expected; ++i) EXPECT_EQ(buffers[i], Payload(1, i + 2)) << i;
    Result<StorePin> pin = store->Pin(run);
    ASSERT_TRUE(pin.ok());
    EXPECT_EQ(store->GetStats().pinned_blocks, expected);
    // Block 4 is not block 2's child: the run ends after block 2.
    const std::vector<BlockKey> gap = {Key(1, 2), Key(1, 4)};
    EXPECT_EQ(store->Lookup(gap).prefix_blocks, named ? 1u : 0u);
    Result<std::size_t> gap_read = store->Get(gap, std::span(outs).first(2));
    ASSERT_TRUE(gap_read.ok());
    EXPECT_EQ(*gap_read, named ? 1u : 0u);
  }
}

TEST(TieredStore, RejectsMalformedPuts) {
  auto store = TwoTierStore(1u << 20, 1u << 20);
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(store->Put({}).status().code(), StatusCode::kInvalidArgument);
  const BlockPut empty{.key = Key(1, 0)};
  EXPECT_EQ(store->Put({&empty, 1}).status().code(), StatusCode::kInvalidArgument);
  std::vector<std::byte> p = Payload(1, 0);
  const BlockPut orphan{.key = Key(1, 1), .payload = p};
  EXPECT_EQ(store->Put({&orphan, 1}, Key(9, 9)).status().code(), StatusCode::kNotFound);
}

// End-to-end checksums (issue 18): the writer's checksum goes into the tier and comes back
// with the block; a payload that does not match it is refused with Corruption, and the
// blocks before it in the chain stay stored.
TEST(TieredStore, WriterChecksumsAreCheckedOnPutAndReturnedByGet) {
  auto store = TwoTierStore(8u << 20, 8u << 20);
  ASSERT_NE(store, nullptr);
  const std::vector<std::byte> a = Payload(3, 0), b = Payload(3, 1);
  const std::vector<BlockPut> puts = {{.key = Key(3, 0), .payload = a, .tokens = 16, .checksum = PayloadChecksum(a)},
                                      {.key = Key(3, 1), .payload = b, .tokens = 16, .checksum = PayloadChecksum(a)}};
  Result<PutResult> put = store->Put(puts);
  ASSERT_FALSE(put.ok());
  EXPECT_EQ(put.status().code(), StatusCode::kCorruption) << put.status().ToString();
  EXPECT_EQ(store->Lookup(std::vector<BlockKey>{Key(3, 0), Key(3, 1)}).prefix_blocks, 1u);
  EXPECT_EQ(store->GetStats().tiers[0].blocks, 1u);
  std::vector<std::byte> out(kBlockBytes), out2(kBlockBytes);
  const std::vector<std::span<std::byte>> outs = {out, out2};
  std::vector<uint64_t> checksums(2, 0);
  Result<std::size_t> read = store->Get(std::vector<BlockKey>{Key(3, 0), Key(3, 1)}, outs,
                                        TransitionType::kSameToolRepeat, {}, checksums);
  ASSERT_TRUE(read.ok()) << read.status().ToString();
  EXPECT_EQ(*read, 1u);
  EXPECT_EQ(out, a);
  EXPECT_EQ(checksums[0], PayloadChecksum(a));
}

TEST(TieredStore, FullFastTierDemotesAndEveryBlockStaysReadable) {
  StoreOptions options;
  options.policy = PolicyKind::kLru;
  auto store = TwoTierStore(16 * kBlockBytes, 128 * kBlockBytes, options);
  ASSERT_NE(store, nullptr);
  for (uint64_t chain = 0; chain < 10; ++chain) PutChain(*store, chain, 8);  // 80 blocks, 16 fit above
  store->Drain();
  const StoreStats stats = store->GetStats();
  EXPECT_LE(stats.tiers[0].used_bytes, 16u * kBlockBytes);
  EXPECT_GT(stats.tiers[0].demotions, 0u);
  EXPECT_EQ(stats.tiers[0].blocks + stats.tiers[1].blocks, 80u);
  for (uint64_t chain = 0; chain < 10; ++chain) EXPECT_EQ(GetChain(*store, chain, 8), 8u) << chain;
}

TEST(TieredStore, LastTierDropsLeavesFirstAndNeverPinnedBlocks) {
  auto store = TwoTierStore(8 * kBlockBytes, 16 * kBlockBytes, SynchronousLru());
  ASSERT_NE(store, nullptr);
  PutChain(*store, 0, 4);
  const std::vector<BlockKey> pinned_keys = {Key(0, 0), Key(0, 1), Key(0, 2), Key(0, 3)};
  Result<StorePin> pin = store->Pin(pinned_keys);
  ASSERT_TRUE(pin.ok());
  EXPECT_EQ(pin->size(), 4u);
  for (uint64_t chain = 1; chain < 12; ++chain) PutChain(*store, chain, 2);
  // The pinned chain survives whatever else came and went.
  EXPECT_EQ(GetChain(*store, 0, 4), 4u);
  const StoreStats stats = store->GetStats();
  EXPECT_GT(stats.tiers[1].drops, 0u);
  // Whatever is stored is a prefix-closed set: a chain's second block never outlives its first.
  for (uint64_t chain = 1; chain < 12; ++chain) {
    const std::vector<BlockKey> keys = {Key(chain, 0), Key(chain, 1)};
    const std::size_t first_only = store->Lookup({keys.data(), 1}).prefix_blocks;
    const LookupResult both = store->Lookup(keys);
    if (first_only == 0) {
      EXPECT_EQ(both.prefix_blocks, 0u);
    }
  }
  pin->Release();
  EXPECT_EQ(store->GetStats().pinned_blocks, 0u);
}

TEST(TieredStore, ReadsFromBelowPromoteAndPrefetchTheRest) {
  StoreOptions options;
  options.policy = PolicyKind::kLru;
  options.synchronous_moves = true;
  options.prefetch_window.initial_window = 4;
  auto store = TwoTierStore(8 * kBlockBytes, 64 * kBlockBytes, options);
  ASSERT_NE(store, nullptr);
  PutChain(*store, 0, 8);
  PutChain(*store, 1, 8);  // pushes chain 0 down
  ASSERT_EQ(store->Lookup(std::vector<BlockKey>{Key(0, 0)}).tier, std::vector<int>{1});
  // Reading chain 0: its first block comes from below and is promoted, and the window of
  // blocks after it is prefetched into the fast tier ahead of the reads (synchronous moves:
  // the prefetch completes before the next read).
  EXPECT_EQ(GetChain(*store, 0, 8), 8u);
  const StoreStats stats = store->GetStats();
  EXPECT_GE(stats.tiers[0].promotions, 1u);
  EXPECT_GE(stats.prefetch_issued, 4u);
  EXPECT_GE(stats.prefetch_used, 4u) << "blocks 1-4 were read from the fast tier after their prefetch";
  EXPECT_GT(stats.tiers[0].hits, stats.tiers[1].hits);
}

TEST(TieredStore, CorruptCopyFallsBackToTheOneBelow) {
  StoreOptions options;
  options.policy = PolicyKind::kLru;
  options.synchronous_moves = true;
  options.prefetch = false;
  auto store = TwoTierStore(8 * kBlockBytes, 64 * kBlockBytes, options);
  ASSERT_NE(store, nullptr);
  PutChain(*store, 0, 2);
  PutChain(*store, 1, 8);  // chain 0 goes below
  EXPECT_EQ(GetChain(*store, 0, 2), 2u);  // promoted: now in both tiers
  ASSERT_EQ(store->Lookup(std::vector<BlockKey>{Key(0, 0)}).tier, std::vector<int>{0});
  ASSERT_TRUE(CorruptDramBlockForTesting(&store->tier(0), Key(0, 0)));
  EXPECT_EQ(GetChain(*store, 0, 2), 2u);  // bit-exact, from the lower copy
  EXPECT_EQ(store->GetStats().corrupt_blocks, 1u);
}

// The paper's motivating case, in a metadata-only store: a system prompt every session
// shares survives a flood of one-off reasoning blocks under the Bayesian policy, not under LRU.
double SystemPromptHitRate(PolicyKind policy) {
  double now = 0;
  StoreOptions options;
  options.policy = policy;
  options.synchronous_moves = true;
  options.metadata_only = true;
  options.prefetch = false;
  options.clock = [&now] { return now; };
  options.predictor.horizon_s = 50;
  options.recompute_seconds_per_token = 1e-4;  // prefill of a 70B model on one GPU, roughly
  std::vector<std::unique_ptr<Tier>> tiers;
  tiers.push_back(Dram("fast", 24 * kBlockBytes));  // 6 MiB
  auto store = TieredStore::Open(std::move(tiers), options);
  EXPECT_TRUE(store.ok());
  uint64_t hits = 0, sessions = 0;
  for (uint64_t session = 0; session < 60; ++session) {
    // Each session: the 4-block system prompt, then 30 reasoning blocks of its own.
    std::vector<BlockPut> chain;
    for (uint64_t i = 0; i < 4; ++i) {
      chain.push_back({.key = Key(0, i), .bytes = kBlockBytes, .tokens = 16, .type = BlockType::kSystemPrompt,
                       .transition = TransitionType::kAgentHandoff});
    }
    const std::vector<BlockKey> prompt = {Key(0, 0), Key(0, 1), Key(0, 2), Key(0, 3)};
    if (session >= 30) {
      ++sessions;
      if ((*store)->Lookup(prompt).prefix_blocks == 4) ++hits;
    }
    now += 1;
    (void)(*store)->Get(prompt, {}, TransitionType::kAgentHandoff);
    EXPECT_TRUE((*store)->Put(chain).ok());
    // Then 30 one-off reasoning blocks of other traffic, as 10 chains of 3 (their own
    // chains: leaf-first eviction alone would protect an ancestor of the flood).
    for (uint64_t c = 0; c < 10; ++c) {
      now += 0.3;
      std::vector<BlockPut> reasoning;
      for (uint64_t i = 0; i < 3; ++i) {
        reasoning.push_back({.key = Key(1000 + session * 10 + c, i), .bytes = kBlockBytes, .tokens = 16,
                             .type = BlockType::kIntermediateReasoning, .transition = TransitionType::kReasoningStep});
      }
      const Result<PutResult> put = (*store)->Put(reasoning);
      EXPECT_TRUE(put.ok()) << put.status().ToString();
    }
  }
  return static_cast<double>(hits) / static_cast<double>(sessions);
}

TEST(TieredStore, SharedSystemPromptSurvivesAFloodUnderBayesNotLru) {
  const double lru = SystemPromptHitRate(PolicyKind::kLru);
  const double bayes = SystemPromptHitRate(PolicyKind::kBayes);
  std::printf("system prompt kept for %.0f%% of sessions under LRU, %.0f%% under Bayes\n", 100 * lru, 100 * bayes);
  EXPECT_LT(lru, 0.2) << "LRU keeps the prompt only when the flood is short";
  EXPECT_GT(bayes, 0.8) << "the Bayesian policy should learn the prompt is reused";
}

// Head-granular eviction: blocks of a (small) model's layout lose their least important head
// units to the slow tier first; every block still reads back bit-exact, gathered from both.
TEST(TieredStore, HeadGranularDemotionKeepsBlocksBitExact) {
  const KvBlockLayout layout{.layers = 8, .kv_heads = 8, .tokens = 16, .k_dim = 64, .v_dim = 64, .element_bytes = 2};
  ASSERT_EQ(layout.block_bytes(), kBlockBytes);
  Result<std::unique_ptr<HeadImportance>> importance = HeadImportance::Create(layout.layers, layout.kv_heads);
  ASSERT_TRUE(importance.ok()) << importance.status().ToString();
  StoreOptions options;
  options.policy = PolicyKind::kLru;
  options.synchronous_moves = true;
  options.prefetch = false;
  options.promote_on_read = false;
  options.head_layout = layout;
  options.head_importance = std::shared_ptr<HeadImportance>(std::move(*importance));
  // 4 slabs above (32 blocks). The first victims go down whole until a slab empties and the
  // half-size parts can take it (slab rebalancing); from then on victims are split.
  auto store = TwoTierStore(32 * kBlockBytes, 128 * kBlockBytes, options);
  ASSERT_NE(store, nullptr);
  for (uint64_t chain = 0; chain < 20; ++chain) PutChain(*store, chain, 3);  // 60 blocks
  const StoreStats stats = store->GetStats();
  EXPECT_GT(stats.head_splits, 0u);
  EXPECT_TRUE(stats.head_importance_assumed) << "no engine reported importance: the split used the prior";
  for (uint64_t chain = 0; chain < 20; ++chain) EXPECT_EQ(GetChain(*store, chain, 3), 3u) << chain;
  EXPECT_GT(store->GetStats().head_split_reads, 0u) << "some block was read from both tiers";
}

// With a cost model, Lookup says how much of the stored prefix is worth loading: a block in a
// tier whose load takes longer than recomputing it ends the loadable prefix.
TEST(TieredStore, LookupCutsThePrefixWhereRecomputeBeatsLoading) {
  Result<ModelSpec> model = LoadCatalogModel("llama-3-8b");
  ASSERT_TRUE(model.ok());
  Result<GpuSpec> gpu = GpuPreset("h100-sxm");
  ASSERT_TRUE(gpu.ok());
  Result<PrefillCostModel> cost = PrefillCostModel::Create(*model, *gpu);
  ASSERT_TRUE(cost.ok()) << cost.status().ToString();
  StoreOptions options;
  options.policy = PolicyKind::kLru;
  options.synchronous_moves = true;
  options.prefetch = false;
  options.cost_model = *cost;
  // The slow tier answers after a second: recomputing 16 tokens is far cheaper.
  options.tier_costs = {TierCost{.bandwidth_bytes_per_s = 50e9, .latency_s = 2e-6},
                        TierCost{.bandwidth_bytes_per_s = 1e9, .latency_s = 1.0}};
  auto store = TwoTierStore(16 * kBlockBytes, 64 * kBlockBytes, options);
  ASSERT_NE(store, nullptr);
  PutChain(*store, 0, 4);
  PutChain(*store, 1, 12);  // over the watermark: chain 0's oldest blocks go to the slow tier
  const std::vector<BlockKey> fast = {Key(1, 0), Key(1, 1)};
  LookupResult hit = store->Lookup(fast);
  EXPECT_EQ(hit.load_blocks, 2u);
  ASSERT_EQ(hit.decisions.size(), 2u);
  EXPECT_TRUE(hit.decisions[0].load);
  EXPECT_GT(hit.decisions[0].recompute_seconds, hit.decisions[0].load_seconds);
  const std::vector<BlockKey> slow = {Key(0, 0), Key(0, 1)};
  hit = store->Lookup(slow);
  ASSERT_EQ(hit.prefix_blocks, 2u);
  ASSERT_EQ(hit.tier[0], 1);
  EXPECT_EQ(hit.load_blocks, 0u) << "one second to load 16 tokens of KV: recompute instead";
  EXPECT_FALSE(hit.decisions[0].load);
  EXPECT_EQ(store->GetStats().recompute_preferred, 1u);
}

TEST(TieredStore, ConcurrentPutsAndGetsLoseNothing) {
  auto store = TwoTierStore(16 * kBlockBytes, 1024 * kBlockBytes);
  ASSERT_NE(store, nullptr);
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int t = 0; t < 6; ++t) {
    threads.emplace_back([&, t] {
      for (uint64_t round = 0; round < 20; ++round) {
        const uint64_t chain = static_cast<uint64_t>(t) * 100 + round;
        PutChain(*store, chain, 6);
        if (GetChain(*store, chain, 6) != 6) failures.fetch_add(1);
        if (round > 0 && GetChain(*store, chain - 1, 6) != 6) failures.fetch_add(1);
      }
    });
  }
  for (std::thread& th : threads) th.join();
  store->Drain();
  EXPECT_EQ(failures.load(), 0);
  for (int t = 0; t < 6; ++t) {
    for (uint64_t round = 0; round < 20; ++round) EXPECT_EQ(GetChain(*store, static_cast<uint64_t>(t) * 100 + round, 6), 6u);
  }
}

TEST(TieredStore, RetagKeepsBlocksServedAndIgnoresUnknownKeys) {
  auto store = TwoTierStore(8u << 20, 8u << 20);
  ASSERT_NE(store, nullptr);
  PutChain(*store, 1, 2);
  const std::vector<BlockTags> updates = {{.key = Key(1, 0), .type = BlockType::kSystemPrompt,
                                           .transition = TransitionType::kToolSwitch},
                                          {.key = Key(9, 9), .type = BlockType::kSystemPrompt}};  // not stored: ignored
  store->Retag(updates);
  const std::vector<BlockKey> keys = {Key(1, 0), Key(1, 1)};
  EXPECT_EQ(store->Lookup(keys).prefix_blocks, 2u);
  EXPECT_EQ(GetChain(*store, 1, 2), 2u);
}

}  // namespace
}  // namespace kvtier
