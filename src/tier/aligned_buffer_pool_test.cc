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

TEST(AlignedBufferPool, ASmallerRequestTakesTheSmallestBufferThatHoldsIt) {
  AlignedBufferPool pool(16u << 20);
  std::byte* one_mib = nullptr;
  std::byte* four_mib = nullptr;
  {
    AlignedBufferPool::Buffer a = pool.Acquire(1u << 20);
    AlignedBufferPool::Buffer b = pool.Acquire(4u << 20);
    one_mib = a.get();
    four_mib = b.get();
  }
  EXPECT_EQ(pool.cached_bytes(), 5u << 20);
  {
    AlignedBufferPool::Buffer c = pool.Acquire(768u << 10);  // the 1 MiB one, not the 4 MiB one
    EXPECT_EQ(c.get(), one_mib);
    EXPECT_EQ(pool.cached_bytes(), 4u << 20);
    AlignedBufferPool::Buffer d = pool.Acquire(1u << 20);  // the 4 MiB one would waste 3/4 of itself
    EXPECT_NE(d.get(), four_mib);
    EXPECT_EQ(pool.cached_bytes(), 4u << 20);
  }
  // Released, each goes back under its own capacity (5 MiB + the new 1 MiB).
  EXPECT_EQ(pool.cached_bytes(), 6u << 20);
  AlignedBufferPool::Buffer e = pool.Acquire(3u << 20);
  EXPECT_EQ(e.get(), four_mib);
  EXPECT_EQ(pool.cached_bytes(), 2u << 20);
}

TEST(AlignedBufferPool, KeepsNoMoreThanItsLimit) {
  AlignedBufferPool pool(1u << 20);
  {
    std::vector<AlignedBufferPool::Buffer> held;
    for (int i = 0; i < 4; ++i) held.push_back(pool.Acquire(512u << 10));
  }
  EXPECT_EQ(pool.cached_bytes(), 1u << 20);  // two of the four kept, two freed
}

TEST(AlignedBufferPool, AFullPoolGivesUpSmallBuffersForALargeOne) {
  AlignedBufferPool pool(2u << 20);
  {
    std::vector<AlignedBufferPool::Buffer> small;
    for (int i = 0; i < 4; ++i) small.push_back(pool.Acquire(512u << 10));
  }
  ASSERT_EQ(pool.cached_bytes(), 2u << 20);  // full of 512 KiB buffers
  std::byte* large = nullptr;
  {
    AlignedBufferPool::Buffer b = pool.Acquire(1536u << 10);  // none holds it: a new one
    large = b.get();
  }
  EXPECT_EQ(pool.cached_bytes(), 2u << 20);  // three small ones freed, one kept beside it
  EXPECT_EQ(pool.Acquire(1536u << 10).get(), large);
  {
    AlignedBufferPool::Buffer x = pool.Acquire(512u << 10);  // the kept 512 KiB one
    AlignedBufferPool::Buffer y = pool.Acquire(512u << 10);  // a new one: 1.5 MiB is too large
    EXPECT_EQ(pool.cached_bytes(), 1536u << 10);
  }
  // y fills the pool again; x then finds no smaller buffer to give up, and is freed.
  EXPECT_EQ(pool.cached_bytes(), 2u << 20);
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
