#include "util/rw_mutex.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <shared_mutex>
#include <thread>
#include <vector>

namespace kvtier {
namespace {

using namespace std::chrono_literals;

TEST(RwMutex, ReadersShareAndAWriterExcludesThem) {
  RwMutex mu;
  std::shared_lock first(mu);
  std::atomic<bool> second_reader_in{false};
  std::thread reader([&] {
    std::shared_lock second(mu);
    second_reader_in = true;
  });
  reader.join();  // would hang if readers excluded each other
  EXPECT_TRUE(second_reader_in);
  EXPECT_FALSE(mu.try_lock());
  first.unlock();
  EXPECT_TRUE(mu.try_lock());
  EXPECT_FALSE(mu.try_lock_shared());
  mu.unlock();
}

// Readers that always overlap (there is never a moment without one) starve a writer on a
// reader-preferring lock; here the writer gets in once the readers already holding it leave.
TEST(RwMutex, AWriterIsNotStarvedByOverlappingReaders) {
  RwMutex mu;
  std::atomic<bool> stop{false};
  std::vector<std::thread> readers;
  for (int r = 0; r < 4; ++r) {
    readers.emplace_back([&] {
      while (!stop) {
        std::shared_lock lock(mu);
        std::this_thread::sleep_for(1ms);
      }
    });
  }
  std::this_thread::sleep_for(20ms);  // the readers overlap by now
  std::atomic<bool> written{false};
  std::thread writer([&] {
    std::lock_guard lock(mu);
    written = true;
  });
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (!written && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(1ms);
  const bool got_in = written;
  stop = true;
  for (std::thread& t : readers) t.join();
  writer.join();
  EXPECT_TRUE(got_in) << "the writer waited 10 s behind readers";
}

}  // namespace
}  // namespace kvtier
