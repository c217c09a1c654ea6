// Small POSIX helpers for the checkpoint code: an owned file descriptor, and a Status for
// a failed system call that names the path and the OS's reason.
//
// Thread-safety: ScopedFd is a value owned by one thread at a time.
#pragma once

#include <cerrno>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>

#include <unistd.h>

#include "kvtier/status.h"

namespace kvtier {

// "<path>: <what> failed: <reason>"; NotFound for ENOENT (a missing file or directory is
// something the caller can act on), IoError otherwise.
inline Status ErrnoStatus(const std::string& path, std::string_view what, int error) {
  std::string message = path + ": " + std::string(what) + " failed: " + std::generic_category().message(error);
  return error == ENOENT ? Status::NotFound(std::move(message)) : Status::IoError(std::move(message));
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

}  // namespace kvtier
