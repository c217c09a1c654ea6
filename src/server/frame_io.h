// Blocking frame I/O on a connected stream socket, for the client: whole frames out (with
// descriptors passed by SCM_RIGHTS when asked), whole frames in (with the descriptors that
// came along), and deadlines so that a peer that stops halfway through a frame cannot hold
// its reader forever. The bytes go through a ByteStream (byte_stream.h):
// plain, or TLS once UseStream installs one.
//
// The server assembles frames without waiting instead (frame_assembler.h, connection.h).
//
// Thread-safety: one FrameSocket is used by one thread at a time.
#pragma once

#include <cstddef>
#include <span>
#include <vector>

#include "kvtier/protocol.h"
#include "kvtier/status.h"
#include "server/byte_stream.h"
#include "util/posix_file.h"

namespace kvtier::server {

class FrameSocket {
 public:
  // Owns `fd`, and speaks plainly on it until UseStream. `io_timeout_ms` bounds every wait
  // once a frame has started (0: none).
  FrameSocket(ScopedFd fd, int io_timeout_ms);

  int fd() const { return fd_.get(); }
  // Frames travel through `stream` from now on (a TLS session over fd(), after its handshake).
  void UseStream(std::unique_ptr<ByteStream> stream) { stream_ = std::move(stream); }

  // Sends `frame` whole; `fds` travel with its first byte. Unavailable when the peer has gone.
  Status Send(std::span<const std::byte> frame, std::span<const int> fds = {});

  // One frame read: its header, and its payload (the first header.payload_bytes bytes of the
  // buffer it was read into).
  struct Frame {
    protocol::FrameHeader header;
    std::span<std::byte> payload;
  };
  // Reads one frame, its payload into `buffer`. The buffer grows to hold it and never
  // shrinks: a connection reuses its memory, and a large reply after a small one is not
  // zero-filled before it is read over. Descriptors that arrive are appended to `fds` (the
  // caller owns them). Waits for the first byte without a deadline; NotFound when the peer
  // closed cleanly between frames; InvalidArgument for a header that does not decode (the
  // caller answers and closes); Unavailable for a reset, a timeout in the middle of a frame
  // or a close in the middle of one.
  Result<Frame> Receive(const protocol::Limits& limits, std::vector<std::byte>& buffer, std::vector<ScopedFd>& fds);

  // Whether a Receive would find bytes (or end-of-stream) without waiting.
  bool ReadableNow() const;

 private:
  Status ReadFully(std::span<std::byte> into, bool frame_started, std::vector<ScopedFd>& fds);

  ScopedFd fd_;
  std::unique_ptr<ByteStream> stream_;  // borrows fd_, so it is destroyed first
  int io_timeout_ms_;
};

}  // namespace kvtier::server
