#include "server/frame_assembler.h"

#include <gtest/gtest.h>
#include <unistd.h>

namespace kvtier::server {
namespace {

std::vector<std::byte> Frame(const protocol::Message& m, uint64_t request_id) {
  std::vector<std::byte> frame;
  EXPECT_TRUE(protocol::EncodeFrame(m, request_id, protocol::MessageType::kError, {}, frame).ok());
  return frame;
}

std::vector<ScopedFd> OnePipeEnd() {
  int ends[2];
  EXPECT_EQ(::pipe(ends), 0);
  ::close(ends[1]);
  std::vector<ScopedFd> fds;
  fds.emplace_back(ends[0]);
  return fds;
}

TEST(FrameAssembler, FramesArriveWholeWhateverTheReadsAre) {
  std::vector<std::byte> bytes = Frame(protocol::Stats{}, 1);
  const std::size_t first_frame_end = bytes.size();
  const std::vector<std::byte> lookup = Frame(protocol::Lookup{{{{1, 2}, {3, 4}}}}, 2);
  bytes.insert(bytes.end(), lookup.begin(), lookup.end());
  for (const std::size_t read : {std::size_t{1}, std::size_t{7}, protocol::kHeaderBytes, bytes.size()}) {
    FrameAssembler assembler({});
    std::deque<AssembledFrame> done;
    for (std::size_t at = 0; at < bytes.size(); at += read) {
      ASSERT_TRUE(assembler.Feed(std::span(bytes).subspan(at, std::min(read, bytes.size() - at)), {}, done).ok());
      const std::size_t end = std::min(at + read, bytes.size());
      EXPECT_EQ(assembler.mid_frame(), end != first_frame_end && end != bytes.size()) << read << " " << end;
    }
    ASSERT_EQ(done.size(), 2u) << read;
    EXPECT_EQ(done[0].header.request_id, 1u);
    EXPECT_EQ(done[1].header.request_id, 2u);
    Result<protocol::Message> m = protocol::DecodePayload(done[1].header, done[1].payload, {});
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    EXPECT_EQ(std::get<protocol::Lookup>(*m).chains.at(0).size(), 2u);
  }
}

// A read that returns descriptors ends with the segment that carried them, which begins
// their frame: they belong to the frame holding the read's last byte.
TEST(FrameAssembler, DescriptorsGoWithTheFrameOfTheReadsLastByte) {
  const std::vector<std::byte> first = Frame(protocol::Stats{}, 1);
  const std::vector<std::byte> hello = Frame(protocol::Hello{.tenant = "t", .auth_token = "", .segment_bytes = {4096}}, 2);
  std::vector<std::byte> bytes = first;
  bytes.insert(bytes.end(), hello.begin(), hello.begin() + 5);
  FrameAssembler assembler({});
  std::deque<AssembledFrame> done;
  ASSERT_TRUE(assembler.Feed(bytes, OnePipeEnd(), done).ok());
  ASSERT_TRUE(assembler.Feed(std::span(hello).subspan(5), {}, done).ok());
  ASSERT_EQ(done.size(), 2u);
  EXPECT_TRUE(done[0].fds.empty());
  EXPECT_EQ(done[1].fds.size(), 1u);

  // A read that ends exactly at its frame's end gives that frame the descriptors.
  ASSERT_TRUE(assembler.Feed(hello, OnePipeEnd(), done).ok());
  ASSERT_EQ(done.size(), 3u);
  EXPECT_EQ(done[2].fds.size(), 1u);
}

// A large payload may be read straight into place once its header is in.
TEST(FrameAssembler, LargePayloadsCanBeReadInPlace) {
  protocol::Put put;
  const std::vector<std::byte> bytes(100000, std::byte{0x42});
  put.blocks.push_back({.key = {1, 2}, .payload = {.length = 100000}, .inline_bytes = bytes, .checksum = 0});
  const std::vector<std::byte> frame = Frame(put, 9);
  FrameAssembler assembler({});
  std::deque<AssembledFrame> done;
  EXPECT_TRUE(assembler.DirectTarget(1).empty()) << "no header yet";
  ASSERT_TRUE(assembler.Feed(std::span(frame).first(1000), {}, done).ok());
  EXPECT_TRUE(assembler.DirectTarget(frame.size()).empty()) << "less than that is missing";
  std::span<std::byte> target = assembler.DirectTarget(4096);
  ASSERT_EQ(target.size(), frame.size() - 1000);
  std::ranges::copy(std::span(frame).subspan(1000, 50000), target.begin());
  assembler.DirectFilled(50000, {}, done);
  EXPECT_TRUE(done.empty());
  target = assembler.DirectTarget(4096);
  ASSERT_EQ(target.size(), frame.size() - 51000);
  std::ranges::copy(std::span(frame).subspan(51000), target.begin());
  assembler.DirectFilled(target.size(), {}, done);
  ASSERT_EQ(done.size(), 1u);
  EXPECT_FALSE(assembler.mid_frame());
  Result<protocol::Message> m = protocol::DecodePayload(done[0].header, done[0].payload, {});
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_TRUE(std::ranges::equal(std::get<protocol::Put>(*m).blocks.at(0).inline_bytes, bytes));
}

TEST(FrameAssembler, AHeaderThatDoesNotDecodeIsRefused) {
  FrameAssembler assembler({});
  std::deque<AssembledFrame> done;
  std::vector<std::byte> bytes = Frame(protocol::Stats{}, 1);
  const std::string garbage = "GET / HTTP/1.1\r\nHost: x\r\n\r\n";
  for (char c : garbage) bytes.push_back(static_cast<std::byte>(c));
  EXPECT_EQ(assembler.Feed(bytes, {}, done).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(done.size(), 1u) << "the frame before it stands";
}

}  // namespace
}  // namespace kvtier::server
