#include "tier/nvme_tier.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>

#include <gtest/gtest.h>


namespace kvtier {
namespace {

std::vector<std::byte> Payload(std::size_t size, uint8_t seed) {
  std::vector<std::byte> bytes(size);
  for (std::size_t i = 0; i < size; ++i) bytes[i] = static_cast<std::byte>((i * 131 + seed) & 0xff);
  return bytes;
}

BlockKey Key(uint64_t n) { return {n * 0x9E3779B97F4A7C15ull, n + 1}; }

class ScratchDir {
 public:
  ScratchDir() {
    static int counter = 0;
    path_ = (std::filesystem::path(::testing::TempDir()) /
             ("kvtier-nvme-" + std::to_string(::getpid()) + "-" + std::to_string(counter++)))
                .string();
    std::filesystem::create_directories(path_);
  }
  ~ScratchDir() { std::filesystem::remove_all(path_); }
  std::string File(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

std::unique_ptr<NvmeTier> OpenTier(const NvmeTierOptions& options) {
  Result<std::unique_ptr<NvmeTier>> tier = NvmeTier::Open(options);
  EXPECT_TRUE(tier.ok()) << tier.status().ToString();
  return tier.ok() ? std::move(*tier) : nullptr;
}

// Overwrites `bytes` at `offset` of `path`, as a stray write or a media error would.
void Scribble(const std::string& path, uint64_t offset, std::span<const std::byte> bytes) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
  ASSERT_GE(fd, 0) << path;
  ASSERT_EQ(::pwrite(fd, bytes.data(), bytes.size(), static_cast<off_t>(offset)), static_cast<ssize_t>(bytes.size()));
  ASSERT_EQ(::fsync(fd), 0);
  ::close(fd);
}

// Both I/O engines: io_uring (where the kernel allows it) and pread/pwrite.
class NvmeTierIo : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override {
    tier_ = OpenTier({.files = {dir_.File("a.slots"), dir_.File("b.slots")},
                      .capacity_bytes = 16u << 20,
                      .use_io_uring = GetParam()});
    ASSERT_NE(tier_, nullptr);
    if (GetParam() && tier_->io_engine() != "io_uring") {
      GTEST_SKIP() << "io_uring refused here: " << tier_->io_fallback_reason();
    }
    if (!GetParam()) {
      EXPECT_EQ(tier_->io_engine(), "pread");
    }
    RecordProperty("direct_io", tier_->direct_io() ? "true" : "false");
    RecordProperty("io_engine", std::string(tier_->io_engine()));
  }

