#include "kvtier/server.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <list>
#include <mutex>
#include <thread>

#include "server/frame_io.h"
#include "server/service_metrics.h"
#include "server/session.h"
#include "server/tls.h"

namespace kvtier {
namespace {

using server::FrameSocket;

bool IsLoopback(const std::string& host) { return host == "127.0.0.1" || host == "::1" || host == "localhost"; }

Result<ScopedFd> ListenUnix(const std::string& path) {
  sockaddr_un addr{};
  if (path.size() >= sizeof(addr.sun_path)) {
    return Status::InvalidArgument("unix socket path '" + path + "' is longer than " + std::to_string(sizeof(addr.sun_path) - 1) + " bytes");
  }
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  ScopedFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd.valid()) return ErrnoStatus(path, "socket", errno);
  // A socket file left by a killed server would make bind fail; only this server may own the path.
  struct stat st{};
  if (::lstat(path.c_str(), &st) == 0) {
    if (!S_ISSOCK(st.st_mode)) return Status::InvalidArgument("'" + path + "' exists and is not a socket; refusing to replace it");
    ::unlink(path.c_str());
  }
  // The socket is created 0600: only the server's user may connect.
  const mode_t old_mask = ::umask(0177);
  const int bound = ::bind(fd.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof(addr));
  const int bind_errno = errno;
  ::umask(old_mask);
  if (bound != 0) return ErrnoStatus(path, "bind", bind_errno);
  if (::listen(fd.get(), 128) != 0) return ErrnoStatus(path, "listen", errno);
  return fd;
}

Result<std::pair<ScopedFd, uint16_t>> ListenTcp(const std::string& host, uint16_t port) {
  const std::string where = host + ":" + std::to_string(port);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  if (const int rc = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found); rc != 0) {
    return Status::InvalidArgument("cannot resolve '" + host + "': " + ::gai_strerror(rc));
  }
  std::unique_ptr<addrinfo, decltype(&::freeaddrinfo)> list(found, &::freeaddrinfo);
  ScopedFd fd(::socket(found->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd.valid()) return ErrnoStatus(where, "socket", errno);
  const int one = 1;
  ::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (::bind(fd.get(), found->ai_addr, found->ai_addrlen) != 0) return ErrnoStatus(where, "bind", errno);
  if (::listen(fd.get(), 128) != 0) return ErrnoStatus(where, "listen", errno);
  sockaddr_storage bound{};
  socklen_t length = sizeof(bound);
  ::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&bound), &length);
  const uint16_t bound_port = bound.ss_family == AF_INET6 ? ntohs(reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port)
                                                          : ntohs(reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
  return std::pair<ScopedFd, uint16_t>(std::move(fd), bound_port);
}

// Sends one Error frame on a socket we are about to close; best effort. In the oldest
// version: an Error is the same in all of them, and every client reads that one.
void SendError(FrameSocket& socket, const Status& status, uint64_t request_id, protocol::MessageType reply_to,
               const protocol::Limits& limits) {
  std::vector<std::byte> frame;
  if (protocol::EncodeFrame(protocol::ErrorReply{status.code(), status.message().substr(0, limits.max_string_bytes)},
                            request_id, reply_to, limits, frame, protocol::kMinVersion)
          .ok()) {
    (void)socket.Send(frame);
  }
}

// Reads and drops what a peer we are about to close on has sent already (up to 64 KiB):
// closing a TCP socket with unread bytes resets the connection, and the reset can overtake
// the error frame just sent.
void DiscardWaiting(int fd) {
  char sink[4096];
  for (int i = 0; i < 16 && ::recv(fd, sink, sizeof(sink), MSG_DONTWAIT) > 0; ++i) {
  }
}

}  // namespace

Status ServerOptions::Validate() const {
  if (unix_socket_path.empty() && !tcp) return Status::InvalidArgument("the server needs a Unix socket path or TCP");
  if (tcp && !IsLoopback(tcp_host)) {
    const std::string exposed = "TCP on '" + tcp_host + "' is reachable from other hosts: ";
    if (!tls.enabled()) {
      return Status::InvalidArgument(exposed + "give it TLS (listen.tls.cert and listen.tls.key) and auth_token, "
                                               "or listen on 127.0.0.1");
    }
    const bool every_tenant_has_a_token =
        !tenants.empty() && std::ranges::all_of(tenants, [](const TenantOptions& t) { return !t.auth_token.empty(); });
    if (auth_token.empty() && !every_tenant_has_a_token) {
      return Status::InvalidArgument(exposed + "set auth_token (or an auth_token for every tenant)");
    }
  }
  if (tls.enabled() && (tls.cert_file.empty() || tls.key_file.empty())) {
    return Status::InvalidArgument("TLS needs both a certificate (listen.tls.cert) and its private key (listen.tls.key)");
  }
  if (tls.handshake_timeout_ms < 0) return Status::InvalidArgument("the TLS handshake timeout must be 0 (none) or positive");
  if (max_connections == 0) return Status::InvalidArgument("max_connections must be at least 1");
  if (io_timeout_ms < 0) return Status::InvalidArgument("io_timeout_ms must be 0 (none) or positive");
  return limits.Validate();
}

