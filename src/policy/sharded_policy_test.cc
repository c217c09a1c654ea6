// ShardedPolicy (sharded_policy.h): one shard is the policy itself; several give one policy's
// victims where the victims have a standing, and nearly its order where they do not. The conformance suite
// (policy_conformance_test.cc) runs every kind sharded too.
#include "policy/sharded_policy.h"

#include <algorithm>
#include <random>
#include <set>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "policy/policy_test_util.h"

namespace kvtier {
namespace {

using policy_testing::Block;
using policy_testing::Key;
using policy_testing::MakePolicy;

std::unique_ptr<ShardedPolicy> MakeSharded(PolicyKind kind, uint32_t shards, PolicyOptions options = {}) {
  options.shards = shards;
  auto predictor = ReusePredictor::Create({}).value();
  auto made = ShardedPolicy::Create(kind, options, predictor);
  EXPECT_TRUE(made.ok()) << made.status().ToString();
  return std::move(made).value();
}

// Drives `plain` and `other` with the same random calls (every call at its own time, so that
// no two blocks tie in a standing) and requires the same victims, admission answers and sizes
// at every step.
void ExpectTheSameVictims(EvictionPolicy& plain, EvictionPolicy& other) {
  std::mt19937_64 rng(11);
  double now = 0;
  for (int step = 0; step < 30000; ++step) {
    now += std::uniform_real_distribution<double>(0.001, 1)(rng);
    const int op = std::uniform_int_distribution<int>(0, 5)(rng);
    const uint64_t n = std::uniform_int_distribution<uint64_t>(1, 400)(rng);
    if (op <= 1) {
      const ResidentBlock block = Block(n, static_cast<BlockType>(n % 4), static_cast<TransitionType>(step % 4));
      ASSERT_EQ(plain.ShouldAdmit(block, now), other.ShouldAdmit(block, now)) << "step " << step;
      plain.Admit(block, now);
      other.Admit(block, now);
    } else if (op == 2) {
      plain.Touch(Key(n), TransitionType::kToolSwitch, now);
      other.Touch(Key(n), TransitionType::kToolSwitch, now);
    } else if (op == 3) {
      plain.SetEvictable(Key(n), step % 3 != 0);
      other.SetEvictable(Key(n), step % 3 != 0);
    } else if (op == 4) {
      plain.Expect(Key(n), step % 2 == 0 ? std::optional<uint64_t>(n) : std::nullopt);
      other.Expect(Key(n), step % 2 == 0 ? std::optional<uint64_t>(n) : std::nullopt);
    } else {
      const std::optional<BlockKey> victim = plain.Victim();
      ASSERT_EQ(victim, other.Victim()) << "step " << step;
      if (victim) {
        plain.Remove(*victim, now);
        other.Remove(*victim, now);
      }
    }
    ASSERT_EQ(plain.size(), other.size());
  }
}

class OneShard : public ::testing::TestWithParam<PolicyKind> {};

// One shard is the policy itself, for every kind: the default changes no replay.
TEST_P(OneShard, IsThePolicyItself) {
  auto predictor = ReusePredictor::Create({}).value();
  auto plain = MakePolicy(GetParam(), {.capacity_blocks = 256}, predictor);
  auto sharded = ShardedPolicy::Create(GetParam(), {.capacity_blocks = 256}, predictor).value();
  ExpectTheSameVictims(*plain, *sharded);
}

INSTANTIATE_TEST_SUITE_P(AllKinds, OneShard,
                         ::testing::Values(PolicyKind::kLru, PolicyKind::kEma, PolicyKind::kS3Fifo, PolicyKind::kArc,
                                           PolicyKind::kBayes, PolicyKind::kPredictive),
                         [](const ::testing::TestParamInfo<PolicyKind>& param) {
                           return std::string(PolicyKindName(param.param));
                         });

class ManyShards : public ::testing::TestWithParam<PolicyKind> {};

// Policies whose victims have a standing give, in 8 shards, the victims one policy gives.
TEST_P(ManyShards, GiveTheVictimsOfOnePolicy) {
  auto plain = MakePolicy(GetParam(), {.capacity_blocks = 256});
  auto sharded = MakeSharded(GetParam(), 8, {.capacity_blocks = 256});
  ExpectTheSameVictims(*plain, *sharded);
}

INSTANTIATE_TEST_SUITE_P(RankedKinds, ManyShards,
                         ::testing::Values(PolicyKind::kLru, PolicyKind::kEma, PolicyKind::kPredictive),
                         [](const ::testing::TestParamInfo<PolicyKind>& param) {
                           return std::string(PolicyKindName(param.param));
                         });

// S3-FIFO has no standing: drained from 8,000 blocks to 1,000, the shards stay the same size
// and the blocks left are mostly the newest.
TEST(ShardedPolicy, QueuePoliciesTakeFromTheFullestShard) {
  auto policy = MakeSharded(PolicyKind::kS3Fifo, 8, {.capacity_blocks = 1000});
  constexpr uint64_t kBlocks = 8000, kKept = 1000;
  std::set<uint64_t> left;
  for (uint64_t n = 1; n <= kBlocks; ++n) {
    policy->Admit(Block(n), static_cast<double>(n));
    left.insert(n);
  }
  while (policy->size() > kKept) {
    const std::optional<BlockKey> victim = policy->Victim();
    ASSERT_TRUE(victim);
    ASSERT_EQ(left.erase(victim->lo), 1u);
    policy->Remove(*victim, kBlocks + 1.0);
  }
  const auto newest = static_cast<std::size_t>(std::count_if(left.begin(), left.end(), [&](uint64_t n) {
    return n > kBlocks - kKept;
  }));
  EXPECT_GE(newest, kKept * 8 / 10) << "of the 1,000 blocks left, the newest 1,000";
}

// The predictive policy's promise holds across shards: a block a queued request will read
// leaves only once no shard has another evictable block.
TEST(ShardedPolicy, ExpectedBlocksLeaveLastInEveryShard) {
  auto policy = MakeSharded(PolicyKind::kPredictive, 8);
  constexpr uint64_t kBlocks = 400;
  for (uint64_t n = 1; n <= kBlocks; ++n) policy->Admit(Block(n), static_cast<double>(n));
  std::set<uint64_t> expected;
  for (uint64_t n = 1; n <= kBlocks; n += 10) {
    policy->Expect(Key(n), n);
    expected.insert(n);
  }
  std::size_t unexpected_left = kBlocks - expected.size();
  while (const std::optional<BlockKey> victim = policy->Victim()) {
    if (expected.contains(victim->lo)) {
      ASSERT_EQ(unexpected_left, 0u) << "an expected block left before " << unexpected_left << " others";
    } else {
      --unexpected_left;
    }
    policy->Remove(*victim, kBlocks + 1.0);
  }
  EXPECT_EQ(policy->size(), 0u);
}

// Many threads on their own keys, and one picking victims, at once (TSan checks the locks):
// every block is accounted for at the end.
TEST(ShardedPolicy, ThreadsOnDifferentBlocksAddUp) {
  auto policy = MakeSharded(PolicyKind::kBayes, 16);
  constexpr int kThreads = 6;
  constexpr uint64_t kPerThread = 3000;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      const uint64_t base = static_cast<uint64_t>(t) * kPerThread;
      std::vector<ShardedPolicy::Hit> hits;
      for (uint64_t i = 1; i <= kPerThread; ++i) {
        const double now = static_cast<double>(i);
        policy->AdmitAs(Block(base + i), now, /*evictable=*/i % 5 != 0);
        hits.push_back({.key = Key(base + i), .at = now});
        if (hits.size() == 16) {
          policy->TouchAll(hits);
          hits.clear();
        }
        if (i % 7 == 0) policy->Remove(Key(base + i - 3), now);
      }
    });
  }
  std::thread picker([&] {
    for (int i = 0; i < 2000; ++i) (void)policy->Victim();
  });
  for (auto& thread : threads) thread.join();
  picker.join();
  const std::size_t removed = kPerThread / 7;
  EXPECT_EQ(policy->size(), kThreads * (kPerThread - removed));
  EXPECT_GT(policy->Profile().exclusive_acquisitions, kThreads * kPerThread);
  const std::vector<LockProfile> shards = policy->ShardProfiles();
  ASSERT_EQ(shards.size(), 16u);
  uint64_t acquisitions = 0;
  for (const LockProfile& shard : shards) {
    EXPECT_GT(shard.exclusive_acquisitions, 0u) << "keys spread over every shard";
    acquisitions += shard.exclusive_acquisitions;
  }
  EXPECT_EQ(acquisitions, policy->Profile().exclusive_acquisitions);
}

}  // namespace
}  // namespace kvtier
