#include <gtest/gtest.h>

#include "policy/policy_test_util.h"

namespace kvtier {
namespace {

using policy_testing::Block;
using policy_testing::Key;
using policy_testing::MakePolicy;
using policy_testing::TierSim;

constexpr BlockType kSystem = BlockType::kSystemPrompt;
constexpr BlockType kReasoning = BlockType::kIntermediateReasoning;
constexpr TransitionType kStep = TransitionType::kReasoningStep;

std::shared_ptr<ReusePredictor> Predictor(double p_system, double p_reasoning, double horizon_s = 300) {
  ReusePredictorOptions options{.horizon_s = horizon_s};
  options.pair_priors[ReusePairIndex(kSystem, kStep)] = BetaPrior{p_system * 10, (1 - p_system) * 10};
  options.pair_priors[ReusePairIndex(kReasoning, kStep)] = BetaPrior{p_reasoning * 10, (1 - p_reasoning) * 10};
  return ReusePredictor::Create(options).value();
}

const ReusePosterior& Row(const std::array<ReusePosterior, kReusePairCount>& rows, BlockType b, TransitionType t) {
  return rows[static_cast<std::size_t>(ReusePairIndex(b, t))];
}

TEST(BayesPolicy, EvictsTheLowestReuseProbabilityTimesValuePerByte) {
  auto bayes = MakePolicy(PolicyKind::kBayes, {}, Predictor(0.9, 0.1));
  EXPECT_EQ(bayes->name(), "bayes");
  bayes->Admit(Block(1, kSystem, kStep, 0.01), 0);     // 0.9 x 0.01 s
  bayes->Admit(Block(2, kReasoning, kStep, 0.05), 0);  // 0.1 x 0.05 s: lower
  EXPECT_EQ(bayes->Victim(), Key(2));
  bayes->Remove(Key(2), 1);
  bayes->Admit(Block(3, kReasoning, kStep, 0.2), 1);  // 0.1 x 0.2 s: higher than the prompt
  EXPECT_EQ(bayes->Victim(), Key(1));
}

TEST(BayesPolicy, BlocksCheaperToRecomputeThanToLoadGoFirst) {
  auto bayes = MakePolicy(PolicyKind::kBayes, {.tier_bandwidth_bytes_per_s = 1e9}, Predictor(0.9, 0.1));
  bayes->Admit(Block(1, kReasoning, kStep, 0.01), 0);
  bayes->Admit(Block(2, kSystem, kStep, 0.0005), 0);  // 1 MiB loads in ~1 ms: worth nothing here
  EXPECT_EQ(bayes->Victim(), Key(2));
}

TEST(BayesPolicy, WithinAPairLowerValueAndOlderGoFirst) {
  auto bayes = MakePolicy(PolicyKind::kBayes, {}, Predictor(0.5, 0.5));
  bayes->Admit(Block(1, kSystem, kStep, 0.02), 0);
  bayes->Admit(Block(2, kSystem, kStep, 0.01), 1);
  bayes->Admit(Block(3, kSystem, kStep, 0.01), 2);
  EXPECT_EQ(bayes->Victim(), Key(2));
  bayes->SetEvictable(Key(2), false);
  EXPECT_EQ(bayes->Victim(), Key(3));
  bayes->SetEvictable(Key(3), false);
  EXPECT_EQ(bayes->Victim(), Key(1));
  bayes->SetEvictable(Key(1), false);
  EXPECT_EQ(bayes->Victim(), std::nullopt);
}

TEST(BayesPolicy, StalenessOutweighsASmallGapInReuseProbability) {
  for (const auto& [p_reasoning, victim] : {std::pair{0.80, Key(1)}, std::pair{0.05, Key(2)}}) {
    auto bayes = MakePolicy(PolicyKind::kBayes, {.bayes_staleness_tau_s = 10}, Predictor(0.81, p_reasoning));
    bayes->Admit(Block(1, kSystem, kStep), 0);
    bayes->Admit(Block(2, kReasoning, kStep), 20);
    // The prompt waited 2 tau: 0.81 e^-2 = 0.11 is below 0.80, above 0.05.
    EXPECT_EQ(bayes->Victim(), victim) << p_reasoning;
  }
}

TEST(BayesPolicy, ExpiredBlocksGoFirstAndTeachNoReuse) {
  std::shared_ptr<ReusePredictor> predictor = Predictor(0.9, 0.1, /*horizon_s=*/10);
  auto bayes = MakePolicy(PolicyKind::kBayes, {}, predictor);
  bayes->Admit(Block(1, kSystem, kStep), 0);
  bayes->Admit(Block(2, kReasoning, kStep), 5);
  EXPECT_EQ(bayes->Victim(), Key(2));
  bayes->Touch(Key(2), kStep, 12);  // block 1's horizon ended at 10 without a reuse
  EXPECT_EQ(bayes->Victim(), Key(1));
  const auto rows = predictor->Snapshot();
  EXPECT_DOUBLE_EQ(Row(rows, kSystem, kStep).beta, 1 + 1);    // prior 9:1, one no-reuse
  EXPECT_DOUBLE_EQ(Row(rows, kReasoning, kStep).alpha, 1 + 1);  // prior 1:9, one reuse
  bayes->Touch(Key(1), kStep, 13);  // live again
  EXPECT_EQ(bayes->Victim(), Key(2));
  EXPECT_EQ(predictor->Calibration().total, 2u);
}

TEST(BayesPolicy, ARemovedBlockAdmittedAgainWithinItsHorizonWasAReuse) {
  std::shared_ptr<ReusePredictor> predictor = Predictor(0.5, 0.5, /*horizon_s=*/10);
  auto bayes = MakePolicy(PolicyKind::kBayes, {}, predictor);
  bayes->Admit(Block(1, kSystem, kStep), 0);
  bayes->Admit(Block(2, kReasoning, kStep), 0);
  bayes->Remove(Key(1), 1);
  bayes->Remove(Key(2), 1);
  EXPECT_EQ(predictor->Calibration().total, 0u) << "no outcome until the horizon ends or the block returns";
  bayes->Admit(Block(1, kSystem, kStep), 6);
  bayes->Admit(Block(3, BlockType::kUserContext, kStep), 20);  // block 2's horizon is over
  const auto rows = predictor->Snapshot();
  EXPECT_DOUBLE_EQ(Row(rows, kSystem, kStep).alpha, 5 + 1);
  EXPECT_DOUBLE_EQ(Row(rows, kReasoning, kStep).beta, 5 + 1);
}

TEST(BayesPolicy, ShouldAdmitRefusesBlocksBelowTheThreshold) {
  auto bayes = MakePolicy(PolicyKind::kBayes, {.bayes_admit_threshold = 0.5}, Predictor(0.9, 0.1));
  EXPECT_TRUE(bayes->ShouldAdmit(Block(1, kSystem, kStep), 0));
  EXPECT_FALSE(bayes->ShouldAdmit(Block(2, kReasoning, kStep), 0));
  auto lru = MakePolicy(PolicyKind::kLru);
  EXPECT_TRUE(lru->ShouldAdmit(Block(2, kReasoning, kStep), 0));
}

TEST(BayesPolicy, WithoutLearningThePredictorIsLeftAlone) {
  std::shared_ptr<ReusePredictor> predictor = Predictor(0.5, 0.5, 10);
  auto bayes = MakePolicy(PolicyKind::kBayes, {.bayes_learn = false}, predictor);
  bayes->Admit(Block(1, kSystem, kStep), 0);
  bayes->Touch(Key(1), kStep, 1);
  bayes->Remove(Key(1), 2);
  bayes->Admit(Block(1, kSystem, kStep), 3);
  bayes->Touch(Key(1), kStep, 30);
  EXPECT_EQ(Row(predictor->Snapshot(), kSystem, kStep).observations, 0u);
}

// The paper's motivating case: every session reads the shared system prompt, then floods
// the tier with more one-off reasoning blocks than it holds. LRU evicts the prompt in every
// flood; Bayes learns that prompts come back and reasoning blocks do not.
int SystemPromptHits(EvictionPolicy& policy, int sessions) {
  TierSim tier(&policy, /*capacity=*/16);
  uint64_t next_key = 1000;
  int late_hits = 0;
  for (int session = 0; session < sessions; ++session) {
    const double t = session;
    const bool hit = tier.Access(Block(1, kSystem, kStep), t);
    if (session >= sessions / 2 && hit) ++late_hits;
    for (int i = 0; i < 20; ++i) tier.Access(Block(next_key++, kReasoning, kStep), t + 0.01 * (i + 1));
  }
  return late_hits;
}

TEST(BayesPolicy, SharedSystemPromptSurvivesAFloodOfReasoningBlocks) {
  ReusePredictorOptions options{.horizon_s = 30};
  std::shared_ptr<ReusePredictor> predictor = ReusePredictor::Create(options).value();
  auto bayes = MakePolicy(PolicyKind::kBayes, {}, predictor);
  auto lru = MakePolicy(PolicyKind::kLru);
  constexpr int kSessions = 100;
  EXPECT_EQ(SystemPromptHits(*lru, kSessions), 0);
  EXPECT_GE(SystemPromptHits(*bayes, kSessions), kSessions / 2 - 1);
  EXPECT_GT(predictor->PReuse(kSystem, kStep), 0.9);
  EXPECT_LT(predictor->PReuse(kReasoning, kStep), 0.1);
}

}  // namespace
}  // namespace kvtier