  ScratchDir dir_;
  std::unique_ptr<NvmeTier> tier_;
};

TEST_P(NvmeTierIo, WritesAndReadsBack) {
  const auto a = Payload(100000, 1);
  ASSERT_TRUE(tier_->Write(Key(1), a).ok());
  std::vector<std::byte> out(a.size());
  Result<std::size_t> n = tier_->Read(Key(1), out);
  ASSERT_TRUE(n.ok()) << n.status().ToString();
  EXPECT_EQ(*n, a.size());
  EXPECT_EQ(out, a);
  const TierStats stats = tier_->GetStats();
  EXPECT_EQ(stats.capacity_bytes, (16u << 20) - 2 * NvmeTier::MetadataBytes(8u << 20));  // two files
  EXPECT_EQ(stats.used_bytes, a.size());
  EXPECT_EQ(stats.reads, 1u);
}

TEST_P(NvmeTierIo, BatchesOf64Blocks) {
  std::vector<std::vector<std::byte>> payloads;
  std::vector<Tier::WriteOp> writes;
  for (uint8_t i = 0; i < 64; ++i) payloads.push_back(Payload(32768 + i * 100u, i));
  for (uint8_t i = 0; i < 64; ++i) writes.push_back({Key(100 + i), payloads[i]});
  for (const Status& s : tier_->WriteBatch(writes)) ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(tier_->GetStats().blocks, 64u);

  std::vector<std::vector<std::byte>> outs(65, std::vector<std::byte>(40000));
  std::vector<Tier::ReadOp> reads;
  for (uint8_t i = 0; i < 65; ++i) reads.push_back({Key(100 + i), outs[i]});
  const auto results = tier_->ReadBatch(reads);
  ASSERT_EQ(results.size(), 65u);
  for (uint8_t i = 0; i < 64; ++i) {
    ASSERT_TRUE(results[i].ok()) << int{i} << ": " << results[i].status().ToString();
    EXPECT_EQ(*results[i], payloads[i].size());
    EXPECT_TRUE(std::equal(payloads[i].begin(), payloads[i].end(), outs[i].begin())) << int{i};
  }
  EXPECT_EQ(results[64].status().code(), StatusCode::kNotFound);
  // Blocks spread over both files.
  EXPECT_NE(tier_->LocationForTesting(Key(100))->path, tier_->LocationForTesting(Key(101))->path);
}

TEST_P(NvmeTierIo, CorruptedPayloadIsDroppedNeverReturned) {
  const auto a = Payload(8192, 3);
  ASSERT_TRUE(tier_->Write(Key(2), a).ok());
  const std::optional<NvmeTier::Location> at = tier_->LocationForTesting(Key(2));
  ASSERT_TRUE(at.has_value());
  const std::byte flipped[1] = {~a[100]};
  Scribble(at->path, at->offset + NvmeTier::kHeaderBytes + 100, flipped);

  std::vector<std::byte> out(a.size(), std::byte{0x5a});
  EXPECT_EQ(tier_->Read(Key(2), out).status().code(), StatusCode::kCorruption);
  EXPECT_EQ(out, std::vector<std::byte>(a.size(), std::byte{0}));  // none of the bad bytes handed back
  EXPECT_EQ(tier_->Size(Key(2)), std::nullopt);
  const TierStats stats = tier_->GetStats();
  EXPECT_EQ(stats.checksum_failures, 1u);
  EXPECT_EQ(stats.blocks, 0u);
  EXPECT_EQ(stats.used_bytes, 0u);
  EXPECT_EQ(tier_->Read(Key(2), out).status().code(), StatusCode::kNotFound);
}

TEST_P(NvmeTierIo, CorruptedHeaderIsDropped) {
  ASSERT_TRUE(tier_->Write(Key(3), Payload(4096, 4)).ok());
  const std::optional<NvmeTier::Location> at = tier_->LocationForTesting(Key(3));
  ASSERT_TRUE(at.has_value());
  const std::byte garbage[8] = {};
  Scribble(at->path, at->offset + 16, garbage);  // the key
  std::vector<std::byte> out(4096);
  EXPECT_EQ(tier_->Read(Key(3), out).status().code(), StatusCode::kCorruption);
  EXPECT_EQ(tier_->GetStats().checksum_failures, 1u);
}

TEST_P(NvmeTierIo, FullTierRefusesAndKeepsEarlierBlocks) {
  const auto block = Payload(1u << 20, 5);
  uint64_t stored = 0;
  Status last;
  for (uint64_t i = 0; i < 64 && (last = tier_->Write(Key(200 + i), block)).ok(); ++i) ++stored;
  EXPECT_EQ(last.code(), StatusCode::kResourceExhausted) << last.ToString();
  // 16 MiB in two files of 8 MiB; a 1 MiB block takes a 1 MiB + 4 KiB slot: 7 per file.
  EXPECT_EQ(stored, 14u);
  EXPECT_EQ(tier_->GetStats().write_failures, 1u);
  std::vector<std::byte> out(block.size());
  for (uint64_t i = 0; i < stored; ++i) {
    ASSERT_TRUE(tier_->Read(Key(200 + i), out).ok()) << i;
    EXPECT_EQ(out, block) << i;
  }
  ASSERT_TRUE(tier_->Evict(Key(203)).ok());
  EXPECT_TRUE(tier_->Write(Key(999), block).ok());
}

INSTANTIATE_TEST_SUITE_P(Engines, NvmeTierIo, ::testing::Values(true, false),
                         [](const auto& param_info) { return param_info.param ? std::string("IoUring") : std::string("Pread"); });

// Fails every request of the next batches with an errno, like a failing device.
class FailingIo final : public BlockIo {
 public:
  explicit FailingIo(int error) : error_(error) {}
  std::string_view name() const override { return "failing"; }
  void Run(std::span<IoRequest> requests) override {
    for (IoRequest& request : requests) request.error = error_;
  }