struct Server::Impl {
  struct Connection {
    std::unique_ptr<FrameSocket> socket;
    std::thread thread;
    std::atomic<bool> finished{false};
  };

  TieredStore& store;
  ServerOptions options;
  std::unique_ptr<server::TlsContext> tls;  // for TCP connections; none without options.tls
  ScopedFd unix_listener, tcp_listener;
  uint16_t bound_tcp_port = 0;
  int wake_pipe[2] = {-1, -1};  // the acceptor's poll wakes when Shutdown writes here
  std::thread acceptor;
  std::atomic<bool> stopping{false};
  std::mutex mu;                         // guards `connections` and `shut_down`
  std::list<Connection> connections;     // GUARDED_BY(mu)
  std::atomic<uint32_t> live{0};
  bool shut_down = false;                // GUARDED_BY(mu)

  Impl(TieredStore& s, ServerOptions o) : store(s), options(std::move(o)) {}

  ~Impl() {
    for (int fd : wake_pipe) {
      if (fd >= 0) ::close(fd);
    }
  }

  void AcceptLoop() {
    std::vector<pollfd> fds;
    fds.push_back({wake_pipe[0], POLLIN, 0});
    if (unix_listener.valid()) fds.push_back({unix_listener.get(), POLLIN, 0});
    if (tcp_listener.valid()) fds.push_back({tcp_listener.get(), POLLIN, 0});
    while (!stopping.load()) {
      if (::poll(fds.data(), fds.size(), 1000) < 0 && errno != EINTR) break;
      ReapFinished();
      for (std::size_t i = 1; i < fds.size(); ++i) {
        if ((fds[i].revents & POLLIN) == 0 || stopping.load()) continue;
        ScopedFd client(::accept4(fds[i].fd, nullptr, nullptr, SOCK_CLOEXEC));
        if (!client.valid()) continue;
        const bool tcp = fds[i].fd == tcp_listener.get();
        if (tcp) {
          const int one = 1;
          ::setsockopt(client.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        }
        Admit(std::move(client), tcp);
      }
    }
  }

  void Admit(ScopedFd client, bool tcp) {
    auto socket = std::make_unique<FrameSocket>(std::move(client), options.io_timeout_ms);
    if (live.load() >= options.max_connections) {
      if (options.metrics) options.metrics->ConnectionRejected();
      SendError(*socket, Status::ResourceExhausted("the server has " + std::to_string(options.max_connections) +
                                                   " connections, its limit"),
                0, protocol::MessageType::kError, options.limits);
      return;
    }
    std::lock_guard lock(mu);
    Connection& c = connections.emplace_back();
    c.socket = std::move(socket);
    ++live;
    if (options.metrics) options.metrics->ConnectionOpened();
    c.thread = std::thread([this, &c, tcp] {
      if (!tcp || tls == nullptr || Secure(*c.socket)) Serve(*c.socket, tcp);
      c.socket->Hangup();
      --live;
      if (options.metrics) options.metrics->ConnectionClosed();
      c.finished.store(true);
    });
  }

  // The server's side of the TLS handshake, on the connection's own thread (the acceptor
  // never waits for a client). False when the connection must close: a plain kvtier client
  // is told why in its own framing first; every failure is counted.
  bool Secure(FrameSocket& socket) {
    const int timeout_ms = options.tls.handshake_timeout_ms;
    const Result<bool> plain = server::PlainKvtierWaiting(socket.fd(), timeout_ms);
    Result<std::unique_ptr<server::ByteStream>> stream =
        plain.ok() && !*plain ? tls->Accept(socket.fd(), timeout_ms) : Status::Unavailable("not a TLS client");
    if (stream.ok()) {
      socket.UseStream(std::move(*stream));
      return true;
    }
    // Counted before the plain client is told, so that the count is there once it knows.
    if (options.metrics) options.metrics->TlsHandshakeFailed();
    if (plain.ok() && *plain) {
      SendError(socket, Status::FailedPrecondition("this kvtier port speaks TLS: connect with TLS (ClientOptions::tls)"),
                0, protocol::MessageType::kError, options.limits);
      DiscardWaiting(socket.fd());
    }
    return false;
  }

  void ReapFinished() {
    std::lock_guard lock(mu);
    for (auto it = connections.begin(); it != connections.end();) {
      if (it->finished.load()) {
        it->thread.join();
        it = connections.erase(it);
      } else {
        ++it;
      }
    }
  }

  // One connection: frames in, replies out, until the peer leaves, a frame is malformed or
  // the server shuts down. The session (and its pins and mappings) dies with the loop.
  void Serve(FrameSocket& socket, bool tcp) {
    server::Session session(store, options, tcp);
    std::vector<std::byte> payload, out;
    std::vector<ScopedFd> fds;
    while (!stopping.load()) {
      fds.clear();
      Result<protocol::FrameHeader> header = socket.Receive(options.limits, payload, fds);
      if (!header.ok()) {
        if (header.status().code() == StatusCode::kInvalidArgument) {
          if (options.metrics) options.metrics->FrameRejected();
          SendError(socket, header.status(), 0, protocol::MessageType::kError, options.limits);
        }
        return;  // closed, reset, stalled or shut down
      }
      const auto start = std::chrono::steady_clock::now();
      Result<protocol::Message> request = protocol::DecodePayload(*header, payload, options.limits);
      if (!request.ok() || header->reply) {
        if (options.metrics) options.metrics->FrameRejected();
        SendError(socket, request.ok() ? Status::InvalidArgument("a client sent a reply frame") : request.status(),
                  header->request_id, header->type, options.limits);
        return;
      }
      if (options.metrics) options.metrics->InFlightAdd(1);
      // Each request is answered in the protocol version of its frame (version 1 clients
      // get no checksums).
      server::Reply reply = session.Handle(*request, header->version, fds);
      // Counted before the reply leaves: a client that sees the refusal sees the count.
      if (options.metrics && reply.put_checksum_mismatches > 0) {
        options.metrics->PutChecksumMismatches(reply.put_checksum_mismatches);
      }
      out.clear();
      Status encoded =
          protocol::EncodeFrame(reply.message, header->request_id, header->type, options.limits, out, header->version);
      if (!encoded.ok()) {  // e.g. a reply over the frame limit: say so instead
        reply = {protocol::ErrorReply{encoded.code(), encoded.message().substr(0, options.limits.max_string_bytes)}};
        out.clear();
        encoded =
            protocol::EncodeFrame(reply.message, header->request_id, header->type, options.limits, out, header->version);
      }
      const bool ok = !std::holds_alternative<protocol::ErrorReply>(reply.message);
      const Status sent = encoded.ok() ? socket.Send(out) : encoded;
      if (options.metrics) {
        options.metrics->InFlightAdd(-1);
        options.metrics->RecordRequest(header->type,
                                       std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), ok,
                                       reply.blocks, reply.payload_bytes);
      }
      if (!sent.ok() || reply.close) return;
    }
  }

