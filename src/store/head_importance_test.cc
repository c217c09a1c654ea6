#include "kvtier/head_importance.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <limits>
#include <thread>
#include <vector>

namespace kvtier {
namespace {

std::unique_ptr<HeadImportance> Make(uint32_t layers, uint32_t heads, HeadImportanceOptions options = {}) {
  Result<std::unique_ptr<HeadImportance>> importance = HeadImportance::Create(layers, heads, options);
  EXPECT_TRUE(importance.ok()) << importance.status().ToString();
  return std::move(importance).value();
}

HeadUnitMask Units(std::size_t size, std::initializer_list<std::size_t> set) {
  HeadUnitMask mask(size);
  for (std::size_t unit : set) mask.Set(unit);
  return mask;
}

TEST(HeadImportanceTest, StartsFromTheUniformPriorAndIsAssumed) {
  auto importance = Make(2, 3);
  for (uint32_t layer = 0; layer < 2; ++layer) {
    for (uint32_t head = 0; head < 3; ++head) EXPECT_EQ(importance->Importance(layer, head), 1.0);
  }
  EXPECT_FALSE(importance->reported());
  EXPECT_TRUE(importance->assumed());
  EXPECT_TRUE(importance->LeastImportantUnits(1).assumed_importance);
}

TEST(HeadImportanceTest, EmaMath) {
  auto importance = Make(2, 3, {.ema_alpha = 0.5});
  ASSERT_TRUE(importance->Report(1, 2, 0.0).ok());
  EXPECT_DOUBLE_EQ(importance->Importance(1, 2), 0.5);
  ASSERT_TRUE(importance->Report(1, 2, 0.0).ok());
  EXPECT_DOUBLE_EQ(importance->Importance(1, 2), 0.25);
  ASSERT_TRUE(importance->Report(1, 2, 4.25).ok());
  EXPECT_DOUBLE_EQ(importance->Importance(1, 2), 2.25);
  EXPECT_EQ(importance->Importance(0, 0), 1.0);  // other cells untouched

  auto by_default = Make(1, 1);  // alpha 0.1
  ASSERT_TRUE(by_default->Report(0, 0, 3.0).ok());
  EXPECT_DOUBLE_EQ(by_default->Importance(0, 0), 1.0 + 0.1 * (3.0 - 1.0));
}

TEST(HeadImportanceTest, AssumedUntilEveryCellIsReported) {
  auto importance = Make(2, 2);
  ASSERT_TRUE(importance->Report(0, 0, 1.0).ok());
  EXPECT_TRUE(importance->reported());
  EXPECT_TRUE(importance->assumed());
  ASSERT_TRUE(importance->ReportMatrix(std::vector<double>{1, 2, 3, 4}).ok());
  EXPECT_FALSE(importance->assumed());
  EXPECT_FALSE(importance->LeastImportantUnits(1).assumed_importance);
  const ImportanceSnapshot snapshot = importance->Snapshot();
  EXPECT_EQ(snapshot.reports, (std::vector<uint64_t>{2, 1, 1, 1}));
  EXPECT_FALSE(snapshot.assumed_importance);
}

TEST(HeadImportanceTest, ExplicitPrior) {
  auto importance = Make(2, 2, {.prior = {4, 3, 2, 1}});
  EXPECT_EQ(importance->Importance(0, 1), 3.0);
  EXPECT_EQ(importance->Snapshot().at(1, 1), 1.0);
  EXPECT_TRUE(importance->assumed());
  EXPECT_EQ(HeadImportance::Create(2, 3, {.prior = {1, 2}}).status().code(), StatusCode::kInvalidArgument);
}

TEST(HeadImportanceTest, RejectsBadOptionsAndReports) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  EXPECT_FALSE((HeadImportanceOptions{.ema_alpha = 0}).Validate().ok());
  EXPECT_FALSE((HeadImportanceOptions{.ema_alpha = 1.5}).Validate().ok());
  EXPECT_FALSE((HeadImportanceOptions{.ema_alpha = nan}).Validate().ok());
  EXPECT_FALSE((HeadImportanceOptions{.prior = {1, nan}}).Validate().ok());
  EXPECT_TRUE((HeadImportanceOptions{.ema_alpha = 1}).Validate().ok());
  EXPECT_FALSE(HeadImportance::Create(0, 8).ok());