 private:
  const int error_;
};

TEST(NvmeTier, FailedWritesLeaveTheOldBlockReadable) {
  ScratchDir dir;
  std::unique_ptr<NvmeTier> tier = OpenTier({.files = {dir.File("a.slots")}, .capacity_bytes = 4u << 20});
  ASSERT_NE(tier, nullptr);
  const auto old_block = Payload(20000, 6);
  ASSERT_TRUE(tier->Write(Key(1), old_block).ok());

  std::unique_ptr<BlockIo> real = tier->ReplaceIoForTesting(std::make_unique<FailingIo>(EIO));
  const Status eio = tier->Write(Key(1), Payload(20000, 7));
  EXPECT_EQ(eio.code(), StatusCode::kIoError) << eio.ToString();
  EXPECT_NE(eio.message().find("Input/output error"), std::string::npos) << eio.message();
  (void)tier->ReplaceIoForTesting(std::make_unique<FailingIo>(ENOSPC));
  EXPECT_EQ(tier->Write(Key(1), Payload(20000, 8)).code(), StatusCode::kResourceExhausted);
  std::vector<std::byte> out(old_block.size());
  EXPECT_EQ(tier->Read(Key(1), out).status().code(), StatusCode::kIoError);  // a read error drops nothing
  (void)tier->ReplaceIoForTesting(std::move(real));

  ASSERT_TRUE(tier->Read(Key(1), out).ok());
  EXPECT_EQ(out, old_block);
  const TierStats stats = tier->GetStats();
  EXPECT_EQ(stats.write_failures, 2u);
  EXPECT_EQ(stats.blocks, 1u);
  EXPECT_EQ(stats.used_bytes, old_block.size());
  // The failed writes' slots went back: the tier still fills to the same count.
  EXPECT_TRUE(tier->Write(Key(2), Payload(20000, 9)).ok());
}

// Fails every write with EIO and passes reads to `real` (not owned): a device that went
// read-only, or whose writes time out.
class ReadOnlyIo final : public BlockIo {
 public:
  explicit ReadOnlyIo(BlockIo* real) : real_(real) {}
  std::string_view name() const override { return real_->name(); }
  void Run(std::span<IoRequest> requests) override {
    for (IoRequest& request : requests) {
      if (request.write) {
        request.error = EIO;
      } else {
        real_->Run({&request, 1});
      }
    }
  }

