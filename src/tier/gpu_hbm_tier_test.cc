// The GPU HBM tier. The first tests run everywhere (no GPU: the factory must fail cleanly);
// the GpuHbmTierOnDevice tests need a CUDA GPU and skip, saying so, where none answers.
#include "tier/gpu_hbm_tier.h"

#include <algorithm>
#include <atomic>
#include <thread>

#include <gtest/gtest.h>

#include "kvtier/tiers.h"
#include "port/cuda_device.h"
#include "tier/memory_region.h"

namespace kvtier {
namespace {

bool GpuPresent() {
  Result<std::vector<port::GpuDevice>> gpus = port::ListGpus();
  return gpus.ok() && !gpus->empty();
}

std::vector<std::byte> Payload(std::size_t size, uint8_t seed) {
  std::vector<std::byte> bytes(size);
  for (std::size_t i = 0; i < size; ++i) bytes[i] = static_cast<std::byte>((i * 131 + seed) & 0xff);
  return bytes;
}

BlockKey Key(uint64_t n) { return {n * 0x9E3779B97F4A7C15ull, n + 1}; }

TEST(GpuHbmTier, FactoryFailsCleanlyWithoutAGpu) {
  Result<std::unique_ptr<Tier>> tier = NewGpuHbmTier({.capacity_bytes = 4u << 20});
  if (!port::BuiltWithCuda()) {
    ASSERT_FALSE(tier.ok());
    EXPECT_EQ(tier.status().code(), StatusCode::kUnsupported) << tier.status().ToString();
    EXPECT_NE(tier.status().message().find("without CUDA"), std::string::npos) << tier.status().message();
  } else if (!GpuPresent()) {
    ASSERT_FALSE(tier.ok());
    EXPECT_EQ(tier.status().code(), StatusCode::kUnavailable) << tier.status().ToString();
  } else {
    ASSERT_TRUE(tier.ok()) << tier.status().ToString();
    EXPECT_EQ((*tier)->kind(), TierKind::kGpuHbm);
    EXPECT_EQ((*tier)->GetStats().capacity_bytes, 4u << 20);
  }
}

TEST(GpuHbmTier, OptionsAreValidatedBeforeAnyDeviceIsTouched) {
  const auto code = [](const GpuHbmTierOptions& options) { return NewGpuHbmTier(options).status().code(); };
  EXPECT_EQ(code({.capacity_bytes = 0}), StatusCode::kInvalidArgument);
  EXPECT_EQ(code({.device = -1, .capacity_bytes = 1u << 20}), StatusCode::kInvalidArgument);
  EXPECT_EQ(code({.capacity_bytes = 1u << 20, .streams = 0}), StatusCode::kInvalidArgument);
  EXPECT_EQ(code({.capacity_bytes = 1u << 20, .streams = 17}), StatusCode::kInvalidArgument);
  EXPECT_EQ(code({.capacity_bytes = 1u << 20, .staging_bytes = 4096}), StatusCode::kInvalidArgument);
  EXPECT_EQ(code({.capacity_bytes = 1u << 20, .staging_bytes = uint64_t{2} << 30}), StatusCode::kInvalidArgument);
  EXPECT_TRUE(GpuHbmTierOptions{.capacity_bytes = 1}.Validate().ok());
}

TEST(GpuHbmTier, DeviceAccessRefusesOtherTiers) {
  Result<std::unique_ptr<Tier>> dram = NewDramTier({.capacity_bytes = 2u << 20, .lock_memory = false});
  ASSERT_TRUE(dram.ok()) << dram.status().ToString();
  ASSERT_TRUE((*dram)->Write(Key(1), Payload(4096, 1)).ok());
  const StatusCode code = DeviceLocation(dram->get(), Key(1)).status().code();
  EXPECT_EQ(code, port::BuiltWithCuda() ? StatusCode::kInvalidArgument : StatusCode::kUnsupported);
  EXPECT_FALSE(CorruptGpuBlockForTesting(dram->get(), Key(1)));
}

// DramTierOptions::pin_for_gpu: the region is page-locked exactly where a GPU answers.
TEST(GpuHbmTier, DramRegionIsPinnedOnlyWhereAGpuAnswers) {
  Result<std::unique_ptr<MemoryRegion>> region =
      MemoryRegion::Create({.capacity_bytes = 2u << 20, .lock_memory = false, .pin_for_gpu = true});
  ASSERT_TRUE(region.ok()) << region.status().ToString();
  EXPECT_EQ((*region)->pinned_for_gpu(), GpuPresent());
  Result<std::unique_ptr<MemoryRegion>> unpinned =
      MemoryRegion::Create({.capacity_bytes = 2u << 20, .lock_memory = false});
  ASSERT_TRUE(unpinned.ok());
  EXPECT_FALSE((*unpinned)->pinned_for_gpu());
}

class GpuHbmTierOnDevice : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!GpuPresent()) {
      GTEST_SKIP() << "no CUDA GPU answers here (" << port::ListGpus().status().message()
                   << "); scripts/gpu_check.sh runs these tests on a GPU machine";
    }
  }

  // A small staging buffer (64 KiB: 32 KiB chunks) so that most blocks take many chunks.
  static std::unique_ptr<Tier> Make(uint64_t capacity, int streams = 2, uint64_t staging = 64u << 10) {
    Result<std::unique_ptr<Tier>> tier =
        NewGpuHbmTier({.capacity_bytes = capacity, .streams = streams, .staging_bytes = staging});
    EXPECT_TRUE(tier.ok()) << tier.status().ToString();
    return tier.ok() ? std::move(*tier) : nullptr;
  }

  static std::vector<std::byte> ReadAll(Tier& tier, const BlockKey& key) {
    std::vector<std::byte> out(tier.Size(key).value_or(0));
    Result<std::size_t> n = tier.Read(key, out);
    EXPECT_TRUE(n.ok()) << n.status().ToString();
    return out;
  }
};

