#include "kvtier/optimal_bound.h"

#include <algorithm>
#include <array>
#include <bit>
#include <random>
#include <map>
#include <vector>

#include <gtest/gtest.h>

namespace kvtier {
namespace {

// Builds a trace from requests of small node numbers; node k has id 1000 + 7919 k and k + 1
// tokens unless `tokens` says otherwise.
PrefixTrace Trace(const std::vector<std::vector<int>>& requests, const std::vector<uint32_t>& tokens = {}) {
  PrefixTrace trace;
  for (const std::vector<int>& request : requests) {
    std::vector<uint64_t> ids;
    std::vector<uint32_t> counts;
    for (int node : request) {
      ids.push_back(1000 + 7919 * static_cast<uint64_t>(node));
      counts.push_back(tokens.empty() ? static_cast<uint32_t>(node + 1) : tokens[static_cast<std::size_t>(node)]);
    }
    EXPECT_TRUE(trace.AddRequest(ids, counts).ok());
  }
  return trace;
}

OptimalBound Bound(const PrefixTrace& trace, uint64_t capacity) {
  Result<OptimalBound> bound = ComputeOptimalBound(trace, capacity);
  EXPECT_TRUE(bound.ok()) << bound.status().ToString();
  return std::move(bound).value();
}

// Exhaustive search over every policy that admits only the block being accessed and may
// drop any cached blocks after each access, scoring hits by the prefix rule. f(t, cache,
// alive) is the most hits (or hit tokens) from access t on, `alive` meaning every earlier
// block of t's request hit. Trees of at most 8 blocks: the cache is a bitmask.
uint64_t BruteForce(const std::vector<std::vector<int>>& requests, const std::vector<uint32_t>& weight,
                    uint64_t capacity) {
  std::vector<int> block;
  std::vector<bool> start;
  for (const std::vector<int>& request : requests) {
    for (std::size_t i = 0; i < request.size(); ++i) {
      block.push_back(request[i]);
      start.push_back(i == 0);
    }
  }
  const std::size_t n = block.size();
  // best[t][mask][alive]; index n is the end of the trace (all zeros).
  std::vector<std::vector<std::array<uint64_t, 2>>> best(n + 1, std::vector<std::array<uint64_t, 2>>(256, {0, 0}));
  for (std::size_t t = n; t-- > 0;) {
    const unsigned bit = 1u << block[t];
    for (unsigned mask = 0; mask < 256; ++mask) {
      if (static_cast<uint64_t>(std::popcount(mask)) > capacity) continue;
      for (int alive = 0; alive < 2; ++alive) {
        const bool hit = (start[t] || alive == 1) && (mask & bit) != 0;
        const int next_alive = hit ? 1 : 0;
        const unsigned choices = mask | bit;
        uint64_t future = 0;
        // Every subset of (cache + the accessed block) that fits.
        for (unsigned sub = choices;; sub = (sub - 1) & choices) {
          if (static_cast<uint64_t>(std::popcount(sub)) <= capacity) {
            future = std::max(future, best[t + 1][sub][static_cast<std::size_t>(next_alive)]);
          }
          if (sub == 0) break;
        }
        best[t][mask][static_cast<std::size_t>(alive)] =
            (hit ? weight[static_cast<std::size_t>(block[t])] : 0) + future;
      }
    }
  }
  return best[0][0][1];
}

// Belady with bypass by scanning the cache at every miss (no heap), per-access hits.
uint64_t NaiveBelady(const std::vector<uint64_t>& accesses, uint64_t capacity) {
  const std::size_t never = accesses.size() + 1;  // ties between nevers keep the incoming block out
  std::vector<std::size_t> next(accesses.size(), never);
  for (std::size_t i = 0; i < accesses.size(); ++i) {
    for (std::size_t j = i + 1; j < accesses.size(); ++j) {
      if (accesses[j] == accesses[i]) {
        next[i] = j;
        break;
      }
    }
  }
  std::map<uint64_t, std::size_t> cache;  // id -> its next use
  uint64_t hits = 0;
  for (std::size_t i = 0; i < accesses.size(); ++i) {
    auto it = cache.find(accesses[i]);
    if (it != cache.end()) {
      ++hits;
      it->second = next[i];
    } else if (cache.size() < capacity) {
      cache[accesses[i]] = next[i];
    } else if (capacity > 0) {
      auto victim = std::max_element(cache.begin(), cache.end(),
                                     [](const auto& a, const auto& b) { return a.second < b.second; });
      if (victim->second > next[i]) {
        cache.erase(victim);
        cache[accesses[i]] = next[i];
      }
    }
  }
  return hits;
}

struct RandomTree {
  std::vector<int> parent;  // -1 for a root
  std::vector<uint32_t> tokens;

