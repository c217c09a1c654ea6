#include "server/frame_assembler.h"

#include <algorithm>
#include <cstring>

namespace kvtier::server {
namespace {

void MoveAll(std::vector<ScopedFd>& from, std::vector<ScopedFd>& to) {
  for (ScopedFd& fd : from) to.push_back(std::move(fd));
  from.clear();
}

}  // namespace

Result<std::size_t> FrameAssembler::Take(std::span<const std::byte> bytes) {
  std::size_t used = 0;
  if (header_got_ < protocol::kHeaderBytes) {
    used = std::min(bytes.size(), protocol::kHeaderBytes - header_got_);
    std::memcpy(header_bytes_ + header_got_, bytes.data(), used);
    header_got_ += used;
    if (header_got_ < protocol::kHeaderBytes) return used;
    KVTIER_ASSIGN_OR_RETURN(current_.header, protocol::DecodeHeader(header_bytes_, limits_));
    current_.payload.resize(current_.header.payload_bytes);
    payload_got_ = 0;
  }
  const std::size_t more = std::min(bytes.size() - used, current_.payload.size() - payload_got_);
  if (more > 0) std::memcpy(current_.payload.data() + payload_got_, bytes.data() + used, more);
  payload_got_ += more;
  return used + more;
}

Status FrameAssembler::Feed(std::span<const std::byte> bytes, std::vector<ScopedFd> fds, std::deque<AssembledFrame>& done) {
  while (!bytes.empty()) {
    KVTIER_ASSIGN_OR_RETURN(std::size_t used, Take(bytes));
    bytes = bytes.subspan(used);
    if (header_got_ == protocol::kHeaderBytes && payload_got_ == current_.payload.size()) {
      // The last byte of this read completes this frame: the descriptors are its own.
      if (bytes.empty()) MoveAll(fds, current_.fds);
      Complete(done);
    }
  }
  MoveAll(fds, current_.fds);
  return Status::Ok();
}

std::span<std::byte> FrameAssembler::DirectTarget(std::size_t min_bytes) {
  if (header_got_ < protocol::kHeaderBytes || current_.payload.size() - payload_got_ < min_bytes) return {};
  return std::span(current_.payload).subspan(payload_got_);
}

void FrameAssembler::DirectFilled(std::size_t n, std::vector<ScopedFd> fds, std::deque<AssembledFrame>& done) {
  payload_got_ += n;
  MoveAll(fds, current_.fds);
  if (payload_got_ == current_.payload.size()) Complete(done);
}

void FrameAssembler::Complete(std::deque<AssembledFrame>& done) {
  done.push_back(std::move(current_));
  current_ = AssembledFrame{};
  header_got_ = 0;
}

}  // namespace kvtier::server
