// A shared-memory segment between a client and the server: a memfd the client creates and
// seals against shrinking, passes with its Hello (SCM_RIGHTS), and both sides map. Block
// payloads then cross the socket as (segment, offset, length), so a put or a get costs one
// copy: between the segment and the tier.
//
// Why sealed: a client that shrank its segment while the server copied from it would fault
// the server (SIGBUS). The server maps only segments sealed with F_SEAL_SHRINK.
//
// Thread-safety: immutable after creation; the bytes themselves are shared with the peer and
// carry no guarantee (a client that rewrites a block while putting it stores torn bytes
// under its own key, which the tier's checksum then describes faithfully).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "kvtier/status.h"
#include "util/posix_file.h"

namespace kvtier::server {

class SharedSegment {
 public:
  // Client side: a new sealed memfd of `bytes` bytes, mapped.
  static Result<SharedSegment> Create(uint64_t bytes, const std::string& name);
  // Server side: maps the first `declared_bytes` of a received descriptor. InvalidArgument
  // when it is not a memfd sealed against shrinking or is smaller than declared.
  static Result<SharedSegment> Map(ScopedFd fd, uint64_t declared_bytes);

  SharedSegment(SharedSegment&& other) noexcept;
  SharedSegment& operator=(SharedSegment&& other) noexcept;
  SharedSegment(const SharedSegment&) = delete;
  SharedSegment& operator=(const SharedSegment&) = delete;
  ~SharedSegment();

  int fd() const { return fd_.get(); }
  std::span<std::byte> bytes() const { return {base_, size_}; }
  // The bytes [offset, offset + length): InvalidArgument when they leave the segment.
  Result<std::span<std::byte>> Slice(uint64_t offset, uint64_t length) const;

 private:
  SharedSegment(ScopedFd fd, std::byte* base, std::size_t size) : fd_(std::move(fd)), base_(base), size_(size) {}

  ScopedFd fd_;
  std::byte* base_ = nullptr;
  std::size_t size_ = 0;
};

}  // namespace kvtier::server
