#include "server/tier_health.h"

#include <gtest/gtest.h>

namespace kvtier::server {
namespace {

std::vector<TierHealthInput> Tiers(TierStats dram, TierStats nvme) { return {{"dram", dram}, {"nvme", nvme}}; }

TEST(TierHealth, HealthyWhileWritesSucceed) {
  TierHealth health(1);
  EXPECT_TRUE(health.Check(Tiers({.writes = 10}, {.writes = 10})).healthy);
  const TierHealthVerdict v = health.Check(Tiers({.writes = 20, .write_failures = 1}, {.writes = 30}));
  EXPECT_TRUE(v.healthy);
  EXPECT_FALSE(v.degraded) << "a failure among successes is not a failing tier";
  EXPECT_EQ(v.detail, "");
}

TEST(TierHealth, AFailingPersistTierIsUnhealthyUntilItWritesAgain) {
  TierHealth health(1);
  (void)health.Check(Tiers({.writes = 5}, {.writes = 5}));
  TierHealthVerdict v = health.Check(Tiers({.writes = 9}, {.writes = 5, .write_failures = 3}));
  EXPECT_FALSE(v.healthy);
  EXPECT_NE(v.detail.find("tier \"nvme\""), std::string::npos);
  EXPECT_NE(v.detail.find("persist tier"), std::string::npos);
  v = health.Check(Tiers({.writes = 9}, {.writes = 5, .write_failures = 3}));
  EXPECT_FALSE(v.healthy) << "no traffic since: the verdict stands";
  v = health.Check(Tiers({.writes = 9}, {.writes = 6, .write_failures = 3}));
  EXPECT_TRUE(v.healthy) << "a write went through again";
}

TEST(TierHealth, AFailingCacheTierOrCorruptReadsDegradeButServe) {
  TierHealth health(std::nullopt);
  (void)health.Check(Tiers({}, {}));
  TierHealthVerdict v = health.Check(Tiers({.write_failures = 2}, {.writes = 1}));
  EXPECT_TRUE(v.healthy);
  EXPECT_TRUE(v.degraded);
  EXPECT_NE(v.detail.find("tier \"dram\""), std::string::npos);
  v = health.Check(Tiers({.writes = 1, .write_failures = 2}, {.writes = 1, .checksum_failures = 1}));
  EXPECT_TRUE(v.healthy);
  EXPECT_TRUE(v.degraded);
  EXPECT_NE(v.detail.find("checksum"), std::string::npos);
  v = health.Check(Tiers({.writes = 2, .write_failures = 2}, {.writes = 2, .checksum_failures = 1}));
  EXPECT_FALSE(v.degraded);
}

}  // namespace
}  // namespace kvtier::server
