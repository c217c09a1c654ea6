#include "lookup_load.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/un.h>

#include <algorithm>
#include <array>
#include <barrier>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <memory>
#include <random>
#include <span>
#include <thread>
#include <variant>

#include "kvtier/protocol.h"
#include "util/little_endian.h"
#include "util/posix_file.h"

namespace kvtier::bench {
namespace {

using Clock = std::chrono::steady_clock;

enum class State { kConnecting, kHello, kReady, kWaiting, kClosed };

struct Connection {
  ScopedFd fd;
  State state = State::kConnecting;
  std::vector<std::byte> out;
  std::size_t out_done = 0;
  bool want_write = false;
  std::string send_error;  // why the last send failed, if it did
  std::vector<std::byte> in;
  std::size_t in_have = 0;
  uint64_t next_id = 2;  // Hello is request 1
  std::size_t chain = 0;  // of the lookup in flight
  Clock::time_point sent_at;
};

// The frames every connection sends, encoded once.
struct Frames {
  std::vector<std::byte> hello;
  std::vector<std::vector<std::byte>> lookups;  // one per chain, request id patched when sent
};

Result<Frames> EncodeFrames(const std::vector<std::vector<BlockKey>>& chains) {
  Frames f;
  KVTIER_RETURN_IF_ERROR(protocol::EncodeFrame(protocol::Hello{}, 1, protocol::MessageType::kError, {}, f.hello));
  for (const std::vector<BlockKey>& chain : chains) {
    KVTIER_RETURN_IF_ERROR(protocol::EncodeFrame(protocol::Lookup{.chains = {chain}}, 0, protocol::MessageType::kError, {},
                                                 f.lookups.emplace_back()));
  }
  return f;
}

// One thread's connections and their epoll loop.
class LoadLoop {
 public:
  LoadLoop(const LookupLoadOptions& o, const Frames& frames, const std::vector<std::vector<BlockKey>>& chains, int clients,
           uint64_t seed)
      : o_(o), frames_(frames), chains_(chains), epoll_(::epoll_create1(EPOLL_CLOEXEC)), rng_(seed),
        connections_(static_cast<std::size_t>(clients)) {}

  // Connects every connection and exchanges Hello, until all are ready (or failed) or `deadline`.
  void Setup(Clock::time_point deadline) {
    if (!epoll_.valid()) {
      for (Connection& c : connections_) Fail(c, std::string("epoll_create1: ") + std::strerror(errno));
      return;
    }
    for (std::size_t i = 0; i < connections_.size(); ++i) Connect(i);
    while (Pending() > 0 && Clock::now() < deadline) Poll(Clock::time_point::max());
    for (Connection& c : connections_) {
      if (c.state == State::kConnecting || c.state == State::kHello) {
        Fail(c, "did not connect and finish Hello within " + std::to_string(o_.connect_timeout_ms) + " ms");
      }
    }
  }

  // Keeps one lookup in flight on every ready connection until `end`; counts replies until then.
  void Drive(Clock::time_point start, Clock::time_point end) {
    end_ = end;
    for (Connection& c : connections_) {
      if (c.state == State::kReady) SendLookup(c);
    }
    auto next_expiry = Clock::now();
    for (auto now = Clock::now(); now < end; now = Clock::now()) {
      Poll(end);
      if (now >= next_expiry) {
        ExpireStalled(now);
        next_expiry = now + std::chrono::milliseconds(100);
      }
    }
    result_.elapsed_s = std::chrono::duration<double>(Clock::now() - start).count();
    for (Connection& c : connections_) c.fd = ScopedFd();
  }

  LookupLoadResult& result() { return result_; }

 private:
  std::size_t Pending() const {
    return static_cast<std::size_t>(std::count_if(connections_.begin(), connections_.end(), [](const Connection& c) {
      return c.state == State::kConnecting || c.state == State::kHello;
    }));
  }

  void Fail(Connection& c, const std::string& why) {
    if (c.state == State::kClosed) return;
    if (result_.errors++ == 0) result_.first_error = why;
    c.state = State::kClosed;
    c.fd = ScopedFd();  // closing it also leaves the epoll set
  }

