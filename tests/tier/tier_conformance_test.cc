// The contract of tier.h, checked on every tier implementation (and on the FaultyTier
// decorator with no faults armed, which must be transparent).
#include <atomic>
#include <filesystem>
#include <future>
#include <thread>

#include <gtest/gtest.h>

#include <numa.h>

#include "kvtier/tiers.h"
#include "testing/faulty_tier.h"
#include "testing/redis_server.h"

namespace kvtier {
namespace {

constexpr uint64_t kCapacity = 8u << 20;  // every tier under test holds 8 MiB

struct TierFactory {
  const char* name;
  std::function<std::unique_ptr<Tier>(const std::string& scratch_dir)> make;
};
// Names the tier in test listings (instead of the factory's bytes).
void PrintTo(const TierFactory& factory, std::ostream* os) { *os << factory.name; }


// Set by a factory that cannot make its tier on this machine or build (no GPU, say): the
// tests of that factory are skipped with this reason instead of failing.
std::string factory_skip_reason;

// The GPU tier where a CUDA device answers; elsewhere a skip (Unsupported without CUDA,
// Unavailable without a GPU or driver). 1 MiB staging, so that blocks cross several chunks.
std::unique_ptr<Tier> MakeGpuHbm(const std::string&) {
  Result<std::unique_ptr<Tier>> tier = NewGpuHbmTier({.capacity_bytes = kCapacity, .staging_bytes = 1u << 20});
  if (tier.ok()) return std::move(*tier);
  const StatusCode code = tier.status().code();
  EXPECT_TRUE(code == StatusCode::kUnsupported || code == StatusCode::kUnavailable) << tier.status().ToString();
  factory_skip_reason = "no GPU HBM tier here: " + tier.status().ToString();
  return nullptr;
}

std::unique_ptr<Tier> MakeDram(const std::string&) {
  Result<std::unique_ptr<Tier>> tier = NewDramTier({.capacity_bytes = kCapacity, .lock_memory = false});
  EXPECT_TRUE(tier.ok()) << tier.status().ToString();
  return tier.ok() ? std::move(*tier) : nullptr;
}

// The remote pool as the tests can have it: a hash ring over one redis-server, started on
// first use for the whole test binary (and killed at exit); each test gets its own key prefix.
std::unique_ptr<Tier> MakeRemoteRing(const std::string& dir) {
  static const Result<std::unique_ptr<testing::RedisServers>> server = testing::RedisServers::StartStandalone(1);
  EXPECT_TRUE(server.ok()) << server.status().ToString();
  if (!server.ok()) return nullptr;
  Result<std::unique_ptr<Tier>> tier = NewRemoteTier({.topology = RemoteTopology::kHashRing,
                                                      .endpoints = (*server)->endpoints(),
                                                      .capacity_bytes = kCapacity,
                                                      .key_prefix = std::filesystem::path(dir).filename().string() + ":"});
  EXPECT_TRUE(tier.ok()) << tier.status().ToString();
  return tier.ok() ? std::move(*tier) : nullptr;
}

std::vector<TierFactory> Factories() {
  std::vector<TierFactory> factories = {
      {"Dram", MakeDram},
      {"GpuHbm", MakeGpuHbm},
      {"FaultyTierOverDram", [](const std::string& dir) -> std::unique_ptr<Tier> {
         return std::make_unique<testing::FaultyTier>(MakeDram(dir));
       }},
      {"ParallelFsDirectory", [](const std::string& dir) -> std::unique_ptr<Tier> {
         Result<std::unique_ptr<Tier>> tier =
             NewParallelFsTier({.directory = dir + "/pfs", .capacity_bytes = kCapacity, .fsync = FsyncPolicy::kNever});
         EXPECT_TRUE(tier.ok()) << tier.status().ToString();
         return tier.ok() ? std::move(*tier) : nullptr;
       }},
      // CXL memory as the tests can have it: a file in /dev/shm (tmpfs) bound to node 0.
      {"CxlOnDevShm", [](const std::string& dir) -> std::unique_ptr<Tier> {
         const std::string path = "/dev/shm/kvtier-cxl-test-" + std::filesystem::path(dir).filename().string();
         Result<std::unique_ptr<Tier>> tier =
             NewCxlTier({.path = path, .capacity_bytes = kCapacity, .numa_node = numa_available() < 0 ? -1 : 0});
         std::filesystem::remove(path);  // the mapping keeps the memory until the tier goes
         EXPECT_TRUE(tier.ok()) << tier.status().ToString();
         return tier.ok() ? std::move(*tier) : nullptr;
       }},
      // NVMe as the tests can have it: two slot files in the scratch directory (O_DIRECT
      // where the filesystem allows it), through io_uring where the kernel allows it.
      {"NvmeFiles", [](const std::string& dir) -> std::unique_ptr<Tier> {
         Result<std::unique_ptr<Tier>> tier =
             NewNvmeTier({.files = {dir + "/nvme0.slots", dir + "/nvme1.slots"}, .capacity_bytes = kCapacity});
         EXPECT_TRUE(tier.ok()) << tier.status().ToString();
         return tier.ok() ? std::move(*tier) : nullptr;
       }},
  };
  if (testing::RedisServers::Available()) factories.push_back({"RemoteRingOnRedisServer", MakeRemoteRing});
  return factories;
}

std::vector<std::byte> Payload(std::size_t size, uint8_t seed) {
  std::vector<std::byte> bytes(size);
  for (std::size_t i = 0; i < size; ++i) bytes[i] = static_cast<std::byte>((i * 131 + seed) & 0xff);
  return bytes;
}

BlockKey Key(uint64_t n) { return {n * 0x9E3779B97F4A7C15ull, n + 1}; }

class TierConformance : public ::testing::TestWithParam<TierFactory> {
 protected:
  void SetUp() override {
    dir_ = (std::filesystem::path(::testing::TempDir()) /
            ("kvtier-tier-" + std::to_string(::getpid()) + "-" + std::to_string(counter_++)))
               .string();
    std::filesystem::create_directories(dir_);
    factory_skip_reason.clear();
    tier_ = GetParam().make(dir_);
    if (tier_ == nullptr && !factory_skip_reason.empty()) GTEST_SKIP() << factory_skip_reason;
    ASSERT_NE(tier_, nullptr);
  }
  void TearDown() override {
    tier_.reset();
    std::filesystem::remove_all(dir_);
  }

