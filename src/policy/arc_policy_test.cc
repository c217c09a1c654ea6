#include <gtest/gtest.h>

#include "policy/policy_test_util.h"

namespace kvtier {
namespace {

using policy_testing::Block;
using policy_testing::Key;
using policy_testing::MakePolicy;

constexpr TransitionType kHit = TransitionType::kSameToolRepeat;

// Names for the keys of the scenario below.
enum : uint64_t { A = 1, B, C, D, E };

TEST(ArcPolicy, GhostHitsAdaptTheTargetSizeOfT1) {
  auto arc = MakePolicy(PolicyKind::kArc, {.capacity_blocks = 4});
  EXPECT_EQ(arc->name(), "arc");
  arc->Admit(Block(A), 0);
  arc->Admit(Block(B), 0);
  arc->Touch(Key(A), kHit, 1);
  arc->Touch(Key(B), kHit, 1);  // T2 = A B
  arc->Admit(Block(C), 2);
  arc->Admit(Block(D), 2);      // T1 = C D, p = 0
  EXPECT_EQ(arc->Victim(), Key(C)) << "|T1| > p: T1's least recent";
  arc->Remove(Key(C), 3);       // B1 = C
  arc->Admit(Block(E), 3);      // T1 = D E
  EXPECT_EQ(arc->Victim(), Key(D));
  arc->Remove(Key(D), 4);       // B1 = C D

  arc->Admit(Block(C), 5);      // B1 hit: p = 0 + max(1, 0/2) = 1; T2 = A B C, T1 = E
  EXPECT_EQ(arc->Victim(), Key(A)) << "with p still 0, T1's E would go";
  arc->Remove(Key(A), 6);       // B2 = A
  arc->Admit(Block(D), 6);      // B1 hit: p = 1 + max(1, 1/1) = 2; T2 = B C D
  EXPECT_EQ(arc->Victim(), Key(B));
  arc->Remove(Key(B), 7);       // B2 = A B

  arc->Admit(Block(A), 8);      // B2 hit: p = 2 - max(1, 0/2) = 1; T2 = C D A
  EXPECT_EQ(arc->Victim(), Key(C)) << "|T1| = 1 is not above p = 1";
  arc->Remove(Key(C), 9);       // B2 = B C
  arc->Admit(Block(B), 9);      // B2 hit: p = 0; T2 = D A B
  EXPECT_EQ(arc->Victim(), Key(E)) << "p shrank: T1 gives up its block";
}

TEST(ArcPolicy, HitsMoveBlocksToTheFrequentList) {
  auto arc = MakePolicy(PolicyKind::kArc, {.capacity_blocks = 8});
  arc->Admit(Block(A), 0);
  arc->Admit(Block(B), 0);
  arc->Admit(Block(C), 0);
  arc->Touch(Key(A), kHit, 1);  // T1 = B C, T2 = A
  EXPECT_EQ(arc->Victim(), Key(B));
  arc->Remove(Key(B), 2);
  EXPECT_EQ(arc->Victim(), Key(C));
  arc->Remove(Key(C), 2);
  EXPECT_EQ(arc->Victim(), Key(A)) << "T1 is empty: T2's least recent";
}

TEST(ArcPolicy, ParkedBlocksReturnByRecency) {
  auto arc = MakePolicy(PolicyKind::kArc, {.capacity_blocks = 8});
  arc->Admit(Block(A), 0);
  arc->Admit(Block(B), 0);
  arc->Admit(Block(C), 0);
  arc->SetEvictable(Key(A), false);
  EXPECT_EQ(arc->Victim(), Key(B));  // A parked
  arc->SetEvictable(Key(A), true);
  EXPECT_EQ(arc->Victim(), Key(A)) << "not used since: back at the least recent end";
  arc->SetEvictable(Key(A), false);
  EXPECT_EQ(arc->Victim(), Key(B));
  arc->Touch(Key(A), kHit, 1);  // hit while parked: T2's most recent
  arc->SetEvictable(Key(A), true);
  EXPECT_EQ(arc->Victim(), Key(B));
  arc->Remove(Key(B), 2);
  arc->Remove(Key(C), 2);
  EXPECT_EQ(arc->Victim(), Key(A));
}

}  // namespace
}  // namespace kvtier
