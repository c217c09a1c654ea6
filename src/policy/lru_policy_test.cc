#include <gtest/gtest.h>

#include "policy/policy_test_util.h"

namespace kvtier {
namespace {

using policy_testing::Block;
using policy_testing::Key;
using policy_testing::MakePolicy;

TEST(LruPolicy, EvictsLeastRecentlyUsedFirst) {
  auto lru = MakePolicy(PolicyKind::kLru);
  EXPECT_EQ(lru->name(), "lru");
  EXPECT_EQ(lru->Victim(), std::nullopt);
  lru->Admit(Block(1), 1);
  lru->Admit(Block(2), 2);
  lru->Admit(Block(3), 3);
  lru->Touch(Key(1), TransitionType::kSameToolRepeat, 4);
  EXPECT_EQ(lru->Victim(), Key(2));
  EXPECT_EQ(lru->Victim(), Key(2)) << "Victim does not remove";
  lru->Remove(Key(2), 5);
  EXPECT_EQ(lru->Victim(), Key(3));
  lru->Remove(Key(3), 5);
  EXPECT_EQ(lru->Victim(), Key(1));
  lru->Remove(Key(1), 5);
  EXPECT_EQ(lru->Victim(), std::nullopt);
  EXPECT_EQ(lru->size(), 0u);
}

TEST(LruPolicy, SameInstantEvictsTheRequestTailFirst) {
  auto lru = MakePolicy(PolicyKind::kLru);
  for (uint64_t i = 1; i <= 4; ++i) lru->Admit(Block(i), 10);  // one request, head to tail, one virtual instant
  for (uint64_t i = 4; i >= 1; --i) {
    EXPECT_EQ(lru->Victim(), Key(i));
    lru->Remove(Key(i), 10);
  }
}

TEST(LruPolicy, NonEvictableBlocksAreNeverVictimsAndReturnInPlace) {
  auto lru = MakePolicy(PolicyKind::kLru);
  lru->Admit(Block(1), 1);
  lru->Admit(Block(2), 2);
  lru->Admit(Block(3), 3);
  lru->SetEvictable(Key(1), false);  // pinned
  EXPECT_EQ(lru->Victim(), Key(2));
  lru->SetEvictable(Key(2), false);
  lru->SetEvictable(Key(3), false);
  EXPECT_EQ(lru->Victim(), std::nullopt);
  EXPECT_EQ(lru->size(), 3u);
  lru->SetEvictable(Key(3), true);
  lru->SetEvictable(Key(1), true);
  EXPECT_EQ(lru->Victim(), Key(1)) << "an unpinned block keeps its last access time";
}

TEST(LruPolicy, LeafFirstChainEvictsTailToHead) {
  auto lru = MakePolicy(PolicyKind::kLru);
  // A chain 1 <- 2 <- 3 (3 is the leaf), the head touched most recently of all.
  lru->Admit(Block(1), 1);
  lru->Admit(Block(2), 2);
  lru->Admit(Block(3), 3);
  lru->SetEvictable(Key(1), false);
  lru->SetEvictable(Key(2), false);
  lru->Touch(Key(1), TransitionType::kReasoningStep, 9);
  lru->Admit(Block(4), 5);  // an unrelated leaf, more recent than 3
  EXPECT_EQ(lru->Victim(), Key(3));
  lru->Remove(Key(3), 10);
  lru->SetEvictable(Key(2), true);  // now a leaf
  EXPECT_EQ(lru->Victim(), Key(2));
}

TEST(LruPolicy, AdmittingAResidentKeyIsATouch) {
  auto lru = MakePolicy(PolicyKind::kLru);
  lru->Admit(Block(1), 1);
  lru->Admit(Block(2), 2);
  lru->Admit(Block(1), 3);
  EXPECT_EQ(lru->size(), 2u);
  EXPECT_EQ(lru->Victim(), Key(2));
}

}  // namespace
}  // namespace kvtier
