#include "tier/aligned_buffer_pool.h"

#include <cstdint>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

namespace kvtier {
namespace {

TEST(AlignedBufferPool, ReusesReleasedBuffersOfTheSameSize) {
  AlignedBufferPool pool(8u << 20);
  std::byte* first = nullptr;
  {
    AlignedBufferPool::Buffer b = pool.Acquire((1u << 20) + 4096);
    ASSERT_NE(b, nullptr);
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(b.get()) % AlignedBufferPool::kAlignment, 0u);
    first = b.get();
  }
  EXPECT_GT(pool.cached_bytes(), 0u);
  AlignedBufferPool::Buffer again = pool.Acquire((1u << 20) + 100);  // same 64 KiB granule
  EXPECT_EQ(again.get(), first);
  EXPECT_EQ(pool.cached_bytes(), 0u);
}

TEST(AlignedBufferPool, KeepsNoMoreThanItsLimit) {
  AlignedBufferPool pool(1u << 20);
  {
    std::vector<AlignedBufferPool::Buffer> held;
    for (int i = 0; i < 4; ++i) held.push_back(pool.Acquire(512u << 10));
  }
  EXPECT_EQ(pool.cached_bytes(), 1u << 20);  // two of the four kept, two freed
}

TEST(AlignedBufferPool, ConcurrentAcquireAndRelease) {
  AlignedBufferPool pool(4u << 20);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&pool, t] {
      for (int i = 0; i < 2000; ++i) {
        AlignedBufferPool::Buffer b = pool.Acquire(static_cast<std::size_t>(4096 * (1 + (i + t) % 40)));
        ASSERT_NE(b, nullptr);
        b.get()[0] = std::byte{1};
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_LE(pool.cached_bytes(), 4u << 20);
}

}  // namespace
}  // namespace kvtier
