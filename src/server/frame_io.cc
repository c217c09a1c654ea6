#include "server/frame_io.h"

namespace kvtier::server {

FrameSocket::FrameSocket(ScopedFd fd, int io_timeout_ms)
    : fd_(std::move(fd)), stream_(NewPlainStream(fd_.get())), io_timeout_ms_(io_timeout_ms) {}

Status FrameSocket::Send(std::span<const std::byte> frame, std::span<const int> fds) {
  return stream_->Write(frame, fds, io_timeout_ms_);
}

Status FrameSocket::ReadFully(std::span<std::byte> into, bool frame_started, std::vector<ScopedFd>& fds) {
  std::size_t got = 0;
  while (got < into.size()) {
    // Between frames a connection may idle as long as it likes; inside one it may not stall.
    const int timeout_ms = frame_started || got > 0 ? io_timeout_ms_ : 0;
    KVTIER_ASSIGN_OR_RETURN(std::size_t n, stream_->ReadSome(into.subspan(got), fds, timeout_ms));
    if (n == 0) {
      if (!frame_started && got == 0) return Status::NotFound("peer closed the connection");
      return Status::Unavailable("peer closed the connection in the middle of a frame");
    }
    got += n;
  }
  return Status::Ok();
}

Result<FrameSocket::Frame> FrameSocket::Receive(const protocol::Limits& limits, std::vector<std::byte>& buffer,
                                                std::vector<ScopedFd>& fds) {
  std::byte header_bytes[protocol::kHeaderBytes];
  KVTIER_RETURN_IF_ERROR(ReadFully(header_bytes, /*frame_started=*/false, fds));
  KVTIER_ASSIGN_OR_RETURN(protocol::FrameHeader header, protocol::DecodeHeader(header_bytes, limits));
  if (buffer.size() < header.payload_bytes) buffer.resize(header.payload_bytes);
  const std::span<std::byte> payload = std::span(buffer).first(header.payload_bytes);
  KVTIER_RETURN_IF_ERROR(ReadFully(payload, /*frame_started=*/true, fds));
  return Frame{header, payload};
}

bool FrameSocket::ReadableNow() const { return stream_->ReadableNow(); }

}  // namespace kvtier::server
