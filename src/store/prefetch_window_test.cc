#include "kvtier/prefetch_window.h"

#include <cmath>
#include <cstdint>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

namespace kvtier {
namespace {

std::unique_ptr<PrefetchWindow> Make(const PrefetchWindowOptions& options = {}) {
  Result<std::unique_ptr<PrefetchWindow>> window = PrefetchWindow::Create(options);
  EXPECT_TRUE(window.ok()) << window.status().ToString();
  return std::move(window).value();
}

// One evaluation period of `period` prefetched blocks of which `used` were read.
void Period(PrefetchWindow& w, uint64_t period, uint64_t used) {
  w.OnPrefetched(period, period * 4096);
  w.OnUsed(used);
  w.OnWasted(period - used, (period - used) * 4096);
}

TEST(PrefetchWindow, OptionsValidate) {
  EXPECT_TRUE(PrefetchWindowOptions{}.Validate().ok());
  EXPECT_FALSE((PrefetchWindowOptions{.min_window = 0}.Validate().ok()));
  EXPECT_FALSE((PrefetchWindowOptions{.max_window = 4}.Validate().ok())) << "initial 8 above max";
  EXPECT_FALSE((PrefetchWindowOptions{.grow_accuracy = 0.4}.Validate().ok())) << "below shrink_accuracy";
  EXPECT_FALSE((PrefetchWindowOptions{.grow_max_utilization = 1.5}.Validate().ok()));
  EXPECT_FALSE((PrefetchWindowOptions{.evaluation_period = 0}.Validate().ok()));
  EXPECT_FALSE(PrefetchWindow::Create({.min_window = 0}).ok());
}

TEST(PrefetchWindow, GrowsUnderPerfectAccuracyUpToMax) {
  auto w = Make();
  EXPECT_EQ(w->window(), 8);
  Period(*w, 64, 64);
  EXPECT_EQ(w->window(), 16);
  Period(*w, 64, 64);
  Period(*w, 64, 64);
  EXPECT_EQ(w->window(), 64);
  Period(*w, 64, 64);
  EXPECT_EQ(w->window(), 64) << "capped at max_window";
  EXPECT_EQ(w->Counters().grows, 3u);
  EXPECT_EQ(w->Counters().shrinks, 0u);
}

TEST(PrefetchWindow, ShrinksUnderWasteToMin) {
  auto w = Make();
  Period(*w, 64, 10);
  EXPECT_EQ(w->window(), 4);
  for (int i = 0; i < 5; ++i) Period(*w, 64, 0);
  EXPECT_EQ(w->window(), 1) << "floored at min_window";
  EXPECT_EQ(w->Counters().shrinks, 3u);
}

TEST(PrefetchWindow, HoldsInsideTheBand) {
  auto w = Make();
  for (int i = 0; i < 10; ++i) Period(*w, 64, 40);  // 62.5%: between 0.5 and 0.8
  EXPECT_EQ(w->window(), 8);
  // Exactly on a threshold holds too: growth needs more than 0.8, shrinking less than 0.5.
  auto edges = Make({.evaluation_period = 100});
  Period(*edges, 100, 80);
  Period(*edges, 100, 50);
  EXPECT_EQ(edges->window(), 8);
}

TEST(PrefetchWindow, DoesNotGrowWithoutBandwidthHeadroom) {
  auto w = Make();
  w->SetBandwidthUtilization(0.95);
  Period(*w, 64, 64);
  EXPECT_EQ(w->window(), 8);
  w->SetBandwidthUtilization(0.3);
  Period(*w, 64, 64);
  EXPECT_EQ(w->window(), 16);
  // A saturated tier does not stop shrinking.
  w->SetBandwidthUtilization(1.0);
  Period(*w, 64, 0);
  EXPECT_EQ(w->window(), 8);
}

TEST(PrefetchWindow, JudgesOnlyWholePeriodsOfResolvedBlocks) {
  auto w = Make({.evaluation_period = 100});
  w->OnPrefetched(1000, 1000);
  w->OnUsed(99);  // in flight do not count: one block short of a period
  EXPECT_EQ(w->window(), 8);
  w->OnUsed(1);
  EXPECT_EQ(w->window(), 16);
}

TEST(PrefetchWindow, CountsBlocksBytesAndAccuracy) {
  auto w = Make();
  EXPECT_EQ(w->accuracy(), 0);
  w->OnPrefetched(10, 10 * 4096);
  w->OnUsed(6);
  w->OnWasted(3, 3 * 4096);
  const PrefetchCounters c = w->Counters();
  EXPECT_EQ(c.issued_blocks, 10u);
  EXPECT_EQ(c.issued_bytes, 10u * 4096);
  EXPECT_EQ(c.used_blocks, 6u);
  EXPECT_EQ(c.wasted_blocks, 3u);
  EXPECT_EQ(c.wasted_bytes, 3u * 4096);
  EXPECT_EQ(c.window, 8);
  EXPECT_DOUBLE_EQ(w->accuracy(), 0.6) << "the one in flight counts as not used";
}

TEST(PrefetchWindow, UtilizationIsClampedAndNanIgnored) {
  auto w = Make();
  w->SetBandwidthUtilization(-3);  // clamps to 0: room to grow
  w->SetBandwidthUtilization(std::nan(""));
  Period(*w, 64, 64);
  EXPECT_EQ(w->window(), 16);
}

TEST(PrefetchWindow, ConcurrentCallersKeepCountsAndBounds) {
  auto w = Make({.evaluation_period = 16});
  constexpr int kThreads = 4, kRounds = 2000;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&w, t] {
      for (int i = 0; i < kRounds; ++i) {
        w->OnPrefetched(2, 200);
        // Threads 0 and 1 use everything, 2 and 3 waste everything.
        if (t < 2) {
          w->OnUsed(2);
        } else {
          w->OnWasted(2, 200);
        }
        if (i % 64 == 0) w->SetBandwidthUtilization(t * 0.25);
        const int window = w->window();
        EXPECT_GE(window, 1);
        EXPECT_LE(window, 64);
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  const PrefetchCounters c = w->Counters();
  EXPECT_EQ(c.issued_blocks, uint64_t{kThreads} * kRounds * 2);
  EXPECT_EQ(c.issued_bytes, uint64_t{kThreads} * kRounds * 200);
  EXPECT_EQ(c.used_blocks, uint64_t{2} * kRounds * 2);
  EXPECT_EQ(c.wasted_blocks, uint64_t{2} * kRounds * 2);
  EXPECT_EQ(c.wasted_bytes, uint64_t{2} * kRounds * 200);
  EXPECT_DOUBLE_EQ(w->accuracy(), 0.5);
}

TEST(PrefetchRange, NextBlocksUpToTheWindowOrTheChainEnd) {
  EXPECT_EQ(PrefetchRange(3, 100, 4), (std::vector<uint64_t>{4, 5, 6, 7}));
  EXPECT_EQ(PrefetchRange(0, 3, 8), (std::vector<uint64_t>{1, 2}));
  EXPECT_EQ(PrefetchRange(97, 100, 8), (std::vector<uint64_t>{98, 99}));
  EXPECT_TRUE(PrefetchRange(99, 100, 8).empty()) << "the last block";
  EXPECT_TRUE(PrefetchRange(150, 100, 8).empty()) << "past the end";
  EXPECT_TRUE(PrefetchRange(0, 0, 8).empty());
  EXPECT_TRUE(PrefetchRange(3, 100, 0).empty());
  EXPECT_EQ(PrefetchRange(UINT64_MAX - 2, UINT64_MAX, 64), (std::vector<uint64_t>{UINT64_MAX - 1})) << "no overflow";
}

}  // namespace
}  // namespace kvtier
