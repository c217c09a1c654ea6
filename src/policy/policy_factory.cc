#include <bit>
#include <cmath>
#include <string>

#include "kvtier/eviction_policy.h"
#include "kvtier/reuse_predictor.h"
#include "policy/policies.h"
#include "policy/sharded_policy.h"

namespace kvtier {
namespace {

bool Fraction(double x) { return std::isfinite(x) && x >= 0 && x <= 1; }

}  // namespace

std::string_view PolicyKindName(PolicyKind kind) {
  switch (kind) {
    case PolicyKind::kLru: return "lru";
    case PolicyKind::kEma: return "ema";
    case PolicyKind::kS3Fifo: return "s3fifo";
    case PolicyKind::kArc: return "arc";
    case PolicyKind::kBayes: return "bayes";
    case PolicyKind::kPredictive: return "predictive";
  }
  return "unknown";
}

bool ShardsKeepOrder(PolicyKind kind) { return kind != PolicyKind::kS3Fifo && kind != PolicyKind::kArc; }

Result<PolicyKind> ParsePolicyKind(std::string_view name) {
  for (PolicyKind kind :
       {PolicyKind::kLru, PolicyKind::kEma, PolicyKind::kS3Fifo, PolicyKind::kArc, PolicyKind::kBayes,
        PolicyKind::kPredictive}) {
    if (name == PolicyKindName(kind)) return kind;
  }
  return Status::InvalidArgument("unknown eviction policy '" + std::string(name) +
                                 "'; expected one of lru, ema, s3fifo, arc, bayes, predictive");
}

Status PolicyOptions::Validate() const {
  if (!std::isfinite(ema_tau_s) || ema_tau_s <= 0) {
    return Status::InvalidArgument("policy: ema_tau_s must be positive seconds, got " + std::to_string(ema_tau_s));
  }
  if (!Fraction(s3fifo_small_fraction) || s3fifo_small_fraction == 0 || s3fifo_small_fraction == 1) {
    return Status::InvalidArgument("policy: s3fifo_small_fraction must lie strictly between 0 and 1, got " +
                                   std::to_string(s3fifo_small_fraction));
  }
  if (!std::isfinite(s3fifo_ghost_fraction) || s3fifo_ghost_fraction < 0 || s3fifo_ghost_fraction > 16) {
    return Status::InvalidArgument("policy: s3fifo_ghost_fraction must lie in [0, 16], got " +
                                   std::to_string(s3fifo_ghost_fraction));
  }
  if (s3fifo_move_to_main_threshold < 1 || s3fifo_move_to_main_threshold > 3) {
    return Status::InvalidArgument("policy: s3fifo_move_to_main_threshold must be 1, 2 or 3 (frequencies are capped "
                                   "at 3), got " + std::to_string(s3fifo_move_to_main_threshold));
  }
  if (!std::isfinite(tier_bandwidth_bytes_per_s) || tier_bandwidth_bytes_per_s <= 0) {
    return Status::InvalidArgument("policy: tier_bandwidth_bytes_per_s must be positive, got " +
                                   std::to_string(tier_bandwidth_bytes_per_s));
  }
  if (!std::isfinite(tier_latency_s) || tier_latency_s < 0) {
    return Status::InvalidArgument("policy: tier_latency_s must be >= 0, got " + std::to_string(tier_latency_s));
  }
  if (!std::isfinite(bayes_staleness_tau_s) || bayes_staleness_tau_s < 0) {
    return Status::InvalidArgument("policy: bayes_staleness_tau_s must be >= 0 seconds (0 = horizon / 4), got " +
                                   std::to_string(bayes_staleness_tau_s));
  }
  if (!Fraction(bayes_admit_threshold)) {
    return Status::InvalidArgument("policy: bayes_admit_threshold is a probability in [0, 1], got " +
                                   std::to_string(bayes_admit_threshold));
  }
  if (!std::isfinite(bayes_ghost_fraction) || bayes_ghost_fraction < 0 || bayes_ghost_fraction > 16) {
    return Status::InvalidArgument("policy: bayes_ghost_fraction must lie in [0, 16], got " +
                                   std::to_string(bayes_ghost_fraction));
  }
  if (shards < 1 || shards > ShardedPolicy::kMaxShards || !std::has_single_bit(shards)) {
    return Status::InvalidArgument("policy: shards must be a power of two from 1 to " +
                                   std::to_string(ShardedPolicy::kMaxShards) + ", got " + std::to_string(shards));
  }
  return Status::Ok();
}

Result<std::unique_ptr<EvictionPolicy>> NewEvictionPolicy(PolicyKind kind, const PolicyOptions& options,
                                                          std::shared_ptr<ReusePredictor> predictor) {
  KVTIER_RETURN_IF_ERROR(options.Validate());
  if (options.shards > 1) {
    KVTIER_ASSIGN_OR_RETURN(std::unique_ptr<ShardedPolicy> sharded, ShardedPolicy::Create(kind, options, predictor));
    return std::unique_ptr<EvictionPolicy>(std::move(sharded));
  }
  switch (kind) {
    case PolicyKind::kLru: return policy_internal::NewLruPolicy(options);
    case PolicyKind::kEma: return policy_internal::NewEmaPolicy(options);
    case PolicyKind::kS3Fifo: return policy_internal::NewS3FifoPolicy(options);
    case PolicyKind::kArc: return policy_internal::NewArcPolicy(options);
    case PolicyKind::kBayes:
      if (predictor == nullptr) {
        return Status::InvalidArgument(
            "policy: bayes needs a ReusePredictor (ReusePredictor::Create) shared by the tiers");
      }
      return policy_internal::NewBayesPolicy(options, std::move(predictor));
    case PolicyKind::kPredictive: return policy_internal::NewPredictivePolicy(options);
  }
  return Status::InvalidArgument("policy: unknown kind " + std::to_string(static_cast<int>(kind)));
}

}  // namespace kvtier