  void Connect(std::size_t i) {
    Connection& c = connections_[i];
    const bool local = !o_.unix_socket.empty();
    c.fd = ScopedFd(::socket(local ? AF_UNIX : AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
    if (!c.fd.valid()) return Fail(c, std::string("socket: ") + std::strerror(errno));
    sockaddr_storage address{};
    socklen_t length = 0;
    if (local) {
      auto* un = reinterpret_cast<sockaddr_un*>(&address);
      if (o_.unix_socket.size() >= sizeof un->sun_path) return Fail(c, "Unix socket path too long: " + o_.unix_socket);
      un->sun_family = AF_UNIX;
      std::memcpy(un->sun_path, o_.unix_socket.c_str(), o_.unix_socket.size() + 1);
      length = sizeof(sockaddr_un);
    } else {
      const int one = 1;
      ::setsockopt(c.fd.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      auto* in = reinterpret_cast<sockaddr_in*>(&address);
      in->sin_family = AF_INET;
      in->sin_port = htons(o_.port);
      if (::inet_pton(AF_INET, o_.host.c_str(), &in->sin_addr) != 1) return Fail(c, "not an IPv4 address: " + o_.host);
      length = sizeof(sockaddr_in);
    }
    if (::connect(c.fd.get(), reinterpret_cast<const sockaddr*>(&address), length) != 0 && errno != EINPROGRESS) {
      const std::string where = local ? o_.unix_socket : o_.host + ":" + std::to_string(o_.port);
      return Fail(c, "connect to " + where + ": " + std::strerror(errno));
    }
    epoll_event event{.events = EPOLLOUT, .data = {.u64 = i}};
    if (::epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, c.fd.get(), &event) != 0) {
      return Fail(c, std::string("epoll_ctl: ") + std::strerror(errno));
    }
    c.want_write = true;
  }

  void Poll(Clock::time_point end) {
    std::array<epoll_event, 256> events;
    const int n = ::epoll_wait(epoll_.get(), events.data(), static_cast<int>(events.size()), 10);
    for (int e = 0; e < n && Clock::now() < end; ++e) {
      Connection& c = connections_[events[static_cast<std::size_t>(e)].data.u64];
      const uint32_t what = events[static_cast<std::size_t>(e)].events;
      if (c.state == State::kClosed) continue;
      if (c.state == State::kConnecting) {
        int error = 0;
        socklen_t length = sizeof error;
        ::getsockopt(c.fd.get(), SOL_SOCKET, SO_ERROR, &error, &length);
        if (error != 0) {
          Fail(c, "connect to " + o_.host + ":" + std::to_string(o_.port) + ": " + std::strerror(error));
          continue;
        }
        c.state = State::kHello;
        Send(c, frames_.hello);
        continue;
      }
      if ((what & EPOLLOUT) != 0) Flush(c);
      if ((what & (EPOLLIN | EPOLLHUP | EPOLLERR)) != 0 && c.state != State::kClosed) OnReadable(c);
    }
  }

  void Send(Connection& c, std::span<const std::byte> frame) {
    c.out.assign(frame.begin(), frame.end());
    c.out_done = 0;
    Flush(c);
  }

  void Flush(Connection& c) {
    while (c.out_done < c.out.size()) {
      const ssize_t n = ::send(c.fd.get(), c.out.data() + c.out_done, c.out.size() - c.out_done, MSG_NOSIGNAL);
      if (n > 0) {
        c.out_done += static_cast<std::size_t>(n);
      } else if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
        break;
      } else {
        // A server that refused the connection wrote why before closing: OnReadable reads
        // that when the hang-up arrives, and names this only when there was nothing to read.
        c.send_error = std::string("send: ") + std::strerror(errno);
        c.out_done = c.out.size();
      }
    }
    const bool want_write = c.out_done < c.out.size();
    if (want_write == c.want_write) return;
    const std::size_t index = static_cast<std::size_t>(&c - connections_.data());
    epoll_event event{.events = EPOLLIN | (want_write ? EPOLLOUT : 0u), .data = {.u64 = index}};
    if (::epoll_ctl(epoll_.get(), EPOLL_CTL_MOD, c.fd.get(), &event) != 0) {
      return Fail(c, std::string("epoll_ctl: ") + std::strerror(errno));
    }
    c.want_write = want_write;
  }

  void SendLookup(Connection& c) {
    c.chain = std::uniform_int_distribution<std::size_t>(0, chains_.size() - 1)(rng_);
    c.state = State::kWaiting;
    const std::vector<std::byte>& frame = frames_.lookups[c.chain];
    c.out.assign(frame.begin(), frame.end());
    little_endian::PutU64(c.out.data() + 8, c.next_id++);  // the header's request id
    c.out_done = 0;
    c.sent_at = Clock::now();
    Flush(c);
  }

  void OnReadable(Connection& c) {
    bool closed = false;
    for (;;) {
      if (c.in.size() - c.in_have < 4096) c.in.resize(std::max<std::size_t>(2 * c.in.size(), c.in_have + 4096));
      const ssize_t n = ::recv(c.fd.get(), c.in.data() + c.in_have, c.in.size() - c.in_have, 0);
      if (n > 0) {
        c.in_have += static_cast<std::size_t>(n);
      } else if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
        break;
      } else {
        closed = true;
        break;
      }
    }
    ParseFrames(c);
    if (closed) Fail(c, "the server closed the connection" + (c.send_error.empty() ? "" : " (" + c.send_error + ")"));
  }

