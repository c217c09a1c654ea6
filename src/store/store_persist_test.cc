// Durable blocks (StoreOptions::persistence): write-through and on-flush persistence over a
// DRAM tier and an NVMe-file tier, recovery on reopen, and what recovery refuses to serve.
// The kill -9 test is tests/store/store_crash_test.cc (it forks, so it runs on its own).
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <thread>

#include <gtest/gtest.h>

#include "kvtier/store.h"
#include "kvtier/tiers.h"
#include "store/block_journal.h"
#include "testing/faulty_tier.h"

namespace kvtier {
namespace {

constexpr uint32_t kBlockBytes = 16 << 10;

BlockKey Key(uint64_t chain, uint64_t i) { return {chain * 0x9E3779B97F4A7C15ull + 7, i + 1}; }

// Pseudo-random bytes, different for every block, so that a block's bytes can be found in
// the tier's file and any returned block can be checked.
std::vector<std::byte> Payload(uint64_t chain, uint64_t i) {
  std::mt19937_64 rng(chain * 1000003 + i);
  std::vector<std::byte> bytes(kBlockBytes);
  for (std::size_t k = 0; k < bytes.size(); k += 8) {
    const uint64_t word = rng();
    for (std::size_t b = 0; b < 8; ++b) bytes[k + b] = static_cast<std::byte>(word >> (8 * b));
  }
  return bytes;
}

class StorePersist : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = (std::filesystem::temp_directory_path() / "kvtier-persist-XXXXXX").string();
    ASSERT_NE(::mkdtemp(dir_.data()), nullptr);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::string nvme_file() const { return dir_ + "/nvme.slots"; }
  std::string journal() const { return dir_ + "/blocks.journal"; }

  std::vector<std::unique_ptr<Tier>> Tiers(uint64_t dram_bytes, uint64_t nvme_bytes = 64u << 20) const {
    std::vector<std::unique_ptr<Tier>> tiers;
    Result<std::unique_ptr<Tier>> dram = NewDramTier(
        {.capacity_bytes = dram_bytes, .lock_memory = false, .huge_pages = false, .pin_for_gpu = false});
    Result<std::unique_ptr<Tier>> nvme = NewNvmeTier({.files = {nvme_file()}, .capacity_bytes = nvme_bytes});
    EXPECT_TRUE(dram.ok() && nvme.ok()) << dram.status().ToString() << nvme.status().ToString();
    tiers.push_back(std::move(*dram));
    tiers.push_back(std::move(*nvme));
    return tiers;
  }

  StoreOptions Options(PersistenceOptions::PersistMode mode = PersistenceOptions::PersistMode::kWriteThrough) const {
    StoreOptions options;
    options.persistence = PersistenceOptions{.tier = 1, .journal_path = journal(), .mode = mode};
    return options;
  }

  std::unique_ptr<TieredStore> Open(uint64_t dram_bytes, StoreOptions options) const {
    Result<std::unique_ptr<TieredStore>> store = TieredStore::Open(Tiers(dram_bytes), std::move(options));
    EXPECT_TRUE(store.ok()) << store.status().ToString();
    return store.ok() ? std::move(*store) : nullptr;
  }

  std::string dir_;
};

// Puts blocks [first, first + n) of chain `chain` (under block first - 1, when first > 0).
void PutChain(TieredStore& store, uint64_t chain, uint64_t n, uint64_t first = 0) {
  std::vector<std::vector<std::byte>> payloads;
  std::vector<BlockPut> puts;
  for (uint64_t i = first; i < first + n; ++i) payloads.push_back(Payload(chain, i));
  for (uint64_t i = 0; i < n; ++i) {
    puts.push_back({.key = Key(chain, first + i),
                    .payload = payloads[i],
                    .tokens = static_cast<uint32_t>(16 + chain % 3),
                    .type = static_cast<BlockType>(chain % 4),
                    .transition = static_cast<TransitionType>(i % 4)});
  }
  const std::optional<BlockKey> parent = first > 0 ? std::optional(Key(chain, first - 1)) : std::nullopt;
  Result<PutResult> r = store.Put(puts, parent);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->new_blocks + r->present_blocks, n);
}

