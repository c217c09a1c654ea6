#include "kvtier/checkpoint.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <set>

#include <gtest/gtest.h>

#include "dedup/checkpoint_format.h"
#include "dedup/checkpoint_test_util.h"

namespace kvtier {
namespace {

using checkpoint_testing::AddTestBlocks;
using checkpoint_testing::DumpCache;

std::unique_ptr<PayloadStore> NewStore(PayloadStoreOptions options = {}) {
  return std::move(PayloadStore::Create(options)).value();
}

std::vector<char> ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void WriteAll(const std::string& path, const std::vector<char>& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// Recomputes the trailer, so a test can make a well-checksummed file with bad contents.
void Reseal(std::vector<char>& file) {
  const std::size_t body = file.size() - checkpoint_format::kTrailerBytes;
  const uint64_t checksum = PayloadChecksum(std::as_bytes(std::span(file).first(body)));
  for (std::size_t i = 0; i < 8; ++i) file[body + i] = static_cast<char>(checksum >> (8 * i));
}

class CheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string dir = (std::filesystem::temp_directory_path() / "kvtier-checkpoint-XXXXXX").string();
    ASSERT_NE(::mkdtemp(dir.data()), nullptr);
    dir_ = dir;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  // A small cache: a chain of two with distinct payloads, a metadata-only child, and a
  // second root sharing the first root's payload.
  void FillSmall(PrefixIndex& index, PayloadStore& store) {
    const BlockKey a{1, 1}, b{2, 2}, c{3, 3}, d{4, 4};
    const BlockMeta meta{.size_bytes = 7, .type = BlockType::kToolContext, .fingerprint = 42, .tiers = 0x5};
    ASSERT_TRUE(index.Insert(std::vector{a, b, c}, std::vector(3, meta), 10).ok());
    ASSERT_TRUE(index.Insert({&d, 1}, {&meta, 1}, 11).ok());
    ASSERT_TRUE(store.Put(a, std::as_bytes(std::span("payload-a", 9))).ok());
    ASSERT_TRUE(store.Put(b, std::as_bytes(std::span("payload-b", 9))).ok());
    ASSERT_TRUE(store.Put(d, std::as_bytes(std::span("payload-a", 9))).ok());
  }

  // Restores into fresh targets; on error checks that they were left empty.
  Status Restore(checkpoint_testing::CacheDump* dump = nullptr) {
    PrefixIndex index;
    auto store = NewStore();
    Result<CheckpointStats> stats = RestoreCheckpoint(dir_, &index, store.get());
    if (!stats.ok()) {
      EXPECT_EQ(index.size(), 0u);
      EXPECT_EQ(store->GetStats().blocks, 0u);
      return stats.status();
    }
    if (dump != nullptr) *dump = DumpCache(index, *store);
    return Status::Ok();
  }

  std::string dir_;
};

TEST_F(CheckpointTest, RoundTripKeepsEveryBlockAndWritesSharedPayloadsOnce) {
  PrefixIndex index;
  auto store = NewStore();
  ASSERT_TRUE(AddTestBlocks(index, *store, 0, 60));
  Result<CheckpointStats> written = WriteCheckpoint(dir_, index, *store);
  ASSERT_TRUE(written.ok()) << written.status().ToString();

  std::set<uint64_t> variants;
  uint64_t with_payload = 0;
  for (uint64_t i = 0; i < 60; ++i) {
    if (!checkpoint_testing::TestBlockHasPayload(i)) continue;
    ++with_payload;
    variants.insert(i % checkpoint_testing::kPayloadVariants);
  }
  EXPECT_EQ(written->blocks, 60u);
  EXPECT_EQ(written->unique_payloads, variants.size());
  EXPECT_EQ(written->deduplicated_bytes, std::filesystem::file_size(CheckpointPath(dir_)));
  EXPECT_GT(written->raw_bytes, written->deduplicated_bytes);
  EXPECT_DOUBLE_EQ(written->saving, 1.0 - static_cast<double>(written->deduplicated_bytes) /
                                              static_cast<double>(written->raw_bytes));

  PrefixIndex restored_index;
  auto restored_store = NewStore();
  Result<CheckpointStats> restored = RestoreCheckpoint(dir_, &restored_index, restored_store.get());
  ASSERT_TRUE(restored.ok()) << restored.status().ToString();
  EXPECT_EQ(restored->raw_bytes, written->raw_bytes);
  EXPECT_EQ(restored->deduplicated_bytes, written->deduplicated_bytes);
  EXPECT_EQ(restored->unique_payloads, written->unique_payloads);
  EXPECT_EQ(DumpCache(restored_index, *restored_store), DumpCache(index, *store));
  EXPECT_EQ(restored_store->GetStats().blocks, with_payload);  // metadata-only blocks stay so
  EXPECT_EQ(restored_store->GetStats().unique_payloads, variants.size());
}

TEST_F(CheckpointTest, EmptyCacheRoundTrips) {
  PrefixIndex index;
  auto store = NewStore();
  ASSERT_TRUE(WriteCheckpoint(dir_, index, *store).ok());
  checkpoint_testing::CacheDump dump;
  ASSERT_TRUE(Restore(&dump).ok());
  EXPECT_TRUE(dump.empty());
}

TEST_F(CheckpointTest, MissingCheckpointOrDirectoryIsNotFound) {
  EXPECT_EQ(Restore().code(), StatusCode::kNotFound);
  PrefixIndex index;
  auto store = NewStore();
  const Result<CheckpointStats> written = WriteCheckpoint(dir_ + "/absent", index, *store);
  EXPECT_EQ(written.status().code(), StatusCode::kNotFound);
  EXPECT_NE(written.status().message().find("create it first"), std::string::npos);
}

TEST_F(CheckpointTest, RestoreNeedsEmptyTargets) {
  PrefixIndex index;
  auto store = NewStore();
  FillSmall(index, *store);
  ASSERT_TRUE(WriteCheckpoint(dir_, index, *store).ok());
  EXPECT_EQ(RestoreCheckpoint(dir_, &index, store.get()).status().code(), StatusCode::kFailedPrecondition);
}

TEST_F(CheckpointTest, NewCheckpointReplacesTheOldAndLeavesNoTemporaryFile) {
  PrefixIndex index;
  auto store = NewStore();
  ASSERT_TRUE(AddTestBlocks(index, *store, 0, 10));
  ASSERT_TRUE(WriteCheckpoint(dir_, index, *store).ok());
  ASSERT_TRUE(AddTestBlocks(index, *store, 10, 20));
  ASSERT_TRUE(WriteCheckpoint(dir_, index, *store).ok());
  checkpoint_testing::CacheDump dump;
  ASSERT_TRUE(Restore(&dump).ok());
  EXPECT_EQ(dump, DumpCache(index, *store));
  for (const auto& entry : std::filesystem::directory_iterator(dir_)) {
    EXPECT_EQ(entry.path().string().find(".tmp"), std::string::npos) << entry.path();
  }
}

TEST_F(CheckpointTest, DamagedStorePayloadIsNotWrittenAndThePreviousCheckpointStays) {
  PrefixIndex index;
  auto store = NewStore();
  FillSmall(index, *store);
  ASSERT_TRUE(WriteCheckpoint(dir_, index, *store).ok());
  const checkpoint_testing::CacheDump before = DumpCache(index, *store);
  ASSERT_TRUE(store->CorruptForTesting(BlockKey{2, 2}).ok());
  const Result<CheckpointStats> written = WriteCheckpoint(dir_, index, *store);
  ASSERT_EQ(written.status().code(), StatusCode::kCorruption);
  EXPECT_NE(written.status().message().find(BlockKey{2, 2}.ToHex()), std::string::npos);
  checkpoint_testing::CacheDump dump;
  ASSERT_TRUE(Restore(&dump).ok());
  EXPECT_EQ(dump, before);
}

TEST_F(CheckpointTest, EveryTruncationIsRefused) {
  PrefixIndex index;
  auto store = NewStore();
  FillSmall(index, *store);
  ASSERT_TRUE(WriteCheckpoint(dir_, index, *store).ok());
  const std::string path = CheckpointPath(dir_);
  const std::vector<char> file = ReadAll(path);
  for (std::size_t size = 0; size < file.size(); ++size) {
    WriteAll(path, {file.begin(), file.begin() + static_cast<std::ptrdiff_t>(size)});
    const Status status = Restore();
    EXPECT_EQ(status.code(), StatusCode::kCorruption) << size << ": " << status.ToString();
    EXPECT_NE(status.message().find(path), std::string::npos) << status.message();
  }
  WriteAll(path, {file.begin(), file.end() - 1});
  EXPECT_NE(Restore().message().find("truncated"), std::string::npos);
}

TEST_F(CheckpointTest, EveryDamagedByteIsRefused) {
  PrefixIndex index;
  auto store = NewStore();
  FillSmall(index, *store);
  ASSERT_TRUE(WriteCheckpoint(dir_, index, *store).ok());
  const std::string path = CheckpointPath(dir_);
  const std::vector<char> file = ReadAll(path);
  for (std::size_t at = 0; at < file.size(); ++at) {
    for (const int bit : {0, 7}) {
      std::vector<char> damaged = file;
      damaged[at] = static_cast<char>(damaged[at] ^ (1 << bit));
      WriteAll(path, damaged);
      const Status status = Restore();
      const StatusCode code = status.code();
      EXPECT_TRUE(code == StatusCode::kCorruption || code == StatusCode::kInvalidArgument ||
                  code == StatusCode::kUnsupported)
          << "byte " << at << " bit " << bit << ": " << status.ToString();
      if (at >= checkpoint_format::kMagic.size() + 4) {  // past magic and version
        EXPECT_EQ(code, StatusCode::kCorruption) << at;
      }
    }
  }
}

TEST_F(CheckpointTest, ForeignFileAndFutureVersionAreNamed) {
  PrefixIndex index;
  auto store = NewStore();
  FillSmall(index, *store);
  ASSERT_TRUE(WriteCheckpoint(dir_, index, *store).ok());
  const std::string path = CheckpointPath(dir_);
  const std::vector<char> file = ReadAll(path);

  WriteAll(path, std::vector<char>{'{', '"', 'a', '"', ':', '1', '}'});
  Status status = Restore();
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("not a kvtier checkpoint"), std::string::npos) << status.message();

