#include "server/frame_io.h"

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

Status WaitFor(int fd, short events, int timeout_ms) {
  pollfd p{.fd = fd, .events = events, .revents = 0};
  for (;;) {
    const int n = ::poll(&p, 1, timeout_ms > 0 ? timeout_ms : -1);
    if (n > 0) return Status::Ok();
    if (n == 0) return Status::Unavailable("peer stalled for " + std::to_string(timeout_ms) + " ms in the middle of a frame");
    if (errno != EINTR) return Status::Unavailable(std::string("poll failed: ") + std::strerror(errno));
  }
}

}  // namespace

FrameSocket::FrameSocket(ScopedFd fd, int io_timeout_ms) : fd_(std::move(fd)), io_timeout_ms_(io_timeout_ms) {}

Status FrameSocket::Send(std::span<const std::byte> frame, std::span<const int> fds) {
  if (fds.size() > kMaxFdsPerMessage) return Status::InvalidArgument("too many descriptors for one frame");
  std::size_t sent = 0;
  while (sent < frame.size()) {
    iovec iov{.iov_base = const_cast<std::byte*>(frame.data() + sent), .iov_len = frame.size() - sent};
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
    const ssize_t n = ::sendmsg(fd_.get(), &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      sent += static_cast<std::size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      // A peer that does not read its replies blocks only this connection, and not forever.
      KVTIER_RETURN_IF_ERROR(WaitFor(fd_.get(), POLLOUT, io_timeout_ms_));
      continue;
    }
    return Status::Unavailable(std::string("send failed: ") + std::strerror(n < 0 ? errno : EPIPE));
  }
  return Status::Ok();
}

Status FrameSocket::ReadFully(std::span<std::byte> into, bool frame_started, std::vector<ScopedFd>& fds) {
  std::size_t got = 0;
  while (got < into.size()) {
    if (frame_started || got > 0) KVTIER_RETURN_IF_ERROR(WaitFor(fd_.get(), POLLIN, io_timeout_ms_));
    iovec iov{.iov_base = into.data() + got, .iov_len = into.size() - got};
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxFdsPerMessage)];
    msg.msg_control = control;
    msg.msg_controllen = sizeof(control);
    const ssize_t n = ::recvmsg(fd_.get(), &msg, MSG_CMSG_CLOEXEC);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) continue;
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
    if (n == 0) {
      if (!frame_started && got == 0) return Status::NotFound("peer closed the connection");
      return Status::Unavailable("peer closed the connection in the middle of a frame");
    }
    got += static_cast<std::size_t>(n);
  }
  return Status::Ok();
}

Result<protocol::FrameHeader> FrameSocket::Receive(const protocol::Limits& limits, std::vector<std::byte>& payload,
                                                   std::vector<ScopedFd>& fds) {
  std::byte header_bytes[protocol::kHeaderBytes];
  KVTIER_RETURN_IF_ERROR(ReadFully(header_bytes, /*frame_started=*/false, fds));
  KVTIER_ASSIGN_OR_RETURN(protocol::FrameHeader header, protocol::DecodeHeader(header_bytes, limits));
  payload.resize(header.payload_bytes);
  KVTIER_RETURN_IF_ERROR(ReadFully(payload, /*frame_started=*/true, fds));
  return header;
}

bool FrameSocket::ReadableNow() const {
  pollfd p{.fd = fd_.get(), .events = POLLIN, .revents = 0};
  return ::poll(&p, 1, 0) > 0;
}

void FrameSocket::ShutdownRead() { ::shutdown(fd_.get(), SHUT_RD); }
void FrameSocket::Hangup() { ::shutdown(fd_.get(), SHUT_RDWR); }

}  // namespace kvtier::server
