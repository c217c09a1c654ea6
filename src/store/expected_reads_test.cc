// TieredStore::Expect: blocks queued requests will read stay over others under the
// predictive policy, in queue order; a hint that never blocks a put; safe from many threads.
#include <atomic>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "kvtier/store.h"
#include "store/capacity_tier.h"
#include "store/expected_reads.h"

namespace kvtier {
namespace {

constexpr uint32_t kBlockBytes = 4096;

BlockKey Key(uint64_t chain, uint64_t i) { return {chain * 0x9E3779B97F4A7C15ull + 7, i + 1}; }

// One metadata-only tier of `blocks` blocks that evicts on demand, as the replay runs it.
std::unique_ptr<TieredStore> OneTierStore(uint64_t blocks, PolicyKind policy) {
  std::vector<std::unique_ptr<Tier>> tiers;
  tiers.push_back(std::make_unique<CapacityTier>("t0", TierKind::kCpuDram, blocks * kBlockBytes));
  StoreOptions options;
  options.policy = policy;
  options.metadata_only = true;
  options.synchronous_moves = true;
  options.prefetch = false;
  options.high_watermark = 1.0;
  options.low_watermark = 1.0 - 1e-12;
  Result<std::unique_ptr<TieredStore>> store = TieredStore::Open(std::move(tiers), std::move(options));
  EXPECT_TRUE(store.ok()) << store.status().ToString();
  return store.ok() ? std::move(*store) : nullptr;
}

std::vector<BlockKey> Chain(uint64_t chain, uint64_t n) {
  std::vector<BlockKey> keys;
  for (uint64_t i = 0; i < n; ++i) keys.push_back(Key(chain, i));
  return keys;
}

void PutChain(TieredStore& store, uint64_t chain, uint64_t n) {
  std::vector<BlockPut> puts;
  for (const BlockKey& key : Chain(chain, n)) puts.push_back({.key = key, .bytes = kBlockBytes, .tokens = 16});
  Result<PutResult> r = store.Put(puts);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
}

std::size_t Cached(const TieredStore& store, uint64_t chain, uint64_t n) {
  return store.Lookup(Chain(chain, n)).prefix_blocks;
}

TEST(ExpectedReads, KeepsTheSoonestOrderOfEachBlock) {
  store_internal::ExpectedReads reads;
  EXPECT_EQ(reads.Add(Key(0, 0), 5), 5u);
  EXPECT_EQ(reads.Add(Key(0, 0), 3), 3u);
  EXPECT_EQ(reads.Add(Key(0, 0), 9), 3u);
  EXPECT_EQ(reads.Remove(Key(0, 0), 3), std::optional<uint64_t>(5));
  EXPECT_EQ(reads.Remove(Key(0, 0), 4), std::optional<uint64_t>(5)) << "an order never added changes nothing";
  EXPECT_EQ(reads.Remove(Key(0, 0), 5), std::optional<uint64_t>(9));
  EXPECT_EQ(reads.Remove(Key(0, 0), 9), std::nullopt);
  EXPECT_EQ(reads.Soonest(Key(0, 0)), std::nullopt);
  EXPECT_EQ(reads.Remove(Key(1, 0), 1), std::nullopt);
  EXPECT_EQ(reads.size(), 0u);
}

// Chain 0 is the oldest; a queued request will read it. A burst of other chains fills the
// tier: LRU drops chain 0, the predictive policy keeps it, and lets it go once the request
// has started (the expectation is dropped) and the burst goes on.
TEST(StoreExpect, QueuedReadsSurviveABurstUnderPredictiveOnly) {
  for (PolicyKind policy : {PolicyKind::kLru, PolicyKind::kPredictive}) {
    auto store = OneTierStore(12, policy);
    ASSERT_NE(store, nullptr);
    PutChain(*store, 0, 4);
    StoreExpectation queued = store->Expect(Chain(0, 4));
    EXPECT_EQ(queued.size(), 4u);
    for (uint64_t chain = 1; chain <= 6; ++chain) PutChain(*store, chain, 4);
    EXPECT_EQ(Cached(*store, 0, 4), policy == PolicyKind::kPredictive ? 4u : 0u) << PolicyKindName(policy);
    queued.Release();
    for (uint64_t chain = 7; chain <= 9; ++chain) PutChain(*store, chain, 4);
    EXPECT_EQ(Cached(*store, 0, 4), 0u) << PolicyKindName(policy) << ": released, it ages out as LRU would";
  }
}

TEST(StoreExpect, TheRequestQueuedFirstIsKeptFirst) {
  auto store = OneTierStore(8, PolicyKind::kPredictive);
  ASSERT_NE(store, nullptr);
  PutChain(*store, 0, 4);
  PutChain(*store, 1, 4);
  StoreExpectation first = store->Expect(Chain(1, 4));
  StoreExpectation second = store->Expect(Chain(0, 4));
  StoreExpectation third = store->Expect(Chain(2, 4));
  PutChain(*store, 2, 4);  // room for two of the three queued chains
  EXPECT_EQ(Cached(*store, 1, 4), 4u);
  EXPECT_EQ(Cached(*store, 0, 4), 0u) << "queued after chain 1: it goes first";
  EXPECT_EQ(Cached(*store, 2, 4), 4u) << "a put never evicts its own chain";
}

// A tier holding only blocks queued requests will read refuses a block none will read (the
// lookahead optimum's bypass) and takes one a queued request will read, evicting the blocks
// of the request queued last; LRU takes everything.
TEST(StoreExpect, AFullTierOfExpectedBlocksTakesOnlyExpectedOnes) {
  for (PolicyKind policy : {PolicyKind::kLru, PolicyKind::kPredictive}) {
    auto store = OneTierStore(4, policy);
    ASSERT_NE(store, nullptr);
    PutChain(*store, 0, 4);
    StoreExpectation all = store->Expect(Chain(0, 4));
    StoreExpectation later = store->Expect(Chain(5, 2));  // not stored yet: remembered anyway
    PutChain(*store, 1, 2);
    const bool predictive = policy == PolicyKind::kPredictive;
    EXPECT_EQ(Cached(*store, 1, 2), predictive ? 0u : 2u) << PolicyKindName(policy);
    EXPECT_EQ(store->GetStats().tiers[0].refused, predictive ? 1u : 0u) << PolicyKindName(policy);
    PutChain(*store, 5, 2);  // expected, after chain 0: it may take chain 0's tail only when nothing else is left
    EXPECT_EQ(Cached(*store, 0, 4), predictive ? 2u : 0u) << PolicyKindName(policy);
    EXPECT_EQ(Cached(*store, 5, 2), 2u) << PolicyKindName(policy);
    all.Release();
    later.Release();
    PutChain(*store, 2, 2);  // nothing is expected any more: LRU order again
    EXPECT_EQ(Cached(*store, 2, 2), 2u) << PolicyKindName(policy);
  }
}

TEST(StoreExpect, ExpectAndReleaseFromManyThreadsBesidePutsAndGets) {
  auto store = OneTierStore(64, PolicyKind::kPredictive);
  ASSERT_NE(store, nullptr);
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (uint64_t round = 0; round < 200; ++round) {
        const uint64_t chain = static_cast<uint64_t>(t) * 1000 + round % 20;
        StoreExpectation queued = store->Expect(Chain(chain, 6));
        std::vector<BlockPut> puts;
        for (const BlockKey& key : Chain(chain, 6)) puts.push_back({.key = key, .bytes = kBlockBytes, .tokens = 16});
        if (!store->Put(puts).ok()) failures.fetch_add(1);
        if (round % 3 == 0) queued.Release();
        const std::vector<BlockKey> keys = Chain(chain, 6);
        if (!store->Get(keys, {}).ok()) failures.fetch_add(1);
      }
    });
  }
  for (std::thread& th : threads) th.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_LE(store->GetStats().tiers[0].blocks, 64u);
}

}  // namespace
}  // namespace kvtier
