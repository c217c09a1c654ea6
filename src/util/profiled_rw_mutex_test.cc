#include "util/profiled_rw_mutex.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <shared_mutex>
#include <thread>
#include <vector>

namespace kvtier {
namespace {

using namespace std::chrono_literals;

TEST(ProfiledRwMutex, CountsAWritersHoldAndNoWaitWhenUncontended) {
  ProfiledRwMutex mu;
  {
    std::lock_guard lock(mu);
    std::this_thread::sleep_for(20ms);
  }
  for (int i = 0; i < 1000; ++i) std::shared_lock lock(mu);
  const LockProfile p = mu.Profile();
  EXPECT_EQ(p.exclusive_acquisitions, 1u);
  EXPECT_GE(p.exclusive_hold_seconds, 0.02);
  EXPECT_EQ(p.exclusive_waits, 0u);
  EXPECT_EQ(p.exclusive_wait_seconds, 0.0);
  EXPECT_EQ(p.shared_waits, 0u) << "readers without a writer never wait";
}

TEST(ProfiledRwMutex, TimeAsleepInAConditionVariableIsNotHeld) {
  ProfiledRwMutex mu;
  std::condition_variable_any cv;
  const auto start = std::chrono::steady_clock::now();
  {
    std::unique_lock lock(mu);
    cv.wait_for(lock, 100ms, [] { return false; });
  }
  const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const LockProfile p = mu.Profile();
  EXPECT_GE(p.exclusive_acquisitions, 2u) << "taken, released by the wait, taken again";
  EXPECT_GE(elapsed, 0.1);
  EXPECT_LT(p.exclusive_hold_seconds, elapsed - 0.09) << "the 100 ms asleep counted as held";
}

// Writers' holds never overlap, so their sum cannot exceed the wall time: a profile that
// counted a hold twice or from the wrong start would.
TEST(ProfiledRwMutex, WritersHoldsSumToAtMostTheWallTime) {
  ProfiledRwMutex mu;
  constexpr int kThreads = 4, kRounds = 2000;
  uint64_t counter = 0;  // guarded by mu
  const auto start = std::chrono::steady_clock::now();
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < kRounds; ++i) {
        std::lock_guard lock(mu);
        for (int spin = 0; spin < 200; ++spin) counter = counter * 31 + 1;
      }
    });
  }
  for (std::thread& t : threads) t.join();
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const LockProfile p = mu.Profile();
  EXPECT_EQ(p.exclusive_acquisitions, static_cast<uint64_t>(kThreads * kRounds));
  EXPECT_GT(p.exclusive_hold_seconds, 0.0);
  EXPECT_LE(p.exclusive_hold_seconds, wall);
  EXPECT_LE(p.exclusive_waits, p.exclusive_acquisitions);
  EXPECT_NE(counter, 0u);
}

// A reader that arrives while a writer holds the lock waits, and its wait is counted; the
// writer holds on until the reader has announced itself (and then 50 ms), so the reader's first
// try fails unless it was descheduled that long between announcing and trying: tried again then.
TEST(ProfiledRwMutex, AReaderBehindAWriterCountsItsWait) {
  ProfiledRwMutex mu;
  LockProfile p;
  for (int attempt = 0; attempt < 20 && p.shared_waits == 0; ++attempt) {
    std::unique_lock writer(mu);
    std::atomic<bool> arriving{false};
    std::thread reader([&] {
      arriving = true;
      std::shared_lock lock(mu);
    });
    while (!arriving) std::this_thread::yield();
    std::this_thread::sleep_for(50ms);
    writer.unlock();
    reader.join();
    p = mu.Profile();
  }
  ASSERT_GE(p.shared_waits, 1u);
  EXPECT_GT(p.shared_wait_seconds, 0.0);
}

TEST(ProfiledRwMutex, AWriterBehindAReaderCountsItsWait) {
  ProfiledRwMutex mu;
  LockProfile p;
  for (int attempt = 0; attempt < 20 && p.exclusive_waits == 0; ++attempt) {
    std::shared_lock reader(mu);
    std::atomic<bool> arriving{false};
    std::thread writer([&] {
      arriving = true;
      std::lock_guard lock(mu);
    });
    while (!arriving) std::this_thread::yield();
    std::this_thread::sleep_for(50ms);
    reader.unlock();
    writer.join();
    p = mu.Profile();
  }
  ASSERT_GE(p.exclusive_waits, 1u);
  EXPECT_GT(p.exclusive_wait_seconds, 0.0);
}

// A lock that spins before it sleeps still excludes writers from each other and from readers,
// and a writer kept out past the spin sleeps until the lock is free, its wait counted whole.
TEST(ProfiledRwMutex, ASpinningLockExcludesAndSleepsPastItsSpin) {
  ProfiledRwMutex mu(std::chrono::microseconds(2));
  constexpr int kWriters = 3, kRounds = 3000;
  uint64_t a = 0, b = 0;  // guarded by mu: always equal under it
  std::atomic<bool> torn{false};
  std::vector<std::thread> threads;
  for (int t = 0; t < kWriters; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < kRounds; ++i) {
        std::lock_guard lock(mu);
        ++a;
        ++b;
      }
    });
  }
  threads.emplace_back([&] {
    for (int i = 0; i < kRounds; ++i) {
      std::shared_lock lock(mu);
      if (a != b) torn = true;
    }
  });
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(a, static_cast<uint64_t>(kWriters * kRounds));
  EXPECT_FALSE(torn.load());

  ProfiledRwMutex held(std::chrono::microseconds(2));
  std::unique_lock holder(held);
  std::atomic<bool> arriving{false};
  std::thread writer([&] {
    arriving = true;
    std::lock_guard lock(held);
  });
  while (!arriving) std::this_thread::yield();
  std::this_thread::sleep_for(50ms);
  holder.unlock();
  writer.join();
  const LockProfile p = held.Profile();
  ASSERT_EQ(p.exclusive_waits, 1u);
  EXPECT_GE(p.exclusive_wait_seconds, 0.04) << "the writer waited through the 50 ms, not just its spin";
}

}  // namespace
}  // namespace kvtier
