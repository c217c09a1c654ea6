// The byte stream under the frames (frame_io.h): a plain socket, which can also carry
// descriptors (SCM_RIGHTS, on Unix sockets), or a TLS session over TCP (tls.h). The frame
// code reads and writes through this seam, so the sessions do not know which they are on.
//
// Each stream has one non-blocking step each way (TryRead, TryWrite), which the server's
// event loop drives, and blocking Write / ReadSome built on those steps, which the client
// uses: one implementation of each byte path.
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

// What one non-blocking step did: moved `bytes` (at least one), met a clean end of stream
// (reads only), or moved nothing and waits until the socket is ready for `wants` (POLLIN or
// POLLOUT; TLS may want to write in order to read, and the reverse).
struct StreamProgress {
  std::size_t bytes = 0;
  bool end = false;
  short wants = 0;
};

class ByteStream {
 public:
  virtual ~ByteStream() = default;

  // Sends a prefix of `bytes` (not empty) without waiting; `fds` travel with its first byte,
  // so pass them only on a frame's first step. Unavailable when the peer has gone;
  // InvalidArgument when this stream cannot carry descriptors.
  virtual Result<StreamProgress> TryWrite(std::span<const std::byte> bytes, std::span<const int> fds) = 0;

  // Reads up to `into.size()` bytes (not empty) without waiting. Descriptors that arrive are
  // appended to `fds`. Unavailable for a reset; InvalidArgument for more descriptors than a
  // frame may carry.
  virtual Result<StreamProgress> TryRead(std::span<std::byte> into, std::vector<ScopedFd>& fds) = 0;

  // Whether TryWrite may run on one thread while TryRead runs on another: true for a plain
  // socket (the kernel keeps the directions apart), false for TLS (one session state).
  virtual bool ConcurrentReadWrite() const = 0;

  // Whether bytes already read from the socket wait inside the stream (TLS records decrypted
  // ahead): a reader woken only by the socket's readiness would never see them.
  virtual bool Buffered() const = 0;

  // Sends `bytes` whole, waiting at most `timeout_ms` (0: no limit) each time the peer stops
  // reading; `fds` travel with the first byte. Unavailable when the peer has gone or stalled;
  // InvalidArgument when this stream cannot carry descriptors.
  Status Write(std::span<const std::byte> bytes, std::span<const int> fds, int timeout_ms);

  // Reads at least one byte into `into` (not empty) and returns how many, or 0 at a clean
  // end-of-stream; waits at most `timeout_ms` for them (0: no limit). Descriptors that
  // arrive are appended to `fds`. Unavailable for a reset or a timeout.
  Result<std::size_t> ReadSome(std::span<std::byte> into, std::vector<ScopedFd>& fds, int timeout_ms);

  // Whether a ReadSome would find bytes (or end-of-stream) without waiting.
  bool ReadableNow() const;

 protected:
  explicit ByteStream(int fd) : fd_(fd) {}
  int fd() const { return fd_; }

 private:
  const int fd_;
};

// Plain sendmsg / recvmsg on `fd`, descriptors included.
std::unique_ptr<ByteStream> NewPlainStream(int fd);

// Waits until `fd` is ready for `events` (POLLIN, POLLOUT): Unavailable after `timeout_ms`
// (0: no limit), naming it as a stall in the middle of a frame.
Status WaitForSocket(int fd, short events, int timeout_ms);

}  // namespace kvtier::server
