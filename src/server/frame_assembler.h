// Frames assembled from whatever bytes have arrived, for a reader that never waits (the
// server's event loop): header first, then the payload its header announced. The blocking
// reader, FrameSocket::Receive, is the client's.
//
// Descriptors passed by SCM_RIGHTS travel with the first byte of their frame, and a Unix
// socket read that returns them stops at the end of the segment that carried them: so the
// descriptors of one read belong to the frame holding the read's last byte.
//
// Thread-safety: one thread at a time.
#pragma once

#include <cstddef>
#include <deque>
#include <span>
#include <vector>

#include "kvtier/protocol.h"
#include "kvtier/status.h"
#include "util/posix_file.h"

namespace kvtier::server {

struct AssembledFrame {
  protocol::FrameHeader header;
  std::vector<std::byte> payload;
  std::vector<ScopedFd> fds;
};

class FrameAssembler {
 public:
  explicit FrameAssembler(const protocol::Limits& limits) : limits_(limits) {}

  // Takes the bytes of one read, and the descriptors that came with it; each frame they
  // complete is appended to `done`. InvalidArgument for a header that does not decode (the
  // frames before it are in `done`; the connection cannot go on after it).
  Status Feed(std::span<const std::byte> bytes, std::vector<ScopedFd> fds, std::deque<AssembledFrame>& done);

  // Where a read may go straight into the payload of the frame in progress, saving a copy
  // of large payloads: the rest of it, when its header has decoded and at least `min_bytes`
  // of it are missing; empty otherwise (then read elsewhere and Feed).
  std::span<std::byte> DirectTarget(std::size_t min_bytes);
  // Records `n` bytes read into DirectTarget's span, and the descriptors that came with them.
  void DirectFilled(std::size_t n, std::vector<ScopedFd> fds, std::deque<AssembledFrame>& done);

  // Whether part of a frame has arrived and the rest has not.
  bool mid_frame() const { return header_got_ > 0; }
  // The payload buffer of the frame in progress: allocated whole once its header decodes.
  std::size_t payload_bytes_held() const { return current_.payload.size(); }
  // Bytes that take the frame in progress to the end of its header (while that is partial)
  // or of its payload: a read of at most these decodes no part of the next frame.
  std::size_t bytes_to_boundary() const {
    return header_got_ < protocol::kHeaderBytes ? protocol::kHeaderBytes - header_got_ : current_.payload.size() - payload_got_;
  }

 private:
  void Complete(std::deque<AssembledFrame>& done);
  // Takes bytes into the frame in progress; returns how many it used.
  Result<std::size_t> Take(std::span<const std::byte> bytes);

  const protocol::Limits limits_;
  std::byte header_bytes_[protocol::kHeaderBytes];
  std::size_t header_got_ = 0;  // kHeaderBytes once the header has decoded
  AssembledFrame current_;
  std::size_t payload_got_ = 0;
};

}  // namespace kvtier::server
