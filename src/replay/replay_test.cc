#include "kvtier/replay.h"

#include <gtest/gtest.h>

#include "kvtier/model_catalog.h"

namespace kvtier {
namespace {

ReplayBlock B(uint64_t id) { return {.key = {id, id}, .tokens = 16}; }

ReplayRequest R(double t, std::vector<ReplayBlock> prompt) { return {.arrival_s = t, .prompt = std::move(prompt)}; }

const ReplayPolicyResult& Find(const ReplayReport& report, const std::string& policy) {
  for (const ReplayPolicyResult& r : report.results) {
    if (r.policy == policy) return r;
  }
  ADD_FAILURE() << "no result for " << policy;
  return report.results.front();
}

TEST(Replay, LeafFirstLruOnAHandBuiltTrace) {
  // Capacity 2. r1 stores A-B; r2 hits both; r3 stores C, evicting the only leaf B (A is B's
  // parent); r4 hits A and misses B.
  const std::vector<ReplayRequest> trace = {R(0, {B(1), B(2)}), R(1, {B(1), B(2)}), R(2, {B(3)}), R(3, {B(1), B(2)})};
  ReplayOptions options;
  options.policies = {PolicyKind::kLru};
  options.capacity_blocks = 2;
  Result<ReplayReport> report = Replay(trace, options);
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  EXPECT_EQ(report->accesses, 7u);
  EXPECT_EQ(report->unique_blocks, 3u);
  const ReplayPolicyResult& lru = Find(*report, "lru");
  EXPECT_EQ(lru.hit_blocks, 3u);
  EXPECT_EQ(lru.hit_tokens, 48u);
  const ReplayPolicyResult& ceiling = Find(*report, "ceiling");
  EXPECT_EQ(ceiling.hit_blocks, 4u);
  EXPECT_DOUBLE_EQ(ceiling.block_hit_rate, 4.0 / 7.0);
}

TEST(Replay, GeneratedBlocksAreCachedForTheNextTurn) {
  // Turn 2's prompt is turn 1's prompt and answer: with cache_output its answer block hits.
  ReplayRequest turn1 = R(0, {B(1)});
  turn1.output = {B(2)};
  const std::vector<ReplayRequest> trace = {turn1, R(1, {B(1), B(2), B(3)})};
  ReplayOptions options;
  options.policies = {PolicyKind::kLru, PolicyKind::kBayes};
  options.capacity_blocks = 8;
  Result<ReplayReport> with = Replay(trace, options);
  ASSERT_TRUE(with.ok()) << with.status().ToString();
  EXPECT_EQ(Find(*with, "lru").hit_blocks, 2u);
  EXPECT_EQ(Find(*with, "bayes").hit_blocks, 2u);
  EXPECT_EQ(Find(*with, "opt").hit_blocks, 2u);
  EXPECT_EQ(Find(*with, "ceiling").hit_blocks, 2u);
  options.cache_output = false;
  Result<ReplayReport> without = Replay(trace, options);
  ASSERT_TRUE(without.ok());
  EXPECT_EQ(Find(*without, "lru").hit_blocks, 1u);
}

// 400 requests of 23 sessions, each a shared two-block system prompt and 1-5 blocks of its own.
std::vector<ReplayRequest> SharedPromptTrace() {
  std::vector<ReplayRequest> trace;
  for (uint64_t i = 0; i < 400; ++i) {
    const uint64_t session = (i * 7919) % 23;
    std::vector<ReplayBlock> prompt = {B(1), B(2)};  // a shared system prompt
    for (uint64_t k = 0; k < 1 + i % 5; ++k) prompt.push_back(B(1000 * (session + 1) + k));
    trace.push_back(R(static_cast<double>(i), prompt));
  }
  return trace;
}

TEST(Replay, EveryPolicyStaysUnderTheCeiling) {
  const std::vector<ReplayRequest> trace = SharedPromptTrace();
  ReplayOptions options;
  options.capacity_blocks = 20;
  Result<ReplayReport> report = Replay(trace, options);
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  const double ceiling = Find(*report, "ceiling").block_hit_rate;
  const double opt = Find(*report, "opt").block_hit_rate;
  EXPECT_LE(opt, ceiling + 1e-12);
  for (const ReplayPolicyResult& r : report->results) {
    if (r.policy != "ceiling") {
      EXPECT_LE(r.block_hit_rate, opt + 1e-12) << r.policy << " beat the offline optimum";
    }
    EXPECT_GT(r.block_hit_rate, 0.3) << r.policy << ": the shared prompt alone is 2 of every 3-7 blocks";
  }
}

TEST(Replay, RejectsBadOptions) {
  ReplayOptions options;
  options.policies.clear();
  EXPECT_EQ(Replay({}, options).status().code(), StatusCode::kInvalidArgument);
  options = {};
  options.capacity_fraction = 0;
  EXPECT_EQ(Replay({}, options).status().code(), StatusCode::kInvalidArgument);
}

// Issue 19: each policy split into shards (PolicyOptions::shards) runs in a replay; one shard
// is the policy itself, exactly; the bounds do not depend on it.
TEST(Replay, PolicyShardsSplitEveryPolicyAndOneShardIsThePolicyItself) {
  const std::vector<ReplayRequest> trace = SharedPromptTrace();
  ReplayOptions options;
  options.capacity_blocks = 20;
  Result<ReplayReport> plain = Replay(trace, options);
  ASSERT_TRUE(plain.ok()) << plain.status().ToString();
  options.policy_shards = 1;
  Result<ReplayReport> one = Replay(trace, options);
  ASSERT_TRUE(one.ok()) << one.status().ToString();
  options.policy_shards = 8;
  Result<ReplayReport> eight = Replay(trace, options);
  ASSERT_TRUE(eight.ok()) << eight.status().ToString();
  ASSERT_EQ(one->results.size(), plain->results.size());
  ASSERT_EQ(eight->results.size(), plain->results.size());
  bool any_differs = false;
  for (std::size_t i = 0; i < plain->results.size(); ++i) {
    const ReplayPolicyResult &p = plain->results[i], &o = one->results[i], &e = eight->results[i];
    SCOPED_TRACE(p.policy);
    EXPECT_EQ(o.policy, p.policy);
    EXPECT_EQ(o.hit_blocks, p.hit_blocks);
    EXPECT_EQ(o.hit_tokens, p.hit_tokens);
    EXPECT_EQ(o.block_hit_rate, p.block_hit_rate);
    EXPECT_EQ(o.token_hit_rate, p.token_hit_rate);
    EXPECT_EQ(e.policy, p.policy);
    EXPECT_EQ(e.accesses, p.accesses);
    if (p.policy == "opt" || p.policy == "ceiling") {
      EXPECT_EQ(e.hit_blocks, p.hit_blocks) << "the bounds have no policy to shard";
      continue;
    }
    EXPECT_LE(e.block_hit_rate, Find(*eight, "opt").block_hit_rate + 1e-12);
    EXPECT_GT(e.block_hit_rate, 0.3) << "the shared prompt alone is 2 of every 3-7 blocks";
    any_differs = any_differs || e.hit_blocks != p.hit_blocks;
  }
  // 8 shards of 20 blocks evict in another order than one policy: the option reached them.
  EXPECT_TRUE(any_differs) << "8 shards gave every policy exactly its unsharded hits";
}

TEST(Replay, RejectsAShardCountThePoliciesRefuse) {
  const std::vector<ReplayRequest> trace = {R(0, {B(1)})};
  ReplayOptions options;
  for (const uint32_t shards : {0u, 3u, 12u, 128u}) {
    SCOPED_TRACE(shards);
    options.policy_shards = shards;
    const Status status = Replay(trace, options).status();
    EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(status.message().find("policy_shards"), std::string::npos) << status.ToString();
    EXPECT_NE(status.message().find("power of two"), std::string::npos) << status.ToString();
  }
  options.policy_shards = 64;
  EXPECT_TRUE(Replay(trace, options).ok());
}

PrefillCostModel Llama8bOnH100() {
  Result<ModelSpec> model = LoadCatalogModel("llama-3-8b");
  Result<GpuSpec> gpu = GpuPreset("h100-sxm");
  EXPECT_TRUE(model.ok() && gpu.ok());
  return PrefillCostModel::Create(*model, *gpu).value();
}

TEST(ReplayEngine, ARequestHitsOnlyWhatFinishedPrefillingBeforeItStarted) {
  // Two requests for the same 256-block prompt, the second 1 ms after the first: served on
  // arrival the second hits everything; through one engine it starts after the first's
  // prefill (the budget holds one prompt per step) and hits too; with two engines it starts
  // while the first still prefills, so it finds nothing stored yet.
  std::vector<ReplayBlock> prompt;
  for (uint64_t i = 1; i <= 256; ++i) prompt.push_back(B(i));
  const std::vector<ReplayRequest> trace = {R(0, prompt), R(0.001, prompt)};
  ReplayOptions options;
  options.policies = {PolicyKind::kLru};
  options.capacity_blocks = 1024;
  options.cost_model = Llama8bOnH100();
  Result<ReplayReport> instant = Replay(trace, options);
  ASSERT_TRUE(instant.ok()) << instant.status().ToString();
  EXPECT_EQ(Find(*instant, "lru").hit_blocks, 256u);
  EXPECT_FALSE(Find(*instant, "lru").engine.has_value());

  options.engine = EngineOptions{.engines = 1, .max_batched_tokens = 4096};
  Result<ReplayReport> queued = Replay(trace, options);
  ASSERT_TRUE(queued.ok()) << queued.status().ToString();
  const ReplayPolicyResult& one = Find(*queued, "lru");
  EXPECT_EQ(one.hit_blocks, 256u);
  ASSERT_TRUE(one.engine.has_value());
  EXPECT_GT(one.engine->queue_wait_mean_s, 0);

  options.engine->engines = 2;
  Result<ReplayReport> parallel = Replay(trace, options);
  ASSERT_TRUE(parallel.ok()) << parallel.status().ToString();
  EXPECT_EQ(Find(*parallel, "lru").hit_blocks, 0u);
  EXPECT_DOUBLE_EQ(Find(*parallel, "lru").engine->queue_wait_mean_s, 0);
}

TEST(ReplayEngine, NeedsACostModel) {
  ReplayOptions options;
  options.engine = EngineOptions{};
  EXPECT_EQ(Replay({R(0, {B(1)})}, options).status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace kvtier
