#include "util/task_pool.h"

#include <atomic>
#include <chrono>
#include <future>

#include <gtest/gtest.h>

namespace kvtier {
namespace {

TEST(TaskPoolTest, RunsEveryTaskBeforeTheDestructorReturns) {
  std::atomic<int> ran{0};
  {
    TaskPool pool(3, 4);
    for (int i = 0; i < 100; ++i) pool.Submit([&] { ran.fetch_add(1); });
  }
  EXPECT_EQ(ran.load(), 100);
}

TEST(TaskPoolTest, SubmitBlocksWhileTheQueueIsFull) {
  TaskPool pool(1, 2);
  std::promise<void> release;
  std::shared_future<void> gate = release.get_future().share();
  pool.Submit([gate] { gate.wait(); });  // occupies the only worker
  // Wait until the worker took it, so that the queue is empty again.
  while (pool.queued() != 0) std::this_thread::yield();
  pool.Submit([] {});
  pool.Submit([] {});
  EXPECT_EQ(pool.queued(), 2u);
  std::atomic<bool> third_submitted{false};
  std::thread producer([&] {
    pool.Submit([] {});
    third_submitted = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_FALSE(third_submitted.load()) << "Submit returned although the queue was full";
  release.set_value();
  producer.join();
  EXPECT_TRUE(third_submitted.load());
}

TEST(TaskPoolTest, ATaskSubmittingToItsFullPoolDoesNotDeadlock) {
  std::atomic<int> ran{0};
  {
    TaskPool pool(1, 1);
    pool.Submit([&] {
      for (int i = 0; i < 10; ++i) pool.Submit([&] { ran.fetch_add(1); });
    });
  }
  EXPECT_EQ(ran.load(), 10);
}

}  // namespace
}  // namespace kvtier