 private:
  BlockIo* const real_;
};

// Issue 18, hole 5: an evicted block whose header could not be zeroed would come back after
// a restart. The Evict reports it, the tier counts it, and the slot (stale header and all)
// is not handed to another block until a later eviction zeroes it.
TEST(NvmeTier, HeaderThatCannotBeZeroedFailsTheEvictAndKeepsItsSlotOutOfUse) {
  ScratchDir dir;
  const NvmeTierOptions options{.files = {dir.File("a.slots")}, .capacity_bytes = 4u << 20};
  std::unique_ptr<NvmeTier> tier = OpenTier(options);
  ASSERT_NE(tier, nullptr);
  ASSERT_TRUE(tier->Write(Key(1), Payload(8000, 1)).ok());
  ASSERT_TRUE(tier->Write(Key(2), Payload(8000, 2)).ok());
  const uint64_t stale = tier->LocationForTesting(Key(1))->offset;

  std::unique_ptr<BlockIo> real = tier->ReplaceIoForTesting(nullptr);
  (void)tier->ReplaceIoForTesting(std::make_unique<ReadOnlyIo>(real.get()));
  const Status evicted = tier->Evict(Key(1));
  EXPECT_EQ(evicted.code(), StatusCode::kIoError) << evicted.ToString();
  EXPECT_EQ(tier->Size(Key(1)), std::nullopt);
  EXPECT_EQ(tier->GetStats().evict_failures, 1u);
  (void)tier->ReplaceIoForTesting(std::move(real));

  ASSERT_TRUE(tier->Write(Key(3), Payload(8000, 3)).ok());
  EXPECT_NE(tier->LocationForTesting(Key(3))->offset, stale) << "a slot with a live-looking header was reused";
  // The next eviction zeroes the stale header too, and the slot serves again.
  ASSERT_TRUE(tier->Evict(Key(2)).ok());
  bool reused = false;
  for (uint64_t n = 4; n < 8 && !reused; ++n) {
    ASSERT_TRUE(tier->Write(Key(n), Payload(8000, 4)).ok());
    reused = tier->LocationForTesting(Key(n))->offset == stale;
  }
  EXPECT_TRUE(reused);
  tier.reset();
  tier = OpenTier(options);
  ASSERT_NE(tier, nullptr);
  std::vector<std::byte> out(8000);
  EXPECT_EQ(tier->Read(Key(1), out).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(tier->Read(Key(2), out).status().code(), StatusCode::kNotFound);
}

// Fails the writes that zero a slot header (a page of zeros) with EIO, and passes every
// other request to `real` (not owned).
class HeaderZeroingFailsIo final : public BlockIo {
 public:
  explicit HeaderZeroingFailsIo(BlockIo* real) : real_(real) {}
  std::string_view name() const override { return real_->name(); }
  void Run(std::span<IoRequest> requests) override {
    for (IoRequest& request : requests) {
      const bool zeroing = request.write && request.length == NvmeTier::kHeaderBytes &&
                           std::all_of(request.buffer, request.buffer + request.length,
                                       [](std::byte b) { return b == std::byte{0}; });
      if (zeroing) {
        request.error = EIO;
      } else {
        real_->Run({&request, 1});
      }
    }
  }

 private:
  BlockIo* const real_;
};

// A replaced block whose old header could not be zeroed before the process died is not
// brought back at the next restart once its successor is evicted.
TEST(NvmeTier, OlderVersionLeftOnDiskByACrashNeverComesBack) {
  ScratchDir dir;
  const NvmeTierOptions options{.files = {dir.File("a.slots")}, .capacity_bytes = 4u << 20};
  {
    std::unique_ptr<NvmeTier> tier = OpenTier(options);
    ASSERT_NE(tier, nullptr);
    ASSERT_TRUE(tier->Write(Key(1), Payload(8000, 1)).ok());
    std::unique_ptr<BlockIo> real = tier->ReplaceIoForTesting(nullptr);
    (void)tier->ReplaceIoForTesting(std::make_unique<HeaderZeroingFailsIo>(real.get()));
    ASSERT_TRUE(tier->Write(Key(1), Payload(8000, 2)).ok());
    EXPECT_EQ(tier->GetStats().evict_failures, 1u);
    (void)tier->ReplaceIoForTesting(std::move(real));
  }  // the process dies with the old header on disk
  std::vector<std::byte> out(8000);
  {
    std::unique_ptr<NvmeTier> tier = OpenTier(options);
    ASSERT_NE(tier, nullptr);
    ASSERT_TRUE(tier->Read(Key(1), out).ok());
    EXPECT_EQ(out, Payload(8000, 2));
    ASSERT_TRUE(tier->Evict(Key(1)).ok());
  }
  std::unique_ptr<NvmeTier> tier = OpenTier(options);
  ASSERT_NE(tier, nullptr);
  EXPECT_EQ(tier->Read(Key(1), out).status().code(), StatusCode::kNotFound) << "the replaced version came back";
  EXPECT_EQ(tier->recovered_blocks(), 0u);
}

// Runs `hook` once, before the first read batch reaches the real engine: lets a test change
// the tier between a Read's index lookup and its I/O, as a concurrent writer would.
class HookedIo final : public BlockIo {
 public:
  HookedIo(std::unique_ptr<BlockIo> real, std::function<void()> hook) : real_(std::move(real)), hook_(std::move(hook)) {}
  std::string_view name() const override { return real_->name(); }
  void Run(std::span<IoRequest> requests) override {
    if (hook_ && !requests.empty() && !requests[0].write) std::exchange(hook_, nullptr)();
    real_->Run(requests);
  }

 private:
  std::unique_ptr<BlockIo> real_;
  std::function<void()> hook_;
};

TEST(NvmeTier, ReadRacingWithSlotReuseIsAMissOrTheNewBlockNeverCorruption) {
  ScratchDir dir;
  std::unique_ptr<NvmeTier> tier = OpenTier({.files = {dir.File("a.slots")}, .capacity_bytes = 4u << 20});
  ASSERT_NE(tier, nullptr);
  const auto a = Payload(8000, 1), b = Payload(8000, 2), c = Payload(8000, 3);
  std::vector<std::byte> out(8000);

  // Evicted while the read was in flight, its slot taken by another key: a miss.
  ASSERT_TRUE(tier->Write(Key(1), a).ok());
  const uint64_t offset = tier->LocationForTesting(Key(1))->offset;
  NvmeTier* t = tier.get();
  std::unique_ptr<BlockIo> real = tier->ReplaceIoForTesting(nullptr);
  (void)tier->ReplaceIoForTesting(std::make_unique<HookedIo>(std::move(real), [&] {
    ASSERT_TRUE(t->Evict(Key(1)).ok());
    ASSERT_TRUE(t->Write(Key(2), b).ok());
    ASSERT_EQ(t->LocationForTesting(Key(2))->offset, offset);  // the same slot, reused
  }));
  EXPECT_EQ(tier->Read(Key(1), out).status().code(), StatusCode::kNotFound);

  // Replaced while the read was in flight, the old slot reused: the read retries and returns
  // the new block.
  ASSERT_TRUE(tier->Write(Key(3), a).ok());
  real = tier->ReplaceIoForTesting(nullptr);
  (void)tier->ReplaceIoForTesting(std::make_unique<HookedIo>(std::move(real), [&] {
    ASSERT_TRUE(t->Write(Key(3), c).ok());
    ASSERT_TRUE(t->Write(Key(4), b).ok());  // takes Key(3)'s old slot
  }));
  Result<std::size_t> n = tier->Read(Key(3), out);
  ASSERT_TRUE(n.ok()) << n.status().ToString();
  EXPECT_EQ(out, c);
  EXPECT_EQ(tier->GetStats().checksum_failures, 0u);
  EXPECT_EQ(tier->GetStats().blocks, 3u);
}

TEST(NvmeTier, ReopeningRecoversWrittenBlocksNotEvictedOrReplacedOnes) {
  ScratchDir dir;
  const NvmeTierOptions options{.files = {dir.File("a.slots"), dir.File("b.slots")}, .capacity_bytes = 16u << 20};
  std::vector<std::vector<std::byte>> payloads;
  for (uint8_t i = 0; i < 40; ++i) payloads.push_back(Payload(5000u + 3000u * (i % 5u), i));
  {
    std::unique_ptr<NvmeTier> tier = OpenTier(options);
    ASSERT_NE(tier, nullptr);
    EXPECT_EQ(tier->recovered_blocks(), 0u);
    for (uint8_t i = 0; i < 40; ++i) ASSERT_TRUE(tier->Write(Key(i), payloads[i]).ok());
    for (uint8_t i = 0; i < 10; ++i) ASSERT_TRUE(tier->Evict(Key(i)).ok());
    payloads[20] = Payload(9000, 200);  // replaced: the newer version must come back
    ASSERT_TRUE(tier->Write(Key(20), payloads[20]).ok());
  }
  std::unique_ptr<NvmeTier> tier = OpenTier(options);
  ASSERT_NE(tier, nullptr);
  EXPECT_EQ(tier->recovered_blocks(), 30u);
  const TierStats stats = tier->GetStats();
  EXPECT_EQ(stats.blocks, 30u);
  uint64_t bytes = 0;
  for (uint8_t i = 10; i < 40; ++i) bytes += payloads[i].size();
  EXPECT_EQ(stats.used_bytes, bytes);
  std::vector<std::byte> out(20000);
  for (uint8_t i = 0; i < 40; ++i) {
    Result<std::size_t> n = tier->Read(Key(i), out);
    if (i < 10) {
      EXPECT_EQ(n.status().code(), StatusCode::kNotFound) << "evicted block " << int{i} << " came back";
      continue;
    }
    ASSERT_TRUE(n.ok()) << int{i} << ": " << n.status().ToString();
    ASSERT_EQ(*n, payloads[i].size());
    EXPECT_TRUE(std::equal(payloads[i].begin(), payloads[i].end(), out.begin())) << int{i};
  }
  // The recovered tier keeps working: its free slots and new slabs do not overlap live blocks.
  for (uint8_t i = 40; i < 80; ++i) ASSERT_TRUE(tier->Write(Key(i), Payload(7000, i)).ok());
  for (uint8_t i = 10; i < 40; ++i) {
    ASSERT_TRUE(tier->Read(Key(i), out).ok());
    EXPECT_TRUE(std::equal(payloads[i].begin(), payloads[i].end(), out.begin())) << int{i};
  }
  tier.reset();
  tier = OpenTier(options);
  ASSERT_NE(tier, nullptr);
  EXPECT_EQ(tier->recovered_blocks(), 70u);
}

TEST(NvmeTier, RecoveredBlockWithCorruptPayloadIsNeverReturned) {
  ScratchDir dir;
  const NvmeTierOptions options{.files = {dir.File("a.slots")}, .capacity_bytes = 4u << 20};
  std::optional<NvmeTier::Location> at;
  {
    std::unique_ptr<NvmeTier> tier = OpenTier(options);
    ASSERT_NE(tier, nullptr);
    ASSERT_TRUE(tier->Write(Key(1), Payload(10000, 1)).ok());
    at = tier->LocationForTesting(Key(1));
  }
  ASSERT_TRUE(at.has_value());
  const std::byte flipped[1] = {std::byte{0x5a}};
  Scribble(at->path, at->offset + NvmeTier::kHeaderBytes + 1234, flipped);
  std::unique_ptr<NvmeTier> tier = OpenTier(options);
  ASSERT_NE(tier, nullptr);
  std::vector<std::byte> out(10000);
  EXPECT_EQ(tier->Read(Key(1), out).status().code(), StatusCode::kCorruption);
  EXPECT_EQ(tier->Read(Key(1), out).status().code(), StatusCode::kNotFound);
}

TEST(NvmeTier, FilesOfAnotherLayoutAreRefusedUnlessRecoverIsOff) {
  ScratchDir dir;
  {
    std::unique_ptr<NvmeTier> tier = OpenTier({.files = {dir.File("a.slots")}, .capacity_bytes = 4u << 20});
    ASSERT_NE(tier, nullptr);
    ASSERT_TRUE(tier->Write(Key(1), Payload(10000, 1)).ok());
  }
  Result<std::unique_ptr<NvmeTier>> bigger = NvmeTier::Open({.files = {dir.File("a.slots")}, .capacity_bytes = 8u << 20});
  ASSERT_FALSE(bigger.ok());
  EXPECT_EQ(bigger.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(bigger.status().message().find("recover: false"), std::string::npos) << bigger.status().message();

  std::unique_ptr<NvmeTier> fresh =
      OpenTier({.files = {dir.File("a.slots")}, .capacity_bytes = 8u << 20, .recover = false});
  ASSERT_NE(fresh, nullptr);
  EXPECT_EQ(fresh->GetStats().blocks, 0u);
  fresh.reset();
  // The new format's journal does not replay the old one's records or slots.
  std::unique_ptr<NvmeTier> again = OpenTier({.files = {dir.File("a.slots")}, .capacity_bytes = 8u << 20});
  ASSERT_NE(again, nullptr);
  EXPECT_EQ(again->recovered_blocks(), 0u);
}

TEST(NvmeTier, BadOptionsAreRefusedClearly) {
  ScratchDir dir;
  auto code = [](const NvmeTierOptions& options) { return NewNvmeTier(options).status().code(); };
  EXPECT_EQ(code({.capacity_bytes = 1u << 20}), StatusCode::kInvalidArgument);  // no files
  EXPECT_EQ(code({.files = {dir.File("a")}}), StatusCode::kInvalidArgument);     // no capacity
  EXPECT_EQ(code({.files = {dir.File("a"), dir.File("a")}, .capacity_bytes = 1u << 20}), StatusCode::kInvalidArgument);
  EXPECT_EQ(code({.files = {dir.File("a")}, .capacity_bytes = 1u << 20, .slot_bytes = 5000}), StatusCode::kInvalidArgument);
  EXPECT_EQ(code({.files = {dir.File("a")}, .capacity_bytes = 1u << 20, .queue_depth = 0}), StatusCode::kInvalidArgument);
  EXPECT_NE(NewNvmeTier({.capacity_bytes = 1u << 20}).status().message().find("files"), std::string::npos);

  // A path under a regular file cannot be created, even by root.
  std::ofstream(dir.File("plain")) << "x";
  const std::string unwritable = dir.File("plain") + "/slots";
  Result<std::unique_ptr<Tier>> tier = NewNvmeTier({.files = {unwritable}, .capacity_bytes = 1u << 20});
  ASSERT_FALSE(tier.ok());
  EXPECT_EQ(tier.status().code(), StatusCode::kIoError);
  EXPECT_NE(tier.status().message().find(unwritable), std::string::npos) << tier.status().message();

  // A file already serving another tier.
  Result<std::unique_ptr<Tier>> first = NewNvmeTier({.files = {dir.File("b")}, .capacity_bytes = 1u << 20});
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  EXPECT_EQ(code({.files = {dir.File("b")}, .capacity_bytes = 1u << 20}), StatusCode::kFailedPrecondition);
}

TEST(NvmeTier, FilesArePreallocatedToTheirShare) {
  ScratchDir dir;
  std::unique_ptr<NvmeTier> tier =
      OpenTier({.files = {dir.File("a"), dir.File("b")}, .capacity_bytes = 6u << 20, .use_io_uring = false});
  ASSERT_NE(tier, nullptr);
  EXPECT_EQ(std::filesystem::file_size(dir.File("a")), 3u << 20);
  EXPECT_EQ(std::filesystem::file_size(dir.File("b")), 3u << 20);
}

// tmpfs refused O_DIRECT before Linux 6.6: the tier then runs buffered. Either way it works.
TEST(NvmeTier, WorksOnTmpfs) {
  if (!std::filesystem::is_directory("/dev/shm")) GTEST_SKIP() << "no /dev/shm";
  const std::string path = "/dev/shm/kvtier-nvme-test-" + std::to_string(::getpid());
  for (bool uring : {true, false}) {
    {
      std::unique_ptr<NvmeTier> tier = OpenTier({.files = {path}, .capacity_bytes = 1u << 20, .use_io_uring = uring});
      ASSERT_NE(tier, nullptr);
      RecordProperty(uring ? "tmpfs_direct_io_uring" : "tmpfs_direct_io_pread", tier->direct_io() ? "true" : "false");
      const auto a = Payload(5000, 11);
      ASSERT_TRUE(tier->Write(Key(1), a).ok());
      std::vector<std::byte> out(a.size());
      ASSERT_TRUE(tier->Read(Key(1), out).ok());
      EXPECT_EQ(out, a);
    }
    std::filesystem::remove(path);
  }
}

TEST(NvmeTier, FixedSlotsRefuseLargerBlocks) {
  ScratchDir dir;
  std::unique_ptr<NvmeTier> tier =
      OpenTier({.files = {dir.File("a")}, .capacity_bytes = 1u << 20, .slot_bytes = 64u << 10});
  ASSERT_NE(tier, nullptr);
  EXPECT_TRUE(tier->Write(Key(1), Payload(1000, 1)).ok());
  EXPECT_EQ(tier->LocationForTesting(Key(1))->slot_bytes, 64u << 10);
  EXPECT_TRUE(tier->Write(Key(2), Payload(60u << 10, 2)).ok());
  EXPECT_EQ(tier->Write(Key(3), Payload((60u << 10) + 1, 3)).code(), StatusCode::kInvalidArgument);
  uint64_t stored = 2;
  while (tier->Write(Key(10 + stored), Payload(100, 4)).ok()) ++stored;
  EXPECT_EQ(stored, ((1u << 20) - NvmeTier::MetadataBytes(1u << 20)) / (64u << 10));  // the slot area / 64 KiB
}

// Issue 19: once full of one size, a tier whose slabs kept their size class for life refused
// every put of another size even after all the old blocks were evicted.
TEST(NvmeTier, EvictedSpaceTakesBlocksOfAnotherSizeAndSurvivesARestart) {
  ScratchDir dir;
  const NvmeTierOptions options{.files = {dir.File("a.slots"), dir.File("b.slots")}, .capacity_bytes = 16u << 20};
  const uint64_t slot_area = 2 * ((8u << 20) - NvmeTier::MetadataBytes(8u << 20));
  std::unique_ptr<NvmeTier> tier = OpenTier(options);
  ASSERT_NE(tier, nullptr);
  uint64_t large = 0;
  while (tier->Write(Key(large), Payload(1u << 20, 1)).ok()) ++large;
  ASSERT_GT(large, 10u);
  for (uint64_t i = 0; i < large; ++i) ASSERT_TRUE(tier->Evict(Key(i)).ok());
  const std::vector<std::byte> small = Payload(200u << 10, 2);
  uint64_t stored = 0;
  Status refused;
  while ((refused = tier->Write(Key(1000 + stored), small)).ok()) ++stored;
  EXPECT_EQ(refused.code(), StatusCode::kResourceExhausted) << refused.ToString();
  ASSERT_GT(stored, 0u) << refused.ToString();
  const uint64_t slot_bytes = tier->LocationForTesting(Key(1000))->slot_bytes;
  EXPECT_GE(stored * slot_bytes, slot_area / 10 * 9) << stored << " blocks of " << slot_bytes << " bytes";
  // The journal now holds slabs of both sizes over the same space; the later ones win.
  tier.reset();
  tier = OpenTier(options);
  ASSERT_NE(tier, nullptr);
  EXPECT_EQ(tier->recovered_blocks(), stored);
  std::vector<std::byte> out(small.size());
  for (uint64_t i = 0; i < stored; ++i) {
    ASSERT_TRUE(tier->Read(Key(1000 + i), out).ok()) << i;
    EXPECT_EQ(out, small) << i;
  }
  EXPECT_FALSE(tier->Size(Key(0)).has_value());
}

// Every slab carved over released space appends a journal record; a full journal is
// compacted to the slabs that survive, and the compacted journal recovers.
TEST(NvmeTier, AFullSlabJournalIsCompactedAndStillRecovers) {
  ScratchDir dir;
  const NvmeTierOptions options{.files = {dir.File("a.slots")}, .capacity_bytes = 4u << 20};
  std::unique_ptr<NvmeTier> tier = OpenTier(options);
  ASSERT_NE(tier, nullptr);
  const uint64_t records = (NvmeTier::MetadataBytes(4u << 20) - NvmeTier::kSuperblockBytes) / 32;
  // Each round carves one slab over the one the previous round emptied.
  for (uint64_t round = 0; round < records + 50; ++round) {
    const BlockKey key = Key(round);
    ASSERT_TRUE(tier->Write(key, Payload(round % 2 == 0 ? 8000 : 20000, 3)).ok()) << round;
    ASSERT_TRUE(tier->Evict(key).ok()) << round;
  }
  for (uint64_t i = 0; i < 5; ++i) ASSERT_TRUE(tier->Write(Key(5000 + i), Payload(30000, 4)).ok());
  tier.reset();
  tier = OpenTier(options);
  ASSERT_NE(tier, nullptr);
  EXPECT_EQ(tier->recovered_blocks(), 5u);
  std::vector<std::byte> out(30000);
  for (uint64_t i = 0; i < 5; ++i) {
    ASSERT_TRUE(tier->Read(Key(5000 + i), out).ok()) << i;
    EXPECT_EQ(out, Payload(30000, 4));
  }
}

TEST(NvmeTier, ALaterSlabReplacesTheRecordsItOverlaps) {
  const std::vector<RegionSlab> journal = {{0, 0, 2u << 20, 1u << 20},
                                           {0, 2u << 20, 2u << 20, 1u << 20},
                                           {0, 1u << 20, 2u << 20, 512u << 10}};  // over the halves of both
  EXPECT_EQ(NvmeTier::SurvivingSlabs(journal), (std::vector<RegionSlab>{journal[2]}));
}

// CompactJournal overwrites the journal in place from the front; a crash part way leaves the
// first pages compacted and the rest of the old log. Whatever page it stopped at, the journal
// must replay to the same slabs. Histories come from the allocator itself under random
// carving and freeing, so slabs are released and carved over as in a running tier.
TEST(NvmeTier, AJournalCompactedPartWayReplaysToTheSameSlabs) {
  constexpr std::size_t kRecordsPerPage = 128;
  SizeClassAllocator slots({1u << 30});
  std::vector<RegionSlab> log;
  slots.SetSlabListener([&](const RegionSlab& slab) {
    log.push_back(slab);
    return Status::Ok();
  });
  std::mt19937_64 random(11);
  const uint64_t sizes[] = {12u << 10, 68u << 10, 1152u << 10, 3u << 20};
  std::vector<std::pair<RegionSlot, uint64_t>> live;
  while (log.size() < 20 * kRecordsPerPage) {
    if (live.empty() || random() % 3 != 0) {  // grows until full, then churns
      const uint64_t size = sizes[random() % std::size(sizes)];
      if (Result<RegionSlot> s = slots.Allocate(size); s.ok()) live.push_back({*s, size});
    } else {
      const std::size_t k = random() % live.size();
      slots.Free(live[k].first, live[k].second);
      live.erase(live.begin() + static_cast<std::ptrdiff_t>(k));
    }
  }
  const std::vector<RegionSlab> current = NvmeTier::SurvivingSlabs(log);
  // The history carved over released slabs, and the compacted journal spans several pages.
  ASSERT_LT(current.size(), log.size());
  ASSERT_GT(current.size(), 3 * kRecordsPerPage);
  for (std::size_t pages = 0; pages * kRecordsPerPage <= current.size(); ++pages) {
    const std::size_t cut = pages * kRecordsPerPage;
    std::vector<RegionSlab> on_disk(current.begin(), current.begin() + static_cast<std::ptrdiff_t>(cut));
    on_disk.insert(on_disk.end(), log.begin() + static_cast<std::ptrdiff_t>(cut), log.end());
    EXPECT_EQ(NvmeTier::SurvivingSlabs(on_disk), current) << pages << " pages compacted";
  }
}

TEST(NvmeTier, GdsDetectionIsStable) {
  const bool available = NvmeTier::gds_available();
  EXPECT_EQ(NvmeTier::gds_available(), available);
  RecordProperty("gds_available", available ? "true" : "false");
}

}  // namespace
}  // namespace kvtier
