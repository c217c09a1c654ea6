// The daemon's descriptor budget: every connection holds its socket and the shared-memory
// segments its client passed, so max_connections decides how many descriptors the process
// needs. The soft RLIMIT_NOFILE (often 1,024) is raised toward the hard limit at start; a
// hard limit below the need is reported with the numbers, since connections past it would
// fail to be accepted.
//
// Thread-safety: call at start, before other threads open descriptors.
#pragma once

#include <sys/resource.h>

#include <cstdint>
#include <string>

#include "kvtier/server.h"

namespace kvtier::server {

struct DescriptorLimitPlan {
  rlim_t needed = 0;
  rlim_t soft = 0;      // the soft limit to set (unchanged when already enough)
  std::string warning;  // empty when the hard limit allows `needed`
};

// What `options` need, given the current `soft` and `hard` limits.
DescriptorLimitPlan PlanDescriptorLimit(const ServerOptions& options, rlim_t soft, rlim_t hard);

// Applies the plan to this process; returns its warning (empty when none). IoError when the
// limits cannot be read or set.
Result<std::string> RaiseDescriptorLimit(const ServerOptions& options);

}  // namespace kvtier::server