  auto importance = Make(2, 2);
  EXPECT_EQ(importance->Report(2, 0, 1).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(importance->Report(0, 2, 1).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(importance->Report(0, 0, nan).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(importance->Report(0, 0, std::numeric_limits<double>::infinity()).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(importance->ReportMatrix(std::vector<double>{1, 2, 3}).code(), StatusCode::kInvalidArgument);
  // All or nothing: a bad value anywhere leaves every cell as it was.
  EXPECT_EQ(importance->ReportMatrix(std::vector<double>{0, 0, 0, nan}).code(), StatusCode::kInvalidArgument);
  EXPECT_FALSE(importance->reported());
  EXPECT_EQ(importance->Importance(0, 0), 1.0);
}

TEST(HeadImportanceTest, LeastImportantUnits) {
  auto importance = Make(2, 3, {.ema_alpha = 1.0});
  ASSERT_TRUE(importance->ReportMatrix(std::vector<double>{0.5, 0.1, 0.9, 0.3, 0.7, 0.2}).ok());
  EXPECT_EQ(importance->LeastImportantUnits(0).units, HeadUnitMask(6));
  EXPECT_EQ(importance->LeastImportantUnits(1).units, Units(6, {1}));
  EXPECT_EQ(importance->LeastImportantUnits(3).units, Units(6, {1, 5, 3}));
  EXPECT_EQ(importance->LeastImportantUnits(100).units, HeadUnitMask::All(6));
}

TEST(HeadImportanceTest, TiesGoToTheLaterLayerThenTheHigherHead) {
  auto importance = Make(2, 3);
  EXPECT_EQ(importance->LeastImportantUnits(2).units, Units(6, {5, 4}));
  EXPECT_EQ(importance->LeastImportantUnits(4).units, Units(6, {5, 4, 3, 2}));
}

TEST(HeadImportanceTest, PlanDemotionCoversTheBytes) {
  const KvBlockLayout layout{2, 3, 4, 8, 8, 2};  // a unit is 4 x (8 + 8) x 2 = 128 bytes
  ASSERT_EQ(layout.UnitBytes(), 128u);
  auto importance = Make(2, 3, {.ema_alpha = 1.0});
  ASSERT_TRUE(importance->ReportMatrix(std::vector<double>{0.5, 0.1, 0.9, 0.3, 0.7, 0.2}).ok());
  auto plan = [&](uint64_t bytes) {
    Result<HeadSelection> selection = importance->PlanDemotion(layout, bytes);
    EXPECT_TRUE(selection.ok()) << selection.status().ToString();
    EXPECT_FALSE(selection->assumed_importance);
    return selection->units;
  };
  EXPECT_EQ(plan(0), HeadUnitMask(6));
  EXPECT_EQ(plan(1), Units(6, {1}));
  EXPECT_EQ(plan(128), Units(6, {1}));
  EXPECT_EQ(plan(129), Units(6, {1, 5}));
  EXPECT_EQ(plan(layout.block_bytes() * 2), HeadUnitMask::All(6));
  EXPECT_GE(layout.PackedBytes(plan(300)), 300u);

  // Only the candidates (units still resident) are considered.
  Result<HeadSelection> rest = importance->PlanDemotion(layout, 256, Units(6, {1, 5}).Complement());
  ASSERT_TRUE(rest.ok());
  EXPECT_EQ(rest->units, Units(6, {3, 0}));
  Result<HeadSelection> short_of = importance->PlanDemotion(layout, 1000, Units(6, {2}));
  ASSERT_TRUE(short_of.ok());
  EXPECT_EQ(short_of->units, Units(6, {2}));
}

TEST(HeadImportanceTest, PlanDemotionChecksShapes) {
  auto importance = Make(2, 3);
  EXPECT_EQ(importance->PlanDemotion(KvBlockLayout{2, 4, 4, 8, 8, 2}, 1).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(importance->PlanDemotion(KvBlockLayout{2, 3, 4, 8, 8, 2}, 1, HeadUnitMask(5)).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(importance->PlanDemotion(KvBlockLayout{}, 1).status().code(), StatusCode::kInvalidArgument);
}

TEST(HeadImportanceTest, MlaDemotesWholeLayers) {
  const KvBlockLayout layout{61, 1, 16, 576, 0, 2};  // DeepSeek-V3's shape
  auto importance = Make(61, 1);
  Result<HeadSelection> selection = importance->PlanDemotion(layout, layout.UnitBytes() * 2);
  ASSERT_TRUE(selection.ok());
  EXPECT_EQ(selection->units, Units(61, {60, 59}));  // assumed: the prior's tie-break alone
  EXPECT_TRUE(selection->assumed_importance);
}

// Engine threads report while the store ranks and snapshots (run under TSan).
TEST(HeadImportanceTest, ConcurrentReportsAndReads) {
  constexpr uint32_t kLayers = 8, kHeads = 4;
  constexpr int kReportsPerThread = 2000;
  auto importance = Make(kLayers, kHeads);
  const KvBlockLayout layout{kLayers, kHeads, 4, 8, 8, 2};
  std::atomic<bool> done{false};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      std::vector<double> matrix(kLayers * kHeads, 0.5);
      for (int i = 0; i < kReportsPerThread; ++i) {
        const auto cell = static_cast<uint32_t>(i * 7 + t) % (kLayers * kHeads);
        EXPECT_TRUE(importance->Report(cell / kHeads, cell % kHeads, static_cast<double>(t)).ok());
        if (i % 100 == 0) {
          EXPECT_TRUE(importance->ReportMatrix(matrix).ok());
        }
      }
    });
  }
  std::vector<std::thread> readers;
  for (int r = 0; r < 2; ++r) {
    readers.emplace_back([&] {
      while (!done.load()) {
        const ImportanceSnapshot snapshot = importance->Snapshot();
        for (double value : snapshot.values) EXPECT_TRUE(value >= 0.0 && value <= 3.0);
        Result<HeadSelection> plan = importance->PlanDemotion(layout, layout.UnitBytes() * 3);
        EXPECT_TRUE(plan.ok());
        EXPECT_EQ(plan->units.Count(), 3u);
        EXPECT_EQ(importance->LeastImportantUnits(5).units.Count(), 5u);
        (void)importance->Importance(1, 1);
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  done.store(true);
  for (std::thread& thread : readers) thread.join();

  const ImportanceSnapshot snapshot = importance->Snapshot();
  uint64_t total = 0;
  for (uint64_t reports : snapshot.reports) total += reports;
  EXPECT_EQ(total, 4u * (kReportsPerThread + (kReportsPerThread / 100) * kLayers * kHeads));
  EXPECT_FALSE(importance->assumed());
}

}  // namespace
}  // namespace kvtier