std::vector<BlockKey> ChainKeys(uint64_t chain, uint64_t n) {
  std::vector<BlockKey> keys;
  for (uint64_t i = 0; i < n; ++i) keys.push_back(Key(chain, i));
  return keys;
}

// Reads the chain's stored prefix, checks it bit-exact, and returns its length.
std::size_t GetChain(TieredStore& store, uint64_t chain, uint64_t n) {
  const std::vector<BlockKey> keys = ChainKeys(chain, n);
  std::vector<std::vector<std::byte>> buffers(n, std::vector<std::byte>(kBlockBytes));
  std::vector<std::span<std::byte>> outs(buffers.begin(), buffers.end());
  Result<std::size_t> read = store.Get(keys, outs);
  EXPECT_TRUE(read.ok()) << read.status().ToString();
  if (!read.ok()) return 0;
  for (std::size_t i = 0; i < *read; ++i) {
    EXPECT_EQ(buffers[i], Payload(chain, i)) << "chain " << chain << " block " << i;
  }
  return *read;
}

TEST_F(StorePersist, RejectsTiersThatDoNotPersistAndIncompleteOptions) {
  StoreOptions options = Options();
  options.persistence->tier = 0;
  Result<std::unique_ptr<TieredStore>> store = TieredStore::Open(Tiers(4u << 20), options);
  ASSERT_EQ(store.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(store.status().message().find("cpu_dram"), std::string::npos) << store.status().message();
  options.persistence->tier = 2;
  EXPECT_EQ(TieredStore::Open(Tiers(4u << 20), options).status().code(), StatusCode::kInvalidArgument);
  options = Options();
  options.persistence->journal_path.clear();
  EXPECT_EQ(options.Validate().code(), StatusCode::kInvalidArgument);
  auto plain = Open(4u << 20, StoreOptions{});
  ASSERT_NE(plain, nullptr);
  EXPECT_EQ(plain->Flush().code(), StatusCode::kFailedPrecondition);
}

// (a) Write-through: every acknowledged chain is found in the NVMe tier after a reopen on
// new tier objects, with its bytes, its chain structure and its tags.
TEST_F(StorePersist, WriteThroughChainsSurviveAReopen) {
  {
    auto store = Open(2u << 20, Options());  // DRAM holds 128 of the 164 blocks: demotions leave
    ASSERT_NE(store, nullptr);
    for (uint64_t chain = 0; chain < 20; ++chain) PutChain(*store, chain, 8);
    PutChain(*store, 0, 4, 8);  // chain 0 extended by a second Put under its last block
    EXPECT_EQ(store->GetStats().tiers[1].blocks, 164u);
    EXPECT_EQ(store->GetStats().journal_records, 164u);
    EXPECT_TRUE(store->Flush().ok());  // write-through: only syncs the journal
  }
  auto store = Open(2u << 20, Options());
  ASSERT_NE(store, nullptr);
  const StoreStats stats = store->GetStats();
  EXPECT_EQ(stats.recovered_blocks, 164u);
  EXPECT_EQ(stats.recovery_dropped_blocks, 0u);
  EXPECT_EQ(stats.journal_records, 164u);  // compacted to the live set
  EXPECT_EQ(stats.tiers[1].blocks, 164u);
  EXPECT_EQ(stats.tiers[1].used_bytes, 164u * kBlockBytes);
  for (uint64_t chain = 0; chain < 20; ++chain) {
    const uint64_t n = chain == 0 ? 12 : 8;
    const LookupResult found = store->Lookup(ChainKeys(chain, n));
    EXPECT_EQ(found.prefix_blocks, n) << "chain " << chain;
    EXPECT_EQ(found.tier, std::vector<int>(n, 1)) << "chain " << chain;
    EXPECT_EQ(GetChain(*store, chain, n), n);
  }
  // Tags and structure as they were put (the compacted journal lists what was indexed).
  Result<BlockJournal::Contents> listed = BlockJournal::Read(journal());
  ASSERT_TRUE(listed.ok());
  ASSERT_EQ(listed->records.size(), 164u);
  std::map<BlockKey, std::pair<uint64_t, uint64_t>> where;  // key -> (chain, block)
  for (uint64_t chain = 0; chain < 20; ++chain) {
    for (uint64_t i = 0; i < 12; ++i) where[Key(chain, i)] = {chain, i};
  }
  for (const JournalRecord& r : listed->records) {
    ASSERT_TRUE(where.contains(r.key));
    const auto [chain, i] = where[r.key];
    EXPECT_EQ(r.parent, i == 0 ? std::nullopt : std::optional(Key(chain, i - 1)));
    EXPECT_EQ(r.type, static_cast<BlockType>(chain % 4));
    EXPECT_EQ(r.transition, static_cast<TransitionType>(i % 4));
    EXPECT_EQ(r.tokens, 16 + chain % 3);
    EXPECT_EQ(r.bytes, kBlockBytes);
  }
}

// (b) A block whose bytes were damaged on disk is never returned, and the blocks after it
// are not indexed (nor kept in the tier).
TEST_F(StorePersist, CorruptBlockOnDiskIsDroppedWithItsDescendants) {
  {
    auto store = Open(8u << 20, Options());
    ASSERT_NE(store, nullptr);
    for (uint64_t chain = 0; chain < 4; ++chain) PutChain(*store, chain, 6);
  }
  {
    std::fstream file(nvme_file(), std::ios::in | std::ios::out | std::ios::binary);
    std::vector<char> bytes(std::istreambuf_iterator<char>(file), {});
    const std::vector<std::byte> target = Payload(1, 2);
    const char* head = reinterpret_cast<const char*>(target.data());
    const auto at = std::search(bytes.begin(), bytes.end(), head, head + 64);
    ASSERT_NE(at, bytes.end()) << "block (1, 2) not found in the tier's file";
    file.seekp(at - bytes.begin() + 1000);
    file.put(static_cast<char>(bytes[static_cast<std::size_t>(at - bytes.begin() + 1000)] ^ 0x01));
  }
  auto store = Open(8u << 20, Options());
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(store->GetStats().recovered_blocks, 20u);
  EXPECT_EQ(store->GetStats().recovery_dropped_blocks, 4u);
  EXPECT_EQ(store->Lookup(ChainKeys(1, 6)).prefix_blocks, 2u);
  EXPECT_EQ(GetChain(*store, 1, 6), 2u);
  for (uint64_t i = 2; i < 6; ++i) EXPECT_FALSE(store->tier(1).Size(Key(1, i)).has_value()) << i;
  for (const uint64_t chain : {uint64_t{0}, uint64_t{2}, uint64_t{3}}) EXPECT_EQ(GetChain(*store, chain, 6), 6u);
  EXPECT_EQ(store->GetStats().corrupt_blocks, 0u);  // nothing corrupt reached a Get
}

// (c) A journal cut in the middle of its last record (a kill -9 during the append) recovers
// every block before it.
TEST_F(StorePersist, TornJournalTailRecoversEverythingBeforeIt) {
  {
    auto store = Open(8u << 20, Options());
    ASSERT_NE(store, nullptr);
    for (uint64_t chain = 0; chain < 3; ++chain) PutChain(*store, chain, 4);
  }
  const uint64_t size = std::filesystem::file_size(journal());
  std::filesystem::resize_file(journal(), size - BlockJournal::kRecordBytes / 2);
  auto store = Open(8u << 20, Options());
  ASSERT_NE(store, nullptr);
  const StoreStats stats = store->GetStats();
  EXPECT_EQ(stats.recovered_blocks, 11u);
  EXPECT_EQ(stats.journal_ignored_bytes, BlockJournal::kRecordBytes - BlockJournal::kRecordBytes / 2);
  EXPECT_EQ(GetChain(*store, 0, 4), 4u);
  EXPECT_EQ(GetChain(*store, 1, 4), 4u);
  EXPECT_EQ(GetChain(*store, 2, 4), 3u);
}

// Recovery takes parents first whatever the journal's order (a block dropped and put again
// has its last record after its children's).
TEST_F(StorePersist, RecoveryOrdersParentsFirstWhateverTheJournalOrder) {
  {
    auto store = Open(8u << 20, Options());
    ASSERT_NE(store, nullptr);
    for (uint64_t chain = 0; chain < 3; ++chain) PutChain(*store, chain, 5);
  }
  Result<BlockJournal::Contents> listed = BlockJournal::Read(journal());
  ASSERT_TRUE(listed.ok());
  std::reverse(listed->records.begin(), listed->records.end());
  ASSERT_TRUE(BlockJournal::Create(journal(), listed->records, false).ok());
  auto store = Open(8u << 20, Options());
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(store->GetStats().recovered_blocks, 15u);
  for (uint64_t chain = 0; chain < 3; ++chain) EXPECT_EQ(GetChain(*store, chain, 5), 5u);
}

// (d) On flush: blocks only in DRAM do not survive; after Flush every block does; blocks
// demoted into the persist tier survive without one.
TEST_F(StorePersist, OnFlushPersistsWhatReachedThePersistTier) {
  const auto on_flush = PersistenceOptions::PersistMode::kOnFlush;
  {
    auto store = Open(8u << 20, Options(on_flush));
    ASSERT_NE(store, nullptr);
    for (uint64_t chain = 0; chain < 10; ++chain) PutChain(*store, chain, 4);
    EXPECT_EQ(store->GetStats().tiers[1].blocks, 0u);
  }
  {
    auto store = Open(8u << 20, Options(on_flush));
    ASSERT_NE(store, nullptr);
    EXPECT_EQ(store->GetStats().recovered_blocks, 0u);
    EXPECT_EQ(store->Lookup(ChainKeys(0, 4)).prefix_blocks, 0u);
    for (uint64_t chain = 0; chain < 10; ++chain) PutChain(*store, chain, 4);
    const Status flushed = store->Flush();
    ASSERT_TRUE(flushed.ok()) << flushed.ToString();
    EXPECT_EQ(store->GetStats().tiers[1].blocks, 40u);
    EXPECT_EQ(store->GetStats().tiers[0].blocks, 40u);  // copied, not moved
  }
  {
    auto store = Open(8u << 20, Options(on_flush));
    ASSERT_NE(store, nullptr);
    EXPECT_EQ(store->GetStats().recovered_blocks, 40u);
    for (uint64_t chain = 0; chain < 10; ++chain) EXPECT_EQ(GetChain(*store, chain, 4), 4u);
  }
  std::filesystem::remove(journal());
  std::filesystem::remove(nvme_file());
  uint64_t demoted = 0;
  {
    StoreOptions options = Options(on_flush);
    options.policy = PolicyKind::kLru;  // demotes, where Bayes might drop one-off blocks
    auto store = Open(2u << 20, options);
    ASSERT_NE(store, nullptr);
    for (uint64_t chain = 0; chain < 40; ++chain) PutChain(*store, chain, 4);
    store->Drain();
    demoted = store->GetStats().tiers[1].blocks;
    EXPECT_GT(demoted, 0u);
  }
  auto store = Open(2u << 20, Options(on_flush));
  ASSERT_NE(store, nullptr);
  EXPECT_GT(store->GetStats().recovered_blocks, 0u);
  EXPECT_LE(store->GetStats().recovered_blocks, demoted);
  uint64_t found = 0;
  for (uint64_t chain = 0; chain < 40; ++chain) found += GetChain(*store, chain, 4);
  EXPECT_EQ(found, store->GetStats().recovered_blocks);
}

// Issue 18, hole 4: blocks the persist tier holds that no journal record lists (written
// after the last Flush before a crash, or listed by a journal tail a power loss cut off)
// are evicted at Open, not kept unindexed: the tier's space comes back, even from full.
TEST_F(StorePersist, BlocksThePersistTierHoldsWithoutARecordAreEvictedAtOpen) {
  const auto open = [&] {  // a small NVMe tier, quick to fill
    Result<std::unique_ptr<TieredStore>> store =
        TieredStore::Open(Tiers(8u << 20, 8u << 20), Options(PersistenceOptions::PersistMode::kOnFlush));
    EXPECT_TRUE(store.ok()) << store.status().ToString();
    return store.ok() ? std::move(*store) : nullptr;
  };
  uint64_t orphans = 0;
  {
    auto store = open();
    ASSERT_NE(store, nullptr);
    PutChain(*store, 0, 4);
    ASSERT_TRUE(store->Flush().ok());
    const std::vector<std::byte> payload = Payload(99, 0);
    while (store->tier(1).Write(Key(100 + orphans, 0), payload).ok()) ++orphans;
    ASSERT_GT(orphans, 300u);
  }  // no Flush: a crash
  auto store = open();
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(store->GetStats().recovered_blocks, 4u);
  EXPECT_EQ(store->tier(1).GetStats().blocks, 4u);
  EXPECT_EQ(store->tier(1).GetStats().used_bytes, 4u * kBlockBytes);
  EXPECT_EQ(store->tier(1).Size(Key(100, 0)), std::nullopt);
  EXPECT_EQ(GetChain(*store, 0, 4), 4u);
  for (uint64_t chain = 1; chain <= 10; ++chain) PutChain(*store, chain, 4);
  const Status flushed = store->Flush();
  EXPECT_TRUE(flushed.ok()) << flushed.ToString();
  EXPECT_EQ(store->tier(1).GetStats().blocks, 44u);
}

// Issue 18, hole 4: without persistence the store indexes nothing at Open, so a tier that
// recovered blocks from an earlier run (an NVMe tier with recover: true) is emptied.
TEST_F(StorePersist, WithoutPersistenceBlocksATierRecoveredAreEvictedAtOpen) {
  {
    std::vector<std::unique_ptr<Tier>> tiers = Tiers(4u << 20);
    const std::vector<std::byte> payload = Payload(99, 0);
    for (uint64_t i = 0; i < 50; ++i) ASSERT_TRUE(tiers[1]->Write(Key(100 + i, 0), payload).ok());
  }
  auto store = Open(4u << 20, StoreOptions{});
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(store->tier(1).GetStats().blocks, 0u);
  EXPECT_EQ(store->tier(1).GetStats().used_bytes, 0u);
}

// (f) A file at journal_path that is not a block journal stops Open, naming the file.
TEST_F(StorePersist, ForeignJournalFileIsCorruptionNamingThePath) {
  std::ofstream(journal()) << "{\"this\": \"is a config, not a journal\"}";
  Result<std::unique_ptr<TieredStore>> store = TieredStore::Open(Tiers(4u << 20), Options());
  ASSERT_EQ(store.status().code(), StatusCode::kCorruption);
  EXPECT_NE(store.status().message().find(journal()), std::string::npos) << store.status().message();
}

// An I/O error of the persist tier fails the Put and leaves nothing acknowledged or indexed.
TEST_F(StorePersist, PersistTierIoErrorFailsThePut) {
  std::vector<std::unique_ptr<Tier>> tiers = Tiers(4u << 20);
  auto faulty = std::make_unique<testing::FaultyTier>(std::move(tiers[1]));
  testing::FaultyTier* fault = faulty.get();
  tiers[1] = std::move(faulty);
  Result<std::unique_ptr<TieredStore>> store = TieredStore::Open(std::move(tiers), Options());
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  fault->FailNextWrites(1, StatusCode::kIoError);
  const std::vector<std::byte> payload = Payload(0, 0);
  const BlockPut put{.key = Key(0, 0), .payload = payload, .tokens = 16};
  Result<PutResult> r = (*store)->Put({&put, 1});
  EXPECT_EQ(r.status().code(), StatusCode::kIoError);
  EXPECT_EQ((*store)->Lookup(ChainKeys(0, 1)).prefix_blocks, 0u);
  EXPECT_EQ((*store)->GetStats().tiers[0].blocks, 0u);
  PutChain(**store, 0, 3);  // the next try goes through
  store->reset();
  auto reopened = Open(4u << 20, Options());
  ASSERT_NE(reopened, nullptr);
  EXPECT_EQ(reopened->GetStats().recovered_blocks, 3u);
  EXPECT_EQ(GetChain(*reopened, 0, 3), 3u);
}

// A block the persist tier let go (its policy evicted it to make room) while DRAM kept it is
// written to the persist tier again when a write-through Put acknowledges it once more.
TEST_F(StorePersist, WriteThroughPutPersistsAPresentBlockThePersistTierDropped) {
  auto tiers = [&] {
    std::vector<std::unique_ptr<Tier>> made;
    made.push_back(
        NewDramTier({.capacity_bytes = 8u << 20, .lock_memory = false, .huge_pages = false, .pin_for_gpu = false})
            .value());
    made.push_back(
        NewParallelFsTier(
            {.directory = dir_ + "/pfs", .capacity_bytes = 16 * kBlockBytes, .fsync = FsyncPolicy::kNever})
            .value());
    return made;
  };
  StoreOptions options = Options();
  options.policy = PolicyKind::kLru;
  options.synchronous_moves = true;
  {
    Result<std::unique_ptr<TieredStore>> store = TieredStore::Open(tiers(), options);
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    for (uint64_t chain = 0; chain < 4; ++chain) PutChain(**store, chain, 4);
    // 16 blocks filled the persist tier past its watermark: its oldest leaves were dropped there.
    ASSERT_FALSE((*store)->tier(1).Size(Key(0, 3)).has_value());
    EXPECT_EQ((*store)->Lookup(ChainKeys(0, 4)).prefix_blocks, 4u);  // DRAM still holds them
    PutChain(**store, 0, 4);
    for (uint64_t i = 0; i < 4; ++i) EXPECT_TRUE((*store)->tier(1).Size(Key(0, i)).has_value()) << i;
  }
  Result<std::unique_ptr<TieredStore>> store = TieredStore::Open(tiers(), options);
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  EXPECT_EQ(GetChain(**store, 0, 4), 4u);
}

// (g) Concurrent write-through puts (run under TSan too): every chain is readable, before
// and after a reopen.
TEST_F(StorePersist, ConcurrentWriteThroughPutsAllSurvive) {
  constexpr uint64_t kThreads = 4, kChains = 12, kBlocks = 4;
  {
    auto store = Open(2u << 20, Options());
    ASSERT_NE(store, nullptr);
    std::vector<std::thread> threads;
    for (uint64_t t = 0; t < kThreads; ++t) {
      threads.emplace_back([&, t] {
        for (uint64_t c = 0; c < kChains; ++c) {
          PutChain(*store, t * kChains + c, kBlocks);
          EXPECT_EQ(GetChain(*store, t * kChains + c, kBlocks), kBlocks);
        }
      });
    }
    for (std::thread& thread : threads) thread.join();
  }
  auto store = Open(2u << 20, Options());
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(store->GetStats().recovered_blocks, kThreads * kChains * kBlocks);
  for (uint64_t chain = 0; chain < kThreads * kChains; ++chain) EXPECT_EQ(GetChain(*store, chain, kBlocks), kBlocks);
}

}  // namespace
}  // namespace kvtier
