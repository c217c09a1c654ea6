// Many threads through every store operation at once, on two tiers small enough that the movers
// demote, drop and promote all the while: what TSan checks the locking rules of store_state.h
// against, and what the counters and the bytes must survive.
#include <atomic>
#include <random>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "kvtier/store.h"
#include "testing/test_store.h"

namespace kvtier {
namespace {

using testing::TestChains;
using testing::TestDram;

constexpr uint32_t kBlockBytes = 16 << 10;
constexpr uint64_t kChainBlocks = 4;
constexpr int kThreads = 8;
constexpr int kRounds = 40;
constexpr uint64_t kSharedChains = 4;  // chains every thread puts and reads (the rest are its own)

// Every test runs on a library store's one policy and one index table, and on the shards
// `kvtier serve` uses (kServePolicyShards, kServeIndexShards: 8 each).
class StoreConcurrency : public ::testing::TestWithParam<uint32_t> {
 protected:
  StoreOptions Options() const {
    StoreOptions options;
    options.policy_options.shards = GetParam();
    options.index_shards = GetParam();
    return options;
  }
};

INSTANTIATE_TEST_SUITE_P(Shards, StoreConcurrency, ::testing::Values(1u, 8u),
                         [](const ::testing::TestParamInfo<uint32_t>& shards) { return std::to_string(shards.param); });

std::unique_ptr<TieredStore> SmallTwoTierStore(StoreOptions options) {
  std::vector<std::unique_ptr<Tier>> tiers;
  // DRAM tiers round up to 2 MiB slabs: 128 blocks fast, 512 slow, fewer than the ~1,000 put.
  tiers.push_back(TestDram(2u << 20, "fast"));
  tiers.push_back(TestDram(8u << 20, "slow"));
  Result<std::unique_ptr<TieredStore>> store = TieredStore::Open(std::move(tiers), std::move(options));
  EXPECT_TRUE(store.ok()) << store.status().ToString();
  return store.ok() ? std::move(*store) : nullptr;
}

// One thread's mix: puts, lookups, gets (bytes checked by TestChains), pins, expectations,
// retags, prefetches and stats, drawn at random. Returns the lookups it made.
uint64_t RunMix(TieredStore& store, const TestChains& chains, int thread, std::atomic<int>& pinned_misses) {
  std::mt19937_64 rng(static_cast<uint64_t>(thread) + 1);
  uint64_t lookups = 0;
  for (int round = 0; round < kRounds; ++round) {
    const uint64_t own = 100 + static_cast<uint64_t>(thread) * kRounds + static_cast<uint64_t>(round);
    const uint64_t chain = rng() % 2 == 0 ? own : rng() % kSharedChains;
    const std::vector<BlockKey> keys = TestChains::Keys(chain, kChainBlocks);
    EXPECT_TRUE(chains.Put(store, chain, kChainBlocks).ok());
    switch (rng() % 6) {
      case 0: {
        // A pinned chain stays whole until released, whatever the movers do.
        Result<StorePin> pin = store.Pin(keys);
        if (pin.ok() && pin->size() == kChainBlocks && chains.Get(store, chain, kChainBlocks) != kChainBlocks) {
          pinned_misses.fetch_add(1);
        }
        break;
      }
      case 1: {
        StoreExpectation expected = store.Expect(keys);
        (void)chains.Get(store, chain, kChainBlocks);
        break;
      }
      case 2: {
        const std::vector<BlockTags> tags = {{.key = keys[0], .type = BlockType::kSystemPrompt}};
        store.Retag(tags);
        break;
      }
      case 3:
        store.Prefetch(keys);
        break;
      case 4:
        (void)store.GetStats();
        break;
      default:
        (void)chains.Get(store, chain, kChainBlocks);
    }
    (void)store.Lookup(keys);
    ++lookups;
  }
  return lookups;
}

TEST_P(StoreConcurrency, EveryOperationAtOnceLosesNoByteAndNoCount) {
  auto store = SmallTwoTierStore(Options());
  ASSERT_NE(store, nullptr);
  const TestChains chains(kBlockBytes);
  std::atomic<int> pinned_misses{0};
  std::atomic<uint64_t> lookups{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] { lookups.fetch_add(RunMix(*store, chains, t, pinned_misses)); });
  }
  for (std::thread& th : threads) th.join();
  store->Drain();
  EXPECT_EQ(pinned_misses.load(), 0) << "a pinned chain lost a block";
  const StoreStats stats = store->GetStats();
  // Lookups count under the shared lock: every one of them, from every thread, is counted.
  EXPECT_EQ(stats.lookups, lookups.load());
  EXPECT_EQ(stats.lookup_blocks, lookups.load() * kChainBlocks);
  EXPECT_EQ(stats.pinned_blocks, 0u);
  EXPECT_EQ(stats.expected_blocks, 0u);
  for (const StoreTierStats& tier : stats.tiers) {
    EXPECT_LE(tier.used_bytes, tier.capacity_bytes) << tier.name;
  }
  // The movers ran all the while (the test is about racing them).
  EXPECT_GT(stats.tiers[0].demotions, 0u);
  EXPECT_GT(stats.tiers[1].drops + stats.tiers[1].refused, 0u);
  // What the index lists reads back whole and bit-exact (TestChains checks the bytes). Each
  // chain is pinned first: the gets of this loop promote, and the movers they wake may drop
  // an unpinned block between its lookup and its read, as a cache may.
  std::size_t listed = 0;
  for (uint64_t chain = 0; chain < 100 + kThreads * kRounds; ++chain) {
    Result<StorePin> pin = store->Pin(TestChains::Keys(chain, kChainBlocks));
    ASSERT_TRUE(pin.ok()) << pin.status().ToString();
    EXPECT_EQ(chains.Get(*store, chain, kChainBlocks), pin->size()) << "chain " << chain;
    listed += pin->size();
  }
  EXPECT_GT(listed, 128u) << "the store kept more than its fast tier holds";
}

