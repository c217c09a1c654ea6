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

class PlainStream final : public ByteStream {
 public:
  explicit PlainStream(int fd) : fd_(fd) {}

  Status Write(std::span<const std::byte> bytes, std::span<const int> fds, int timeout_ms) override {
    if (fds.size() > kMaxFdsPerMessage) return Status::InvalidArgument("too many descriptors for one frame");
    std::size_t sent = 0;
    while (sent < bytes.size()) {
      iovec iov{.iov_base = const_cast<std::byte*>(bytes.data() + sent), .iov_len = bytes.size() - sent};
      msghdr msg{};
      msg.msg_iov = &iov;
      msg.msg_iovlen = 1;
      alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxFdsPerMessage)];
      if (sent == 0 && !fds.empty()) {
        msg.msg_control = control;
        msg.msg_controllen = CMSG_SPACE(sizeof(int) * fds.size());
        cmsghdr* c = CMSG_FIRSTHDR(&msg);
        c->cmsg_level = SOL_SOCKET;
        c->cmsg_type = SCM_RIGHTS;
        c->cmsg_len = CMSG_LEN(sizeof(int) * fds.size());
        std::memcpy(CMSG_DATA(c), fds.data(), sizeof(int) * fds.size());
      }
      const ssize_t n = ::sendmsg(fd_, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n > 0) {
        sent += static_cast<std::size_t>(n);
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        // A peer that does not read its replies blocks only this connection, and not forever.
        KVTIER_RETURN_IF_ERROR(WaitForSocket(fd_, POLLOUT, timeout_ms));
        continue;
      }
      return Status::Unavailable(std::string("send failed: ") + std::strerror(n < 0 ? errno : EPIPE));
    }
    return Status::Ok();
  }

  Result<std::size_t> ReadSome(std::span<std::byte> into, std::vector<ScopedFd>& fds, int timeout_ms) override {
    for (;;) {
      KVTIER_RETURN_IF_ERROR(WaitForSocket(fd_, POLLIN, timeout_ms));
      iovec iov{.iov_base = into.data(), .iov_len = into.size()};
      msghdr msg{};
      msg.msg_iov = &iov;
      msg.msg_iovlen = 1;
      alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxFdsPerMessage)];
      msg.msg_control = control;
      msg.msg_controllen = sizeof(control);
      const ssize_t n = ::recvmsg(fd_, &msg, MSG_CMSG_CLOEXEC | MSG_DONTWAIT);
      if (n < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK)) continue;
      if (n < 0) return Status::Unavailable(std::string("receive failed: ") + std::strerror(errno));
      for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
        if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
        const std::size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
        for (std::size_t i = 0; i < count; ++i) {
          int received = -1;
          std::memcpy(&received, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
          fds.emplace_back(received);
        }
      }
      if ((msg.msg_flags & MSG_CTRUNC) != 0) {
        return Status::InvalidArgument("more descriptors than one frame may carry (" + std::to_string(kMaxFdsPerMessage) + ")");
      }
      return static_cast<std::size_t>(n);
    }
  }

  bool ReadableNow() const override {
    pollfd p{.fd = fd_, .events = POLLIN, .revents = 0};
    return ::poll(&p, 1, 0) > 0;
  }

 private:
  const int fd_;
};

}  // namespace

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
