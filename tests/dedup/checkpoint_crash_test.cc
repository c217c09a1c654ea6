// Crash test for checkpoints: a child process writes checkpoints of a growing cache in a
// loop and is SIGKILLed at a random moment (seeded); after each kill the directory must
// restore to a cache that was written in full, never to a torn or corrupt one, and never
// to one older than the last checkpoint the child reported complete.
//
// Generation g of the cache is test blocks [0, g * kBlocksPerGeneration) (checkpoint_test_util.h),
// so a restored cache names its generation by its size and is checked block by block.
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <random>
#include <thread>

#include <gtest/gtest.h>

#include "dedup/checkpoint_test_util.h"
#include "kvtier/checkpoint.h"
#include "testing/killed_child.h"

namespace kvtier {
namespace {

using checkpoint_testing::AddTestBlocks;
using checkpoint_testing::TestBlockHasPayload;
using checkpoint_testing::TestBlockKey;
using checkpoint_testing::TestBlockParent;
using checkpoint_testing::TestPayload;

constexpr uint64_t kBlocksPerGeneration = 24;
constexpr uint64_t kGenerationsPerChild = 400;  // bounds a child the parent fails to kill
constexpr int kRounds = 20;

// The child: builds generation `first - 1`, then writes generations first, first + 1, ...
// reporting each completed one on `report_fd`. Never returns.
[[noreturn]] void WriteCheckpointsUntilKilled(const std::string& dir, uint64_t first, int report_fd) {
  PrefixIndex index;
  std::unique_ptr<PayloadStore> store = std::move(PayloadStore::Create({})).value();
  if (!AddTestBlocks(index, *store, 0, (first - 1) * kBlocksPerGeneration)) ::_exit(2);
  for (uint64_t g = first; g < first + kGenerationsPerChild; ++g) {
    if (!AddTestBlocks(index, *store, (g - 1) * kBlocksPerGeneration, g * kBlocksPerGeneration)) ::_exit(2);
    if (!WriteCheckpoint(dir, index, *store).ok()) ::_exit(3);
    testing::SendReport(report_fd, g);
  }
  ::_exit(0);
}

// The highest generation the child reported, or `floor` if it reported none.
// Checks that the restored cache is exactly generation `g`.
void ExpectGeneration(const PrefixIndex& index, const PayloadStore& store, uint64_t g) {
  const uint64_t blocks = g * kBlocksPerGeneration;
  ASSERT_EQ(index.size(), blocks);
  uint64_t with_payload = 0;
  for (uint64_t i = 0; i < blocks; ++i) {
    const std::optional<BlockInfo> info = index.Find(TestBlockKey(i));
    ASSERT_TRUE(info.has_value()) << "block " << i;
    const std::optional<uint64_t> parent = TestBlockParent(i);
    ASSERT_EQ(info->parent, parent ? std::optional(TestBlockKey(*parent)) : std::nullopt) << "block " << i;
    ASSERT_EQ(info->last_access, i + 1);
    Result<std::vector<std::byte>> payload = store.Get(TestBlockKey(i));
    if (TestBlockHasPayload(i)) {
      ++with_payload;
      ASSERT_TRUE(payload.ok()) << "block " << i << ": " << payload.status().ToString();
      ASSERT_EQ(*payload, TestPayload(i)) << "block " << i;
    } else {
      ASSERT_EQ(payload.status().code(), StatusCode::kNotFound) << "block " << i;
    }
  }
  ASSERT_EQ(store.GetStats().blocks, with_payload);
}

TEST(CheckpointCrash, SigkillAtRandomPointsNeverLeavesATornCheckpoint) {
  std::string dir = (std::filesystem::temp_directory_path() / "kvtier-crash-XXXXXX").string();
  ASSERT_NE(::mkdtemp(dir.data()), nullptr);
  std::mt19937_64 rng(20240611);
  // The kill comes within `window_us` of the fork. A round in which the child completes
  // nothing doubles the window (to a cap) and one with progress halves it, so slow sanitizer
  // builds make progress too while most kills still land near a write.
  int window_us = 40000;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);

  uint64_t durable = 0;  // generation the directory is known to hold; 0 = none completed
  int temp_left = 0;      // rounds that ended with a temporary file: a kill came mid-write
  for (int round = 0; round < kRounds && std::chrono::steady_clock::now() < deadline; ++round) {
    const Result<std::vector<uint64_t>> reports = testing::RunChildUntilKilled<uint64_t>(
        [&](int report_fd) { WriteCheckpointsUntilKilled(dir, durable + 1, report_fd); },
        std::chrono::microseconds(std::uniform_int_distribution<int>(0, window_us)(rng)));
    ASSERT_TRUE(reports.ok()) << "round " << round << ": " << reports.status().ToString();
    const uint64_t reported = reports->empty() ? durable : std::max(durable, reports->back());
    window_us = reported == durable ? std::min(2 * window_us, 640000) : std::max(window_us / 2, 40000);
    if (std::filesystem::exists(dir + "/checkpoint.kvt.tmp")) ++temp_left;

    PrefixIndex index;
    std::unique_ptr<PayloadStore> store = std::move(PayloadStore::Create({})).value();
    Result<CheckpointStats> restored = RestoreCheckpoint(dir, &index, store.get());
    if (!restored.ok()) {
      ASSERT_EQ(restored.status().code(), StatusCode::kNotFound) << "round " << round << ": " << restored.status().ToString();
      ASSERT_EQ(reported, 0u) << "round " << round << ": a completed checkpoint was lost";
      continue;
    }
    ASSERT_EQ(index.size() % kBlocksPerGeneration, 0u) << "round " << round;
    const uint64_t g = index.size() / kBlocksPerGeneration;
    // The rename may have landed just before the kill, with the report not yet sent.
    ASSERT_GE(g, std::max<uint64_t>(reported, 1)) << "round " << round << ": a completed checkpoint was lost";
    ASSERT_LE(g, reported + 1) << "round " << round;
    ExpectGeneration(index, *store, g);
    if (::testing::Test::HasFatalFailure()) return;
    durable = g;
  }
  RecordProperty("final_generation", static_cast<int>(durable));
  RecordProperty("rounds_with_temp_file", temp_left);
  std::printf("final generation %llu; %d of %d rounds ended with a temporary file\n",
              static_cast<unsigned long long>(durable), temp_left, kRounds);
  EXPECT_GT(durable, 0u) << "no checkpoint ever completed: the kills came too early to test anything";
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace kvtier
