#include "kvtier/promotion_gate.h"

#include <cstdint>
#include <limits>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

namespace kvtier {
namespace {

std::unique_ptr<PromotionGate> Make(const PromotionGateOptions& options = {}) {
  Result<std::unique_ptr<PromotionGate>> gate = PromotionGate::Create(options);
  EXPECT_TRUE(gate.ok()) << gate.status().ToString();
  return std::move(gate).value();
}

// Of `draws` blocks offered at `break_even_yield`, how many were admitted.
int Admitted(PromotionGate& gate, int draws, double break_even_yield) {
  int admitted = 0;
  for (int i = 0; i < draws; ++i) admitted += gate.Admit(break_even_yield) ? 1 : 0;
  return admitted;
}

// One evaluation period (64 outcomes) of which `used` were used.
void Period(PromotionGate& gate, int used) {
  for (int i = 0; i < 64; ++i) (i < used ? gate.OnUsed() : gate.OnWasted());
}

TEST(PromotionGate, OptionsValidate) {
  EXPECT_TRUE(PromotionGateOptions{}.Validate().ok());
  EXPECT_FALSE((PromotionGateOptions{.min_rate = 0}.Validate().ok()));
  EXPECT_FALSE((PromotionGateOptions{.min_rate = 1.5}.Validate().ok()));
  EXPECT_FALSE((PromotionGateOptions{.min_rate = std::numeric_limits<double>::quiet_NaN()}.Validate().ok()));
  EXPECT_FALSE((PromotionGateOptions{.evaluation_period = 0}.Validate().ok()));
  EXPECT_FALSE(PromotionGate::Create({.min_rate = 0}).ok());
}

TEST(PromotionGate, AdmitsEveryBlockUntilAPeriodSaysOtherwise) {
  auto gate = Make();
  EXPECT_EQ(gate->rate(), 1.0);
  EXPECT_EQ(Admitted(*gate, 1000, 0.05), 1000);
  for (int i = 0; i < 63; ++i) gate->OnWasted();
  EXPECT_EQ(gate->rate(), 1.0) << "63 outcomes are not a period";
  gate->OnWasted();
  EXPECT_EQ(gate->rate(), 0.5);
}

TEST(PromotionGate, WastedPeriodsHalveTheRateDownToTheFloor) {
  auto gate = Make();
  (void)gate->Admit(0.05);
  for (double expected : {0.5, 0.25, 0.125, 0.0625, 1.0 / 32, 1.0 / 32}) {
    Period(*gate, 0);
    EXPECT_EQ(gate->rate(), expected);
  }
  // 1/32 of 32,000 is 1,000; the draws are a binomial sample (sd about 31).
  const int admitted = Admitted(*gate, 32000, 0.05);
  EXPECT_GT(admitted, 850);
  EXPECT_LT(admitted, 1150);
  const PromotionGateCounters c = gate->counters();
  EXPECT_EQ(c.admitted + c.declined, 32001u);
  EXPECT_EQ(c.wasted, 6u * 64);
}

TEST(PromotionGate, PeriodsAreJudgedAgainstTheBreakEven) {
  auto gate = Make();
  (void)gate->Admit(0.2);
  Period(*gate, 7);  // a yield of 0.11 against 0.2: halves
  EXPECT_EQ(gate->rate(), 0.5);
  while (!gate->Admit(0.05)) {
  }
  Period(*gate, 7);  // the same yield against 0.05: doubles
  EXPECT_EQ(gate->rate(), 1.0);
  Period(*gate, 64);
  EXPECT_EQ(gate->rate(), 1.0) << "never above every block";
}

TEST(PromotionGate, ComesBackWhenPromotionsAreUsedAgain) {
  auto gate = Make();
  (void)gate->Admit(0.05);
  for (int i = 0; i < 10; ++i) Period(*gate, 0);
  ASSERT_EQ(gate->rate(), 1.0 / 32);
  for (int i = 0; i < 5; ++i) Period(*gate, 32);
  EXPECT_EQ(gate->rate(), 1.0);
  EXPECT_EQ(Admitted(*gate, 1000, 0.05), 1000);
}

TEST(PromotionGate, ABreakEvenThatIsNeverMetSinksToTheFloorAndOffAdmitsAll) {
  auto gate = Make();
  (void)gate->Admit(std::numeric_limits<double>::infinity());
  for (int i = 0; i < 6; ++i) Period(*gate, 64);
  EXPECT_EQ(gate->rate(), 1.0 / 32) << "even a yield of 1 does not pay";

  auto off = Make({.adaptive = false});
  (void)off->Admit(0.05);
  for (int i = 0; i < 10; ++i) Period(*off, 0);
  EXPECT_EQ(Admitted(*off, 1000, 0.05), 1000);
}

TEST(PromotionGate, DrawsRepeatAcrossGates) {
  auto a = Make();
  auto b = Make();
  for (PromotionGate* gate : {a.get(), b.get()}) {
    (void)gate->Admit(0.05);
    for (int i = 0; i < 3; ++i) Period(*gate, 0);
  }
  for (int i = 0; i < 2000; ++i) ASSERT_EQ(a->Admit(0.05), b->Admit(0.05)) << "draw " << i;
}

TEST(PromotionGate, ConcurrentAdmitsAndOutcomesCountEveryCall) {
  auto gate = Make();
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&gate, t] {
      for (int i = 0; i < 5000; ++i) {
        (void)gate->Admit(0.05);
        if (i % 5 == 0) (t % 2 == 0 ? gate->OnUsed() : gate->OnWasted());
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  const PromotionGateCounters c = gate->counters();
  EXPECT_EQ(c.admitted + c.declined, 20000u);
  EXPECT_EQ(c.used, 2000u);
  EXPECT_EQ(c.wasted, 2000u);
  EXPECT_GE(c.rate, 1.0 / 32);
  EXPECT_LE(c.rate, 1.0);
}

}  // namespace
}  // namespace kvtier
