// Crash test for the NVMe tier: a child process writes (and now and then evicts) blocks in a
// loop, reporting each acknowledged write on a pipe, and is SIGKILLed at a random moment
// (seeded). The tier reopened on the same files must return every block the child reported
// with its exact bytes, and never return bytes that are not a block's.
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <map>
#include <random>
#include <thread>

#include <gtest/gtest.h>

#include "testing/killed_child.h"
#include "tier/nvme_tier.h"

namespace kvtier {
namespace {

constexpr int kRounds = 8;
constexpr uint64_t kKeysPerRound = 100000;  // bounds a child the parent fails to kill

BlockKey Key(uint64_t n) { return {n * 0x9E3779B97F4A7C15ull, n + 1}; }

// Block n's bytes: its size and content are functions of n, so any returned block is checkable.
std::vector<std::byte> Payload(uint64_t n) {
  std::vector<std::byte> bytes(4096 * (1 + n % 6) + n % 1000);
  for (std::size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<std::byte>((i * 131 + n * 7) & 0xff);
  return bytes;
}

enum State : uint8_t { kStored = 0, kEvicted = 1, kEvicting = 2 };
struct Report {
  uint64_t key = 0;
  State state = kStored;
};

[[noreturn]] void WriteUntilKilled(const NvmeTierOptions& options, uint64_t first, int report_fd) {
  Result<std::unique_ptr<NvmeTier>> tier = NvmeTier::Open(options);
  if (!tier.ok()) ::_exit(2);
  for (uint64_t n = first; n < first + kKeysPerRound; ++n) {
    if (n % 7 == 3 && n > first) {  // evict an earlier key of this round now and then
      const uint64_t victim = n - 1;
      // Announced first: a kill between the eviction and its report leaves either state.
      testing::SendReport(report_fd, Report{victim, kEvicting});
      if ((*tier)->Evict(Key(victim)).ok()) testing::SendReport(report_fd, Report{victim, kEvicted});
    }
    const Status s = (*tier)->Write(Key(n), Payload(n));
    if (s.code() == StatusCode::kResourceExhausted) ::_exit(0);  // full: the round ends
    if (!s.ok()) ::_exit(3);
    testing::SendReport(report_fd, Report{n, kStored});
  }
  ::_exit(0);
}

TEST(NvmeCrash, SigkillDuringWritesLosesNoAcknowledgedBlock) {
  std::string dir = (std::filesystem::temp_directory_path() / "kvtier-nvme-crash-XXXXXX").string();
  ASSERT_NE(::mkdtemp(dir.data()), nullptr);
  const NvmeTierOptions options{.files = {dir + "/a.slots", dir + "/b.slots"}, .capacity_bytes = 256u << 20};
  std::mt19937_64 rng(20261129);
  std::map<uint64_t, State> acknowledged;  // the last state the child reported
  uint64_t next_key = 0;
  for (int round = 0; round < kRounds; ++round) {
    const Result<std::vector<Report>> reports = testing::RunChildUntilKilled<Report>(
        [&](int report_fd) { WriteUntilKilled(options, next_key, report_fd); },
        std::chrono::milliseconds(std::uniform_int_distribution<int>(20, 200)(rng)));
    ASSERT_TRUE(reports.ok()) << "round " << round << ": " << reports.status().ToString();
    for (const Report& r : *reports) acknowledged[r.key] = r.state;
    next_key += kKeysPerRound;

    Result<std::unique_ptr<NvmeTier>> tier = NvmeTier::Open(options);
    ASSERT_TRUE(tier.ok()) << "round " << round << ": " << tier.status().ToString();
    std::vector<std::byte> out(4096 * 7);
    uint64_t stored = 0;
    for (const auto& [key, state] : acknowledged) {
      Result<std::size_t> n = (*tier)->Read(Key(key), out);
      if (state == kEvicted) {
        // An eviction reported before the kill is durable; the slot may hold another block.
        EXPECT_EQ(n.status().code(), StatusCode::kNotFound) << "round " << round << ": evicted block " << key;
        continue;
      }
      if (state == kEvicting && n.status().code() == StatusCode::kNotFound) continue;
      ++stored;
      ASSERT_TRUE(n.ok()) << "round " << round << ": acknowledged block " << key << " lost: " << n.status().ToString();
      const std::vector<std::byte> expected = Payload(key);
      ASSERT_EQ(*n, expected.size());
      ASSERT_TRUE(std::equal(expected.begin(), expected.end(), out.begin())) << "block " << key;
    }
    // Blocks written but not yet reported may be there too; whatever is there is intact.
    EXPECT_GE((*tier)->GetStats().blocks, stored);
    EXPECT_EQ((*tier)->GetStats().checksum_failures, 0u);
    std::printf("round %d: %llu reports, %llu blocks acknowledged and stored\n", round,
                static_cast<unsigned long long>(reports->size()), static_cast<unsigned long long>(stored));
    // Empty the tier between rounds so the next child has room (and evictions get tested).
    for (auto& [key, state] : acknowledged) {
      if (state != kEvicted) (void)(*tier)->Evict(Key(key));
      state = kEvicted;
    }
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace kvtier
