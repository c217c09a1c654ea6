#include "util/task_pool.h"

#include <atomic>
#include <chrono>
#include <future>
#include <mutex>
#include <thread>
#include <vector>

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

// Waits (a bounded time, so that a broken pool fails instead of hanging) until `done` holds.
template <typename Predicate>
bool Eventually(Predicate done) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!done()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

SpareThreads UpTo(int max_threads, std::chrono::milliseconds idle_end = std::chrono::seconds(2)) {
  return {.max_threads = max_threads, .idle_end = idle_end};
}

// What the tasks of a test wait on, as if on I/O. Opens when the test says so or, declared
// after the pool, when the test ends early: the pool's destructor never waits on it.
class Gate {
 public:
  ~Gate() { Open(); }
  void Open() {
    std::call_once(opened_, [this] { promise_.set_value(); });
  }
  std::shared_future<void> future() const { return future_; }

 private:
  std::promise<void> promise_;
  std::shared_future<void> future_ = promise_.get_future().share();
  std::once_flag opened_;
};

TEST(TaskPoolTest, AWorkerBlockedOnIoLetsASpareRunTheQueue) {
  TaskPool pool(1, 16, "", UpTo(4));
  Gate io;
  pool.Submit([io = io.future()] {
    TaskPool::BlockingScope blocking;
    io.wait();
  });
  std::promise<void> ran;
  std::future<void> second = ran.get_future();
  pool.Submit([&ran] { ran.set_value(); });
  EXPECT_EQ(second.wait_for(std::chrono::seconds(10)), std::future_status::ready)
      << "the queued task waited for the blocked worker";
  EXPECT_EQ(pool.counts().spares_started, 1u);
  EXPECT_EQ(pool.counts().blocked, 1);
}

TEST(TaskPoolTest, AWorkerBusyWithoutABlockingScopeGetsNoSpare) {
  TaskPool pool(1, 16, "", UpTo(4));
  Gate busy;
  pool.Submit([busy = busy.future()] { busy.wait(); });  // computing, as far as the pool knows
  std::atomic<bool> second_ran{false};
  pool.Submit([&] { second_ran = true; });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_FALSE(second_ran.load());
  EXPECT_EQ(pool.counts().spares_started, 0u);
  EXPECT_EQ(pool.counts().threads, 1);
  busy.Open();
  EXPECT_TRUE(Eventually([&] { return second_ran.load(); }));
}

TEST(TaskPoolTest, SparesStopAtMaxThreads) {
  std::atomic<int> ran{0};
  {
    TaskPool pool(1, 16, "", UpTo(3));
    Gate io;
    for (int i = 0; i < 5; ++i) {
      pool.Submit([io = io.future(), &ran] {
        TaskPool::BlockingScope blocking;
        io.wait();
        ran.fetch_add(1);
      });
    }
    ASSERT_TRUE(Eventually([&] { return pool.counts().blocked == 3; }));
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    EXPECT_EQ(pool.counts().threads, 3);
    EXPECT_EQ(pool.queued(), 2u);
  }
  EXPECT_EQ(ran.load(), 5);
}

TEST(TaskPoolTest, AnIdleSpareEnds) {
  TaskPool pool(1, 16, "", UpTo(2, std::chrono::milliseconds(20)));
  for (uint64_t round = 1; round <= 2; ++round) {  // the second round's spare joins the first's
    Gate io;
    pool.Submit([io = io.future()] {
      TaskPool::BlockingScope blocking;
      io.wait();
    });
    std::atomic<bool> ran{false};
    pool.Submit([&] { ran = true; });
    ASSERT_TRUE(Eventually([&] { return ran.load(); }));
    EXPECT_EQ(pool.counts().threads, 2);
    EXPECT_EQ(pool.counts().spares_started, round);
    io.Open();
    EXPECT_TRUE(Eventually([&] { return pool.counts().threads == 1; }));
  }
}

TEST(TaskPoolTest, NestedBlockingScopesCountOnce) {
  TaskPool pool(1, 16, "", UpTo(4));
  std::promise<int> inner, after;
  pool.Submit([&] {
    TaskPool::BlockingScope outer;
    {
      TaskPool::BlockingScope nested;
      inner.set_value(pool.counts().blocked);
    }
    after.set_value(pool.counts().blocked);
  });
  EXPECT_EQ(inner.get_future().get(), 1);
  EXPECT_EQ(after.get_future().get(), 1);
  EXPECT_TRUE(Eventually([&] { return pool.counts().blocked == 0; }));
}

TEST(TaskPoolTest, ABlockingScopeOffAnElasticPoolDoesNothing) {
  TaskPool fixed(1, 16);
  std::promise<uint64_t> spares;
  fixed.Submit([&] {
    TaskPool::BlockingScope blocking;  // a fixed pool: no spare, nothing counted
    spares.set_value(fixed.counts().spares_started + static_cast<uint64_t>(fixed.counts().blocked));
  });
  EXPECT_EQ(spares.get_future().get(), 0u);
  TaskPool elastic(1, 16, "", UpTo(4));
  {
    TaskPool::BlockingScope blocking;  // the test's thread works for no pool
    EXPECT_EQ(elastic.counts().blocked, 0);
  }
}

TEST(TaskPoolTest, ManyThreadsBlockingAndSubmittingRunEveryTask) {
  std::atomic<int> ran{0};
  {
    TaskPool pool(2, 64, "", UpTo(8, std::chrono::milliseconds(1)));  // spares end and start often
    std::vector<std::thread> producers;
    for (int p = 0; p < 4; ++p) {
      producers.emplace_back([&] {
        for (int i = 0; i < 200; ++i) {
          pool.Submit([&ran, i] {
            if (i % 3 == 0) {
              TaskPool::BlockingScope blocking;
              std::this_thread::sleep_for(std::chrono::microseconds(200));
            }
            ran.fetch_add(1);
          });
        }
      });
    }
    for (std::thread& t : producers) t.join();
  }
  EXPECT_EQ(ran.load(), 800);
}

}  // namespace
}  // namespace kvtier
