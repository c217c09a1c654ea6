#include <gtest/gtest.h>

#include "policy/policy_test_util.h"

namespace kvtier {
namespace {

using policy_testing::Block;
using policy_testing::Key;
using policy_testing::MakePolicy;

TEST(EmaPolicy, FavoursFrequentOverRecent) {
  auto ema = MakePolicy(PolicyKind::kEma, {.ema_tau_s = 60});
  auto lru = MakePolicy(PolicyKind::kLru);
  for (EvictionPolicy* policy : {ema.get(), lru.get()}) {
    policy->Admit(Block(1), 0);
    for (int t = 1; t < 5; ++t) policy->Touch(Key(1), TransitionType::kSameToolRepeat, t);
    policy->Admit(Block(2), 5);  // recent, once
  }
  EXPECT_EQ(ema->Victim(), Key(2));  // score ~1 against ~4.8
  EXPECT_EQ(lru->Victim(), Key(1));
}

TEST(EmaPolicy, OldFrequencyDecays) {
  auto ema = MakePolicy(PolicyKind::kEma, {.ema_tau_s = 10});
  ema->Admit(Block(1), 0);
  ema->Touch(Key(1), TransitionType::kSameToolRepeat, 0);
  ema->Touch(Key(1), TransitionType::kSameToolRepeat, 0);  // score 3 at t = 0
  ema->Admit(Block(2), 100);                                  // score 1 at t = 100; block 1 has 3e^-10
  EXPECT_EQ(ema->Victim(), Key(1));
  ema->Touch(Key(1), TransitionType::kSameToolRepeat, 100);  // 1 + 3e^-10 > 1
  EXPECT_EQ(ema->Victim(), Key(2));
}

TEST(EmaPolicy, ShortTimeConstantBehavesLikeLru) {
  auto ema = MakePolicy(PolicyKind::kEma, {.ema_tau_s = 0.01});
  ema->Admit(Block(1), 0);
  for (int t = 1; t < 5; ++t) ema->Touch(Key(1), TransitionType::kSameToolRepeat, t);
  ema->Admit(Block(2), 5);
  ema->Admit(Block(3), 6);
  EXPECT_EQ(ema->Victim(), Key(1));
}

TEST(EmaPolicy, NonEvictableBlocksAreSkipped) {
  auto ema = MakePolicy(PolicyKind::kEma);
  ema->Admit(Block(1), 0);
  ema->Admit(Block(2), 0);
  ema->Touch(Key(2), TransitionType::kSameToolRepeat, 1);
  ema->SetEvictable(Key(1), false);
  EXPECT_EQ(ema->Victim(), Key(2));
  ema->SetEvictable(Key(1), true);
  EXPECT_EQ(ema->Victim(), Key(1));
}

}  // namespace
}  // namespace kvtier