  void Shutdown() {
    {
      std::lock_guard lock(mu);
      if (shut_down) return;
      shut_down = true;
    }
    stopping.store(true);
    if (wake_pipe[1] >= 0) (void)::write(wake_pipe[1], "x", 1);
    if (acceptor.joinable()) acceptor.join();
    unix_listener = ScopedFd();
    tcp_listener = ScopedFd();
    if (!options.unix_socket_path.empty()) ::unlink(options.unix_socket_path.c_str());
    // Readers blocked between frames wake with end-of-stream; a request being served
    // finishes and its reply is still sent.
    std::lock_guard lock(mu);
    for (Connection& c : connections) c.socket->ShutdownRead();
    for (Connection& c : connections) c.thread.join();
    connections.clear();
  }
};

Result<std::unique_ptr<Server>> Server::Start(TieredStore& store, ServerOptions options) {
  KVTIER_RETURN_IF_ERROR(options.Validate());
  auto impl = std::make_unique<Impl>(store, std::move(options));
  if (::pipe2(impl->wake_pipe, O_CLOEXEC) != 0) return ErrnoStatus("server", "pipe", errno);
  if (impl->options.tcp && impl->options.tls.enabled()) {
    KVTIER_ASSIGN_OR_RETURN(impl->tls, server::TlsContext::ForServer(impl->options.tls));
  }
  if (!impl->options.unix_socket_path.empty()) {
    KVTIER_ASSIGN_OR_RETURN(impl->unix_listener, ListenUnix(impl->options.unix_socket_path));
  }
  if (impl->options.tcp) {
    KVTIER_ASSIGN_OR_RETURN(auto tcp, ListenTcp(impl->options.tcp_host, impl->options.tcp_port));
    impl->tcp_listener = std::move(tcp.first);
    impl->bound_tcp_port = tcp.second;
  }
  Impl* raw = impl.get();
  impl->acceptor = std::thread([raw] { raw->AcceptLoop(); });
  return std::unique_ptr<Server>(new Server(std::move(impl)));
}

Server::Server(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Server::~Server() { Shutdown(); }
const std::string& Server::unix_socket_path() const { return impl_->options.unix_socket_path; }
uint16_t Server::tcp_port() const { return impl_->bound_tcp_port; }
uint32_t Server::connections() const { return impl_->live.load(); }
void Server::Shutdown() { impl_->Shutdown(); }

}  // namespace kvtier
