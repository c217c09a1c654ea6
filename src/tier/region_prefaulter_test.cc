#include "tier/region_prefaulter.h"

#include <sys/mman.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <vector>

#include <gtest/gtest.h>

namespace kvtier {
namespace {

using namespace std::chrono_literals;

// An anonymous mapping of small pages (no THP, so that residency is per 4 KiB page).
class Mapping {
 public:
  explicit Mapping(std::size_t bytes) : bytes_(bytes) {
    void* memory = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    data_ = memory == MAP_FAILED ? nullptr : static_cast<std::byte*>(memory);
    if (data_ != nullptr) (void)madvise(data_, bytes, MADV_NOHUGEPAGE);
  }
  ~Mapping() {
    if (data_ != nullptr) munmap(data_, bytes_);
  }
  std::byte* data() const { return data_; }
  std::size_t bytes() const { return bytes_; }

 private:
  std::byte* data_;
  std::size_t bytes_;
};

std::size_t ResidentPages(const std::byte* data, std::size_t bytes) {
  const auto page = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
  std::vector<unsigned char> in_core((bytes + page - 1) / page);
  if (mincore(const_cast<std::byte*>(data), bytes, in_core.data()) != 0) return 0;
  std::size_t resident = 0;
  for (unsigned char flags : in_core) resident += flags & 1;
  return resident;
}

TEST(RegionPrefaulter, PopulateWriteMakesTheWholeRegionResident) {
  Mapping region(24u << 20);
  ASSERT_NE(region.data(), nullptr);
  ASSERT_EQ(ResidentPages(region.data(), region.bytes()), 0u);
  RegionPrefaulter prefaulter(region.data(), region.bytes());
  ASSERT_TRUE(prefaulter.WaitFor(30s));
  EXPECT_EQ(prefaulter.prefaulted_bytes(), region.bytes());
  EXPECT_EQ(ResidentPages(region.data(), region.bytes()), region.bytes() / static_cast<std::size_t>(sysconf(_SC_PAGESIZE)));
}

// The fallback for kernels without MADV_POPULATE_WRITE: resident, and no byte changed.
TEST(RegionPrefaulter, LockFallbackMakesTheRegionResidentAndKeepsItsBytes) {
  Mapping region((8u << 20) + 4096);  // not a whole number of chunks
  ASSERT_NE(region.data(), nullptr);
  std::memset(region.data() + (1u << 20), 0x5a, 3 * 4096);
  RegionPrefaulter prefaulter(region.data(), region.bytes(), PrefaultMethod::kLockPages);
  ASSERT_TRUE(prefaulter.WaitFor(30s));
  EXPECT_EQ(prefaulter.prefaulted_bytes(), region.bytes());
  EXPECT_EQ(ResidentPages(region.data(), region.bytes()), region.bytes() / static_cast<std::size_t>(sysconf(_SC_PAGESIZE)));
  for (std::size_t i = 0; i < region.bytes(); ++i) {
    const bool written = i >= (1u << 20) && i < (1u << 20) + 3 * 4096;
    ASSERT_EQ(region.data()[i], written ? std::byte{0x5a} : std::byte{0}) << "byte " << i;
  }
}

// Writers filling the region while it is prefaulted (as puts do before the pass ends) keep
// every byte they wrote, on both paths; under TSan this is also the race check.
TEST(RegionPrefaulter, ConcurrentWritesSurviveThePass) {
  for (const PrefaultMethod method : {PrefaultMethod::kPopulateWrite, PrefaultMethod::kLockPages}) {
    Mapping region(32u << 20);
    ASSERT_NE(region.data(), nullptr);
    const std::size_t half = region.bytes() / 2;
    {
      RegionPrefaulter prefaulter(region.data() + half, half, method);
      for (std::size_t offset = 0; offset < half; offset += 4096) {
        std::memset(region.data() + half + offset, 0x33, 4096);
      }
      ASSERT_TRUE(prefaulter.WaitFor(30s));
    }
    for (std::size_t i = half; i < region.bytes(); i += 997) ASSERT_EQ(region.data()[i], std::byte{0x33}) << i;
  }
}

TEST(RegionPrefaulter, DestroyingItDuringThePassReturnsPromptly) {
  Mapping region(std::size_t{8} << 30);  // seconds of work: MAP_NORESERVE maps it for free
  ASSERT_NE(region.data(), nullptr);
  const auto start = std::chrono::steady_clock::now();
  uint64_t prefaulted = 0;
  {
    RegionPrefaulter prefaulter(region.data(), region.bytes());
    std::this_thread::sleep_for(5ms);
    prefaulted = prefaulter.prefaulted_bytes();
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, 500ms);
  EXPECT_LT(prefaulted, region.bytes());
}

}  // namespace
}  // namespace kvtier
