#include "kvtier/reuse_predictor.h"

#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace kvtier {
namespace {

constexpr BlockType kTool = BlockType::kToolContext;
constexpr TransitionType kRepeat = TransitionType::kSameToolRepeat;

std::shared_ptr<ReusePredictor> Make(const ReusePredictorOptions& options) {
  Result<std::shared_ptr<ReusePredictor>> predictor = ReusePredictor::Create(options);
  EXPECT_TRUE(predictor.ok()) << predictor.status().ToString();
  return std::move(predictor).value();
}

TEST(ReusePredictor, PosteriorMeanCountsReusesAndNoReuses) {
  ReusePredictorOptions options{.prior = {2, 3}};
  auto predictor = Make(options);
  EXPECT_DOUBLE_EQ(predictor->PReuse(kTool, kRepeat), 2.0 / 5);
  const int k = 7, m = 4;
  for (int i = 0; i < k; ++i) predictor->ObserveReuse(kTool, kRepeat, i);
  for (int i = 0; i < m; ++i) predictor->ObserveNoReuse(kTool, kRepeat, k + i);
  EXPECT_DOUBLE_EQ(predictor->PReuse(kTool, kRepeat), (2.0 + k) / (2 + 3 + k + m));
  const ReusePosterior row = predictor->Snapshot()[static_cast<std::size_t>(ReusePairIndex(kTool, kRepeat))];
  EXPECT_EQ(row.type, kTool);
  EXPECT_EQ(row.transition, kRepeat);
  EXPECT_DOUBLE_EQ(row.alpha, 2.0 + k);
  EXPECT_DOUBLE_EQ(row.beta, 3.0 + m);
  EXPECT_EQ(row.observations, static_cast<uint64_t>(k + m));
  // The other 15 pairs are untouched.
  EXPECT_DOUBLE_EQ(predictor->PReuse(kTool, TransitionType::kToolSwitch), 2.0 / 5);
}

TEST(ReusePredictor, PerPairPriorsOverrideTheDefault) {
  ReusePredictorOptions options;
  options.pair_priors[ReusePairIndex(BlockType::kSystemPrompt, kRepeat)] = BetaPrior{9, 1};
  auto predictor = Make(options);
  EXPECT_DOUBLE_EQ(predictor->PReuse(BlockType::kSystemPrompt, kRepeat), 0.9);
  EXPECT_DOUBLE_EQ(predictor->PReuse(BlockType::kUserContext, kRepeat), 0.5);
}

TEST(ReusePredictor, ForgettingByCountPullsOldEvidenceTowardThePrior) {
  auto forgetting = Make({.half_life_observations = 1});
  auto keeping = Make({});
  for (ReusePredictor* p : {forgetting.get(), keeping.get()}) {
    for (int i = 0; i < 10; ++i) p->ObserveReuse(kTool, kRepeat, 0);
    for (int i = 0; i < 10; ++i) p->ObserveNoReuse(kTool, kRepeat, 0);
  }
  EXPECT_DOUBLE_EQ(keeping->PReuse(kTool, kRepeat), 0.5);
  EXPECT_LT(forgetting->PReuse(kTool, kRepeat), 0.3) << "recent no-reuses dominate";
  // Half-life of one observation: the excess over the prior halves before each new one.
  auto exact = Make({.half_life_observations = 1});
  for (int i = 0; i < 3; ++i) exact->ObserveReuse(kTool, kRepeat, 0);  // excess 1, 1.5, 1.75
  exact->ObserveNoReuse(kTool, kRepeat, 0);                           // alpha excess 0.875
  const ReusePosterior row = exact->Snapshot()[static_cast<std::size_t>(ReusePairIndex(kTool, kRepeat))];
  EXPECT_DOUBLE_EQ(row.alpha, 1.875);
  EXPECT_DOUBLE_EQ(row.beta, 2);
  EXPECT_EQ(row.observations, 4u);
}

TEST(ReusePredictor, ForgettingByTimeHalvesEvidencePerHalfLife) {
  auto predictor = Make({.half_life_s = 10});
  predictor->ObserveReuse(kTool, kRepeat, 100);
  predictor->ObserveReuse(kTool, kRepeat, 100);  // no time passed: alpha 3
  predictor->ObserveNoReuse(kTool, kRepeat, 110);  // excess 2 -> 1
  const ReusePosterior row = predictor->Snapshot()[static_cast<std::size_t>(ReusePairIndex(kTool, kRepeat))];
  EXPECT_DOUBLE_EQ(row.alpha, 2);
  EXPECT_DOUBLE_EQ(row.beta, 2);
}

TEST(ReusePredictor, BrierScoreAndReliabilityBins) {
  auto predictor = Make({});
  const BlockType sys = BlockType::kSystemPrompt;
  predictor->RecordOutcome(sys, kRepeat, 0.9, true, 0);    // (0.1)^2  = 0.01
  predictor->RecordOutcome(sys, kRepeat, 0.9, false, 0);   // (0.9)^2  = 0.81
  predictor->RecordOutcome(kTool, kRepeat, 0.25, false, 0);  // (0.25)^2 = 0.0625
  predictor->RecordOutcome(kTool, kRepeat, 0.05, true, 0);   // (0.95)^2 = 0.9025
  const CalibrationReport report = predictor->Calibration();
  EXPECT_EQ(report.total, 4u);
  EXPECT_DOUBLE_EQ(report.brier_overall, (0.01 + 0.81 + 0.0625 + 0.9025) / 4);
  EXPECT_DOUBLE_EQ(report.brier[static_cast<std::size_t>(ReusePairIndex(sys, kRepeat))], 0.41);
  EXPECT_DOUBLE_EQ(report.brier[static_cast<std::size_t>(ReusePairIndex(kTool, kRepeat))], (0.0625 + 0.9025) / 2);
  EXPECT_EQ(report.bins[9].count, 2u);
  EXPECT_DOUBLE_EQ(report.bins[9].mean_predicted, 0.9);
  EXPECT_DOUBLE_EQ(report.bins[9].observed_frequency, 0.5);
  EXPECT_EQ(report.bins[2].count, 1u);
  EXPECT_DOUBLE_EQ(report.bins[2].observed_frequency, 0);
  EXPECT_EQ(report.bins[0].count, 1u);
  EXPECT_DOUBLE_EQ(report.bins[0].observed_frequency, 1);
  EXPECT_EQ(report.bins[5].count, 0u);
  // Outcomes also moved the posteriors.
  EXPECT_EQ(predictor->Snapshot()[static_cast<std::size_t>(ReusePairIndex(sys, kRepeat))].observations, 2u);

  const nlohmann::json json = nlohmann::json::parse(predictor->ToJson());
  EXPECT_EQ(json["posteriors"].size(), 16u);
  EXPECT_EQ(json["posteriors"][0]["block_type"], "system_prompt");
  EXPECT_EQ(json["calibration"]["total"], 4);
  EXPECT_EQ(json["calibration"]["bins"].size(), 10u);
  EXPECT_EQ(json["calibration"]["bins"][9]["count"], 2);
  EXPECT_DOUBLE_EQ(json["calibration"]["bins"][9]["observed_frequency"].get<double>(), 0.5);
  EXPECT_EQ(nlohmann::json::parse(report.ToJson())["pairs"].size(), 16u);
}

TEST(ReusePredictor, OptionsAreValidated) {
  EXPECT_FALSE(ReusePredictor::Create({.prior = {0, 1}}).ok());
  EXPECT_FALSE(ReusePredictor::Create({.horizon_s = 0}).ok());
  EXPECT_FALSE(ReusePredictor::Create({.half_life_s = -1}).ok());
  ReusePredictorOptions bad_pair;
  bad_pair.pair_priors[3] = BetaPrior{1, -2};
  const Status status = ReusePredictor::Create(bad_pair).status();
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("system_prompt"), std::string::npos) << status.message();
}

TEST(ReusePredictor, ConcurrentObserversAndReaders) {
  auto predictor = Make({});
  constexpr int kThreads = 8, kPerThread = 5000;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      const auto type = static_cast<BlockType>(t % 4);
      double sum = 0;
      for (int i = 0; i < kPerThread; ++i) {
        const auto transition = static_cast<TransitionType>(i % 4);
        predictor->RecordOutcome(type, transition, predictor->PReuse(type, transition), i % 3 == 0, i);
        if (i % 500 == 0) sum += predictor->Snapshot()[0].mean + predictor->Calibration().brier_overall;
      }
      EXPECT_GE(sum, 0);
    });
  }
  for (std::thread& thread : threads) thread.join();
  uint64_t observations = 0;
  double evidence = 0;
  for (const ReusePosterior& row : predictor->Snapshot()) {
    observations += row.observations;
    evidence += row.alpha + row.beta - 2;
  }
  EXPECT_EQ(observations, static_cast<uint64_t>(kThreads * kPerThread));
  EXPECT_DOUBLE_EQ(evidence, kThreads * kPerThread);
  EXPECT_EQ(predictor->Calibration().total, static_cast<uint64_t>(kThreads * kPerThread));
}

}  // namespace
}  // namespace kvtier
