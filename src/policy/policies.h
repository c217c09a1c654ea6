// The policy implementations, reached through NewEvictionPolicy (eviction_policy.h). Options
// are validated by the factory before these run.
#pragma once

#include <memory>

#include "kvtier/eviction_policy.h"
#include "kvtier/reuse_predictor.h"

namespace kvtier::policy_internal {

std::unique_ptr<EvictionPolicy> NewLruPolicy(const PolicyOptions& options);
std::unique_ptr<EvictionPolicy> NewEmaPolicy(const PolicyOptions& options);
std::unique_ptr<EvictionPolicy> NewS3FifoPolicy(const PolicyOptions& options);
std::unique_ptr<EvictionPolicy> NewArcPolicy(const PolicyOptions& options);
std::unique_ptr<EvictionPolicy> NewPredictivePolicy(const PolicyOptions& options);
std::unique_ptr<EvictionPolicy> NewBayesPolicy(const PolicyOptions& options, std::shared_ptr<ReusePredictor> predictor);

}  // namespace kvtier::policy_internal
