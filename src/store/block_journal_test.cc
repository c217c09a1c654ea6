#include "store/block_journal.h"

#include <filesystem>
#include <fstream>
#include <map>
#include <thread>

#include <gtest/gtest.h>

namespace kvtier {
namespace {

class BlockJournalTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = (std::filesystem::temp_directory_path() / "kvtier-journal-XXXXXX").string();
    ASSERT_NE(::mkdtemp(dir_.data()), nullptr);
    path_ = dir_ + "/blocks.journal";
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::string dir_, path_;
};

JournalRecord Put(uint64_t n, std::optional<BlockKey> parent) {
  return {.kind = JournalRecord::Kind::kPut,
          .key = {n, ~n},
          .parent = parent,
          .tokens = static_cast<uint32_t>(16 + n),
          .bytes = static_cast<uint32_t>(4096 * n + 1),
          .type = static_cast<BlockType>(n % 4),
          .transition = static_cast<TransitionType>((n / 4) % 4),
          .recompute_seconds = 0.25 * static_cast<double>(n)};
}

void ExpectSame(const JournalRecord& a, const JournalRecord& b) {
  EXPECT_EQ(a.kind, b.kind);
  EXPECT_EQ(a.key, b.key);
  EXPECT_EQ(a.parent, b.parent);
  EXPECT_EQ(a.tokens, b.tokens);
  EXPECT_EQ(a.bytes, b.bytes);
  EXPECT_EQ(a.type, b.type);
  EXPECT_EQ(a.transition, b.transition);
  EXPECT_EQ(a.recompute_seconds, b.recompute_seconds);
}

TEST_F(BlockJournalTest, CreateAppendReadRoundTrip) {
  const std::vector<JournalRecord> initial = {Put(1, std::nullopt), Put(2, BlockKey{1, ~1ull})};
  {
    Result<std::unique_ptr<BlockJournal>> journal = BlockJournal::Create(path_, initial, /*sync=*/true);
    ASSERT_TRUE(journal.ok()) << journal.status().ToString();
    const std::vector<JournalRecord> more = {Put(7, BlockKey{2, ~2ull}),
                                             {.kind = JournalRecord::Kind::kDrop, .key = {1, ~1ull}}};
    ASSERT_TRUE((*journal)->Append(more, /*durable=*/true).ok());
    ASSERT_TRUE((*journal)->Sync().ok());
    EXPECT_EQ((*journal)->records(), 4u);
  }
  EXPECT_EQ(std::filesystem::file_size(path_), BlockJournal::kHeaderBytes + 4 * BlockJournal::kRecordBytes);
  Result<BlockJournal::Contents> read = BlockJournal::Read(path_);
  ASSERT_TRUE(read.ok()) << read.status().ToString();
  ASSERT_EQ(read->records.size(), 4u);
  EXPECT_EQ(read->ignored_bytes, 0u);
  ExpectSame(read->records[0], initial[0]);
  ExpectSame(read->records[1], initial[1]);
  ExpectSame(read->records[2], Put(7, BlockKey{2, ~2ull}));
  EXPECT_EQ(read->records[3].kind, JournalRecord::Kind::kDrop);
  EXPECT_EQ(read->records[3].key, (BlockKey{1, ~1ull}));
  EXPECT_FALSE(std::filesystem::exists(path_ + ".tmp"));
}

TEST_F(BlockJournalTest, ReadStopsAtATornOrCorruptRecord) {
  std::vector<JournalRecord> records;
  for (uint64_t n = 1; n <= 5; ++n) records.push_back(Put(n, std::nullopt));
  ASSERT_TRUE(BlockJournal::Create(path_, records, false).ok());
  const uint64_t full = std::filesystem::file_size(path_);
  // A torn tail: half of the last record.
  std::filesystem::resize_file(path_, full - BlockJournal::kRecordBytes / 2);
  Result<BlockJournal::Contents> read = BlockJournal::Read(path_);
  ASSERT_TRUE(read.ok()) << read.status().ToString();
  EXPECT_EQ(read->records.size(), 4u);
  EXPECT_EQ(read->ignored_bytes, BlockJournal::kRecordBytes - BlockJournal::kRecordBytes / 2);
  // A flipped bit in record 2: it and everything after it are ignored.
  {
    std::fstream file(path_, std::ios::in | std::ios::out | std::ios::binary);
    file.seekp(static_cast<std::streamoff>(BlockJournal::kHeaderBytes + 2 * BlockJournal::kRecordBytes + 20));
    file.put('\x5a');
  }
  read = BlockJournal::Read(path_);
  ASSERT_TRUE(read.ok());
  EXPECT_EQ(read->records.size(), 2u);
  EXPECT_EQ(read->ignored_bytes, std::filesystem::file_size(path_) - BlockJournal::kHeaderBytes -
                                     2 * BlockJournal::kRecordBytes);
}

TEST_F(BlockJournalTest, OpenExistingCutsTheTornTailAndAppendsAfterIt) {
  std::vector<JournalRecord> records;
  for (uint64_t n = 1; n <= 3; ++n) records.push_back(Put(n, std::nullopt));
  ASSERT_TRUE(BlockJournal::Create(path_, records, false).ok());
  std::filesystem::resize_file(path_, std::filesystem::file_size(path_) - 10);  // record 3 torn
  Result<std::unique_ptr<BlockJournal>> journal = BlockJournal::OpenExisting(path_, false);
  ASSERT_TRUE(journal.ok()) << journal.status().ToString();
  EXPECT_EQ((*journal)->records(), 2u);
  const std::vector<JournalRecord> more = {Put(9, std::nullopt)};
  ASSERT_TRUE((*journal)->Append(more, true).ok());
  Result<BlockJournal::Contents> read = BlockJournal::Read(path_);
  ASSERT_TRUE(read.ok());
  ASSERT_EQ(read->records.size(), 3u);
  EXPECT_EQ(read->records[2].key, more[0].key);
  EXPECT_EQ(read->ignored_bytes, 0u);
  EXPECT_EQ(BlockJournal::OpenExisting(dir_ + "/absent", false).status().code(), StatusCode::kNotFound);
}

TEST_F(BlockJournalTest, MissingFileIsNotFoundAndForeignFileIsCorruption) {
  EXPECT_EQ(BlockJournal::Read(path_).status().code(), StatusCode::kNotFound);
  std::ofstream(path_) << "definitely not a journal";
  Result<BlockJournal::Contents> read = BlockJournal::Read(path_);
  EXPECT_EQ(read.status().code(), StatusCode::kCorruption);
  EXPECT_NE(read.status().message().find(path_), std::string::npos) << read.status().message();
  std::ofstream(path_, std::ios::trunc) << "KV";  // shorter than a header
  EXPECT_EQ(BlockJournal::Read(path_).status().code(), StatusCode::kCorruption);
}

// Compact keeps what recovery would index (the last record of each key, when it is a put)
// while another thread goes on appending: nothing appended before, during or after it is lost.
TEST_F(BlockJournalTest, CompactKeepsTheLiveRecordsWhileAppendsGoOn) {
  Result<std::unique_ptr<BlockJournal>> journal = BlockJournal::Create(path_, {}, /*sync=*/false);
  ASSERT_TRUE(journal.ok()) << journal.status().ToString();
  std::map<uint64_t, bool> live;  // n -> put last (true) or dropped last (false)
  auto append = [&](uint64_t n, bool put) {
    const JournalRecord r = put ? Put(n, std::nullopt) : JournalRecord{.kind = JournalRecord::Kind::kDrop, .key = {n, ~n}};
    ASSERT_TRUE((*journal)->Append({&r, 1}, true).ok());
    live[n] = put;
  };
  for (uint64_t n = 1; n <= 2000; ++n) append(n % 300 + 1, n % 3 != 0);
  std::thread appender([&] {
    for (uint64_t n = 1; n <= 2000; ++n) append(n % 500 + 1000, n % 5 != 0);
  });
  ASSERT_TRUE((*journal)->Compact().ok());
  appender.join();
  ASSERT_TRUE((*journal)->Compact().ok());
  for (uint64_t n = 1; n <= 100; ++n) append(n, true);

  Result<BlockJournal::Contents> read = BlockJournal::Read(path_);
  ASSERT_TRUE(read.ok()) << read.status().ToString();
  EXPECT_EQ(read->ignored_bytes, 0u);
  std::map<uint64_t, JournalRecord> found;
  for (const JournalRecord& r : read->records) found[r.key.hi] = r;
  for (const auto& [n, put] : live) {
    if (!put) {
      EXPECT_TRUE(!found.contains(n) || found[n].kind == JournalRecord::Kind::kDrop) << n;
      continue;
    }
    ASSERT_TRUE(found.contains(n)) << "record " << n << " was lost";
    ExpectSame(found[n], Put(n, std::nullopt));
  }
  std::size_t puts = 0;
  for (const auto& [n, put] : live) puts += put;
  EXPECT_LE(read->records.size(), puts + 100) << "the journal was not compacted";
  EXPECT_EQ((*journal)->records(), read->records.size());
}

// Version 2 added the tiers holding a block; a version 1 journal (written before) still
// reads, its records held by the persist tier (tiers 0), and the new field round-trips.
TEST_F(BlockJournalTest, ReadsVersionOneAndRoundTripsTheTiers) {
  JournalRecord held = Put(3, std::nullopt);
  held.tiers = 0b1010;
  ASSERT_TRUE(BlockJournal::Create(path_, std::vector<JournalRecord>{held}, false).ok());
  Result<BlockJournal::Contents> read = BlockJournal::Read(path_);
  ASSERT_TRUE(read.ok()) << read.status().ToString();
  ASSERT_EQ(read->records.size(), 1u);
  EXPECT_EQ(read->records[0].tiers, 0b1010);

  ASSERT_TRUE(BlockJournal::Create(path_, std::vector<JournalRecord>{Put(4, std::nullopt)}, false).ok());
  {
    std::fstream file(path_, std::ios::in | std::ios::out | std::ios::binary);
    file.seekp(8);
    const char one[4] = {1, 0, 0, 0};  // the header's u32 version
    file.write(one, 4);
  }
  read = BlockJournal::Read(path_);
  ASSERT_TRUE(read.ok()) << read.status().ToString();
  ASSERT_EQ(read->records.size(), 1u);
  ExpectSame(read->records[0], Put(4, std::nullopt));
  EXPECT_EQ(read->records[0].tiers, 0);
}

}  // namespace
}  // namespace kvtier
