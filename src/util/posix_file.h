// Small POSIX helpers shared by the code that writes files (checkpoints, the block journal,
// the filesystem tier): an owned file descriptor, a Status for a failed system call that names
// the path and the OS's reason, whole-buffer reads and writes, and a directory fsync (what
// makes a rename durable).
//
// Thread-safety: ScopedFd is a value owned by one thread at a time.
#pragma once

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>

#include <fcntl.h>
#include <unistd.h>

#include "kvtier/status.h"

namespace kvtier {

// "<path>: <what> failed: <reason>"; NotFound for ENOENT (a missing file or directory is
// something the caller can act on), IoError otherwise.
inline Status ErrnoStatus(const std::string& path, std::string_view what, int error) {
  std::string message = path + ": " + std::string(what) + " failed: " + std::generic_category().message(error);
  return error == ENOENT ? Status::NotFound(std::move(message)) : Status::IoError(std::move(message));
}

// How a caller names a failed call: ErrnoStatus, or its own mapping (the filesystem tier
// reports a full disk as ResourceExhausted, the tier interface's "full").
using ErrnoToStatus = Status (*)(const std::string& path, std::string_view what, int error);

// Writes all of `bytes`, at `offset` (pwrite) or at the file position, through short writes
// and EINTR.
inline Status WriteFully(int fd, std::span<const std::byte> bytes, const std::string& path,
                         std::optional<uint64_t> offset = std::nullopt, ErrnoToStatus to_status = ErrnoStatus) {
  while (!bytes.empty()) {
    const ssize_t n = offset ? ::pwrite(fd, bytes.data(), bytes.size(), static_cast<off_t>(*offset))
                             : ::write(fd, bytes.data(), bytes.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return to_status(path, "write", errno);
    bytes = bytes.subspan(static_cast<std::size_t>(n));
    if (offset) *offset += static_cast<uint64_t>(n);
  }
  return Status::Ok();
}

// Reads from `offset` until `out` is full or the file ends: the bytes read.
inline Result<std::size_t> PreadFully(int fd, std::span<std::byte> out, uint64_t offset, const std::string& path,
                                      ErrnoToStatus to_status = ErrnoStatus) {
  std::size_t done = 0;
  while (done < out.size()) {
    const ssize_t n = ::pread(fd, out.data() + done, out.size() - done, static_cast<off_t>(offset + done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return to_status(path, "read", errno);
    if (n == 0) break;
    done += static_cast<std::size_t>(n);
  }
  return done;
}

class ScopedFd {
 public:
  ScopedFd() = default;
  explicit ScopedFd(int fd) : fd_(fd) {}
  ScopedFd(ScopedFd&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  ScopedFd& operator=(ScopedFd&& other) noexcept {
    if (this != &other) {
      Reset();
      fd_ = std::exchange(other.fd_, -1);
    }
    return *this;
  }
  ScopedFd(const ScopedFd&) = delete;
  ScopedFd& operator=(const ScopedFd&) = delete;
  ~ScopedFd() { Reset(); }

  int get() const { return fd_; }
  // Gives up ownership: the caller closes the descriptor.
  int Release() { return std::exchange(fd_, -1); }
  bool valid() const { return fd_ >= 0; }

  // Closes now, reporting the error a destructor would swallow (NFS reports write errors
  // at close).
  Status Close(const std::string& path) {
    const int fd = std::exchange(fd_, -1);
    if (fd >= 0 && ::close(fd) != 0) return ErrnoStatus(path, "close", errno);
    return Status::Ok();
  }

 private:
  void Reset() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

  int fd_ = -1;
};

// fsyncs a directory, so that renames and creations inside it survive a power loss.
inline Status SyncDirectory(const std::string& dir) {
  ScopedFd fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!fd.valid()) return ErrnoStatus(dir, "open", errno);
  if (::fsync(fd.get()) != 0) return ErrnoStatus(dir, "fsync", errno);
  return fd.Close(dir);
}

}  // namespace kvtier
