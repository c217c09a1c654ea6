// What every policy must do, run over every kind, alone and split into shards
// (sharded_policy.h; one suite per interface): random operations checked against a reference
// model, and leaf-first draining of chains.
#include <algorithm>
#include <map>
#include <random>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include <gtest/gtest.h>

#include "policy/flat_key_map.h"
#include "policy/policy_test_util.h"

namespace kvtier {
namespace {

using policy_testing::Block;
using policy_testing::Key;
using policy_testing::MakePolicy;

class PolicyConformance : public ::testing::TestWithParam<std::tuple<PolicyKind, uint32_t>> {
 protected:
  static PolicyKind Kind() { return std::get<0>(GetParam()); }
  static PolicyOptions Options(PolicyOptions options = {}) {
    options.shards = std::get<1>(GetParam());
    return options;
  }
};

// The reference: which keys are resident and which of them are evictable.
void CheckVictim(EvictionPolicy& policy, const std::map<BlockKey, bool>& model) {
  const std::optional<BlockKey> victim = policy.Victim();
  bool any_evictable = false;
  for (const auto& [key, evictable] : model) any_evictable |= evictable;
  ASSERT_EQ(victim.has_value(), any_evictable);
  if (victim) {
    const auto it = model.find(*victim);
    ASSERT_NE(it, model.end()) << "victim is not resident";
    ASSERT_TRUE(it->second) << "victim is not evictable";
    ASSERT_EQ(policy.Victim(), victim) << "Victim twice without Remove must agree";
  }
  ASSERT_EQ(policy.size(), model.size());
}

TEST_P(PolicyConformance, VictimIsAlwaysAResidentEvictableBlock) {
  auto policy = MakePolicy(Kind(), Options({.capacity_blocks = 64}));
  std::mt19937_64 rng(42);
  std::map<BlockKey, bool> model;
  std::vector<BlockKey> keys;  // resident keys, for picking one at random
  double now = 0;
  auto pick = [&]() -> BlockKey {
    return keys[std::uniform_int_distribution<std::size_t>(0, keys.size() - 1)(rng)];
  };
  auto forget = [&](const BlockKey& key) {
    model.erase(key);
    keys.erase(std::find(keys.begin(), keys.end(), key));
  };
  for (int step = 0; step < 20000; ++step) {
    now += std::uniform_real_distribution<double>(0, 2)(rng);
    const int op = std::uniform_int_distribution<int>(0, 9)(rng);
    if (op <= 2 || keys.empty()) {  // admit a key from a small universe, so some return
      const auto n = std::uniform_int_distribution<uint64_t>(1, 200)(rng);
      const auto type = static_cast<BlockType>(n % 4);
      const auto transition = static_cast<TransitionType>((n / 4) % 4);
      policy->Admit(Block(n, type, transition, 0.001 * static_cast<double>(n % 7)), now);
      if (model.emplace(Key(n), true).second) keys.push_back(Key(n));
    } else if (op <= 4) {
      policy->Touch(pick(), static_cast<TransitionType>(op % 4), now);
    } else if (op == 5) {
      const BlockKey key = pick();
      policy->Remove(key, now);
      forget(key);
    } else if (op == 6 && step % 2 == 0) {  // a queued request will read it, or no longer
      const bool expected = std::bernoulli_distribution(0.5)(rng);
      policy->Expect(pick(), expected ? std::optional<uint64_t>(static_cast<uint64_t>(step)) : std::nullopt);
    } else if (op <= 7) {
      const BlockKey key = pick();
      const bool evictable = std::bernoulli_distribution(0.6)(rng);
      policy->SetEvictable(key, evictable);
      model[key] = evictable;
    } else {  // evict, as the store does
      if (std::optional<BlockKey> victim = policy->Victim()) {
        policy->Remove(*victim, now);
        forget(*victim);
      }
    }
    // Operations on keys that are not resident are ignored.
    policy->Touch(Key(100000 + static_cast<uint64_t>(step)), TransitionType::kToolSwitch, now);
    policy->SetEvictable(Key(100000 + static_cast<uint64_t>(step)), true);
    policy->Remove(Key(100000 + static_cast<uint64_t>(step)), now);
    policy->Expect(Key(100000 + static_cast<uint64_t>(step)), 1);
    CheckVictim(*policy, model);
    if (HasFatalFailure()) FAIL() << "at step " << step;
  }
}

// Chains of 5 blocks (each block's parent is the one before it), fully cached: only the
// tails are leaves. Draining the tier as the store does (evict the victim, make its parent
// evictable once it has no cached child) must evict every block, never an interior one.
TEST_P(PolicyConformance, DrainsChainsLeafFirst) {
  auto policy = MakePolicy(Kind(), Options());
  constexpr uint64_t kChains = 20, kLength = 5;
  std::set<BlockKey> resident;
  double now = 0;
  for (uint64_t chain = 0; chain < kChains; ++chain) {
    for (uint64_t i = 0; i < kLength; ++i) {
      const uint64_t n = chain * kLength + i + 1;
      policy->Admit(Block(n), now += 1);
      resident.insert(Key(n));
      if (i > 0) policy->SetEvictable(Key(n - 1), false);  // now has a cached child
    }
  }
  std::size_t evicted = 0;
  while (std::optional<BlockKey> victim = policy->Victim()) {
    const uint64_t n = victim->lo;
    const uint64_t position = (n - 1) % kLength;
    ASSERT_TRUE(resident.contains(*victim));
    if (position + 1 < kLength) {
      ASSERT_FALSE(resident.contains(Key(n + 1))) << "evicted a block with a cached child";
    }
    policy->Remove(*victim, now += 1);
    resident.erase(*victim);
    if (position > 0) policy->SetEvictable(Key(n - 1), true);
    ++evicted;
  }
  EXPECT_EQ(evicted, kChains * kLength);
  EXPECT_EQ(policy->size(), 0u);
}

INSTANTIATE_TEST_SUITE_P(AllKinds, PolicyConformance,
                         ::testing::Combine(::testing::Values(PolicyKind::kLru, PolicyKind::kEma, PolicyKind::kS3Fifo,
                                                              PolicyKind::kArc, PolicyKind::kBayes,
                                                              PolicyKind::kPredictive),
                                            ::testing::Values(1u, 8u)),
                         [](const ::testing::TestParamInfo<std::tuple<PolicyKind, uint32_t>>& param) {
                           const uint32_t shards = std::get<1>(param.param);
                           return std::string(PolicyKindName(std::get<0>(param.param))) +
                                  (shards == 1 ? "" : "_" + std::to_string(shards) + "_shards");
                         });

TEST(PolicyFactory, ParsesKindsAndValidatesOptions) {
  for (PolicyKind kind :
       {PolicyKind::kLru, PolicyKind::kEma, PolicyKind::kS3Fifo, PolicyKind::kArc, PolicyKind::kBayes,
        PolicyKind::kPredictive}) {
    Result<PolicyKind> parsed = ParsePolicyKind(PolicyKindName(kind));
    ASSERT_TRUE(parsed.ok());
    EXPECT_EQ(*parsed, kind);
  }
  EXPECT_EQ(ParsePolicyKind("lfu").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(NewEvictionPolicy(PolicyKind::kBayes, {}, nullptr).status().code(), StatusCode::kInvalidArgument);
  EXPECT_FALSE(NewEvictionPolicy(PolicyKind::kEma, {.ema_tau_s = 0}).ok());
  EXPECT_FALSE(NewEvictionPolicy(PolicyKind::kS3Fifo, {.s3fifo_small_fraction = 1.5}).ok());
  EXPECT_FALSE(NewEvictionPolicy(PolicyKind::kS3Fifo, {.s3fifo_move_to_main_threshold = 4}).ok());
  EXPECT_FALSE(NewEvictionPolicy(PolicyKind::kLru, {.tier_bandwidth_bytes_per_s = 0}).ok());
  EXPECT_FALSE(NewEvictionPolicy(PolicyKind::kLru, {.bayes_admit_threshold = 2}).ok());
  EXPECT_FALSE(NewEvictionPolicy(PolicyKind::kLru, {.shards = 0}).ok());
  EXPECT_FALSE(NewEvictionPolicy(PolicyKind::kLru, {.shards = 3}).ok());
  EXPECT_FALSE(NewEvictionPolicy(PolicyKind::kLru, {.shards = 128}).ok());
  EXPECT_TRUE(PolicyOptions{}.Validate().ok());
}

TEST(PolicyFlatKeyMap, MatchesAStdMapUnderChurn) {
  policy_internal::FlatKeyMap<uint64_t> map(4);
  std::map<BlockKey, uint64_t> reference;
  std::mt19937_64 rng(7);
  for (int i = 0; i < 100000; ++i) {
    // Few distinct low words, so probe runs collide and wrap around.
    const BlockKey key{rng() % 64, rng() % 512};
    if (rng() % 3 == 0) {
      EXPECT_EQ(map.Erase(key), reference.erase(key) == 1);
    } else {
      EXPECT_EQ(map.Put(key, static_cast<uint64_t>(i)), !reference.contains(key));
      reference[key] = static_cast<uint64_t>(i);
    }
    ASSERT_EQ(map.size(), reference.size());
  }
  for (const auto& [key, value] : reference) ASSERT_EQ(*map.Find(key), value);
}

}  // namespace
}  // namespace kvtier
