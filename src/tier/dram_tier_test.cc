#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>

#include <gtest/gtest.h>

#include "kvtier/tiers.h"
#include "tier/dram_tier.h"

namespace kvtier {
namespace {

TEST(DramTier, CorruptedBlockIsDroppedNeverReturned) {
  Result<std::unique_ptr<Tier>> tier = NewDramTier({.capacity_bytes = 4u << 20, .lock_memory = false});
  ASSERT_TRUE(tier.ok());
  const BlockKey key{1, 2};
  std::vector<std::byte> payload(8192, std::byte{7});
  ASSERT_TRUE((*tier)->Write(key, payload).ok());
  ASSERT_TRUE(CorruptDramBlockForTesting(tier->get(), key));
  std::vector<std::byte> out(8192);
  EXPECT_EQ((*tier)->Read(key, out).status().code(), StatusCode::kCorruption);
  EXPECT_EQ((*tier)->Size(key), std::nullopt);
  EXPECT_EQ((*tier)->GetStats().checksum_failures, 1u);
  EXPECT_EQ((*tier)->GetStats().used_bytes, 0u);
}

// Issue 18, hole 8: a read that fails its checksum hands back none of the bad bytes.
TEST(DramTier, CorruptedReadLeavesNoBadBytesInTheBuffer) {
  Result<std::unique_ptr<Tier>> tier = NewDramTier({.capacity_bytes = 4u << 20, .lock_memory = false});
  ASSERT_TRUE(tier.ok());
  const BlockKey key{1, 2};
  const std::vector<std::byte> payload(8192, std::byte{7});
  ASSERT_TRUE((*tier)->Write(key, payload).ok());
  ASSERT_TRUE(CorruptDramBlockForTesting(tier->get(), key));
  std::vector<std::byte> out(8192, std::byte{0});
  EXPECT_EQ((*tier)->Read(key, out).status().code(), StatusCode::kCorruption);
  EXPECT_TRUE(std::ranges::all_of(out, [](std::byte b) { return b == std::byte{0}; }));
}

// Issue 18, hole 8: a Write of the same key between a failed checksum and the drop that
// follows survives; only the block that failed is dropped.
TEST(DramTier, RewriteRacingAFailedReadSurvives) {
  Result<std::unique_ptr<Tier>> tier = NewDramTier({.capacity_bytes = 4u << 20, .lock_memory = false});
  ASSERT_TRUE(tier.ok());
  Tier* t = tier->get();
  const BlockKey key{1, 2};
  const std::vector<std::byte> bad(8192, std::byte{7}), fresh(8192, std::byte{9});
  ASSERT_TRUE(t->Write(key, bad).ok());
  ASSERT_TRUE(CorruptDramBlockForTesting(t, key));
  SetDramFailedReadHookForTesting(t, [&] { ASSERT_TRUE(t->Write(key, fresh).ok()); });
  std::vector<std::byte> out(8192);
  EXPECT_EQ(t->Read(key, out).status().code(), StatusCode::kCorruption);
  SetDramFailedReadHookForTesting(t, nullptr);
  Result<std::size_t> again = t->Read(key, out);
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(out, fresh);
  EXPECT_EQ(t->GetStats().blocks, 1u);
  EXPECT_EQ(t->GetStats().used_bytes, fresh.size());
}

TEST(DramTier, OptionsAreValidated) {
  EXPECT_EQ(NewDramTier({.capacity_bytes = 0}).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(NewDramTier({.capacity_bytes = 1u << 20, .shards = 0}).status().code(), StatusCode::kInvalidArgument);
  EXPECT_FALSE(NewDramTier({.capacity_bytes = 1u << 20, .numa_node = 4096}).ok());
}

TEST(DramTier, NumaNodeZeroBindsWhereNumaExists) {
  Result<std::unique_ptr<Tier>> tier = NewDramTier({.capacity_bytes = 2u << 20, .numa_node = 0, .lock_memory = false});
  if (!tier.ok()) {
    EXPECT_EQ(tier.status().code(), StatusCode::kUnsupported);
    GTEST_SKIP() << tier.status().message();
  }
  std::vector<std::byte> payload(4096, std::byte{1});
  EXPECT_TRUE((*tier)->Write({3, 4}, payload).ok());
}

}  // namespace
}  // namespace kvtier

namespace kvtier {
namespace {

TEST(CxlTier, MapsAFileAndReportsItsKind) {
  const std::string path = "/dev/shm/kvtier-cxl-unit-" + std::to_string(::getpid());
  Result<std::unique_ptr<Tier>> tier = NewCxlTier({.path = path, .capacity_bytes = 4u << 20});
  ASSERT_TRUE(tier.ok()) << tier.status().ToString();
  EXPECT_EQ((*tier)->kind(), TierKind::kCxlMemory);
  EXPECT_EQ((*tier)->GetStats().capacity_bytes, 4u << 20);
  std::vector<std::byte> payload(100000, std::byte{9});
  ASSERT_TRUE((*tier)->Write({5, 6}, payload).ok());
  std::vector<std::byte> out(100000);
  EXPECT_EQ(*(*tier)->Read({5, 6}, out), payload.size());
  EXPECT_EQ(out, payload);
  tier->reset();
  std::remove(path.c_str());
}

TEST(CxlTier, BadPathsAndOptionsAreClearErrors) {
  EXPECT_EQ(NewCxlTier({.path = "", .capacity_bytes = 1u << 20}).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(NewCxlTier({.path = "/dev/shm/x", .capacity_bytes = 0}).status().code(), StatusCode::kInvalidArgument);
  Result<std::unique_ptr<Tier>> missing_dir = NewCxlTier({.path = "/no/such/dir/cxl", .capacity_bytes = 1u << 20});
  ASSERT_FALSE(missing_dir.ok());
  EXPECT_EQ(missing_dir.status().code(), StatusCode::kIoError);
  EXPECT_NE(missing_dir.status().message().find("/no/such/dir/cxl"), std::string::npos);
}

// Slabs go back to a free pool when all their slots are free, so a tier that held one block
// size can be filled with another (the region does not stay carved for the first size).
TEST(DramTierSlabs, EmptySlabsServeAnotherSizeClass) {
  Result<std::unique_ptr<Tier>> tier =
      NewDramTier({.capacity_bytes = 8u << 20, .lock_memory = false, .huge_pages = false, .pin_for_gpu = false});
  ASSERT_TRUE(tier.ok()) << tier.status().ToString();
  const std::vector<std::byte> big(256u << 10, std::byte{1}), small(96u << 10, std::byte{2});
  uint64_t n = 0;
  while ((*tier)->Write({1, n}, big).ok()) ++n;
  EXPECT_EQ(n, 32u);  // 4 slabs of 8
  for (uint64_t i = 0; i < n; ++i) ASSERT_TRUE((*tier)->Evict({1, i}).ok());
  uint64_t m = 0;
  while ((*tier)->Write({2, m}, small).ok()) ++m;
  // Every slab now serves the 96 KiB class: 4 slabs of 21 slots (2016 KiB), and one more slot
  // carved alone from the 128 KiB left over.
  EXPECT_EQ(m, 4u * ((2u << 20) / (96u << 10)) + 1);
  // A slab with one live block keeps its class: free all but one block of the first slab.
  for (uint64_t i = 1; i < m; ++i) ASSERT_TRUE((*tier)->Evict({2, i}).ok());
  uint64_t k = 0;
  while ((*tier)->Write({3, k}, big).ok()) ++k;
  EXPECT_EQ(k, 24u);  // the space of three slabs came back, the first still holds block {2, 0}
  std::vector<std::byte> out(small.size());
  ASSERT_TRUE((*tier)->Read({2, 0}, out).ok());
  EXPECT_EQ(out, small);
}

// Issue 17: first-touch page faults in an unprefaulted region cut puts from 4 clients to a
// fifth of 1 client's speed. These check the prefault itself; `kvtier bench serve --mix
// 0:100:0 --dram-prefault ...` measures the speed.
using namespace std::chrono_literals;

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define KVTIER_TEST_UNDER_SANITIZER 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define KVTIER_TEST_UNDER_SANITIZER 1
#endif
#endif
#ifndef KVTIER_TEST_UNDER_SANITIZER
#define KVTIER_TEST_UNDER_SANITIZER 0
#endif

// Minor faults this thread took while writing `blocks` blocks of `block_bytes` into `tier`.
long MinorFaultsWriting(Tier& tier, int blocks, std::size_t block_bytes) {
  const std::vector<std::byte> payload(block_bytes, std::byte{0x6b});
  std::vector<BlockKey> keys;
  keys.reserve(static_cast<std::size_t>(blocks));
  for (int i = 0; i < blocks; ++i) keys.push_back({uint64_t{7}, static_cast<uint64_t>(i)});
  rusage before{}, after{};
  getrusage(RUSAGE_THREAD, &before);
  for (const BlockKey& key : keys) EXPECT_TRUE(tier.Write(key, payload).ok());
  getrusage(RUSAGE_THREAD, &after);
  return after.ru_minflt - before.ru_minflt;
}

std::size_t ResidentPages(std::span<const std::byte> region) {
  const auto page = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
  std::vector<unsigned char> in_core((region.size() + page - 1) / page);
  if (mincore(const_cast<std::byte*>(region.data()), region.size(), in_core.data()) != 0) return 0;
  return static_cast<std::size_t>(std::count_if(in_core.begin(), in_core.end(), [](unsigned char f) { return f & 1; }));
}

Result<std::unique_ptr<Tier>> UnlockedTier(uint64_t capacity, bool prefault) {
  // Small pages, so that an unprefaulted region faults once per 4 KiB, not per 2 MiB.
  return NewDramTier({.capacity_bytes = capacity, .lock_memory = false, .huge_pages = false, .prefault = prefault});
}

TEST(DramTierPrefault, PrefaultedRegionIsResidentAndPutsTakeNoMinorFaults) {
  constexpr uint64_t kCapacity = 64u << 20;
  constexpr int kBlocks = 160;
  constexpr std::size_t kBlockBytes = 256u << 10;  // 40 MiB in all
  Result<std::unique_ptr<Tier>> prefaulted = UnlockedTier(kCapacity, true);
  Result<std::unique_ptr<Tier>> untouched = UnlockedTier(kCapacity, false);
  ASSERT_TRUE(prefaulted.ok() && untouched.ok());
  ASSERT_TRUE(MemoryTierPrefaultsForTesting(prefaulted->get()));
  ASSERT_FALSE(MemoryTierPrefaultsForTesting(untouched->get()));
  ASSERT_TRUE(WaitForMemoryTierPrefaultForTesting(prefaulted->get(), 30s));
  const std::span<const std::byte> region = MemoryTierRegionForTesting(prefaulted->get());
  EXPECT_EQ(ResidentPages(region), region.size() / static_cast<std::size_t>(sysconf(_SC_PAGESIZE)));
  EXPECT_EQ(ResidentPages(MemoryTierRegionForTesting(untouched->get())), 0u);

  const long untouched_faults = MinorFaultsWriting(**untouched, kBlocks, kBlockBytes);
  const long prefaulted_faults = MinorFaultsWriting(**prefaulted, kBlocks, kBlockBytes);
  // 40 MiB of 4 KiB pages is 10,240 first touches, which the prefault saves; a sanitizer's
  // shadow memory adds faults of its own as the blocks are written, to both tiers alike.
  EXPECT_GE(untouched_faults - prefaulted_faults, 9000) << prefaulted_faults << " against " << untouched_faults;
#if !KVTIER_TEST_UNDER_SANITIZER
  // Without one, the prefaulted tier's few are the index's own allocations.
  EXPECT_LT(prefaulted_faults, 100) << "against " << untouched_faults << " unprefaulted";
#endif
}

TEST(DramTierPrefault, LockedMemoryIsNotPrefaultedTwice) {
  Result<std::unique_ptr<Tier>> tier = NewDramTier({.capacity_bytes = 4u << 20, .lock_memory = true});
  ASSERT_TRUE(tier.ok());
  rlimit memlock{};
  getrlimit(RLIMIT_MEMLOCK, &memlock);
  // mlock succeeds under the limit (or as root): then no thread is started.
  if (memlock.rlim_cur == RLIM_INFINITY || memlock.rlim_cur >= (4u << 20) || geteuid() == 0) {
    EXPECT_FALSE(MemoryTierPrefaultsForTesting(tier->get()));
  }
}

TEST(DramTierPrefault, ClosingDuringThePrefaultReturnsPromptly) {
  Result<std::unique_ptr<Tier>> tier = UnlockedTier(uint64_t{8} << 30, true);  // seconds to fault in
  ASSERT_TRUE(tier.ok());
  ASSERT_TRUE(MemoryTierPrefaultsForTesting(tier->get()));
  EXPECT_TRUE((*tier)->Write({1, 1}, std::vector<std::byte>(8192, std::byte{1})).ok()) << "puts work meanwhile";
  const auto start = std::chrono::steady_clock::now();
  tier->reset();
  EXPECT_LT(std::chrono::steady_clock::now() - start, 500ms);
}

TEST(CxlTierPrefault, FileBackedRegionIsPrefaultedToo) {
  const std::string path = ::testing::TempDir() + "/kvtier-cxl-prefault-" + std::to_string(::getpid());
  Result<std::unique_ptr<Tier>> tier = NewCxlTier({.path = path, .capacity_bytes = 8u << 20});
  ASSERT_TRUE(tier.ok()) << tier.status().ToString();
  ASSERT_TRUE(MemoryTierPrefaultsForTesting(tier->get()));
  ASSERT_TRUE(WaitForMemoryTierPrefaultForTesting(tier->get(), 30s));
  const std::span<const std::byte> region = MemoryTierRegionForTesting(tier->get());
  EXPECT_EQ(ResidentPages(region), region.size() / static_cast<std::size_t>(sysconf(_SC_PAGESIZE)));
  tier->reset();
  std::remove(path.c_str());
}

}  // namespace
}  // namespace kvtier
