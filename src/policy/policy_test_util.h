// Helpers for the policy tests: small keys and blocks, and a tier simulator of a fixed
// capacity in blocks.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <set>

#include <gtest/gtest.h>

#include "kvtier/eviction_policy.h"
#include "kvtier/reuse_predictor.h"

namespace kvtier::policy_testing {

inline BlockKey Key(uint64_t n) { return BlockKey{n * 0x9E3779B97F4A7C15ull, n}; }

inline ResidentBlock Block(uint64_t n, BlockType type = BlockType::kUserContext,
                           TransitionType transition = TransitionType::kReasoningStep, double recompute_s = 0.01) {
  return ResidentBlock{.key = Key(n), .bytes = 1u << 20, .tokens = 16, .type = type, .transition = transition,
                       .recompute_seconds = recompute_s};
}

inline std::unique_ptr<EvictionPolicy> MakePolicy(PolicyKind kind, const PolicyOptions& options = {},
                                                  std::shared_ptr<ReusePredictor> predictor = nullptr) {
  if (kind == PolicyKind::kBayes && predictor == nullptr) predictor = ReusePredictor::Create({}).value();
  Result<std::unique_ptr<EvictionPolicy>> policy = NewEvictionPolicy(kind, options, std::move(predictor));
  EXPECT_TRUE(policy.ok()) << policy.status().ToString();
  return std::move(policy).value();
}

// A tier of `capacity` blocks driven by `policy`, as the store would drive it (no chains:
// every block is a leaf). Access returns whether the block was a hit.
class TierSim {
 public:
  TierSim(EvictionPolicy* policy, std::size_t capacity) : policy_(policy), capacity_(capacity) {}

  bool Access(const ResidentBlock& block, double now_s) {
    if (resident_.contains(block.key)) {
      policy_->Touch(block.key, block.transition, now_s);
      return true;
    }
    while (resident_.size() >= capacity_) {
      const std::optional<BlockKey> victim = policy_->Victim();
      EXPECT_TRUE(victim.has_value());
      if (!victim) return false;
      EXPECT_TRUE(resident_.erase(*victim) == 1) << "victim not resident";
      policy_->Remove(*victim, now_s);
    }
    if (!policy_->ShouldAdmit(block, now_s)) return false;
    policy_->Admit(block, now_s);
    resident_.insert(block.key);
    return false;
  }

  bool Resident(const BlockKey& key) const { return resident_.contains(key); }

 private:
  EvictionPolicy* policy_;
  std::size_t capacity_;
  std::set<BlockKey> resident_;
};

}  // namespace kvtier::policy_testing