  std::vector<int> PathTo(int node) const {
    std::vector<int> path;
    for (int v = node; v >= 0; v = parent[static_cast<std::size_t>(v)]) path.push_back(v);
    std::reverse(path.begin(), path.end());
    return path;
  }
};

RandomTree MakeTree(std::mt19937_64& rng, int nodes) {
  RandomTree tree;
  for (int i = 0; i < nodes; ++i) {
    const int parent = i == 0 ? -1 : static_cast<int>(rng() % static_cast<uint64_t>(i + 1)) - 1;
    tree.parent.push_back(parent);  // -1 with probability 1 / (i + 1): a forest, sometimes
    tree.tokens.push_back(static_cast<uint32_t>(1 + rng() % 16));
  }
  return tree;
}

TEST(OptimalBound, HandWorkedExample) {
  // A B | C | A B: with two slots Belady keeps A and B and bypasses C.
  const PrefixTrace trace = Trace({{0, 1}, {2}, {0, 1}});
  OptimalBound two = Bound(trace, 2);
  EXPECT_EQ(two.optimal.accesses, 5u);
  EXPECT_EQ(two.optimal.hits, 2u);
  EXPECT_EQ(two.unique_blocks, 3u);
  EXPECT_EQ(two.requests, 3u);
  EXPECT_DOUBLE_EQ(two.optimal.block_hit_rate, 0.4);
  EXPECT_EQ(two.optimal.tokens, 1u + 2 + 3 + 1 + 2);
  EXPECT_EQ(two.optimal.hit_tokens, 3u);
  EXPECT_DOUBLE_EQ(two.ceiling.block_hit_rate, 1 - 3.0 / 5);
  // One slot: A stays (used next at 3, sooner than B at 4); B, C are bypassed. One hit.
  EXPECT_EQ(Bound(trace, 1).optimal.hits, 1u);
  EXPECT_EQ(Bound(trace, 0).optimal.hits, 0u);
}

TEST(OptimalBound, PrefixRuleCountsOnlyLeadingHits) {
  // Keeping the deepest block of A B C would hit it per access but never in a prefix: with
  // one slot the optimum keeps the root, one hit per repeat.
  const PrefixTrace trace = Trace({{0, 1, 2}, {0, 1, 2}, {0, 1, 2}});
  EXPECT_EQ(Bound(trace, 1).optimal.hits, 2u);
  EXPECT_EQ(Bound(trace, 2).optimal.hits, 4u);
  EXPECT_EQ(Bound(trace, 3).optimal.hits, 6u);
  EXPECT_EQ(Bound(trace, 3).optimal.hits, Bound(trace, 3).ceiling.hits);
}

TEST(OptimalBound, CeilingIsOneMinusUniqueOverTotal) {
  const PrefixTrace trace = Trace({{0, 1, 2}, {0, 3}, {4}, {0, 1, 5}, {4}});
  const OptimalBound bound = Bound(trace, 1);
  EXPECT_EQ(bound.ceiling.accesses, 10u);
  EXPECT_EQ(bound.unique_blocks, 6u);
  EXPECT_EQ(bound.ceiling.hits, 4u);
  EXPECT_DOUBLE_EQ(bound.ceiling.block_hit_rate, 1 - 6.0 / 10);
  // Hit tokens of the ceiling: the repeats of 0 (x2), 1 and 4.
  EXPECT_EQ(bound.ceiling.hit_tokens, 1u + 1 + 2 + 5);
  EXPECT_LE(bound.optimal.hits, bound.ceiling.hits);
}

TEST(OptimalBound, RejectsMalformedTraces) {
  // Block 1 under 0, then as a root: ids do not identify prefixes.
  EXPECT_EQ(ComputeOptimalBound(Trace({{0, 1}, {1}}), 2).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ComputeOptimalBound(Trace({{0, 1}, {2, 1}}), 2).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ComputeOptimalBound(Trace({{0, 0}}), 2).status().code(), StatusCode::kInvalidArgument) << "a cycle";
  PrefixTrace trace;
  const uint64_t ids[] = {1, 2};
  const uint32_t tokens[] = {16};
  EXPECT_FALSE(trace.AddRequest(ids, tokens).ok());
  trace = Trace({{0, 1}});
  trace.tokens.pop_back();
  EXPECT_FALSE(ComputeOptimalBound(trace, 1).ok());
  trace = Trace({{0, 1}});
  trace.request_end = {1};
  EXPECT_FALSE(ComputeOptimalBound(trace, 1).ok()) << "blocks after the last request";
  trace.request_end = {2, 1};
  EXPECT_FALSE(ComputeOptimalBound(trace, 1).ok()) << "descending ends";
}

TEST(OptimalBound, EmptyTraceAndEmptyRequests) {
  const OptimalBound empty = Bound(PrefixTrace{}, 4);
  EXPECT_EQ(empty.optimal.accesses, 0u);
  EXPECT_EQ(empty.optimal.block_hit_rate, 0);
  const OptimalBound with_empty = Bound(Trace({{}, {0}, {}, {0}}), 1);
  EXPECT_EQ(with_empty.requests, 4u);
  EXPECT_EQ(with_empty.optimal.hits, 1u);
}

// The claim of docs/optimal_bound.md: serialized Belady with bypass is the exact optimum of
// prefix-rule hits, checked against exhaustive search.
TEST(OptimalBound, BeladyEqualsBruteForceOnRandomSmallTraces) {
  std::mt19937_64 rng(20240611);
  int traces = 0, token_gaps = 0;
  for (int round = 0; round < 400; ++round) {
    const RandomTree tree = MakeTree(rng, 2 + static_cast<int>(rng() % 7));
    std::vector<std::vector<int>> requests;
    const int count = 6 + static_cast<int>(rng() % 5);
    for (int r = 0; r < count; ++r) {
      requests.push_back(tree.PathTo(static_cast<int>(rng() % tree.parent.size())));
    }
    const PrefixTrace trace = Trace(requests, tree.tokens);
    const std::vector<uint32_t> unit(tree.parent.size(), 1);
    for (uint64_t capacity = 0; capacity <= 4; ++capacity) {
      const OptimalBound bound = Bound(trace, capacity);
      ASSERT_EQ(bound.optimal.hits, BruteForce(requests, unit, capacity))
          << "round " << round << " capacity " << capacity;
      // Tokens: the block optimum's schedule is feasible, so it cannot beat the token optimum.
      const uint64_t token_optimum = BruteForce(requests, tree.tokens, capacity);
      EXPECT_LE(bound.optimal.hit_tokens, token_optimum);
      token_gaps += bound.optimal.hit_tokens < token_optimum ? 1 : 0;
      ++traces;
    }
  }
  EXPECT_EQ(traces, 2000);
  EXPECT_GT(token_gaps, 0) << "blocks of unequal tokens: the token optimum sometimes keeps other blocks";
}

TEST(OptimalBound, TokenHitRateIsTheBlockOptimumsNotTheTokenOptimum) {
  // One slot, A (1 token) and B (10) alternating: keeping either gives one hit; Belady keeps
  // A, used sooner, while keeping B would hit 10 tokens.
  const std::vector<std::vector<int>> requests = {{0}, {1}, {0}, {1}};
  const OptimalBound bound = Bound(Trace(requests, {1, 10}), 1);
  EXPECT_EQ(bound.optimal.hits, 1u);
  EXPECT_EQ(bound.optimal.hit_tokens, 1u);
  EXPECT_EQ(BruteForce(requests, {1, 10}, 1), 10u);
}

TEST(OptimalBound, HeapMatchesANaiveBeladyOnLongerTraces) {
  std::mt19937_64 rng(7);
  for (int round = 0; round < 5; ++round) {
    // Chains sharing a few system prompts: a forest of depth up to 12.
    PrefixTrace trace;
    std::vector<uint64_t> flat;
    for (int r = 0; r < 400; ++r) {
      std::vector<uint64_t> ids;
      uint64_t id = 1 + rng() % 4;
      const uint64_t depth = 1 + rng() % 12;
      const uint64_t branch = rng() % 3;
      for (uint64_t d = 0; d < depth; ++d) {
        ids.push_back(id);
        id = id * 31 + (d == depth / 2 ? branch : 0) + 17;  // children of a node: a function of it
      }
      flat.insert(flat.end(), ids.begin(), ids.end());
      ASSERT_TRUE(trace.AddRequest(ids, std::vector<uint32_t>(ids.size(), 16)).ok());
    }
    for (uint64_t capacity : {1u, 5u, 20u, 60u}) {
      EXPECT_EQ(Bound(trace, capacity).optimal.hits, NaiveBelady(flat, capacity)) << "capacity " << capacity;
    }
  }
}

TEST(OptimalBound, SeveralCapacitiesShareOnePassAndAreMonotone) {
  std::mt19937_64 rng(99);
  PrefixTrace trace;
  for (int r = 0; r < 200'000; ++r) {
    // Zipf-ish: a few hot prefixes, a long tail, each extended by a unique suffix.
    const uint64_t prefix = (rng() % 8 == 0) ? rng() % 10'000 : rng() % 50;
    const uint64_t unique_suffix = uint64_t{0xF000'0000'0000} + static_cast<uint64_t>(r);
    const uint64_t ids[] = {prefix + 1, (prefix + 1) * 1'000'003 + 1, unique_suffix};
    const uint32_t tokens[] = {16, 16, 7};
    ASSERT_TRUE(trace.AddRequest(ids, tokens).ok());
  }
  const uint64_t capacities[] = {0, 16, 256, 4096, 1'000'000};
  Result<std::vector<OptimalBound>> bounds = ComputeOptimalBounds(trace, capacities);
  ASSERT_TRUE(bounds.ok()) << bounds.status().ToString();
  ASSERT_EQ(bounds->size(), 5u);
  for (std::size_t i = 1; i < bounds->size(); ++i) {
    EXPECT_GE((*bounds)[i].optimal.hits, (*bounds)[i - 1].optimal.hits);
  }
  EXPECT_EQ((*bounds)[0].optimal.hits, 0u);
  // A cache larger than the trace's blocks reaches the ceiling.
  EXPECT_EQ(bounds->back().optimal.hits, bounds->back().ceiling.hits);
  EXPECT_EQ(bounds->back().optimal.hit_tokens, bounds->back().ceiling.hit_tokens);
  EXPECT_EQ(bounds->back().ceiling.accesses, 600'000u);
}

}  // namespace
}  // namespace kvtier

namespace kvtier {
namespace {

// Generated blocks are stored without a lookup: a chance to admit them, never an access.
TEST(OptimalBoundInsertions, GeneratedBlocksCanBeAdmittedWithoutCounting) {
  PrefixTrace trace;
  const uint64_t turn1[] = {1, 2};  // prompt 1, then its generated block 2
  const uint32_t tokens1[] = {16, 16};
  ASSERT_TRUE(trace.AddRequest(turn1, tokens1, /*inserted_tail=*/1).ok());
  const uint64_t turn2[] = {1, 2, 3};
  const uint32_t tokens2[] = {16, 16, 16};
  ASSERT_TRUE(trace.AddRequest(turn2, tokens2).ok());
  Result<OptimalBound> bound = ComputeOptimalBound(trace, 2);
  ASSERT_TRUE(bound.ok()) << bound.status().ToString();
  EXPECT_EQ(bound->optimal.accesses, 4u);
  EXPECT_EQ(bound->optimal.hits, 2u);
  EXPECT_EQ(bound->ceiling.hits, 2u);
  EXPECT_EQ(bound->ceiling.accesses, 4u);
}

TEST(OptimalBoundInsertions, ReinsertingAnEvictedBlockAdmitsItForFree) {
  // Capacity 1. Lookups [1], [2], [2], then [1] is inserted again (a duplicate answer) and
  // looked up: the optimum holds 2 for its second lookup, then readmits 1 for free.
  PrefixTrace trace;
  const uint32_t tokens[] = {16};
  const uint64_t one[] = {1}, two[] = {2};
  ASSERT_TRUE(trace.AddRequest(one, tokens).ok());
  ASSERT_TRUE(trace.AddRequest(two, tokens).ok());
  ASSERT_TRUE(trace.AddRequest(two, tokens).ok());
  ASSERT_TRUE(trace.AddRequest(one, tokens, /*inserted_tail=*/1).ok());
  ASSERT_TRUE(trace.AddRequest(one, tokens).ok());
  Result<OptimalBound> bound = ComputeOptimalBound(trace, 1);
  ASSERT_TRUE(bound.ok()) << bound.status().ToString();
  EXPECT_EQ(bound->optimal.accesses, 4u);
  EXPECT_EQ(bound->optimal.hits, 2u);  // the second [2], and the last [1] after its free readmission
}

}  // namespace
}  // namespace kvtier