  std::vector<char> future = file;
  future[8] = 2;  // the version field
  Reseal(future);
  WriteAll(path, future);
  status = Restore();
  EXPECT_EQ(status.code(), StatusCode::kUnsupported);
  EXPECT_NE(status.message().find("version 2 is newer"), std::string::npos) << status.message();
}

TEST_F(CheckpointTest, ChildBeforeParentIsCorruptionEvenWithAGoodChecksum) {
  PrefixIndex index;
  auto store = NewStore();
  FillSmall(index, *store);
  ASSERT_TRUE(WriteCheckpoint(dir_, index, *store).ok());
  const std::string path = CheckpointPath(dir_);
  std::vector<char> file = ReadAll(path);
  // Swap the records of the root a {1, 1} and its child b {2, 2}: a record starts with key.hi.
  const auto record_of = [&file](char hi) {
    for (std::size_t at = checkpoint_format::kHeaderBytes;; at += checkpoint_format::kBlockRecordBytes) {
      if (file[at] == hi) return file.begin() + static_cast<std::ptrdiff_t>(at);
    }
  };
  const auto a = record_of(1);
  const auto b = record_of(2);
  ASSERT_LT(a, b);
  std::swap_ranges(a, a + checkpoint_format::kBlockRecordBytes, b);
  Reseal(file);
  WriteAll(path, file);
  const Status status = Restore();
  EXPECT_EQ(status.code(), StatusCode::kCorruption);
  EXPECT_NE(status.message().find("does not come before it"), std::string::npos) << status.message();
}

TEST_F(CheckpointTest, RestoreIntoAStoreTooSmallLeavesBothTargetsEmpty) {
  PrefixIndex index;
  auto store = NewStore();
  ASSERT_TRUE(AddTestBlocks(index, *store, 0, 30));
  ASSERT_TRUE(WriteCheckpoint(dir_, index, *store).ok());
  PrefixIndex restored_index;
  auto small = NewStore({.capacity_bytes = 20000});
  const Result<CheckpointStats> restored = RestoreCheckpoint(dir_, &restored_index, small.get());
  EXPECT_EQ(restored.status().code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(restored_index.size(), 0u);
  EXPECT_EQ(small->GetStats().blocks, 0u);
  EXPECT_EQ(small->GetStats().stored_bytes, 0u);
}

}  // namespace
}  // namespace kvtier
