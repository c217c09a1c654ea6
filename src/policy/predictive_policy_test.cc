#include <gtest/gtest.h>

#include "policy/policy_test_util.h"

namespace kvtier {
namespace {

using policy_testing::Block;
using policy_testing::Key;
using policy_testing::MakePolicy;

TEST(PredictivePolicy, WithoutExpectedReadsItIsLru) {
  auto policy = MakePolicy(PolicyKind::kPredictive);
  EXPECT_EQ(policy->name(), "predictive");
  policy->Admit(Block(1), 1);
  policy->Admit(Block(2), 2);
  policy->Admit(Block(3), 3);
  policy->Touch(Key(1), TransitionType::kSameToolRepeat, 4);
  EXPECT_EQ(policy->Victim(), Key(2));
  policy->Remove(Key(2), 5);
  EXPECT_EQ(policy->Victim(), Key(3));
}

TEST(PredictivePolicy, BlocksOfQueuedRequestsLeaveLastTheLatestNeededFirst) {
  auto policy = MakePolicy(PolicyKind::kPredictive);
  for (uint64_t i = 1; i <= 4; ++i) policy->Admit(Block(i), static_cast<double>(i));
  policy->Expect(Key(1), 7);  // the oldest block, needed by the second queued request
  policy->Expect(Key(2), 3);  // needed by the first
  EXPECT_EQ(policy->Victim(), Key(3)) << "unexpected blocks go first, in LRU order";
  policy->Remove(Key(3), 5);
  EXPECT_EQ(policy->Victim(), Key(4));
  policy->Remove(Key(4), 5);
  EXPECT_EQ(policy->Victim(), Key(1)) << "of the expected blocks, the one read later goes first";
  policy->Expect(Key(1), std::nullopt);  // its request started (or left the queue)
  policy->Admit(Block(5), 6);
  EXPECT_EQ(policy->Victim(), Key(1)) << "no longer expected: back in LRU order";
}

TEST(PredictivePolicy, ExpectationSurvivesPinsAndTouches) {
  auto policy = MakePolicy(PolicyKind::kPredictive);
  policy->Admit(Block(1), 1);
  policy->Admit(Block(2), 2);
  policy->Expect(Key(1), 1);
  policy->SetEvictable(Key(1), false);
  policy->Touch(Key(1), TransitionType::kSameToolRepeat, 3);
  policy->SetEvictable(Key(1), true);
  EXPECT_EQ(policy->Victim(), Key(2));
  policy->Remove(Key(2), 4);
  EXPECT_EQ(policy->Victim(), Key(1)) << "an expected block is still evicted when it is all there is";
}

TEST(PredictivePolicy, AFullTierWhoseVictimIsExpectedTakesOnlyExpectedBlocks) {
  auto policy = MakePolicy(PolicyKind::kPredictive);
  policy->Admit(Block(1), 1);
  EXPECT_TRUE(policy->ShouldAdmit(Block(2), 2)) << "the victim is not expected";
  policy->Expect(Key(1), 4);
  EXPECT_FALSE(policy->ShouldAdmit(Block(2), 2)) << "it would push out a block a queued request reads";
  ResidentBlock expected = Block(3);
  expected.expected_order = 9;
  EXPECT_TRUE(policy->ShouldAdmit(expected, 2));
  policy->Admit(expected, 2);
  EXPECT_EQ(policy->Victim(), Key(3)) << "admitted expected: of the two, read later, it leaves first";
  policy->SetEvictable(Key(3), false);
  policy->SetEvictable(Key(1), false);
  EXPECT_TRUE(policy->ShouldAdmit(Block(2), 2)) << "nothing evictable: the store decides";
}

}  // namespace
}  // namespace kvtier
