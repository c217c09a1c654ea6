#include "server/frame_io.h"

#include <gtest/gtest.h>
#include <sys/socket.h>

#include <algorithm>
#include <variant>

namespace kvtier::server {
namespace {

TEST(FrameSocket, FramesAreReadIntoOneBufferThatOnlyGrows) {
  int ends[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, ends), 0);
  FrameSocket writer{ScopedFd(ends[0]), 5000}, reader{ScopedFd(ends[1]), 5000};
  const std::vector<std::byte> bytes(64u << 10, std::byte{0x3c});
  protocol::Put put;
  put.blocks.push_back({.key = {1, 2}, .payload = {.length = static_cast<uint32_t>(bytes.size())}, .inline_bytes = bytes,
                        .checksum = PayloadChecksum(bytes)});
  std::vector<std::byte> frames;
  ASSERT_TRUE(protocol::EncodeFrame(put, 7, protocol::MessageType::kError, {}, frames).ok());
  ASSERT_TRUE(protocol::EncodeFrame(protocol::Stats{}, 8, protocol::MessageType::kError, {}, frames).ok());
  ASSERT_TRUE(writer.Send(frames).ok());

  std::vector<std::byte> buffer;
  std::vector<ScopedFd> fds;
  Result<FrameSocket::Frame> large = reader.Receive({}, buffer, fds);
  ASSERT_TRUE(large.ok()) << large.status().ToString();
  EXPECT_EQ(large->header.request_id, 7u);
  Result<protocol::Message> decoded = protocol::DecodePayload(large->header, large->payload, {});
  ASSERT_TRUE(decoded.ok()) << decoded.status().ToString();
  EXPECT_TRUE(std::ranges::equal(std::get<protocol::Put>(*decoded).blocks.at(0).inline_bytes, bytes));
  const std::size_t grown = buffer.size();
  const std::byte* memory = buffer.data();

  Result<FrameSocket::Frame> small = reader.Receive({}, buffer, fds);
  ASSERT_TRUE(small.ok()) << small.status().ToString();
  EXPECT_EQ(small->header.request_id, 8u);
  EXPECT_EQ(small->payload.size(), small->header.payload_bytes) << "the payload is the frame's, not the buffer's";
  EXPECT_EQ(small->payload.data(), memory);
  EXPECT_EQ(buffer.size(), grown) << "the buffer keeps its size for the next large frame";
  EXPECT_TRUE(protocol::DecodePayload(small->header, small->payload, {}).ok());
}

}  // namespace
}  // namespace kvtier::server
