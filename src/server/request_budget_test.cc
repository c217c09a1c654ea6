#include "server/request_budget.h"

#include <gtest/gtest.h>

#include <chrono>
#include <vector>

namespace kvtier::server {
namespace {

// The budget lives on its loop's thread: each step runs there as a posted task, and the
// resumes it posts run between them, as they do in the server.
class RequestBudgetTest : public ::testing::Test {
 protected:
  void SetUp() override {
    Result<std::unique_ptr<EventLoop>> loop = EventLoop::Create();
    ASSERT_TRUE(loop.ok()) << loop.status().ToString();
    loop_ = std::move(*loop);
  }

  // Runs the loop until a task calls Stop, or 10 s pass: a resume that never came.
  void RunLoop() {
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    bool timed_out = false;
    loop_->Run(25, [&] {
      if (std::chrono::steady_clock::now() < give_up) return;
      timed_out = true;
      loop_->Stop();
    });
    ASSERT_FALSE(timed_out) << "the loop was not stopped: a resume did not come";
  }

  std::unique_ptr<EventLoop> loop_;
};

TEST_F(RequestBudgetTest, WaitersResumeInOrderAndOnlyWhileThereIsRoom) {
  std::vector<uint64_t> resumed;
  std::unique_ptr<RequestBudget> budget;
  budget = std::make_unique<RequestBudget>(*loop_, 1000, [&](uint64_t id) {
    resumed.push_back(id);
    if (id == 2) {
      budget->Recharge(0, 1500);  // the second takes all the room: the third keeps waiting
      loop_->Post([&] {
        EXPECT_EQ(resumed, (std::vector<uint64_t>{1, 2}));
        EXPECT_FALSE(budget->has_room());
        budget->Recharge(1500, 599);  // 400 + 599: under the limit again, by a byte
      });
    }
    if (id == 3) loop_->Stop();
  }, nullptr);
  loop_->Post([&] {
    EXPECT_TRUE(budget->has_room());
    budget->Recharge(0, 600);
    budget->Recharge(0, 400);
    EXPECT_FALSE(budget->has_room()) << "1,000 of 1,000 bytes held";
    EXPECT_EQ(budget->held(), 1000u);
    budget->Wait(1);
    budget->Wait(2);
    budget->Wait(3);
    budget->Recharge(600, 800);  // more held: nobody resumes
    budget->Recharge(800, 0);
    EXPECT_TRUE(resumed.empty()) << "resumed from a posted task, not inside Recharge";
  });
  RunLoop();
  EXPECT_EQ(resumed, (std::vector<uint64_t>{1, 2, 3}));
  EXPECT_EQ(budget->held(), 999u);
}

TEST_F(RequestBudgetTest, ReportsTheBytesHeldToTheMetrics) {
  ServiceMetrics metrics;
  RequestBudget budget(*loop_, 100, [](uint64_t) {}, &metrics);
  budget.Recharge(0, 70);
  budget.Recharge(0, 50);
  budget.Recharge(70, 20);
  EXPECT_EQ(metrics.Read().request_bytes_held, 70);
  EXPECT_EQ(budget.held(), 70u);
  budget.Recharge(20, 0);
  budget.Recharge(50, 0);
  EXPECT_EQ(metrics.Read().request_bytes_held, 0);
}

}  // namespace
}  // namespace kvtier::server
