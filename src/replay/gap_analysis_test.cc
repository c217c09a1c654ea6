#include "kvtier/gap_analysis.h"

#include <random>
#include <vector>

#include <gtest/gtest.h>

namespace kvtier {
namespace {

// Requests of a forest of chains sharing a few roots, with some generated (inserted) tails.
PrefixTrace RandomForest(std::mt19937_64& rng, int requests, bool with_output) {
  PrefixTrace trace;
  for (int r = 0; r < requests; ++r) {
    std::vector<uint64_t> ids;
    uint64_t id = 1 + rng() % 5;
    const uint64_t depth = 1 + rng() % 10;
    const uint64_t branch = rng() % 4;
    for (uint64_t d = 0; d < depth; ++d) {
      ids.push_back(id);
      id = id * 31 + (d == depth / 2 ? branch : 0) + 17;  // a node's children: a function of it
    }
    const std::size_t inserted = with_output ? rng() % 3 : 0;
    for (std::size_t k = 0; k < inserted; ++k) ids.push_back(id * 131 + k + static_cast<uint64_t>(r) * 7919);
    EXPECT_TRUE(trace.AddRequest(ids, std::vector<uint32_t>(ids.size(), 16), inserted).ok());
  }
  return trace;
}

std::vector<GapAnalysis> Analyze(const PrefixTrace& trace, std::vector<uint64_t> capacities,
                                 const GapAnalysisOptions& options = {}) {
  Result<std::vector<GapAnalysis>> out = AnalyzeGap(trace, capacities, options);
  EXPECT_TRUE(out.ok()) << out.status().ToString();
  return std::move(out).value();
}

const GapOracle& Oracle(const GapAnalysis& a, const std::string& name) {
  for (const GapOracle& o : a.oracles) {
    if (o.name == name) return o;
  }
  ADD_FAILURE() << "no oracle " << name;
  return a.oracles.front();
}

TEST(GapAnalysis, LookaheadOverTheWholeTraceIsTheOptimum) {
  std::mt19937_64 rng(31);
  for (int round = 0; round < 6; ++round) {
    const PrefixTrace trace = RandomForest(rng, 300, round % 2 == 1);
    for (const GapAnalysis& a : Analyze(trace, {1, 4, 16, 64}, {.lookahead_requests = {1000}})) {
      EXPECT_EQ(Oracle(a, "lookahead-1000").hits.hits, a.opt.hits) << "capacity " << a.capacity_blocks;
    }
  }
}

TEST(GapAnalysis, NoOracleBeatsTheOptimumAndLongerWindowsSeeMore) {
  std::mt19937_64 rng(5);
  for (int round = 0; round < 6; ++round) {
    const PrefixTrace trace = RandomForest(rng, 400, round % 2 == 0);
    for (const GapAnalysis& a : Analyze(trace, {2, 8, 32}, {.lookahead_requests = {1, 4, 16, 64}})) {
      for (const GapOracle& o : a.oracles) {
        EXPECT_LE(o.hits.hits, a.opt.hits) << o.name << " at " << a.capacity_blocks;
        EXPECT_EQ(o.hits.accesses, a.opt.accesses) << o.name;
      }
      EXPECT_LE(a.lru.hits, a.opt.hits);
      EXPECT_GE(Oracle(a, "admit-by-features").hits.hits, a.lru.hits) << "admitting everything is among its choices";
      // Not a theorem for every trace, but with windows this far apart a wider one must help.
      EXPECT_LE(Oracle(a, "lookahead-1").hits.hits, Oracle(a, "lookahead-64").hits.hits) << a.capacity_blocks;
    }
  }
}

TEST(GapAnalysis, HandWorkedCycle) {
  // A B C A B C A B C through two slots. LRU always misses. OPT keeps A and B and bypasses C:
  // 4 hits. Evicting the farthest next use but admitting every block: 3. LRU that skips the
  // blocks never used again (the last A) keeps B and C for their last uses: 2.
  PrefixTrace trace;
  for (int r = 0; r < 9; ++r) {
    const uint64_t id = 100 + static_cast<uint64_t>(r % 3);
    ASSERT_TRUE(trace.AddRequest(std::vector<uint64_t>{id}, std::vector<uint32_t>{16}).ok());
  }
  const GapAnalysis a = Analyze(trace, {2}).front();
  EXPECT_EQ(a.lru.hits, 0u);
  EXPECT_EQ(a.opt.hits, 4u);
  EXPECT_EQ(Oracle(a, "rank-next-use").hits.hits, 3u);
  EXPECT_EQ(Oracle(a, "lookahead-8").hits.hits, a.opt.hits);
  EXPECT_DOUBLE_EQ(Oracle(a, "lookahead-8").gap_closed, 1.0);
  EXPECT_EQ(Oracle(a, "admit-reused").hits.hits, 2u);
}

TEST(GapAnalysis, AdmissionOracleKeepsTheReusedBlocksOutOfAFlood) {
  // A hot block A between one-off blocks: LRU with one slot loses A to each one-off; never
  // admitting blocks that are never used again keeps it.
  PrefixTrace trace;
  for (int r = 0; r < 10; ++r) {
    ASSERT_TRUE(trace.AddRequest(std::vector<uint64_t>{7}, std::vector<uint32_t>{16}).ok());
    ASSERT_TRUE(trace.AddRequest(std::vector<uint64_t>{1000 + static_cast<uint64_t>(r)}, std::vector<uint32_t>{16}).ok());
  }
  const GapAnalysis a = Analyze(trace, {1}).front();
  EXPECT_EQ(a.lru.hits, 0u);
  EXPECT_EQ(a.opt.hits, 9u);
  EXPECT_EQ(Oracle(a, "admit-reused").hits.hits, 9u);
  EXPECT_EQ(Oracle(a, "admit-within-age").hits.hits, 9u);
  EXPECT_DOUBLE_EQ(Oracle(a, "admit-reused").gap_closed, 1.0);
  // The past tells them apart too: a first access never came back, a block seen before did.
  EXPECT_EQ(Oracle(a, "admit-by-features").hits.hits, 9u);
}

TEST(GapAnalysis, BadInputIsAClearError) {
  PrefixTrace bad;
  bad.blocks = {1, 2};
  bad.tokens = {16};
  bad.request_end = {2};
  const uint64_t capacity[] = {4};
  EXPECT_EQ(AnalyzeGap(bad, capacity).status().code(), StatusCode::kInvalidArgument);
  PrefixTrace ok;
  ASSERT_TRUE(ok.AddRequest(std::vector<uint64_t>{1}, std::vector<uint32_t>{16}).ok());
  EXPECT_EQ(AnalyzeGap(ok, capacity, {.lookahead_requests = {0}}).status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace kvtier
