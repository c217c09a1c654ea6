#include "server/descriptor_limit.h"

#include <algorithm>
#include <cerrno>

#include "util/posix_file.h"

namespace kvtier::server {
namespace {

// Listeners, the event loop, the store's tier and journal files, the metrics endpoint.
constexpr rlim_t kReservedDescriptors = 256;
// A connection's socket and the one shared-memory segment a client usually passes.
constexpr rlim_t kDescriptorsPerConnection = 2;

}  // namespace

DescriptorLimitPlan PlanDescriptorLimit(const ServerOptions& options, rlim_t soft, rlim_t hard) {
  DescriptorLimitPlan plan;
  plan.needed = rlim_t{options.max_connections} * kDescriptorsPerConnection + kReservedDescriptors;
  plan.soft = soft;
  if (soft != RLIM_INFINITY && soft < plan.needed) plan.soft = hard == RLIM_INFINITY ? plan.needed : std::min(hard, plan.needed);
  if (hard != RLIM_INFINITY && hard < plan.needed) {
    plan.warning = "max_connections " + std::to_string(options.max_connections) + " needs about " +
                   std::to_string(plan.needed) + " open files (a socket and a shared-memory segment each, plus " +
                   std::to_string(kReservedDescriptors) + "), but RLIMIT_NOFILE's hard limit is " + std::to_string(hard) +
                   ": connections past about " +
                   std::to_string(hard > kReservedDescriptors ? (hard - kReservedDescriptors) / kDescriptorsPerConnection : 0) +
                   " will be refused. Raise it (ulimit -Hn, or LimitNOFILE= in the systemd unit) or lower "
                   "limits.max_connections";
  }
  return plan;
}

Result<std::string> RaiseDescriptorLimit(const ServerOptions& options) {
  rlimit limit{};
  if (::getrlimit(RLIMIT_NOFILE, &limit) != 0) return ErrnoStatus("RLIMIT_NOFILE", "getrlimit", errno);
  DescriptorLimitPlan plan = PlanDescriptorLimit(options, limit.rlim_cur, limit.rlim_max);
  if (plan.soft != limit.rlim_cur) {
    limit.rlim_cur = plan.soft;
    if (::setrlimit(RLIMIT_NOFILE, &limit) != 0) return ErrnoStatus("RLIMIT_NOFILE", "setrlimit", errno);
  }
  return std::move(plan.warning);
}

}  // namespace kvtier::server
