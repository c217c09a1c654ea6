#include "server/byte_stream.h"

#include <poll.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstring>
#include <string>

namespace kvtier::server {
namespace {

// Enough for every descriptor a Hello may carry (Limits::max_batch is larger, but the server
// caps segments per client far below this).
constexpr std::size_t kMaxFdsPerMessage = 64;

bool WouldBlock(int error) { return error == EAGAIN || error == EWOULDBLOCK; }

class PlainStream final : public ByteStream {
 public:
  explicit PlainStream(int fd) : ByteStream(fd) {}

  Result<StreamProgress> TryWrite(std::span<const std::byte> bytes, std::span<const int> fds) override {
    if (fds.size() > kMaxFdsPerMessage) return Status::InvalidArgument("too many descriptors for one frame");
    iovec iov{.iov_base = const_cast<std::byte*>(bytes.data()), .iov_len = bytes.size()};
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxFdsPerMessage)];
    if (!fds.empty()) {
      msg.msg_control = control;
      msg.msg_controllen = CMSG_SPACE(sizeof(int) * fds.size());
      cmsghdr* c = CMSG_FIRSTHDR(&msg);
      c->cmsg_level = SOL_SOCKET;
      c->cmsg_type = SCM_RIGHTS;
      c->cmsg_len = CMSG_LEN(sizeof(int) * fds.size());
      std::memcpy(CMSG_DATA(c), fds.data(), sizeof(int) * fds.size());
    }
    for (;;) {
      const ssize_t n = ::sendmsg(fd(), &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n > 0) return StreamProgress{.bytes = static_cast<std::size_t>(n)};
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && WouldBlock(errno)) return StreamProgress{.wants = POLLOUT};
      return Status::Unavailable(std::string("send failed: ") + std::strerror(n < 0 ? errno : EPIPE));
    }
  }

  Result<StreamProgress> TryRead(std::span<std::byte> into, std::vector<ScopedFd>& fds) override {
    iovec iov{.iov_base = into.data(), .iov_len = into.size()};
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxFdsPerMessage)];
    msg.msg_control = control;
    msg.msg_controllen = sizeof(control);
    ssize_t n = -1;
    do {
      n = ::recvmsg(fd(), &msg, MSG_CMSG_CLOEXEC | MSG_DONTWAIT);
    } while (n < 0 && errno == EINTR);
    if (n < 0 && WouldBlock(errno)) return StreamProgress{.wants = POLLIN};
    if (n < 0) return Status::Unavailable(std::string("receive failed: ") + std::strerror(errno));
    TakeDescriptors(msg, fds);
    if ((msg.msg_flags & MSG_CTRUNC) != 0) {
      return Status::InvalidArgument("more descriptors than one frame may carry (" + std::to_string(kMaxFdsPerMessage) + ")");
    }
    return StreamProgress{.bytes = static_cast<std::size_t>(n), .end = n == 0};
  }

  bool ConcurrentReadWrite() const override { return true; }
  bool Buffered() const override { return false; }

 private:
  static void TakeDescriptors(msghdr& msg, std::vector<ScopedFd>& fds) {
    for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
      if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
      const std::size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
      for (std::size_t i = 0; i < count; ++i) {
        int received = -1;
        std::memcpy(&received, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
        fds.emplace_back(received);
      }
    }
  }
};

}  // namespace

Status ByteStream::Write(std::span<const std::byte> bytes, std::span<const int> fds, int timeout_ms) {
  std::size_t sent = 0;
  while (sent < bytes.size()) {
    KVTIER_ASSIGN_OR_RETURN(StreamProgress step, TryWrite(bytes.subspan(sent), sent == 0 ? fds : std::span<const int>{}));
    sent += step.bytes;
    // A peer that does not read its replies blocks only this connection, and not forever.
    if (step.wants != 0) KVTIER_RETURN_IF_ERROR(WaitForSocket(fd_, step.wants, timeout_ms));
  }
  return Status::Ok();
}

Result<std::size_t> ByteStream::ReadSome(std::span<std::byte> into, std::vector<ScopedFd>& fds, int timeout_ms) {
  for (;;) {
    KVTIER_ASSIGN_OR_RETURN(StreamProgress step, TryRead(into, fds));
    if (step.wants == 0) return step.bytes;  // bytes, or 0 at the end of the stream
    KVTIER_RETURN_IF_ERROR(WaitForSocket(fd_, step.wants, timeout_ms));
  }
}

bool ByteStream::ReadableNow() const {
  if (Buffered()) return true;
  pollfd p{.fd = fd_, .events = POLLIN, .revents = 0};
  return ::poll(&p, 1, 0) > 0;
}

std::unique_ptr<ByteStream> NewPlainStream(int fd) { return std::make_unique<PlainStream>(fd); }

Status WaitForSocket(int fd, short events, int timeout_ms) {
  pollfd p{.fd = fd, .events = events, .revents = 0};
  for (;;) {
    const int n = ::poll(&p, 1, timeout_ms > 0 ? timeout_ms : -1);
    if (n > 0) return Status::Ok();
    if (n == 0) return Status::Unavailable("peer stalled for " + std::to_string(timeout_ms) + " ms in the middle of a frame");
    if (errno != EINTR) return Status::Unavailable(std::string("poll failed: ") + std::strerror(errno));
  }
}

}  // namespace kvtier::server
