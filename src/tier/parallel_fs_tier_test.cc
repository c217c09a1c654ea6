// Tests of what is particular to the parallel-filesystem tier: its files, damage to them,
// restarts, fsync policies and a full filesystem. The semantics every tier shares are in
// the conformance suite (tests/tier/).
#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <sys/mount.h>

#include "kvtier/tiers.h"

namespace kvtier {
namespace {

namespace fs = std::filesystem;

constexpr std::size_t kHeaderBytes = 24;
constexpr uint64_t kCapacity = 8 * 1024;  // for the concurrency test

std::vector<std::byte> Payload(std::size_t size, uint8_t seed) {
  std::vector<std::byte> bytes(size);
  for (std::size_t i = 0; i < size; ++i) bytes[i] = static_cast<std::byte>((i * 31 + seed) & 0xFF);
  return bytes;
}

std::vector<char> ReadFile(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void WriteFile(const fs::path& path, const std::vector<char>& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// Every file under `dir` whose name ends with `suffix`.
std::vector<fs::path> FilesEndingWith(const fs::path& dir, const std::string& suffix) {
  std::vector<fs::path> found;
  for (const fs::directory_entry& entry : fs::recursive_directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    if (name.size() >= suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0) {
      found.push_back(entry.path());
    }
  }
  return found;
}

class ParallelFsTierTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string dir = (fs::temp_directory_path() / "kvtier-pfs-XXXXXX").string();
    ASSERT_NE(::mkdtemp(dir.data()), nullptr);
    root_ = dir;
    dir_ = root_ / "tier";
  }
  void TearDown() override {
    if (mounted_) ::umount2(dir_.c_str(), MNT_DETACH);
    fs::remove_all(root_);
  }

  std::unique_ptr<Tier> Open(ParallelFsTierOptions options = {}) {
    if (options.directory.empty()) options.directory = dir_.string();
    Result<std::unique_ptr<Tier>> tier = NewParallelFsTier(options);
    EXPECT_TRUE(tier.ok()) << tier.status().ToString();
    return tier.ok() ? std::move(tier).value() : nullptr;
  }

  fs::path BlockPath(const BlockKey& key) const {
    const std::string hex = key.ToHex();
    return dir_ / hex.substr(0, 2) / hex.substr(2, 2) / (hex + ".blk");
  }

  // Writes a block, damages its file with `damage`, and checks that Read reports Corruption
  // naming the key, returns no bytes and drops the block.
  void ExpectDamageIsCorruption(const std::function<void(std::vector<char>&)>& damage) {
    auto tier = Open();
    const BlockKey key{0x0123456789abcdefULL, 42};
    const std::vector<std::byte> payload = Payload(1000, 7);
    ASSERT_TRUE(tier->Write(key, payload).ok());
    std::vector<char> file = ReadFile(BlockPath(key));
    damage(file);
    WriteFile(BlockPath(key), file);

    std::vector<std::byte> out(2000, std::byte{0});
    Result<std::size_t> read = tier->Read(key, out);
    ASSERT_EQ(read.status().code(), StatusCode::kCorruption) << read.status().ToString();
    EXPECT_NE(read.status().message().find(key.ToHex()), std::string::npos);
    EXPECT_EQ(std::count(out.begin(), out.end(), std::byte{0}), 2000);
    EXPECT_FALSE(fs::exists(BlockPath(key)));
    EXPECT_EQ(tier->Size(key), std::nullopt);
    EXPECT_EQ(tier->Read(key, out).status().code(), StatusCode::kNotFound);
    const TierStats stats = tier->GetStats();
    EXPECT_EQ(stats.checksum_failures, 1u);
    EXPECT_EQ(stats.blocks, 0u);
    EXPECT_EQ(stats.used_bytes, 0u);
  }

  fs::path root_;
  fs::path dir_;
  bool mounted_ = false;
};

TEST_F(ParallelFsTierTest, WritesOneShardedFileWithHeaderPerBlock) {
  auto tier = Open();
  const BlockKey key{0xa1b2c3d4e5f60718ULL, 0x1122334455667788ULL};
  const std::vector<std::byte> payload = Payload(300, 1);
  ASSERT_TRUE(tier->Write(key, payload).ok());

  const std::vector<char> file = ReadFile(dir_ / "a1" / "b2" / "a1b2c3d4e5f607181122334455667788.blk");
  ASSERT_EQ(file.size(), kHeaderBytes + payload.size());
  EXPECT_EQ(std::string(file.data(), 4), "KVTB");
  EXPECT_EQ(file[4], 1);  // format version, little-endian
  EXPECT_EQ(static_cast<uint8_t>(file[8]), 300 & 0xFF);
  EXPECT_EQ(static_cast<uint8_t>(file[9]), 300 >> 8);
  uint64_t checksum = 0;
  for (std::size_t i = 0; i < 8; ++i) checksum |= uint64_t{static_cast<uint8_t>(file[16 + i])} << (8 * i);
  EXPECT_EQ(checksum, PayloadChecksum(payload));
  EXPECT_TRUE(FilesEndingWith(dir_, ".tmp").empty());

  EXPECT_EQ(tier->kind(), TierKind::kParallelFs);
  EXPECT_EQ(tier->Size(key), 300u);
  const TierStats stats = tier->GetStats();
  EXPECT_EQ(stats.blocks, 1u);
  EXPECT_EQ(stats.used_bytes, 300u);
  EXPECT_EQ(stats.writes, 1u);
  EXPECT_EQ(stats.write_bytes, 300u);
}

TEST_F(ParallelFsTierTest, RoundTripReplaceEvictAndMisses) {
  auto tier = Open({.capacity_bytes = 4096});
  const BlockKey key{1, 2};
  std::vector<std::byte> out(4096);
  EXPECT_EQ(tier->Read(key, out).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(tier->Evict(key).code(), StatusCode::kNotFound);
  EXPECT_EQ(tier->Write(key, {}).code(), StatusCode::kInvalidArgument);

  ASSERT_TRUE(tier->Write(key, Payload(1000, 1)).ok());
  ASSERT_TRUE(tier->Write(key, Payload(600, 2)).ok());  // replaces; accounts the difference
  EXPECT_EQ(tier->GetStats().used_bytes, 600u);
  std::vector<std::byte> small(599);
  EXPECT_EQ(tier->Read(key, small).status().code(), StatusCode::kInvalidArgument);
  Result<std::size_t> read = tier->Read(key, out);
  ASSERT_TRUE(read.ok()) << read.status().ToString();
  ASSERT_EQ(*read, 600u);
  EXPECT_TRUE(std::equal(out.begin(), out.begin() + 600, Payload(600, 2).begin()));

  ASSERT_TRUE(tier->Evict(key).ok());
  EXPECT_EQ(tier->Size(key), std::nullopt);
  const TierStats stats = tier->GetStats();
  EXPECT_EQ(stats.capacity_bytes, 4096u);
  EXPECT_EQ(stats.used_bytes, 0u);
  EXPECT_EQ(stats.blocks, 0u);
  EXPECT_EQ(stats.writes, 2u);
  EXPECT_EQ(stats.write_failures, 1u);
  EXPECT_EQ(stats.reads, 1u);
  EXPECT_EQ(stats.read_bytes, 600u);
  EXPECT_EQ(stats.read_misses, 1u);
  EXPECT_EQ(stats.evictions, 1u);
}

// A write that fails before its commit (here: its shard directory cannot be made, a file is in
// the way) gives back the room it reserved; before, every such failure shrank the tier.
TEST_F(ParallelFsTierTest, AFailedWriteGivesBackItsReservation) {
  auto tier = Open({.capacity_bytes = 2500});
  const BlockKey blocked{0xab00000000000000ULL, 9};
  fs::create_directories(dir_);
  WriteFile(dir_ / blocked.ToHex().substr(0, 2), std::vector<char>(10, 'x'));  // not a directory
  for (int i = 0; i < 5; ++i) EXPECT_FALSE(tier->Write(blocked, Payload(1000, 1)).ok());
  EXPECT_TRUE(tier->Write({1, 1}, Payload(1000, 2)).ok()) << "the failed writes kept their room";
  EXPECT_TRUE(tier->Write({2, 2}, Payload(1000, 3)).ok());
  EXPECT_EQ(tier->GetStats().used_bytes, 2000u);
}

TEST_F(ParallelFsTierTest, FullTierRefusesWritesAndKeepsEarlierBlocks) {
  auto tier = Open({.capacity_bytes = 2500});
  ASSERT_TRUE(tier->Write({1, 1}, Payload(1000, 1)).ok());
  ASSERT_TRUE(tier->Write({2, 2}, Payload(1000, 2)).ok());
  EXPECT_EQ(tier->Write({3, 3}, Payload(1000, 3)).code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(tier->Write({1, 1}, Payload(1600, 4)).code(), StatusCode::kResourceExhausted);
  ASSERT_TRUE(tier->Write({1, 1}, Payload(1500, 5)).ok());  // exactly full after the replace
  std::vector<std::byte> out(2000);
  ASSERT_TRUE(tier->Read({2, 2}, out).ok());
  EXPECT_EQ(tier->Size({1, 1}), 1500u);
  EXPECT_EQ(tier->GetStats().used_bytes, 2500u);
  EXPECT_TRUE(FilesEndingWith(dir_, ".tmp").empty());
}

TEST_F(ParallelFsTierTest, FlippedPayloadByteIsCorruption) {
  ExpectDamageIsCorruption([](std::vector<char>& file) { file[kHeaderBytes + 500] ^= 0x10; });
}

TEST_F(ParallelFsTierTest, TruncatedFileIsCorruption) {
  ExpectDamageIsCorruption([](std::vector<char>& file) { file.resize(file.size() - 1); });
}

TEST_F(ParallelFsTierTest, TruncatedHeaderIsCorruption) {
  ExpectDamageIsCorruption([](std::vector<char>& file) { file.resize(10); });
}

TEST_F(ParallelFsTierTest, WrongMagicIsCorruption) {
  ExpectDamageIsCorruption([](std::vector<char>& file) { file[0] = 'X'; });
}

TEST_F(ParallelFsTierTest, WrongVersionIsCorruption) {
  ExpectDamageIsCorruption([](std::vector<char>& file) { file[4] = 2; });
}

TEST_F(ParallelFsTierTest, RestartSeesBlocksAndUsageAndRemovesStaleTemporaries) {
  {
    auto tier = Open({.capacity_bytes = 5000});
    ASSERT_TRUE(tier->Write({1, 1}, Payload(1000, 1)).ok());
    ASSERT_TRUE(tier->Write({2, 2}, Payload(2000, 2)).ok());
  }
  // What a crash mid-Write leaves, a damaged block, and a stranger's file.
  const fs::path shard = BlockPath({1, 1}).parent_path();
  WriteFile(shard / "00000000000000010000000000000001.123.456.7.tmp", {'x'});
  fs::create_directories(BlockPath({3, 3}).parent_path());
  WriteFile(BlockPath({3, 3}), {'K', 'V'});
  WriteFile(shard / "notes.txt", {'h', 'i'});

  auto tier = Open({.capacity_bytes = 5000});
  TierStats stats = tier->GetStats();
  EXPECT_EQ(stats.blocks, 2u);
  EXPECT_EQ(stats.used_bytes, 3000u);
  EXPECT_TRUE(FilesEndingWith(dir_, ".tmp").empty());
  EXPECT_FALSE(fs::exists(BlockPath({3, 3})));
  EXPECT_TRUE(fs::exists(shard / "notes.txt"));

  std::vector<std::byte> out(2000);
  Result<std::size_t> read = tier->Read({2, 2}, out);
  ASSERT_TRUE(read.ok()) << read.status().ToString();
  EXPECT_EQ(out, Payload(2000, 2));
  EXPECT_EQ(tier->Write({4, 4}, Payload(2001, 4)).code(), StatusCode::kResourceExhausted);
  ASSERT_TRUE(tier->Write({4, 4}, Payload(2000, 4)).ok());
}

// Issue 18, hole 4: with recover off the tier starts empty, deleting the blocks an earlier
// run left (nothing would index or evict them), and leaves other files alone.
TEST_F(ParallelFsTierTest, RecoverOffDeletesTheBlocksOfAnEarlierRun) {
  {
    auto tier = Open({.capacity_bytes = 5000});
    ASSERT_TRUE(tier->Write({1, 1}, Payload(1000, 1)).ok());
    ASSERT_TRUE(tier->Write({2, 2}, Payload(2000, 2)).ok());
  }
  const fs::path stranger = BlockPath({1, 1}).parent_path() / "notes.txt";
  WriteFile(stranger, {'h', 'i'});
  auto tier = Open({.capacity_bytes = 5000, .recover = false});
  ASSERT_NE(tier, nullptr);
  EXPECT_EQ(tier->GetStats().blocks, 0u);
  EXPECT_EQ(tier->GetStats().used_bytes, 0u);
  EXPECT_FALSE(fs::exists(BlockPath({1, 1})));
  EXPECT_FALSE(fs::exists(BlockPath({2, 2})));
  EXPECT_TRUE(fs::exists(stranger));
  ASSERT_TRUE(tier->Write({3, 3}, Payload(5000, 3)).ok());  // the whole capacity is free
  Result<std::vector<BlockKey>> keys = tier->ListKeys();
  ASSERT_TRUE(keys.ok()) << keys.status().ToString();
  EXPECT_EQ(*keys, (std::vector<BlockKey>{BlockKey{3, 3}}));
}

TEST_F(ParallelFsTierTest, EveryFsyncPolicyAndShardDepthRoundTrips) {
  for (const FsyncPolicy policy : {FsyncPolicy::kNever, FsyncPolicy::kFile, FsyncPolicy::kFileAndDir}) {
    for (const int levels : {0, 1, 2, 4}) {
      SCOPED_TRACE(testing::Message() << "fsync " << static_cast<int>(policy) << ", levels " << levels);
      const fs::path dir = root_ / ("p" + std::to_string(static_cast<int>(policy)) + "l" + std::to_string(levels));
      auto tier = Open({.directory = dir.string(), .shard_levels = levels, .fsync = policy});
      ASSERT_NE(tier, nullptr);
      ASSERT_TRUE(tier->Write({7, 7}, Payload(100, 1)).ok());
      ASSERT_TRUE(tier->Write({7, 7}, Payload(200, 2)).ok());
      std::vector<std::byte> out(200);
      ASSERT_TRUE(tier->Read({7, 7}, out).ok());
      EXPECT_EQ(out, Payload(200, 2));
      EXPECT_EQ(FilesEndingWith(dir, ".blk").size(), 1u);
      tier.reset();
      EXPECT_EQ(Open({.directory = dir.string(), .shard_levels = levels})->GetStats().used_bytes, 200u);
    }
  }
}

TEST_F(ParallelFsTierTest, BadOptionsAreRefused) {
  EXPECT_EQ(NewParallelFsTier({}).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(NewParallelFsTier({.directory = dir_.string(), .shard_levels = 5}).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(NewParallelFsTier({.directory = dir_.string(), .fsync = static_cast<FsyncPolicy>(9)}).status().code(),
            StatusCode::kInvalidArgument);
  // A path through a regular file cannot be made a directory (root ignores permission bits).
  WriteFile(root_ / "file", {'x'});
  EXPECT_EQ(NewParallelFsTier({.directory = (root_ / "file" / "tier").string()}).status().code(),
            StatusCode::kIoError);
  EXPECT_EQ(NewParallelFsTier({.directory = (root_ / "file").string()}).status().code(), StatusCode::kIoError);
}

TEST_F(ParallelFsTierTest, FullFilesystemIsResourceExhaustedAndKeepsEarlierBlocks) {
  fs::create_directories(dir_);
  if (::mount("tmpfs", dir_.c_str(), "tmpfs", 0, "size=1m") != 0) {
    GTEST_SKIP() << "cannot mount a 1 MiB tmpfs here (" << std::strerror(errno) << "); needs root";
  }
  mounted_ = true;
  auto tier = Open();
  std::size_t written = 0;
  Status status;
  while (written < 10 && (status = tier->Write({written, 1}, Payload(300 * 1024, 1))).ok()) ++written;
  ASSERT_EQ(status.code(), StatusCode::kResourceExhausted) << status.ToString();
  ASSERT_GT(written, 0u);
  EXPECT_NE(status.message().find("full"), std::string::npos);
  // A replace that does not fit keeps the old block.
  EXPECT_EQ(tier->Write({0, 1}, Payload(900 * 1024, 2)).code(), StatusCode::kResourceExhausted);
  EXPECT_TRUE(FilesEndingWith(dir_, ".tmp").empty());
  std::vector<std::byte> out(300 * 1024);
  for (std::size_t i = 0; i < written; ++i) {
    ASSERT_TRUE(tier->Read({i, 1}, out).ok());
    EXPECT_EQ(out, Payload(300 * 1024, 1));
  }
  EXPECT_EQ(tier->GetStats().blocks, written);
  EXPECT_EQ(tier->GetStats().write_failures, 2u);
}

TEST_F(ParallelFsTierTest, ConcurrentWriterAndReaderOfOneKeyNeverSeeATornBlock) {
  auto tier = Open({.fsync = FsyncPolicy::kNever});
  const BlockKey key{9, 9};
  const std::vector<std::byte> a = Payload(64 * 1024, 1), b = Payload(48 * 1024, 2);
  ASSERT_TRUE(tier->Write(key, a).ok());
  std::atomic<bool> done{false};
  std::thread writer([&] {
    for (int i = 0; i < 300; ++i) ASSERT_TRUE(tier->Write(key, i % 2 == 0 ? b : a).ok());
    done = true;
  });
  std::vector<std::byte> out(64 * 1024);
  int reads = 0;
  while (!done || reads == 0) {
    Result<std::size_t> read = tier->Read(key, out);
    ASSERT_TRUE(read.ok()) << read.status().ToString();
    const std::vector<std::byte>& expected = *read == a.size() ? a : b;
    ASSERT_EQ(*read, expected.size());
    ASSERT_TRUE(std::equal(expected.begin(), expected.end(), out.begin()));
    ++reads;
  }
  writer.join();
  EXPECT_EQ(tier->GetStats().checksum_failures, 0u);
  EXPECT_TRUE(FilesEndingWith(dir_, ".tmp").empty());
}

TEST_F(ParallelFsTierTest, ConcurrentWritesAndEvictsKeepAccountingExact) {
  auto tier = Open({.capacity_bytes = kCapacity, .fsync = FsyncPolicy::kNever});
  std::vector<std::thread> threads;
  for (uint64_t t = 0; t < 4; ++t) {
    threads.emplace_back([&tier, t] {
      for (uint64_t i = 0; i < 200; ++i) {
        const BlockKey key{(i * 7 + t) % 6, 0};
        if (i % 3 == 2) {
          (void)tier->Evict(key);
        } else {
          const Status status = tier->Write(key, Payload(512 + 256 * ((i + t) % 5), 3));
          ASSERT_TRUE(status.ok() || status.code() == StatusCode::kResourceExhausted) << status.ToString();
        }
        ASSERT_LE(tier->GetStats().used_bytes, kCapacity);
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  uint64_t on_disk = 0, blocks = 0;
  for (uint64_t k = 0; k < 6; ++k) {
    if (const std::optional<std::size_t> size = tier->Size({k, 0})) {
      on_disk += *size;
      ++blocks;
    }
  }
  const TierStats stats = tier->GetStats();
  EXPECT_EQ(stats.used_bytes, on_disk);
  EXPECT_EQ(stats.blocks, blocks);
  EXPECT_TRUE(FilesEndingWith(dir_, ".tmp").empty());
}

// Issue 16: several nodes on one directory with `shared: true`. Two instances in one process
// stand for two nodes: they share nothing but the directory.
TEST_F(ParallelFsTierTest, SharedTierReportsSharedAndAnotherNodeReadsItsBlocks) {
  auto a = Open({.shared = true});
  auto b = Open({.shared = true});
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  EXPECT_TRUE(a->shared());
  EXPECT_FALSE(Open()->shared());
  const BlockKey key{0x5151, 16};
  ASSERT_TRUE(a->Write(key, Payload(3000, 5)).ok());
  EXPECT_EQ(b->Size(key), 3000u);  // B sees A's file
  std::vector<std::byte> out(3000);
  Result<std::size_t> read = b->Read(key, out);
  ASSERT_TRUE(read.ok()) << read.status().ToString();
  EXPECT_EQ(out, Payload(3000, 5));
  EXPECT_EQ(a->GetStats().used_bytes, 3000u);  // each node counts only what it wrote
  EXPECT_EQ(b->GetStats().used_bytes, 0u);
  EXPECT_EQ(b->GetStats().blocks, 0u);
}

TEST_F(ParallelFsTierTest, SharedEvictForgetsLocallyAndLeavesTheFile) {
  auto a = Open({.capacity_bytes = 4000, .shared = true});
  auto b = Open({.capacity_bytes = 4000, .shared = true});
  const BlockKey key{7, 1};
  ASSERT_TRUE(a->Write(key, Payload(3000, 1)).ok());
  ASSERT_TRUE(b->Evict(key).ok());  // B never wrote it: nothing to forget, the file stays
  ASSERT_TRUE(a->Evict(key).ok());  // even the writer's eviction only forgets
  EXPECT_TRUE(fs::exists(BlockPath(key)));
  std::vector<std::byte> out(3000);
  ASSERT_TRUE(a->Read(key, out).ok());
  EXPECT_EQ(out, Payload(3000, 1));
  EXPECT_EQ(a->GetStats().used_bytes, 0u);
  EXPECT_EQ(a->GetStats().evictions, 1u);
  ASSERT_TRUE(a->Write({8, 1}, Payload(4000, 2)).ok());  // the forgotten bytes are free again
  EXPECT_EQ(a->Evict({9, 9}).code(), StatusCode::kNotFound);
}

TEST_F(ParallelFsTierTest, SharedOpenCountsAndDeletesNothing) {
  {
    auto a = Open({.shared = true});
    ASSERT_TRUE(a->Write({1, 1}, Payload(1000, 1)).ok());
    ASSERT_TRUE(a->Write({2, 2}, Payload(2000, 2)).ok());
  }
  fs::create_directories(BlockPath({3, 3}).parent_path());
  WriteFile(BlockPath({3, 3}), {'K', 'V'});  // damaged, or another node's write in an odd state
  for (const bool recover : {true, false}) {
    SCOPED_TRACE(recover);
    Result<std::unique_ptr<Tier>> c = NewParallelFsTier({.directory = dir_.string(), .recover = recover, .shared = true});
    if (!recover) {  // would delete every node's blocks
      EXPECT_EQ(c.status().code(), StatusCode::kInvalidArgument);
      EXPECT_NE(c.status().message().find("recover"), std::string::npos);
      continue;
    }
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    EXPECT_EQ((*c)->GetStats().used_bytes, 0u);
    EXPECT_EQ((*c)->GetStats().blocks, 0u);
    EXPECT_TRUE((*c)->ListKeys()->empty());
    EXPECT_EQ((*c)->GetStats().checksum_failures, 0u);
  }
  EXPECT_TRUE(fs::exists(BlockPath({1, 1})));
  EXPECT_TRUE(fs::exists(BlockPath({2, 2})));
  EXPECT_TRUE(fs::exists(BlockPath({3, 3})));
}

TEST_F(ParallelFsTierTest, SharedOpenLeavesAnotherProcesssTemporary) {
  // A Write in flight on another host: its pid and nonce are not ours.
  const fs::path shard = BlockPath({1, 1}).parent_path();
  fs::create_directories(shard);
  const fs::path temp = shard / "00000000000000010000000000000001.4242.0123456789abcdef.0.tmp";
  WriteFile(temp, {'x'});
  auto tier = Open({.shared = true});
  ASSERT_NE(tier, nullptr);
  EXPECT_TRUE(fs::exists(temp));
  ASSERT_TRUE(tier->Write({1, 1}, Payload(100, 1)).ok());  // a temporary of its own, renamed
  EXPECT_EQ(FilesEndingWith(dir_, ".tmp"), std::vector<fs::path>{temp});
  tier.reset();
  Open();  // an unshared open still removes every stale temporary (today's rule)
  EXPECT_FALSE(fs::exists(temp));
}

TEST_F(ParallelFsTierTest, SharedBlockAJanitorDeletedIsNotFoundAndForgotten) {
  auto a = Open({.shared = true});
  auto b = Open({.shared = true});
  ASSERT_TRUE(a->Write({4, 4}, Payload(1000, 4)).ok());
  ASSERT_TRUE(fs::remove(BlockPath({4, 4})));  // the janitor
  std::vector<std::byte> out(1000);
  EXPECT_EQ(b->Read({4, 4}, out).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(a->Read({4, 4}, out).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(a->Size({4, 4}), std::nullopt);
  EXPECT_EQ(a->GetStats().used_bytes, 0u);
  EXPECT_EQ(a->GetStats().blocks, 0u);
}

}  // namespace
}  // namespace kvtier