TEST_F(GpuHbmTierOnDevice, RoundTripsBlocksOf4KiBTo4MiB) {
  for (uint64_t staging : {uint64_t{64} << 10, uint64_t{8} << 20}) {
    std::unique_ptr<Tier> tier = Make(32u << 20, 2, staging);
    ASSERT_NE(tier, nullptr);
    uint64_t n = 0;
    for (std::size_t size : {std::size_t{4096}, std::size_t{4097}, std::size_t{65536}, std::size_t{1000003},
                             std::size_t{1} << 20, std::size_t{4} << 20}) {
      const auto payload = Payload(size, static_cast<uint8_t>(n));
      ASSERT_TRUE(tier->Write(Key(n), payload).ok()) << size;
      EXPECT_EQ(tier->Size(Key(n)), size);
      EXPECT_EQ(ReadAll(*tier, Key(n)), payload) << size << " bytes, staging " << staging;
      ++n;
    }
    EXPECT_EQ(tier->GetStats().blocks, n);
    EXPECT_EQ(tier->GetStats().checksum_failures, 0u);
  }
}

TEST_F(GpuHbmTierOnDevice, ReplaceAndEvict) {
  std::unique_ptr<Tier> tier = Make(8u << 20);
  ASSERT_NE(tier, nullptr);
  const auto a = Payload(300000, 1), b = Payload(5000, 2);
  ASSERT_TRUE(tier->Write(Key(1), a).ok());
  ASSERT_TRUE(tier->Write(Key(1), b).ok());
  EXPECT_EQ(ReadAll(*tier, Key(1)), b);
  EXPECT_EQ(tier->GetStats().used_bytes, b.size());
  ASSERT_TRUE(tier->Evict(Key(1)).ok());
  EXPECT_EQ(tier->Evict(Key(1)).code(), StatusCode::kNotFound);
  std::vector<std::byte> out(8);
  EXPECT_EQ(tier->Read(Key(1), out).status().code(), StatusCode::kNotFound);
  const TierStats stats = tier->GetStats();
  EXPECT_EQ(stats.blocks, 0u);
  EXPECT_EQ(stats.used_bytes, 0u);
  EXPECT_EQ(stats.evictions, 1u);
  EXPECT_EQ(stats.read_misses, 1u);
}

