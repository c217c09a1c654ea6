#include "scaling_projection.h"

#include <gtest/gtest.h>

namespace kvtier::bench {
namespace {

TEST(ProjectScaling, CpuBindsWhenNothingSerialIsMeasured) {
  const nlohmann::json p = ProjectScaling({.cpu_us = 60}, 64);
  EXPECT_DOUBLE_EQ(p["ops_per_s"].get<double>(), 64e6 / 60);
  EXPECT_EQ(p["bound"], "cpu");
  EXPECT_EQ(p["cores"], 64);
}

TEST(ProjectScaling, TheMetadataLockBindsWhenItsHoldIsTheLongestSerialPart) {
  // 78 us held per operation caps it at 12,820/s; 64 cores would allow 21,000.
  const nlohmann::json p = ProjectScaling({.cpu_us = 3031, .lock_hold_us = 78, .event_loop_cpu_us = 40}, 64);
  EXPECT_DOUBLE_EQ(p["ops_per_s"].get<double>(), 1e6 / 78);
  EXPECT_EQ(p["bound"], "metadata lock");
}

TEST(ProjectScaling, ATierLockBindsWhenItsHoldIsLongerThanTheMetadataLocks) {
  // Puts hold the metadata lock shared, so a tier's lock can be the longer serial section:
  // 1 / 50 us = 20,000/s, below the metadata lock's 1 / 2 us and 64 cores' 64 / 300 us.
  const nlohmann::json p = ProjectScaling({.cpu_us = 300, .lock_hold_us = 2, .tier_lock_hold_us = 50}, 64);
  EXPECT_DOUBLE_EQ(p["ops_per_s"].get<double>(), 1e6 / 50);
  EXPECT_EQ(p["bound"], "tier lock");
}

TEST(ProjectScaling, AnUnmeasuredTierLockBindsNothing) {
  const nlohmann::json p = ProjectScaling({.cpu_us = 300, .lock_hold_us = 2, .tier_lock_hold_us = 0}, 64);
  EXPECT_DOUBLE_EQ(p["ops_per_s"].get<double>(), 64e6 / 300);
  EXPECT_EQ(p["bound"], "cpu");
}

TEST(ProjectScaling, TheIndexLockBindsWhenItsHoldIsTheLongest) {
  // Every put's inserts hold the prefix index's lock: 1 / 40 us = 25,000/s, below the tier
  // lock's 1 / 30 us, the metadata lock's 1 / 2 us and 64 cores' 64 / 300 us.
  const nlohmann::json p =
      ProjectScaling({.cpu_us = 300, .lock_hold_us = 2, .tier_lock_hold_us = 30, .index_lock_hold_us = 40}, 64);
  EXPECT_DOUBLE_EQ(p["ops_per_s"].get<double>(), 1e6 / 40);
  EXPECT_EQ(p["bound"], "index lock");
}

TEST(ProjectScaling, TheEventLoopsBindWhenTheyCarryMostOfTheWork) {
  // A 64-thread host gets 16 loops by default: 16 / 25 us = 640,000/s, below 64 / 30 us.
  const nlohmann::json p = ProjectScaling({.cpu_us = 30, .lock_hold_us = 0, .event_loop_cpu_us = 25}, 64);
  EXPECT_EQ(p["event_loops"], 16);
  EXPECT_DOUBLE_EQ(p["ops_per_s"].get<double>(), 16e6 / 25);
  EXPECT_EQ(p["bound"], "event loops");
}

TEST(ProjectScaling, LoopsFollowTheServersDefaultForTheCores) {
  EXPECT_EQ(ProjectScaling({.cpu_us = 1}, 8)["event_loops"], 2);
  EXPECT_EQ(ProjectScaling({.cpu_us = 1}, 2)["event_loops"], 1);
  EXPECT_EQ(ProjectScaling({.cpu_us = 1}, 256)["event_loops"], 16);
  // On 8 cores 2 loops at 10 us each allow 200,000/s, below the CPU's 8 / 30 us = 266,667/s.
  EXPECT_EQ(ProjectScaling({.cpu_us = 30, .event_loop_cpu_us = 10}, 8)["bound"], "event loops");
}

TEST(ProjectScaling, ATieGoesToTheCpu) {
  // 64 / 64 us = 1e6/s by CPU, 16 / 16 us = 1e6/s by the loops.
  EXPECT_EQ(ProjectScaling({.cpu_us = 64, .event_loop_cpu_us = 16}, 64)["bound"], "cpu");
}

TEST(ProjectScaling, NothingToProjectWithoutCpuTimeOrCores) {
  EXPECT_TRUE(ProjectScaling({.cpu_us = 0, .lock_hold_us = 5}, 64).is_null());
  EXPECT_TRUE(ProjectScaling({.cpu_us = -1}, 64).is_null());
  EXPECT_TRUE(ProjectScaling({.cpu_us = 10}, 0).is_null());
}

TEST(AddLockFields, PerOperationFieldsAndTheProjectionFromTheEntrysCosts) {
  const LockReadings before{
      .metadata = {.exclusive_acquisitions = 10, .exclusive_hold_seconds = 1.0, .shared_wait_seconds = 0.5}};
  const LockReadings after{
      .metadata = {.exclusive_acquisitions = 30, .exclusive_hold_seconds = 1.001, .shared_wait_seconds = 0.502}};
  nlohmann::json entry = {{"cpu_us_per_lookup", 30.0}, {"loop_cpu_us_per_lookup", 25.0}};
  AddLockFields(before, after, 100, "cpu_us_per_lookup", "loop_cpu_us_per_lookup", entry);
  EXPECT_NEAR(entry["lock_hold_us_per_op"].get<double>(), 10, 1e-6);   // 1 ms over 100 operations
  EXPECT_NEAR(entry["lock_wait_us_per_op"].get<double>(), 20, 1e-6);   // 2 ms of shared waits
  EXPECT_DOUBLE_EQ(entry["lock_acquisitions_per_op"].get<double>(), 0.2);
  EXPECT_EQ(entry["tier_lock_hold_us_per_op"].get<double>(), 0) << "a daemon that exports no tier locks";
  EXPECT_EQ(entry["index_lock_hold_us_per_op"].get<double>(), 0) << "nor the index's";
  // 1 / 10 us = 100,000/s: below the loops' 640,000/s and the CPU's 2.1 M/s.
  EXPECT_EQ(entry["projected"]["bound"], "metadata lock");

  nlohmann::json without_loops = {{"cpu_us_per_op", 30.0}};
  AddLockFields(LockReadings{}, LockReadings{}, 100, "cpu_us_per_op", nullptr, without_loops);
  EXPECT_EQ(without_loops["projected"]["bound"], "cpu");

  nlohmann::json cpu_unknown = {{"cpu_us_per_op", nullptr}};
  AddLockFields(LockReadings{}, LockReadings{}, 100, "cpu_us_per_op", nullptr, cpu_unknown);
  EXPECT_TRUE(cpu_unknown["projected"].is_null());

  nlohmann::json no_operations;
  AddLockFields(before, after, 0, "cpu_us_per_op", nullptr, no_operations);
  EXPECT_TRUE(no_operations.is_null());
}

TEST(AddLockFields, TheIndexLocksHoldPerOperation) {
  // 3 ms of inserts over 100 operations: 30 us each, 33,333/s, below the CPU's 213,333/s.
  const LockReadings before{.index_hold_seconds = {{"", 2.0}}};
  const LockReadings after{.index_hold_seconds = {{"", 2.003}}};
  nlohmann::json entry = {{"cpu_us_per_op", 300.0}};
  AddLockFields(before, after, 100, "cpu_us_per_op", nullptr, entry);
  EXPECT_NEAR(entry["index_lock_hold_us_per_op"].get<double>(), 30, 1e-6);
  EXPECT_EQ(entry["projected"]["bound"], "index lock");
}

TEST(AddLockFields, TheBusiestIndexShardBounds) {
  // Shard 0 held 1 ms, shard 1 0.5 ms over 100 operations: 10 us binds, 15 us were spent.
  const LockReadings before{.index_hold_seconds = {{R"({shard="0"})", 1.0}, {R"({shard="1"})", 1.0}}};
  const LockReadings after{.index_hold_seconds = {{R"({shard="0"})", 1.001}, {R"({shard="1"})", 1.0005}}};
  nlohmann::json entry = {{"cpu_us_per_op", 300.0}};
  AddLockFields(before, after, 100, "cpu_us_per_op", nullptr, entry);
  EXPECT_NEAR(entry["index_lock_hold_us_per_op"].get<double>(), 10, 1e-6);
  EXPECT_NEAR(entry["index_lock_total_hold_us_per_op"].get<double>(), 15, 1e-6);
  EXPECT_EQ(entry["projected"]["bound"], "index lock");  // 100,000/s, below the CPU's 213,333/s
  EXPECT_NEAR(entry["projected"]["ops_per_s"].get<double>(), 1e5, 1e-3);
}

TEST(AddLockFields, TheBusiestTiersLockIsTheTierBound) {
  const std::string dram = R"({tier="dram",kind="cpu_dram"})", disk = R"({tier="disk",kind="nvme"})";
  // DRAM's lock held 2 ms over 100 operations, the disk's 0.5 ms (a tier missing from the
  // first read counts from 0).
  const LockReadings before{.tier_hold_seconds = {{dram, 1.0}}};
  const LockReadings after{.metadata = {.exclusive_hold_seconds = 0.0005},
                           .tier_hold_seconds = {{dram, 1.002}, {disk, 0.0005}}};
  nlohmann::json entry = {{"cpu_us_per_op", 300.0}};
  AddLockFields(before, after, 100, "cpu_us_per_op", nullptr, entry);
  EXPECT_NEAR(entry["tier_lock_hold_us_per_op"].get<double>(), 20, 1e-6);  // the max, not the 25 us sum
  EXPECT_NEAR(entry["lock_hold_us_per_op"].get<double>(), 5, 1e-6);
  // 1 / 20 us = 50,000/s: below the metadata lock's 200,000/s and the CPU's 213,333/s.
  EXPECT_EQ(entry["projected"]["bound"], "tier lock");
  EXPECT_NEAR(entry["projected"]["ops_per_s"].get<double>(), 5e4, 1e-3);
}

}  // namespace
}  // namespace kvtier::bench
