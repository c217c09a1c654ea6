#include <gtest/gtest.h>

#include "policy/policy_test_util.h"

namespace kvtier {
namespace {

using policy_testing::Block;
using policy_testing::Key;
using policy_testing::MakePolicy;

constexpr TransitionType kHit = TransitionType::kSameToolRepeat;

// Capacity 10: the small queue's share is 1 block.
PolicyOptions TenBlocks() { return {.capacity_blocks = 10}; }

TEST(S3FifoPolicy, OneHitWondersLeaveFromTheSmallQueueFirst) {
  auto s3 = MakePolicy(PolicyKind::kS3Fifo, TenBlocks());
  EXPECT_EQ(s3->name(), "s3fifo");
  for (uint64_t i = 1; i <= 5; ++i) {
    s3->Admit(Block(i), 0);
    s3->Touch(Key(i), kHit, 1);  // hot: accessed again while in S
  }
  s3->Admit(Block(100), 2);  // a one-hit wonder, admitted last
  // S's oldest blocks were hit, so they move to M; the first cold block is the victim.
  EXPECT_EQ(s3->Victim(), Key(100));
  EXPECT_EQ(s3->Victim(), Key(100)) << "idempotent";
  s3->Remove(Key(100), 3);
  // S is empty now: M is scanned, in the order blocks entered it, frequencies cleared.
  EXPECT_EQ(s3->Victim(), Key(1));
}

TEST(S3FifoPolicy, GhostHitsGoToTheMainQueue) {
  auto s3 = MakePolicy(PolicyKind::kS3Fifo, TenBlocks());
  s3->Admit(Block(1), 0);
  s3->Touch(Key(1), kHit, 0);
  s3->Admit(Block(2), 0);
  EXPECT_EQ(s3->Victim(), Key(2));  // 1 moves to M
  s3->Remove(Key(2), 1);            // 2 is remembered in the ghost queue
  s3->Admit(Block(2), 2);           // ghost hit: straight into M, behind 1
  EXPECT_EQ(s3->Victim(), Key(1)) << "2 went to S, it would be the victim";
  s3->Remove(Key(1), 3);
  EXPECT_EQ(s3->Victim(), Key(2));
  s3->Admit(Block(3), 4);  // a new key enters S, which now holds its share again
  EXPECT_EQ(s3->Victim(), Key(3));
}

TEST(S3FifoPolicy, MainQueueGivesAccessedBlocksAnotherRound) {
  auto s3 = MakePolicy(PolicyKind::kS3Fifo, TenBlocks());
  for (uint64_t i = 1; i <= 3; ++i) {
    s3->Admit(Block(i), 0);
    s3->Touch(Key(i), kHit, 0);
  }
  s3->Admit(Block(9), 0);
  EXPECT_EQ(s3->Victim(), Key(9));  // moves 1, 2, 3 to M
  s3->Remove(Key(9), 0);
  s3->Touch(Key(1), kHit, 1);
  s3->Touch(Key(1), kHit, 1);
  s3->Touch(Key(2), kHit, 1);
  // M = 1(f2) 2(f1) 3(f0): 1 and 2 are reinserted with one less, 3 goes.
  EXPECT_EQ(s3->Victim(), Key(3));
  s3->Remove(Key(3), 2);
  // M = 1(f1) 2(f0): 1 reinserted again, 2 goes.
  EXPECT_EQ(s3->Victim(), Key(2));
}

TEST(S3FifoPolicy, FrequencyIsCappedAtThree) {
  auto s3 = MakePolicy(PolicyKind::kS3Fifo, TenBlocks());
  s3->Admit(Block(1), 0);
  s3->Touch(Key(1), kHit, 0);
  s3->Admit(Block(2), 0);
  s3->Touch(Key(2), kHit, 0);
  s3->Admit(Block(8), 0);
  EXPECT_EQ(s3->Victim(), Key(8));  // 1 and 2 to M
  s3->Remove(Key(8), 0);
  for (int i = 0; i < 10; ++i) s3->Touch(Key(1), kHit, 1);  // capped at 3
  s3->Touch(Key(2), kHit, 1);
  s3->Touch(Key(2), kHit, 1);
  s3->Touch(Key(2), kHit, 1);
  s3->Touch(Key(2), kHit, 1);  // 3 as well
  // Both need three rounds; 1 is ahead of 2, so after three rounds 1 is at the head with 0.
  EXPECT_EQ(s3->Victim(), Key(1));
}

TEST(S3FifoPolicy, ParkedBlocksReturnToTheHeadTailFirst) {
  auto s3 = MakePolicy(PolicyKind::kS3Fifo, TenBlocks());
  // A one-off chain 1 <- 2 <- 3 in S; only the tail is a leaf.
  for (uint64_t i = 1; i <= 3; ++i) s3->Admit(Block(i), 0);
  s3->SetEvictable(Key(1), false);
  s3->SetEvictable(Key(2), false);
  s3->Admit(Block(4), 1);  // another one-off leaf, newer
  EXPECT_EQ(s3->Victim(), Key(3));
  s3->Remove(Key(3), 2);
  s3->SetEvictable(Key(2), true);
  EXPECT_EQ(s3->Victim(), Key(2)) << "back at the head, ahead of the newer block 4";
  s3->Remove(Key(2), 2);
  s3->SetEvictable(Key(1), true);
  EXPECT_EQ(s3->Victim(), Key(1));
}

}  // namespace
}  // namespace kvtier
