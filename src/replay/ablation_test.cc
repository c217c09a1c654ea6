#include "replay/ablation.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "kvtier/model_catalog.h"
#include "kvtier/sizing.h"

namespace kvtier {
namespace {

constexpr uint32_t kBlockTokens = 16;

// A seeded chat-like trace: sessions whose turns extend a shared system prompt and their own
// history, interleaved, so that a small T0 cannot hold every session and lower tiers help.
std::vector<ReplayRequest> SyntheticTrace() {
  std::vector<ReplayRequest> out;
  uint64_t next_id = 1000;
  constexpr std::size_t kSessions = 24, kTurns = 6;
  std::vector<std::vector<ReplayBlock>> history(kSessions);
  for (std::size_t s = 0; s < kSessions; ++s) {
    for (uint64_t b = 1; b <= 4; ++b) history[s].push_back({.key = {b, b}, .tokens = kBlockTokens});  // system prompt
  }
  double t = 0;
  for (std::size_t turn = 0; turn < kTurns; ++turn) {
    for (std::size_t s = 0; s < kSessions; ++s) {
      for (int k = 0; k < 3; ++k, ++next_id) history[s].push_back({.key = {next_id, next_id}, .tokens = kBlockTokens});
      out.push_back({.arrival_s = t, .prompt = history[s]});
      t += 0.05;
    }
  }
  return out;
}

AblationOptions Llama8bOptions() {
  AblationOptions options;
  Result<ModelSpec> model = LoadCatalogModel("llama-3-8b");
  EXPECT_TRUE(model.ok()) << model.status().ToString();
  Result<KvSizing> sizing = ComputeKvSizing(*model, {.block_size = kBlockTokens});
  EXPECT_TRUE(sizing.ok()) << sizing.status().ToString();
  Result<GpuSpec> gpu = GpuPreset("h100-sxm");
  EXPECT_TRUE(gpu.ok());
  Result<PrefillCostModel> cost = PrefillCostModel::Create(*model, *gpu);
  EXPECT_TRUE(cost.ok());
  options.model = *model;
  options.replay.cost_model = *cost;
  options.replay.kv_bytes_per_token = static_cast<uint32_t>(sizing->kv_bytes_per_token);
  options.replay.capacity_fraction = 0.05;
  return options;
}

const AblationRow& Row(const AblationReport& report, std::string_view name) {
  for (const AblationRow& r : report.rows) {
    if (r.name == name) return r;
  }
  ADD_FAILURE() << "no row " << name;
  return report.rows.front();
}

TEST(Ablation, EveryPartHasARowOrAReason) {
  const std::vector<AblationPart> parts = AblationParts();
  EXPECT_EQ(parts.front(), AblationPart::kNone);
  std::set<std::string_view> names;
  for (AblationPart p : parts) names.insert(AblationPartName(p));
  EXPECT_EQ(names.size(), 5u);  // none, prediction, multi-tier, head-granular, prefetch
  EXPECT_EQ(names.count("unknown"), 0u);

  Result<AblationReport> report = RunAblation(SyntheticTrace(), Llama8bOptions());
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  ASSERT_EQ(report->rows.size(), parts.size());
  for (std::size_t i = 0; i < parts.size(); ++i) EXPECT_EQ(report->rows[i].name, AblationPartName(parts[i]));
  // Deduplication is never measured here, and says why.
  ASSERT_EQ(report->not_ablated.size(), 1u);
  EXPECT_NE(report->not_ablated[0].find("deduplication"), std::string::npos);
  EXPECT_EQ(Row(*report, "-prediction").result.policy, "lru");
  EXPECT_EQ(Row(*report, "full").result.policy, "predictive");
  EXPECT_EQ(Row(*report, "-multi-tier").tiers.size(), 1u);
  EXPECT_EQ(Row(*report, "full").tiers.size(), 5u);
}

TEST(Ablation, RemovingTheLowerTiersNeverRaisesTheHitRate) {
  const AblationOptions options = Llama8bOptions();
  Result<AblationReport> report = RunAblation(SyntheticTrace(), options);
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  const ReplayPolicyResult& full = Row(*report, "full").result;
  const ReplayPolicyResult& one = Row(*report, "-multi-tier").result;
  EXPECT_LE(one.block_hit_rate, full.block_hit_rate);
  EXPECT_LT(one.block_hit_rate, full.block_hit_rate) << "the synthetic trace should overflow T0";
  EXPECT_GT(full.ttft_p50_s, 0);
}

TEST(Ablation, TheLadderClimbsOneTierAtATime) {
  Result<AblationReport> ladder = RunTierLadder(SyntheticTrace(), Llama8bOptions());
  ASSERT_TRUE(ladder.ok()) << ladder.status().ToString();
  ASSERT_EQ(ladder->rows.size(), 5u);
  EXPECT_EQ(ladder->rows[0].name, "gpu_hbm only");
  EXPECT_EQ(ladder->rows[4].name, "+ remote_pool");
  for (std::size_t i = 1; i < ladder->rows.size(); ++i) {
    EXPECT_EQ(ladder->rows[i].tiers.size(), i + 1);
    EXPECT_GT(ladder->rows[i].capacity_blocks, ladder->rows[i - 1].capacity_blocks);
    EXPECT_GE(ladder->rows[i].result.block_hit_rate, ladder->rows[i - 1].result.block_hit_rate) << i;
  }
  // Hits are counted per tier, and every hit is in some tier.
  const ReplayPolicyResult& top = ladder->rows.back().result;
  ASSERT_EQ(top.tier_hits.size(), 5u);
  uint64_t sum = 0;
  for (uint64_t h : top.tier_hits) sum += h;
  EXPECT_EQ(sum, top.hit_blocks);
}

TEST(Ablation, PaperLadderKeepsThePapersRatios) {
  Result<TierConfig> ladder = PaperTierLadder(40);
  ASSERT_TRUE(ladder.ok());
  ASSERT_EQ(ladder->tiers.size(), 5u);
  const uint64_t expected[] = {40, 160, 512, 3988, 33300};
  for (std::size_t i = 0; i < 5; ++i) {
    EXPECT_EQ(std::visit([](const auto& o) { return o.capacity_bytes; }, ladder->tiers[i]), expected[i]) << i;
  }
  EXPECT_EQ(TierKindOf(ladder->tiers[0]), TierKind::kGpuHbm);
  EXPECT_EQ(TierKindOf(ladder->tiers[4]), TierKind::kRemotePool);
  EXPECT_FALSE(PaperTierLadder(0).ok());
  EXPECT_FALSE(PaperTierLadder(uint64_t{1} << 62).ok());
}

TEST(Ablation, BadOptionsSayWhatIsWrong) {
  AblationOptions options = Llama8bOptions();
  options.replay.move_bytes = true;
  Result<AblationReport> moved = RunAblation(SyntheticTrace(), options);
  ASSERT_FALSE(moved.ok());
  EXPECT_NE(moved.status().message().find("metadata mode"), std::string::npos);

  options = Llama8bOptions();
  options.tiers = TierConfig{};
  EXPECT_NE(RunAblation(SyntheticTrace(), options).status().message().find("no tiers"), std::string::npos);
  options.tiers->tiers.push_back(ParallelFsTierOptions{});
  EXPECT_NE(RunTierLadder(SyntheticTrace(), options).status().message().find("no capacity"), std::string::npos);

  options = Llama8bOptions();
  EXPECT_FALSE(RunAblation({}, options).ok());
  options.replay.engine = EngineOptions{};
  options.replay.cost_model.reset();
  EXPECT_NE(RunAblation(SyntheticTrace(), options).status().message().find("cost model"), std::string::npos);
}

TEST(Ablation, WithoutAModelHeadGranularIsNotPartOfTheSystemAndSaysSo) {
  AblationOptions options = Llama8bOptions();
  options.model.reset();
  Result<AblationReport> report = RunAblation(SyntheticTrace(), options);
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  EXPECT_EQ(report->rows.size(), AblationParts().size() - 1);
  ASSERT_EQ(report->not_ablated.size(), 2u);
  EXPECT_NE(report->not_ablated[0].find("head-granular"), std::string::npos);
}

}  // namespace
}  // namespace kvtier
