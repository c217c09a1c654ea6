#include "server/descriptor_limit.h"

#include <gtest/gtest.h>

namespace kvtier::server {
namespace {

ServerOptions WithConnections(uint32_t max_connections) {
  ServerOptions options;
  options.max_connections = max_connections;
  return options;
}

TEST(DescriptorLimit, TheSoftLimitIsRaisedTowardTheHardOne) {
  const DescriptorLimitPlan plan = PlanDescriptorLimit(WithConnections(4096), 1024, 1 << 20);
  EXPECT_GE(plan.needed, 4096u * 2);
  EXPECT_EQ(plan.soft, plan.needed);
  EXPECT_TRUE(plan.warning.empty()) << plan.warning;
  // Already enough: left as it is, even when far larger.
  EXPECT_EQ(PlanDescriptorLimit(WithConnections(16), 50000, 1 << 20).soft, 50000u);
  EXPECT_EQ(PlanDescriptorLimit(WithConnections(16), RLIM_INFINITY, RLIM_INFINITY).soft, RLIM_INFINITY);
}

TEST(DescriptorLimit, AHardLimitTooLowIsNamedWithTheNumbers) {
  const DescriptorLimitPlan plan = PlanDescriptorLimit(WithConnections(4096), 1024, 4096);
  EXPECT_EQ(plan.soft, 4096u);
  EXPECT_NE(plan.warning.find("max_connections 4096"), std::string::npos) << plan.warning;
  EXPECT_NE(plan.warning.find("hard limit is 4096"), std::string::npos) << plan.warning;
  EXPECT_NE(plan.warning.find("past about 1920"), std::string::npos) << plan.warning;
}

}  // namespace
}  // namespace kvtier::server