  void ParseFrames(Connection& c) {
    const protocol::Limits limits;
    std::size_t used = 0;
    while (c.state != State::kClosed && c.in_have - used >= protocol::kHeaderBytes) {
      const std::span<const std::byte> rest(c.in.data() + used, c.in_have - used);
      Result<protocol::FrameHeader> header = protocol::DecodeHeader(rest, limits);
      if (!header.ok()) return Fail(c, "undecodable reply header: " + header.status().message());
      const std::size_t frame_bytes = protocol::kHeaderBytes + header->payload_bytes;
      if (rest.size() < frame_bytes) break;
      Result<protocol::Message> message =
          protocol::DecodePayload(*header, rest.subspan(protocol::kHeaderBytes, header->payload_bytes), limits);
      used += frame_bytes;
      if (!message.ok()) return Fail(c, "undecodable reply: " + message.status().message());
      OnMessage(c, *header, *message);
    }
    std::memmove(c.in.data(), c.in.data() + used, c.in_have - used);
    c.in_have -= used;
  }

  void OnMessage(Connection& c, const protocol::FrameHeader& header, const protocol::Message& message) {
    if (const auto* error = std::get_if<protocol::ErrorReply>(&message)) {
      return Fail(c, "the server answered with an error: " + error->message);
    }
    if (c.state == State::kHello && std::holds_alternative<protocol::HelloReply>(message)) {
      c.state = State::kReady;
      if (Clock::now() < end_) SendLookup(c);
      return;
    }
    const auto* lookup = std::get_if<protocol::LookupReply>(&message);
    if (c.state != State::kWaiting || lookup == nullptr || header.request_id != c.next_id - 1) {
      return Fail(c, "the server sent a reply to no request in flight");
    }
    const auto now = Clock::now();
    result_.latencies_us.push_back(std::chrono::duration<float, std::micro>(now - c.sent_at).count());
    ++result_.lookups;
    if (lookup->chains.size() != 1 || lookup->chains[0].prefix_blocks < chains_[c.chain].size()) ++result_.misses;
    c.state = State::kReady;
    if (now < end_) SendLookup(c);
  }

  void ExpireStalled(Clock::time_point now) {
    for (Connection& c : connections_) {
      if (c.state == State::kWaiting && now - c.sent_at > std::chrono::milliseconds(o_.request_timeout_ms)) {
        Fail(c, "no reply to a lookup within " + std::to_string(o_.request_timeout_ms) + " ms");
      }
    }
  }

  const LookupLoadOptions& o_;
  const Frames& frames_;
  const std::vector<std::vector<BlockKey>>& chains_;
  ScopedFd epoll_;
  std::mt19937_64 rng_;
  std::vector<Connection> connections_;
  Clock::time_point end_{};  // the window's end: none before Drive, so Hello replies send no lookup
  LookupLoadResult result_;
};

}  // namespace

Result<LookupLoadResult> RunLookupLoad(const LookupLoadOptions& o, const std::vector<std::vector<BlockKey>>& chains) {
  if (o.clients < 1 || o.threads < 1 || !(o.seconds > 0) || chains.empty() || o.port == 0) {
    return Status::InvalidArgument("lookup load: needs clients, threads, seconds, a port and chains");
  }
  KVTIER_ASSIGN_OR_RETURN(const Frames frames, EncodeFrames(chains));
  const int threads = std::min(o.threads, o.clients);
  std::vector<std::unique_ptr<LoadLoop>> loops;
  for (int t = 0; t < threads; ++t) {
    const int share = o.clients / threads + (t < o.clients % threads ? 1 : 0);
    loops.push_back(std::make_unique<LoadLoop>(o, frames, chains, share, o.seed * 7919 + static_cast<uint64_t>(t)));
  }
  const auto window = std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(o.seconds));
  Clock::time_point start, end;
  auto on_all_ready = [&]() noexcept {
    if (o.at_window_start) o.at_window_start();
    start = Clock::now();
    end = start + window;
  };
  std::barrier all_ready(threads, on_all_ready);
  const auto setup_deadline = Clock::now() + std::chrono::milliseconds(o.connect_timeout_ms);
  std::vector<std::thread> workers;
  for (auto& loop : loops) {
    workers.emplace_back([&, l = loop.get()] {
      l->Setup(setup_deadline);
      all_ready.arrive_and_wait();
      l->Drive(start, end);
    });
  }
  for (std::thread& w : workers) w.join();
  LookupLoadResult total;
  for (auto& loop : loops) {
    LookupLoadResult& r = loop->result();
    total.elapsed_s = std::max(total.elapsed_s, r.elapsed_s);
    total.lookups += r.lookups;
    total.misses += r.misses;
    if (total.errors == 0 && r.errors > 0) total.first_error = r.first_error;
    total.errors += r.errors;
    total.latencies_us.insert(total.latencies_us.end(), r.latencies_us.begin(), r.latencies_us.end());
  }
  std::sort(total.latencies_us.begin(), total.latencies_us.end());
  return total;
}

}  // namespace kvtier::bench