  std::vector<std::byte> ReadAll(const BlockKey& key) {
    std::vector<std::byte> out(tier_->Size(key).value_or(0));
    Result<std::size_t> n = tier_->Read(key, out);
    EXPECT_TRUE(n.ok()) << n.status().ToString();
    return out;
  }

  static inline int counter_ = 0;
  std::string dir_;
  std::unique_ptr<Tier> tier_;
};

TEST_P(TierConformance, WriteReadReplaceEvict) {
  const auto a = Payload(65536, 1), b = Payload(4000, 2);
  ASSERT_TRUE(tier_->Write(Key(1), a).ok());
  EXPECT_EQ(tier_->Size(Key(1)), a.size());
  EXPECT_EQ(ReadAll(Key(1)), a);
  ASSERT_TRUE(tier_->Write(Key(1), b).ok());  // replace, with another size
  EXPECT_EQ(ReadAll(Key(1)), b);
  ASSERT_TRUE(tier_->Evict(Key(1)).ok());
  EXPECT_EQ(tier_->Size(Key(1)), std::nullopt);
  EXPECT_EQ(tier_->Evict(Key(1)).code(), StatusCode::kNotFound);
  const TierStats stats = tier_->GetStats();
  EXPECT_EQ(stats.blocks, 0u);
  EXPECT_EQ(stats.used_bytes, 0u);
  EXPECT_EQ(stats.writes, 2u);
  EXPECT_EQ(stats.evictions, 1u);
}

TEST_P(TierConformance, MissesAndBadBuffers) {
  std::vector<std::byte> out(1024);
  EXPECT_EQ(tier_->Read(Key(7), out).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(tier_->GetStats().read_misses, 1u);
  const auto a = Payload(2048, 3);
  ASSERT_TRUE(tier_->Write(Key(7), a).ok());
  std::vector<std::byte> small(2047, std::byte{0x5a});
  EXPECT_EQ(tier_->Read(Key(7), small).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(small, std::vector<std::byte>(2047, std::byte{0x5a}));  // nothing copied
  EXPECT_EQ(tier_->Write(Key(8), {}).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ReadAll(Key(7)), a);
}

TEST_P(TierConformance, FullTierRefusesAndKeepsEarlierBlocks) {
  const auto block = Payload(1u << 20, 4);
  uint64_t stored = 0;
  Status last;
  for (uint64_t i = 0; i < 64 && (last = tier_->Write(Key(100 + i), block)).ok(); ++i) ++stored;
  EXPECT_EQ(last.code(), StatusCode::kResourceExhausted) << last.ToString();
  EXPECT_GE(stored, 4u);
  for (uint64_t i = 0; i < stored; ++i) EXPECT_EQ(ReadAll(Key(100 + i)), block) << i;
  // A failed replacement leaves the old block readable.
  const auto big = Payload(6u << 20, 5);
  EXPECT_FALSE(tier_->Write(Key(100), big).ok());
  EXPECT_EQ(ReadAll(Key(100)), block);
  // Room comes back after eviction.
  ASSERT_TRUE(tier_->Evict(Key(100)).ok());
  EXPECT_TRUE(tier_->Write(Key(999), block).ok());
}

TEST_P(TierConformance, Batches) {
  std::vector<std::vector<std::byte>> payloads;
  std::vector<Tier::WriteOp> writes;
  for (uint8_t i = 0; i < 8; ++i) payloads.push_back(Payload(8192 + i, i));
  for (uint8_t i = 0; i < 8; ++i) writes.push_back({Key(200 + i), payloads[i]});
  for (const Status& s : tier_->WriteBatch(writes)) EXPECT_TRUE(s.ok()) << s.ToString();
  std::vector<std::vector<std::byte>> outs(9, std::vector<std::byte>(9000));
  std::vector<Tier::ReadOp> reads;
  for (uint8_t i = 0; i < 9; ++i) reads.push_back({Key(200 + i), outs[i]});
  const auto results = tier_->ReadBatch(reads);
  for (uint8_t i = 0; i < 8; ++i) {
    ASSERT_TRUE(results[i].ok());
    EXPECT_TRUE(std::equal(payloads[i].begin(), payloads[i].end(), outs[i].begin()));
  }
  EXPECT_EQ(results[8].status().code(), StatusCode::kNotFound);
}

// End-to-end checksums (issue 18): the tier keeps the writer's checksum, and bytes that do not
// match it (changed after the writer hashed them) are refused, one op of a batch alone, with
// an earlier block of the key left readable.
TEST_P(TierConformance, WriterChecksumsAreCheckedAndKept) {
  const auto a = Payload(20000, 9), b = Payload(20000, 10);
  ASSERT_TRUE(tier_->Write({.key = Key(400), .payload = a, .checksum = PayloadChecksum(a)}).ok());
  EXPECT_EQ(ReadAll(Key(400)), a);
  const Status refused = tier_->Write({.key = Key(400), .payload = b, .checksum = PayloadChecksum(a)});
  EXPECT_EQ(refused.code(), StatusCode::kCorruption) << refused.ToString();
  EXPECT_EQ(ReadAll(Key(400)), a);
  const std::vector<Tier::WriteOp> writes = {{Key(401), b, PayloadChecksum(a)}, {Key(402), b, PayloadChecksum(b)}};
  const std::vector<Status> results = tier_->WriteBatch(writes);
  EXPECT_EQ(results[0].code(), StatusCode::kCorruption);
  EXPECT_TRUE(results[1].ok()) << results[1].ToString();
  EXPECT_EQ(tier_->Size(Key(401)), std::nullopt);
  EXPECT_EQ(ReadAll(Key(402)), b);
  EXPECT_GE(tier_->GetStats().write_failures, 2u);
  // Reads hand back the checksum the copied bytes matched: the writer's.
  std::vector<std::byte> out(a.size()), batch_out(b.size());
  uint64_t stored = 0, batch_stored = 0;
  ASSERT_TRUE(tier_->Read({.key = Key(400), .out = out, .checksum = &stored}).ok());
  EXPECT_EQ(stored, PayloadChecksum(a));
  const std::vector<Tier::ReadOp> reads = {{Key(402), batch_out, &batch_stored}};
  ASSERT_TRUE(tier_->ReadBatch(reads)[0].ok());
  EXPECT_EQ(batch_stored, PayloadChecksum(b));
}

TEST_P(TierConformance, AsynchronousBatchesByFutureAndCallback) {
  std::vector<std::vector<std::byte>> payloads;
  std::vector<Tier::WriteOp> writes;
  for (uint8_t i = 0; i < 8; ++i) payloads.push_back(Payload(12288 + i, static_cast<uint8_t>(i + 40)));
  for (uint8_t i = 0; i < 8; ++i) writes.push_back({Key(300 + i), payloads[i]});
  for (const Status& s : tier_->WriteBatchAsync(writes).get()) EXPECT_TRUE(s.ok()) << s.ToString();

  std::vector<std::vector<std::byte>> outs(9, std::vector<std::byte>(13000));
  std::vector<Tier::ReadOp> reads;
  for (uint8_t i = 0; i < 9; ++i) reads.push_back({Key(300 + i), outs[i]});
  std::promise<std::vector<Result<std::size_t>>> delivered;
  std::atomic<int> callbacks{0};
  tier_->SubmitReadBatch(reads, [&](std::vector<Result<std::size_t>> results) {
    callbacks.fetch_add(1);
    delivered.set_value(std::move(results));
  });
  const std::vector<Result<std::size_t>> results = delivered.get_future().get();
  ASSERT_EQ(results.size(), 9u);
  for (uint8_t i = 0; i < 8; ++i) {
    ASSERT_TRUE(results[i].ok()) << results[i].status().ToString();
    EXPECT_EQ(*results[i], payloads[i].size());
    EXPECT_TRUE(std::equal(payloads[i].begin(), payloads[i].end(), outs[i].begin()));
  }
  EXPECT_EQ(results[8].status().code(), StatusCode::kNotFound);
  EXPECT_EQ(callbacks.load(), 1);
}

// A writer replaces one block with versions whose every byte equals the version; readers
// must always see a single version.
TEST_P(TierConformance, ConcurrentWriterAndReadersNeverSeeATornBlock) {
  constexpr std::size_t kSize = 256 * 1024;
  ASSERT_TRUE(tier_->Write(Key(300), std::vector<std::byte>(kSize, std::byte{0})).ok());
  std::atomic<bool> done{false};
  std::atomic<int> torn{0}, good{0};
  auto reader = [&] {
    std::vector<std::byte> out(kSize);
    while (!done.load()) {
      Result<std::size_t> n = tier_->Read(Key(300), out);
      if (!n.ok()) continue;
      const std::byte first = out[0];
      if (std::any_of(out.begin(), out.end(), [&](std::byte b) { return b != first; })) {
        torn.fetch_add(1);
      } else {
        good.fetch_add(1);
      }
    }
  };
  std::thread r1(reader), r2(reader);
  for (int version = 1; version <= 200; ++version) {
    ASSERT_TRUE(tier_->Write(Key(300), std::vector<std::byte>(kSize, static_cast<std::byte>(version))).ok());
  }
  // On a loaded machine the readers may not have run yet: give them time to read once.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (good.load() + torn.load() == 0 && std::chrono::steady_clock::now() < deadline) std::this_thread::yield();
  done = true;
  r1.join();
  r2.join();
  EXPECT_EQ(torn.load(), 0);
  EXPECT_GT(good.load(), 0);
}

TEST_P(TierConformance, ConcurrentDistinctKeys) {
  std::vector<std::thread> threads;
  std::atomic<int> errors{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (uint64_t i = 0; i < 50; ++i) {
        const BlockKey key = Key(1000 + static_cast<uint64_t>(t) * 100 + i);
        const auto payload = Payload(16384, static_cast<uint8_t>(i));
        if (!tier_->Write(key, payload).ok()) errors.fetch_add(1);
        std::vector<std::byte> out(payload.size());
        Result<std::size_t> n = tier_->Read(key, out);
        if (!n.ok() || out != payload) errors.fetch_add(1);
        if (i % 2 == 0 && !tier_->Evict(key).ok()) errors.fetch_add(1);
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(errors.load(), 0);
  EXPECT_EQ(tier_->GetStats().blocks, 100u);
}

INSTANTIATE_TEST_SUITE_P(AllTiers, TierConformance, ::testing::ValuesIn(Factories()),
                         [](const auto& param_info) { return std::string(param_info.param.name); });

}  // namespace
}  // namespace kvtier
