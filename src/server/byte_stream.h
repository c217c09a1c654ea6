// The byte stream under the frames (frame_io.h): a plain socket, which can also carry
// descriptors (SCM_RIGHTS, on Unix sockets), or a TLS session over TCP (tls.h). The frame
// code reads and writes through this seam, so the sessions do not know which they are on.
//
// A stream borrows its descriptor: the FrameSocket that holds it owns the descriptor, so
// another thread may shut the socket down (to wake a blocked reader) while the stream is in
// use.
//
// Thread-safety: one thread at a time.
#pragma once

#include <cstddef>
#include <memory>
#include <span>
#include <vector>

#include "kvtier/status.h"
#include "util/posix_file.h"

namespace kvtier::server {

class ByteStream {
 public:
  virtual ~ByteStream() = default;

  // Sends `bytes` whole, waiting at most `timeout_ms` (0: no limit) each time the peer stops
  // reading; `fds` travel with the first byte. Unavailable when the peer has gone or stalled;
  // InvalidArgument when this stream cannot carry descriptors.
  virtual Status Write(std::span<const std::byte> bytes, std::span<const int> fds, int timeout_ms) = 0;

  // Reads at least one byte into `into` (not empty) and returns how many, or 0 at a clean
  // end-of-stream; waits at most `timeout_ms` for them (0: no limit). Descriptors that
  // arrive are appended to `fds`. Unavailable for a reset or a timeout.
  virtual Result<std::size_t> ReadSome(std::span<std::byte> into, std::vector<ScopedFd>& fds, int timeout_ms) = 0;

  // Whether a ReadSome would find bytes (or end-of-stream) without waiting.
  virtual bool ReadableNow() const = 0;
};

// Plain sendmsg / recvmsg on `fd`, descriptors included.
std::unique_ptr<ByteStream> NewPlainStream(int fd);

// Waits until `fd` is ready for `events` (POLLIN, POLLOUT): Unavailable after `timeout_ms`
// (0: no limit), naming it as a stall in the middle of a frame.
Status WaitForSocket(int fd, short events, int timeout_ms);

}  // namespace kvtier::server
