// Crash test for write-through persistence: a child process opens a store (DRAM + an
// NVMe-file tier, StoreOptions::persistence) and puts chains in a loop, reporting each
// acknowledged Put on a pipe after it returns; it is SIGKILLed after about half a second.
// The store reopened on the same files must return every acknowledged block bit-exact, and
// whatever else it indexes (blocks put but not yet reported) must be intact too. Rounds
// accumulate: each child starts from what the last crash left. As in nvme_crash_test.cc the
// parent forks while it has no threads (each store it opens is closed before the next fork).
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <map>
#include <random>
#include <thread>

#include <gtest/gtest.h>

#include "kvtier/store.h"
#include "kvtier/tiers.h"
#include "testing/killed_child.h"

namespace kvtier {
namespace {

constexpr int kRounds = 4;
constexpr uint64_t kChainsPerRound = 1500;  // bounds a child the parent fails to kill
constexpr uint64_t kChainBlocks = 8;        // put as two Puts of 4, the second under the first
constexpr uint32_t kBlockBytes = 4096;

BlockKey Key(uint64_t chain, uint64_t i) { return {chain * 0x9E3779B97F4A7C15ull + 3, i + 1}; }

// Block (chain, i)'s bytes are a function of (chain, i): any returned block is checkable.
std::vector<std::byte> Payload(uint64_t chain, uint64_t i) {
  std::vector<std::byte> bytes(kBlockBytes);
  uint64_t x = chain * 0x100000001b3ull + i * 0x9E3779B97F4A7C15ull + 1;
  for (std::size_t k = 0; k < bytes.size(); ++k) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    bytes[k] = static_cast<std::byte>(x);
  }
  return bytes;
}

struct Report {
  uint64_t chain = 0;
  uint64_t blocks = 0;  // the chain's first `blocks` blocks are acknowledged
};

Result<std::unique_ptr<TieredStore>> OpenStore(const std::string& dir) {
  std::vector<std::unique_ptr<Tier>> tiers;
  KVTIER_ASSIGN_OR_RETURN(
      std::unique_ptr<Tier> dram,
      NewDramTier({.capacity_bytes = 4u << 20, .lock_memory = false, .huge_pages = false, .pin_for_gpu = false}));
  KVTIER_ASSIGN_OR_RETURN(std::unique_ptr<Tier> nvme,
                          NewNvmeTier({.files = {dir + "/nvme.slots"}, .capacity_bytes = 512u << 20}));
  tiers.push_back(std::move(dram));
  tiers.push_back(std::move(nvme));
  StoreOptions options;
  options.policy = PolicyKind::kLru;
  options.persistence = PersistenceOptions{.tier = 1, .journal_path = dir + "/blocks.journal"};
  return TieredStore::Open(std::move(tiers), std::move(options));
}

[[noreturn]] void PutUntilKilled(const std::string& dir, uint64_t first, int report_fd) {
  Result<std::unique_ptr<TieredStore>> store = OpenStore(dir);
  if (!store.ok()) ::_exit(2);
  for (uint64_t chain = first; chain < first + kChainsPerRound; ++chain) {
    for (uint64_t half = 0; half < 2; ++half) {
      std::vector<std::vector<std::byte>> payloads;
      std::vector<BlockPut> puts;
      for (uint64_t i = half * 4; i < half * 4 + 4; ++i) payloads.push_back(Payload(chain, i));
      for (uint64_t k = 0; k < 4; ++k) {
        puts.push_back({.key = Key(chain, half * 4 + k), .payload = payloads[k], .tokens = 16});
      }
      const std::optional<BlockKey> parent = half == 0 ? std::nullopt : std::optional(Key(chain, 3));
      Result<PutResult> r = (*store)->Put(puts, parent);
      if (!r.ok()) ::_exit(3);
      if (r->refused_blocks > 0) ::_exit(0);  // full: the round ends
      testing::SendReport(report_fd, Report{chain, half * 4 + 4});
    }
  }
  ::_exit(0);
}

TEST(StorePersistCrash, SigkillDuringWriteThroughPutsLosesNoAcknowledgedBlock) {
  std::string dir = (std::filesystem::temp_directory_path() / "kvtier-store-crash-XXXXXX").string();
  ASSERT_NE(::mkdtemp(dir.data()), nullptr);
  std::mt19937_64 rng(20260214);
  std::map<uint64_t, uint64_t> acknowledged;  // chain -> blocks
  uint64_t next_chain = 0;
  for (int round = 0; round < kRounds; ++round) {
    const Result<std::vector<Report>> reports = testing::RunChildUntilKilled<Report>(
        [&](int report_fd) { PutUntilKilled(dir, next_chain, report_fd); },
        std::chrono::milliseconds(std::uniform_int_distribution<int>(200, 600)(rng)));
    ASSERT_TRUE(reports.ok()) << "round " << round << ": " << reports.status().ToString();
    for (const Report& r : *reports) acknowledged[r.chain] = r.blocks;
    next_chain += kChainsPerRound;

    Result<std::unique_ptr<TieredStore>> store = OpenStore(dir);
    ASSERT_TRUE(store.ok()) << "round " << round << ": " << store.status().ToString();
    const StoreStats stats = (*store)->GetStats();
    uint64_t blocks = 0;
    std::vector<std::vector<std::byte>> buffers(kChainBlocks, std::vector<std::byte>(kBlockBytes));
    const std::vector<std::span<std::byte>> outs(buffers.begin(), buffers.end());
    // Every acknowledged chain, and the chains the child may have been putting when it died:
    // what is indexed is read back and compared.
    for (uint64_t chain = 0; chain < next_chain; ++chain) {
      auto it = acknowledged.find(chain);
      const uint64_t expected = it == acknowledged.end() ? 0 : it->second;
      std::vector<BlockKey> keys;
      for (uint64_t i = 0; i < kChainBlocks; ++i) keys.push_back(Key(chain, i));
      Result<std::size_t> read = (*store)->Get(keys, outs);
      ASSERT_TRUE(read.ok()) << read.status().ToString();
      ASSERT_GE(*read, expected) << "round " << round << ": chain " << chain << " lost acknowledged blocks";
      for (std::size_t i = 0; i < *read; ++i) {
        ASSERT_EQ(buffers[i], Payload(chain, i)) << "round " << round << ": chain " << chain << " block " << i;
      }
      blocks += expected;
    }
    EXPECT_GE(stats.recovered_blocks, blocks);
    EXPECT_EQ((*store)->GetStats().corrupt_blocks, 0u);
    std::printf("round %d: %llu reports, %llu blocks acknowledged, %llu recovered, %llu dropped, "
                "%llu journal bytes ignored\n",
                round, static_cast<unsigned long long>(reports->size()), static_cast<unsigned long long>(blocks),
                static_cast<unsigned long long>(stats.recovered_blocks),
                static_cast<unsigned long long>(stats.recovery_dropped_blocks),
                static_cast<unsigned long long>(stats.journal_ignored_bytes));
    store->reset();  // no store threads at the next fork
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace kvtier