TEST_F(GpuHbmTierOnDevice, FullTierRefusesWithResourceExhausted) {
  std::unique_ptr<Tier> tier = Make(4u << 20);
  ASSERT_NE(tier, nullptr);
  const auto block = Payload(1u << 20, 3);
  for (uint64_t i = 0; i < 4; ++i) ASSERT_TRUE(tier->Write(Key(i), block).ok()) << i;
  EXPECT_EQ(tier->Write(Key(4), block).code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(tier->Write(Key(0), Payload(1u << 20, 9)).code(), StatusCode::kResourceExhausted);  // replace: no room
  EXPECT_EQ(ReadAll(*tier, Key(0)), block);
  EXPECT_EQ(tier->GetStats().write_failures, 2u);
  ASSERT_TRUE(tier->Evict(Key(1)).ok());
  EXPECT_TRUE(tier->Write(Key(4), block).ok());
}

TEST_F(GpuHbmTierOnDevice, CorruptedBlockIsDroppedNeverReturned) {
  std::unique_ptr<Tier> tier = Make(4u << 20);
  ASSERT_NE(tier, nullptr);
  ASSERT_TRUE(tier->Write(Key(1), Payload(200000, 4)).ok());
  ASSERT_TRUE(CorruptGpuBlockForTesting(tier.get(), Key(1)));
  std::vector<std::byte> out(200000, std::byte{0});
  EXPECT_EQ(tier->Read(Key(1), out).status().code(), StatusCode::kCorruption);
  // Issue 18, hole 8: none of the bytes that failed the check are left in the buffer.
  EXPECT_TRUE(std::ranges::all_of(out, [](std::byte b) { return b == std::byte{0}; }));
  EXPECT_EQ(tier->Size(Key(1)), std::nullopt);
  EXPECT_EQ(tier->GetStats().checksum_failures, 1u);
  EXPECT_EQ(tier->GetStats().used_bytes, 0u);
}

// Writers replace one key with versions whose every byte equals the version, over many
// chunks; readers must always see exactly one version.
TEST_F(GpuHbmTierOnDevice, ConcurrentWritersAndReadersOfOneKeyNeverSeeTornData) {
  constexpr std::size_t kSize = 1u << 20;  // 32 chunks of 32 KiB
  std::unique_ptr<Tier> tier = Make(32u << 20, 2);
  ASSERT_NE(tier, nullptr);
  ASSERT_TRUE(tier->Write(Key(7), std::vector<std::byte>(kSize, std::byte{0})).ok());
  std::atomic<bool> done{false};
  std::atomic<int> torn{0}, good{0}, failed{0};
  auto reader = [&] {
    std::vector<std::byte> out(kSize);
    while (!done.load()) {
      Result<std::size_t> n = tier->Read(Key(7), out);
      if (!n.ok()) {
        failed.fetch_add(1);
        continue;
      }
      const std::byte first = out[0];
      (std::all_of(out.begin(), out.end(), [&](std::byte b) { return b == first; }) ? good : torn).fetch_add(1);
    }
  };
  auto writer = [&](int first_version) {
    for (int v = first_version; v < first_version + 100; ++v) {
      if (!tier->Write(Key(7), std::vector<std::byte>(kSize, static_cast<std::byte>(v))).ok()) failed.fetch_add(1);
    }
  };
  std::thread r1(reader), r2(reader), w1(writer, 1), w2(writer, 101);
  w1.join();
  w2.join();
  done = true;
  r1.join();
  r2.join();
  EXPECT_EQ(torn.load(), 0);
  EXPECT_EQ(failed.load(), 0);
  EXPECT_GT(good.load(), 0);
  EXPECT_EQ(tier->GetStats().blocks, 1u);
  EXPECT_EQ(tier->GetStats().used_bytes, kSize);
}

TEST_F(GpuHbmTierOnDevice, BatchesSpreadOverStreams) {
  std::unique_ptr<Tier> tier = Make(64u << 20, 4);
  ASSERT_NE(tier, nullptr);
  std::vector<std::vector<std::byte>> payloads;
  for (uint8_t i = 0; i < 32; ++i) payloads.push_back(Payload(512 * 1024 + i, i));
  std::vector<Tier::WriteOp> writes;
  for (uint8_t i = 0; i < 32; ++i) writes.push_back({Key(100 + i), payloads[i]});
  const std::vector<std::byte> later = Payload(7000, 77);
  writes.push_back({Key(100), later});   // the same key twice in one batch: the later one wins
  writes.push_back({Key(999), {}});      // invalid, without failing the others
  const std::vector<Status> written = tier->WriteBatch(writes);
  ASSERT_EQ(written.size(), writes.size());
  for (std::size_t i = 0; i + 1 < written.size(); ++i) EXPECT_TRUE(written[i].ok()) << i << written[i].ToString();
  EXPECT_EQ(written.back().code(), StatusCode::kInvalidArgument);

  std::vector<std::vector<std::byte>> outs(34, std::vector<std::byte>(600 * 1024));
  std::vector<Tier::ReadOp> reads;
  for (uint8_t i = 0; i < 32; ++i) reads.push_back({Key(100 + i), outs[i]});
  reads.push_back({Key(555), outs[32]});                            // a miss
  reads.push_back({Key(101), std::span(outs[33]).first(1000)});     // too small a buffer
  const auto results = tier->ReadBatch(reads);
  ASSERT_EQ(results.size(), reads.size());
  ASSERT_TRUE(results[0].ok());
  EXPECT_EQ(*results[0], later.size());
  EXPECT_TRUE(std::equal(later.begin(), later.end(), outs[0].begin()));
  for (uint8_t i = 1; i < 32; ++i) {
    ASSERT_TRUE(results[i].ok()) << int{i} << results[i].status().ToString();
    EXPECT_EQ(*results[i], payloads[i].size());
    EXPECT_TRUE(std::equal(payloads[i].begin(), payloads[i].end(), outs[i].begin())) << int{i};
  }
  EXPECT_EQ(results[32].status().code(), StatusCode::kNotFound);
  EXPECT_EQ(results[33].status().code(), StatusCode::kInvalidArgument);
}

TEST_F(GpuHbmTierOnDevice, ManyThreadsOnDistinctKeys) {
  std::unique_ptr<Tier> tier = Make(64u << 20, 2);
  ASSERT_NE(tier, nullptr);
  std::atomic<int> errors{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 6; ++t) {
    threads.emplace_back([&, t] {
      for (uint64_t i = 0; i < 40; ++i) {
        const BlockKey key = Key(1000 + static_cast<uint64_t>(t) * 100 + i);
        const auto payload = Payload(100000 + i, static_cast<uint8_t>(t));
        if (!tier->Write(key, payload).ok()) errors.fetch_add(1);
        std::vector<std::byte> out(payload.size());
        if (Result<std::size_t> n = tier->Read(key, out); !n.ok() || out != payload) errors.fetch_add(1);
        if (i % 2 == 0 && !tier->Evict(key).ok()) errors.fetch_add(1);
      }
    });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(errors.load(), 0);
  EXPECT_EQ(tier->GetStats().blocks, 120u);
}

// An engine's DeviceSpan keeps the bytes from reuse after the block is evicted.
TEST_F(GpuHbmTierOnDevice, DeviceSpanHoldsItsSlotPastEviction) {
  std::unique_ptr<Tier> tier = Make(2u << 20);
  ASSERT_NE(tier, nullptr);
  const auto block = Payload(1u << 20, 5);
  ASSERT_TRUE(tier->Write(Key(1), block).ok());
  Result<DeviceSpan> span = DeviceLocation(tier.get(), Key(1));
  ASSERT_TRUE(span.ok()) << span.status().ToString();
  EXPECT_NE(span->data, nullptr);
  EXPECT_EQ(span->size, block.size());
  EXPECT_EQ(span->checksum, PayloadChecksum(block));
  EXPECT_EQ(DeviceLocation(tier.get(), Key(2)).status().code(), StatusCode::kNotFound);
  ASSERT_TRUE(tier->Evict(Key(1)).ok());
  ASSERT_TRUE(tier->Write(Key(2), block).ok());
  EXPECT_EQ(tier->Write(Key(3), block).code(), StatusCode::kResourceExhausted);  // Key(1)'s slot is still held
  span = Status::NotFound("released");
  EXPECT_TRUE(tier->Write(Key(3), block).ok());
}

}  // namespace
}  // namespace kvtier