// Puts of different chains from many threads, in a store with room for all of them: each
// section runs under the metadata lock shared (store_state.h), so none takes it exclusively,
// and what they record side by side adds up: every block counted once in its tier, every
// chain read back bit-exact. Half the chains continue one shared first block (a system
// prompt), so the threads also index children of one parent at once.
TEST_P(StoreConcurrency, PutsOfDifferentChainsRunSideBySideAndAddUp) {
  std::vector<std::unique_ptr<Tier>> tiers;
  tiers.push_back(TestDram(64u << 20, "fast"));
  Result<std::unique_ptr<TieredStore>> opened = TieredStore::Open(std::move(tiers), Options());
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  TieredStore& store = **opened;
  const TestChains chains(kBlockBytes);
  constexpr uint64_t kRoot = 1;  // a one-block chain the others continue
  ASSERT_TRUE(chains.Put(store, kRoot, 1).ok());
  const BlockKey root = TestChains::Keys(kRoot, 1)[0];
  const uint64_t before = store.GetStats().metadata_lock.exclusive_acquisitions;
  constexpr uint64_t kChainsPerThread = 40;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (uint64_t c = 0; c < kChainsPerThread; ++c) {
        const uint64_t chain = 1000 + static_cast<uint64_t>(t) * kChainsPerThread + c;
        const std::optional<BlockKey> parent = c % 2 == 0 ? std::optional(root) : std::nullopt;
        const Result<PutResult> put = chains.Put(store, chain, kChainBlocks, parent);
        EXPECT_TRUE(put.ok() && put->new_blocks == kChainBlocks) << put.status().ToString();
      }
    });
  }
  for (std::thread& th : threads) th.join();
  store.Drain();
  const StoreStats stats = store.GetStats();
  EXPECT_EQ(stats.metadata_lock.exclusive_acquisitions, before) << "a put took the metadata lock exclusively";
  const uint64_t blocks = 1 + kThreads * kChainsPerThread * kChainBlocks;
  EXPECT_EQ(stats.tiers[0].blocks, blocks);
  EXPECT_EQ(stats.tiers[0].used_bytes, blocks * kBlockBytes);
  EXPECT_EQ(stats.index_blocks, blocks);
  EXPECT_EQ(stats.put_blocks, blocks);
  EXPECT_EQ(stats.index_shard_locks.size(), GetParam());
  for (uint64_t chain = 1000; chain < 1000 + kThreads * kChainsPerThread; ++chain) {
    const bool continues_root = (chain - 1000) % kChainsPerThread % 2 == 0;
    std::vector<BlockKey> keys = TestChains::Keys(chain, kChainBlocks);
    if (continues_root) keys.insert(keys.begin(), root);
    EXPECT_EQ(store.Lookup(keys).prefix_blocks, keys.size()) << "chain " << chain;
    EXPECT_EQ(chains.Get(store, chain, kChainBlocks, continues_root ? std::optional(root) : std::nullopt),
              kChainBlocks)
        << "chain " << chain;
  }
}

}  // namespace
}  // namespace kvtier
