#include "kvtier/prefix_index.h"

#include <algorithm>
#include <random>
#include <set>
#include <thread>
#include <unordered_map>
#include <unordered_set>

#include <gtest/gtest.h>

namespace kvtier {
namespace {

std::vector<BlockKey> Chain(uint64_t request, std::size_t blocks, std::size_t shared_prefix = 0, uint64_t shared_with = 0) {
  // Keys as a chained hash would give them: block i of two requests is equal iff their
  // first i + 1 blocks are.
  std::vector<BlockKey> keys;
  for (std::size_t i = 0; i < blocks; ++i) {
    const uint64_t owner = i < shared_prefix ? shared_with : request;
    keys.push_back({owner * 0x100000001b3ull + i + 1, (owner << 20) ^ (i * 0x9E3779B97F4A7C15ull) ^ 0x5555});
  }
  return keys;
}

std::vector<BlockMeta> Metas(std::size_t n, uint32_t size = 4096) {
  return std::vector<BlockMeta>(n, BlockMeta{.size_bytes = size});
}

// Up to `max` unpinned leaves, least recently used first: what a caller's policy would evict.
std::vector<BlockKey> Leaves(const PrefixIndex& index, std::size_t max) {
  std::vector<std::pair<uint64_t, BlockKey>> leaves;
  index.ForEachBlock([&leaves](const BlockInfo& info) {
    if (info.children == 0 && info.pins == 0) leaves.emplace_back(info.last_access, info.key);
  });
  std::stable_sort(leaves.begin(), leaves.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<BlockKey> out;
  for (std::size_t i = 0; i < std::min(max, leaves.size()); ++i) out.push_back(leaves[i].second);
  return out;
}

// Every test runs on an index of one shard and of eight: a sharded index answers as one does.
class PrefixIndexTest : public ::testing::TestWithParam<uint32_t> {
 protected:
  PrefixIndexOptions Options(PrefixIndexOptions options = {}) const {
    options.shards = GetParam();
    return options;
  }
};

INSTANTIATE_TEST_SUITE_P(Shards, PrefixIndexTest, ::testing::Values(1u, 8u),
                         [](const ::testing::TestParamInfo<uint32_t>& shards) { return std::to_string(shards.param); });

TEST_P(PrefixIndexTest, LongestPrefixOfInsertedChains) {
  PrefixIndex index(Options());
  const auto a = Chain(1, 8);
  ASSERT_EQ(*index.Insert(a, Metas(8), 10), 8u);
  EXPECT_EQ(index.LongestPrefix(a), 8u);
  index.Touch(a, 11);
  const auto b = Chain(2, 6, 3, 1);  // shares 3 blocks with a
  EXPECT_EQ(index.LongestPrefix(b), 3u);
  index.Touch(std::span(b).first(3), 12);
  ASSERT_EQ(*index.Insert(b, Metas(6), 13), 3u);  // only the 3 new blocks
  EXPECT_EQ(index.size(), 11u);
  EXPECT_EQ(index.GetStats().leaves, 2u);
  EXPECT_EQ(index.LongestPrefix(Chain(3, 4)), 0u);
  const std::optional<BlockInfo> shared = index.Find(a[2]);
  ASSERT_TRUE(shared.has_value());
  EXPECT_EQ(shared->children, 2u);
  EXPECT_EQ(shared->parent, a[1]);
  EXPECT_EQ(shared->last_access, 13u);
  EXPECT_EQ(shared->access_count, 4u);  // insert, two touches, second insert
}

TEST_P(PrefixIndexTest, ContinuationUnderAnExistingParent) {
  PrefixIndex index(Options());
  const auto a = Chain(1, 6);
  ASSERT_TRUE(index.Insert(std::span(a).first(3), Metas(3), 1).ok());
  ASSERT_EQ(*index.Insert(std::span(a).subspan(3), Metas(3), 2, a[2]), 3u);
  EXPECT_EQ(index.LongestPrefix(a), 6u);
  Result<std::size_t> orphan = index.Insert(Chain(9, 1), Metas(1), 4, Chain(8, 1)[0]);
  ASSERT_FALSE(orphan.ok());
  EXPECT_EQ(orphan.status().code(), StatusCode::kNotFound);
}

// A run is what Find per key, checking each parent, gives: stopped by a missing key, by a
// key stored under another parent, and (from a chain start only) by a first key that has a parent.
TEST_P(PrefixIndexTest, FindRunStopsWhereFindPerKeyWould) {
  PrefixIndex index(Options());
  const auto a = Chain(1, 40);
  ASSERT_EQ(*index.Insert(a, Metas(40, 100), 1), 40u);
  const auto b = Chain(2, 32, 20, 1);  // a's first 20 blocks, then its own
  ASSERT_EQ(*index.Insert(b, Metas(32, 200), 2), 12u);
  std::vector<BlockInfo> run;
  index.FindRun(a, PrefixIndex::RunStart::kChainStart, run);
  ASSERT_EQ(run.size(), 40u);
  for (std::size_t i = 0; i < run.size(); ++i) {
    EXPECT_EQ(run[i].key, a[i]);
    EXPECT_EQ(run[i].meta.size_bytes, 100u);
    EXPECT_EQ(run[i].parent, i == 0 ? std::nullopt : std::optional(a[i - 1]));
  }
  std::vector<BlockKey> gap = a;
  gap[17] = Chain(7, 1)[0];
  index.FindRun(gap, PrefixIndex::RunStart::kChainStart, run);
  EXPECT_EQ(run.size(), 17u);
  std::vector<BlockKey> crossed(a.begin(), a.begin() + 10);
  crossed.push_back(b[31]);  // stored, but under b[30]
  index.FindRun(crossed, PrefixIndex::RunStart::kChainStart, run);
  EXPECT_EQ(run.size(), 10u);
  const std::span<const BlockKey> middle = std::span(a).subspan(5, 30);
  index.FindRun(middle, PrefixIndex::RunStart::kChainStart, run);
  EXPECT_TRUE(run.empty());
  index.FindRun(middle, PrefixIndex::RunStart::kAnyBlock, run);
  ASSERT_EQ(run.size(), 30u);
  EXPECT_EQ(run.front().key, a[5]);
  index.FindRun({}, PrefixIndex::RunStart::kAnyBlock, run);
  EXPECT_TRUE(run.empty());
  // FindRunPlacement walks the same runs and keeps each block's size and tiers.
  std::vector<PrefixIndex::RunPlacement> placement;
  const std::vector<BlockKey> middle_keys(middle.begin(), middle.end());
  for (const auto& [keys, start] : std::vector<std::pair<std::vector<BlockKey>, PrefixIndex::RunStart>>{
           {a, PrefixIndex::RunStart::kChainStart}, {gap, PrefixIndex::RunStart::kChainStart},
           {crossed, PrefixIndex::RunStart::kChainStart}, {middle_keys, PrefixIndex::RunStart::kChainStart},
           {middle_keys, PrefixIndex::RunStart::kAnyBlock}, {b, PrefixIndex::RunStart::kChainStart}}) {
    index.FindRun(keys, start, run);
    index.FindRunPlacement(keys, start, placement);
    ASSERT_EQ(placement.size(), run.size());
    for (std::size_t i = 0; i < run.size(); ++i) {
      EXPECT_EQ(placement[i].size_bytes, run[i].meta.size_bytes);
      EXPECT_EQ(placement[i].tiers, run[i].meta.tiers);
    }
  }
  ASSERT_TRUE(index.SetTier(a[3], 2, true).ok());
  index.FindRunPlacement(a, PrefixIndex::RunStart::kChainStart, placement);
  EXPECT_EQ(placement[3].tiers, 1u << 2);
  EXPECT_EQ(placement[20].size_bytes, 100u);
}

TEST_P(PrefixIndexTest, OnlyUnpinnedLeavesAreEvicted) {
  PrefixIndex index(Options());
  const auto a = Chain(1, 4);
  const auto b = Chain(2, 4, 2, 1);
  ASSERT_TRUE(index.Insert(a, Metas(4), 1).ok());
  ASSERT_TRUE(index.Insert(b, Metas(4), 2).ok());
  EXPECT_EQ(index.Evict(a[1]).code(), StatusCode::kFailedPrecondition);  // has two children
  EXPECT_EQ(Leaves(index, 10), (std::vector<BlockKey>{a[3], b[3]}));
  {
    Result<PinnedBlocks> pinned = index.Pin(a);
    ASSERT_TRUE(pinned.ok());
    EXPECT_EQ(index.Evict(a[3]).code(), StatusCode::kFailedPrecondition);
    EXPECT_EQ(Leaves(index, 10), (std::vector<BlockKey>{b[3]}));
  }  // unpinned here
  ASSERT_TRUE(index.Evict(a[3]).ok());
  ASSERT_TRUE(index.Evict(a[2]).ok());  // became a leaf
  EXPECT_EQ(index.LongestPrefix(a), 2u);
  EXPECT_EQ(index.LongestPrefix(b), 4u);
  EXPECT_EQ(index.Evict(a[3]).code(), StatusCode::kNotFound);
  EXPECT_EQ(index.GetStats().evictions, 2u);
  Result<PinnedBlocks> missing = index.Pin(a);
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_EQ(index.Find(a[0])->pins, 0u);  // a failed pin leaves nothing pinned
}

TEST_P(PrefixIndexTest, PinnedBlocksMoveAndRelease) {
  PrefixIndex index(Options());
  const auto a = Chain(1, 2);
  ASSERT_TRUE(index.Insert(a, Metas(2), 1).ok());
  PinnedBlocks outer;
  {
    Result<PinnedBlocks> pinned = index.Pin(a);
    ASSERT_TRUE(pinned.ok());
    outer = std::move(*pinned);
  }
  EXPECT_EQ(index.Find(a[1])->pins, 1u);
  outer.Release();
  EXPECT_EQ(index.Find(a[1])->pins, 0u);
}

TEST_P(PrefixIndexTest, CollisionsAreMissesNeverAliases) {
  // A digest function that returns the same value for everything forces collisions.
  BlockHasher colliding = BlockHasher::WithDigestFunctionForTesting({}, [](std::span<const uint8_t>) {
    BlockDigest d;
    d.size = 16;
    d.bytes.fill(0x42);
    return d;
  });
  std::vector<TokenId> tokens_a(32), tokens_b(32);
  for (TokenId i = 0; i < 32; ++i) {
    tokens_a[i] = i;
    tokens_b[i] = 1000 + i;
  }
  const auto keys_a = colliding.ChainKeys(tokens_a);
  const auto keys_b = colliding.ChainKeys(tokens_b);
  ASSERT_EQ(keys_a[0], keys_b[0]);
  PrefixIndex index(Options());
  auto meta = [](std::span<const TokenId> tokens) {
    return BlockMeta{.size_bytes = 1, .fingerprint = BlockHasher::TokenFingerprint(tokens)};
  };
  // Block 1's key equals block 0's, under a different parent: the second block collides.
  std::vector<BlockMeta> metas_a = {meta(std::span(tokens_a).first(16)), meta(std::span(tokens_a).subspan(16))};
  Result<std::size_t> inserted = index.Insert(keys_a, metas_a, 1);
  ASSERT_FALSE(inserted.ok());
  EXPECT_EQ(inserted.status().code(), StatusCode::kAlreadyExists);
  EXPECT_EQ(index.size(), 1u);
  // Same key, same (empty) parent, other tokens: the fingerprint tells them apart.
  std::vector<BlockMeta> metas_b = {meta(std::span(tokens_b).first(16))};
  EXPECT_EQ(index.Insert(std::span(keys_b).first(1), metas_b, 2).status().code(), StatusCode::kAlreadyExists);
  const uint64_t fingerprint_b = metas_b[0].fingerprint;
  EXPECT_EQ(index.LongestPrefix(std::span(keys_b).first(1), std::span(&fingerprint_b, 1)), 0u);
  const uint64_t fingerprint_a = metas_a[0].fingerprint;
  EXPECT_EQ(index.LongestPrefix(std::span(keys_a).first(1), std::span(&fingerprint_a, 1)), 1u);
  EXPECT_EQ(index.LongestPrefix(keys_a), 1u);  // block 1 "found" under the wrong parent: a miss
  EXPECT_EQ(index.GetStats().collisions, 4u);
}

// Keys a caller builds from ids rather than hashes: many share a low word and differ only in
// the high one. Every operation must still tell them apart by the whole key.
TEST_P(PrefixIndexTest, StructuredKeysThatShareALowWord) {
  PrefixIndex index(Options());
  constexpr uint64_t kChains = 500, kBlocks = 4;
  auto key = [](uint64_t chain, uint64_t i) { return BlockKey{chain, i + 1}; };  // lo: the position only
  for (uint64_t c = 0; c < kChains; ++c) {
    std::vector<BlockKey> chain;
    for (uint64_t i = 0; i < kBlocks; ++i) chain.push_back(key(c, i));
    ASSERT_EQ(*index.Insert(chain, Metas(kBlocks), c), kBlocks);
  }
  EXPECT_EQ(index.size(), kChains * kBlocks);
  for (uint64_t c = 0; c < kChains; c += 7) {
    const std::vector<BlockKey> chain{key(c, 0), key(c, 1), key(c, 2), key(c, 3)};
    EXPECT_EQ(index.LongestPrefix(chain), kBlocks);
    EXPECT_EQ(index.Find(key(c, 2))->parent, key(c, 1));
  }
  // Block 1 of chain 8 after block 0 of chain 7: the same low word as chain 7's block 1, and
  // the parent that block has, but another key: no match past block 0.
  const std::vector<BlockKey> crossed{key(7, 0), key(8, 1)};
  EXPECT_EQ(index.LongestPrefix(crossed), 1u);
  std::vector<BlockInfo> run;
  index.FindRun(crossed, PrefixIndex::RunStart::kChainStart, run);
  EXPECT_EQ(run.size(), 1u);
  // Evicting leaves moves slots back over their clusters; what stays is still found.
  for (uint64_t c = 0; c < kChains; c += 2) ASSERT_TRUE(index.Evict(key(c, kBlocks - 1)).ok());
  for (uint64_t c = 0; c < kChains; ++c) {
    EXPECT_EQ(index.Find(key(c, kBlocks - 1)).has_value(), c % 2 == 1) << "chain " << c;
    EXPECT_TRUE(index.Find(key(c, kBlocks - 2)).has_value()) << "chain " << c;
  }
}

TEST_P(PrefixIndexTest, TiersAndTags) {
  PrefixIndex index(Options());
  const auto a = Chain(1, 1);
  const std::vector<BlockMeta> meta = {BlockMeta{.size_bytes = 7, .type = BlockType::kToolContext,
                                                 .transition = TransitionType::kAgentHandoff, .tiers = 0b1}};
  ASSERT_TRUE(index.Insert(a, meta, 1).ok());
  ASSERT_TRUE(index.SetTier(a[0], 3, true).ok());
  ASSERT_TRUE(index.SetTier(a[0], 0, false).ok());
  EXPECT_FALSE(index.SetTier(a[0], 8, true).ok());
  EXPECT_EQ(index.SetTier(Chain(2, 1)[0], 1, true).code(), StatusCode::kNotFound);
  const BlockInfo info = *index.Find(a[0]);
  EXPECT_EQ(info.meta.tiers, 0b1000);
  EXPECT_EQ(info.meta.size_bytes, 7u);
  EXPECT_EQ(info.meta.type, BlockType::kToolContext);
  EXPECT_EQ(info.meta.transition, TransitionType::kAgentHandoff);
}

// Growth past the initial table and backward-shift deletion, against a shadow set.
TEST_P(PrefixIndexTest, ManyInsertsAndEvictionsMatchAShadowSet) {
  PrefixIndex index(Options({.expected_blocks = 16}));
  std::mt19937_64 rng(7);
  std::set<BlockKey> shadow;
  std::vector<std::vector<BlockKey>> chains;
  // 500 chains of their own, then 2500 that share 1-4 leading blocks with one of them.
  for (uint64_t r = 1; r <= 3000; ++r) {
    const std::size_t shared = r <= 500 ? 0 : 1 + rng() % 4;
    const auto keys = Chain(r, 8, shared, 1 + rng() % 500);
    ASSERT_TRUE(index.Insert(keys, Metas(8), r).ok());
    shadow.insert(keys.begin(), keys.end());
    chains.push_back(keys);
  }
  EXPECT_EQ(index.size(), shadow.size());
  // Evict leaves until a third remain.
  while (index.size() > shadow.size() / 3) {
    for (const BlockKey& key : Leaves(index, 64)) {
      ASSERT_TRUE(index.Evict(key).ok());
      shadow.erase(key);
    }
  }
  EXPECT_EQ(index.size(), shadow.size());
  for (const auto& chain : chains) {
    const std::size_t found = index.LongestPrefix(chain);
    for (std::size_t i = 0; i < chain.size(); ++i) EXPECT_EQ(shadow.count(chain[i]) > 0, i < found);
  }
  EXPECT_LT(index.MemoryBytes(), std::size_t{64} << 20);
}

// The memory for the expected blocks is allocated when the index is made, not by the insert
// that first needs it: inserts run under the store's exclusive lock, where faulting in (and
// compacting for) a 4 MiB chunk of huge pages stalled every request for tens of milliseconds.
TEST_P(PrefixIndexTest, MemoryForTheExpectedBlocksIsAllocatedUpFront) {
  PrefixIndex index(Options({.expected_blocks = 100'000}));
  const std::size_t made = index.MemoryBytes();
  for (uint64_t r = 1; r <= 100'000 / 8; ++r) ASSERT_TRUE(index.Insert(Chain(r, 8), Metas(8), r).ok());
  EXPECT_EQ(index.size(), 100'000u);
  EXPECT_EQ(index.MemoryBytes(), made);
}

TEST_P(PrefixIndexTest, ForEachBlockVisitsParentsFirst) {
  PrefixIndex index(Options());
  for (uint64_t r = 1; r <= 50; ++r) ASSERT_TRUE(index.Insert(Chain(r, 5, r == 1 ? 0 : r % 4, 1), Metas(5), r).ok());
  std::unordered_set<BlockKey, BlockKeyHash> seen;
  std::size_t visited = 0;
  index.ForEachBlock([&](const BlockInfo& info) {
    if (info.parent) {
      EXPECT_TRUE(seen.count(*info.parent)) << info.key.ToHex();
    }
    seen.insert(info.key);
    ++visited;
  });
  EXPECT_EQ(visited, index.size());
}

// Concurrent insert / lookup / pin / evict; run under the tsan preset.
TEST_P(PrefixIndexTest, ConcurrentInsertLookupEvict) {
  PrefixIndex index(Options());
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> lookups{0};
  auto inserter = [&](uint64_t base) {
    for (uint64_t r = 0; r < 400; ++r) {
      auto keys = Chain(base + r, 6, r % 2 == 0 ? 2 : 0, base);
      (void)index.Insert(keys, Metas(6), r);
    }
  };
  auto looker = [&] {
    do {
      for (uint64_t r = 0; r < 50; ++r) {
        const auto keys = Chain(1000 + r, 6, r % 2 == 0 ? 2 : 0, 1000);
        index.Touch(std::span(keys).first(index.LongestPrefix(keys)), r);
        if (Result<PinnedBlocks> pinned = index.Pin(std::span(keys).first(1)); pinned.ok()) (void)index.Find(keys[0]);
        lookups.fetch_add(1);
      }
    } while (!stop.load());
  };
  auto evictor = [&] {
    do {
      for (const BlockKey& key : Leaves(index, 16)) {
        const Status s = index.Evict(key);
        EXPECT_TRUE(s.ok() || s.code() == StatusCode::kFailedPrecondition || s.code() == StatusCode::kNotFound) << s.ToString();
      }
    } while (!stop.load());
  };
  std::vector<std::thread> threads;
  threads.emplace_back(inserter, 1000);
  threads.emplace_back(inserter, 5000);
  threads.emplace_back(looker);
  threads.emplace_back(evictor);
  threads[0].join();
  threads[1].join();
  stop = true;
  threads[2].join();
  threads[3].join();
  // Every remaining block's parent is present: eviction never orphaned a child.
  std::unordered_set<BlockKey, BlockKeyHash> present;
  std::vector<std::optional<BlockKey>> parents;
  index.ForEachBlock([&](const BlockInfo& info) {
    present.insert(info.key);
    parents.push_back(info.parent);
  });
  for (const auto& parent : parents) {
    if (parent) {
      EXPECT_TRUE(present.count(*parent));
    }
  }
  EXPECT_GT(lookups.load(), 0u);
}

TEST_P(PrefixIndexTest, SetTagsChangesOnlyTheTags) {
  PrefixIndex index(Options());
  const auto keys = Chain(1, 2);
  ASSERT_TRUE(index.Insert(keys, Metas(2), 10).ok());
  ASSERT_TRUE(index.SetTags(keys[1], BlockType::kSystemPrompt, TransitionType::kAgentHandoff).ok());
  const std::optional<BlockInfo> info = index.Find(keys[1]);
  ASSERT_TRUE(info.has_value());
  EXPECT_EQ(info->meta.type, BlockType::kSystemPrompt);
  EXPECT_EQ(info->meta.transition, TransitionType::kAgentHandoff);
  EXPECT_EQ(info->meta.size_bytes, 4096u);
  EXPECT_EQ(index.Find(keys[0])->meta.type, BlockType::kUserContext);
  EXPECT_EQ(index.SetTags(Chain(2, 1)[0], BlockType::kSystemPrompt, TransitionType::kAgentHandoff).code(),
            StatusCode::kNotFound);
}

// Threads insert and evict chains that share prefixes, so that parents and children sit in
// different shards and change at once: afterwards every block's count of children and every
// leaf list still match the tree (run under the tsan preset too).
TEST_P(PrefixIndexTest, ChildrenAndLeavesStayExactUnderThreads) {
  PrefixIndex index(Options({.expected_blocks = 1024}));
  constexpr uint64_t kThreads = 4;
  auto worker = [&index](uint64_t thread) {
    std::mt19937_64 rng(thread);
    for (uint64_t r = 0; r < 600; ++r) {
      // Every chain shares 1-3 leading blocks with one of 20 common roots.
      const auto keys = Chain(100 + thread * 1000 + r, 6, 1 + rng() % 3, rng() % 20);
      (void)index.Insert(keys, Metas(6), r);
      if (r % 3 == 0) {
        for (const BlockKey& key : Leaves(index, 8)) (void)index.Evict(key);
      }
    }
  };
  std::vector<std::thread> threads;
  for (uint64_t t = 0; t < kThreads; ++t) threads.emplace_back(worker, t);
  for (std::thread& t : threads) t.join();
  std::unordered_map<BlockKey, uint32_t, BlockKeyHash> children, counted;
  std::size_t blocks = 0;
  index.ForEachBlock([&](const BlockInfo& info) {
    children[info.key] = info.children;
    counted.try_emplace(info.key, 0);
    if (info.parent) ++counted[*info.parent];
    ++blocks;
  });
  ASSERT_GT(blocks, 0u);
  std::size_t leaves = 0;
  for (const auto& [key, n] : children) {
    EXPECT_EQ(n, counted[key]) << key.ToHex();
    leaves += n == 0 ? 1 : 0;
  }
  EXPECT_EQ(index.GetStats().leaves, leaves);
  // Evicting every leaf, level by level, empties the index: nothing was left counted as a child.
  while (index.size() > 0) {
    const std::vector<BlockKey> leaves_now = Leaves(index, blocks);
    ASSERT_FALSE(leaves_now.empty());
    for (const BlockKey& key : leaves_now) ASSERT_TRUE(index.Evict(key).ok());
  }
  EXPECT_EQ(index.GetStats().leaves, 0u);
}

TEST_P(PrefixIndexTest, EachShardHasItsOwnLock) {
  PrefixIndex index(Options());
  ASSERT_EQ(index.GetStats().shard_locks.size(), GetParam());
  ASSERT_TRUE(index.Insert(Chain(1, 64), Metas(64), 1).ok());
  const PrefixIndex::Stats stats = index.GetStats();
  std::size_t locked = 0;
  uint64_t acquisitions = 0;
  for (const LockProfile& lock : stats.shard_locks) {
    locked += lock.exclusive_acquisitions > 0 ? 1 : 0;
    acquisitions += lock.exclusive_acquisitions;
  }
  EXPECT_EQ(locked, GetParam()) << "64 blocks fall in every shard";
  EXPECT_EQ(stats.lock.exclusive_acquisitions, acquisitions);
}

TEST(PrefixIndexOptions, ShardsArePowersOfTwoUpTo64) {
  EXPECT_TRUE(PrefixIndexOptions{.shards = 1}.Validate().ok());
  EXPECT_TRUE(PrefixIndexOptions{.shards = 64}.Validate().ok());
  for (uint32_t bad : {0u, 3u, 12u, 128u}) {
    const Status status = PrefixIndexOptions{.shards = bad}.Validate();
    EXPECT_EQ(status.code(), StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(status.message().find("power of two"), std::string::npos) << status.ToString();
  }
}

}  // namespace
}  // namespace kvtier
