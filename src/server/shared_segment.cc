#include "server/shared_segment.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <utility>

namespace kvtier::server {
namespace {

Result<std::byte*> MapShared(int fd, std::size_t bytes) {
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) return ErrnoStatus("shared segment", "mmap", errno);
  return static_cast<std::byte*>(p);
}

}  // namespace

Result<SharedSegment> SharedSegment::Create(uint64_t bytes, const std::string& name) {
  if (bytes == 0) return Status::InvalidArgument("a shared segment needs at least one byte");
  ScopedFd fd(::memfd_create(name.c_str(), MFD_CLOEXEC | MFD_ALLOW_SEALING));
  if (!fd.valid()) return ErrnoStatus("memfd " + name, "memfd_create", errno);
  if (::ftruncate(fd.get(), static_cast<off_t>(bytes)) != 0) return ErrnoStatus("memfd " + name, "ftruncate", errno);
  if (::fcntl(fd.get(), F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0) {
    return ErrnoStatus("memfd " + name, "sealing", errno);
  }
  KVTIER_ASSIGN_OR_RETURN(std::byte * base, MapShared(fd.get(), bytes));
  return SharedSegment(std::move(fd), base, bytes);
}

Result<SharedSegment> SharedSegment::Map(ScopedFd fd, uint64_t declared_bytes) {
  if (declared_bytes == 0) return Status::InvalidArgument("a shared segment of 0 bytes");
  const int seals = ::fcntl(fd.get(), F_GET_SEALS);
  if (seals < 0 || (seals & F_SEAL_SHRINK) == 0) {
    return Status::InvalidArgument("a shared segment must be a memfd sealed with F_SEAL_SHRINK");
  }
  struct stat st{};
  if (::fstat(fd.get(), &st) != 0) return ErrnoStatus("shared segment", "fstat", errno);
  if (static_cast<uint64_t>(st.st_size) < declared_bytes) {
    return Status::InvalidArgument("a shared segment declared as " + std::to_string(declared_bytes) + " bytes holds " +
                                   std::to_string(st.st_size));
  }
  KVTIER_ASSIGN_OR_RETURN(std::byte * base, MapShared(fd.get(), declared_bytes));
  return SharedSegment(std::move(fd), base, declared_bytes);
}

SharedSegment::SharedSegment(SharedSegment&& other) noexcept
    : fd_(std::move(other.fd_)), base_(std::exchange(other.base_, nullptr)), size_(std::exchange(other.size_, 0)) {}

SharedSegment& SharedSegment::operator=(SharedSegment&& other) noexcept {
  if (this != &other) {
    if (base_ != nullptr) ::munmap(base_, size_);
    fd_ = std::move(other.fd_);
    base_ = std::exchange(other.base_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

SharedSegment::~SharedSegment() {
  if (base_ != nullptr) ::munmap(base_, size_);
}

Result<std::span<std::byte>> SharedSegment::Slice(uint64_t offset, uint64_t length) const {
  if (offset > size_ || length > size_ - offset) {
    return Status::InvalidArgument("bytes [" + std::to_string(offset) + ", +" + std::to_string(length) +
                                   ") leave the " + std::to_string(size_) + "-byte shared segment");
  }
  return std::span<std::byte>(base_ + offset, length);
}

}  // namespace kvtier::server
