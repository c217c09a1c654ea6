#include "kvtier/server.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <ctime>
#include <mutex>
#include <optional>
#include <thread>
#include <unordered_map>

#include "server/connection.h"
#include "server/event_loop.h"
#include "server/service_metrics.h"
#include "server/tls.h"
#include "util/task_pool.h"

namespace kvtier {
namespace {

// How often deadlines are checked (a stalled frame, a handshake, a reply not taken).
constexpr int kTickMs = 25;

// How long accepting pauses when the process is out of descriptors.
constexpr int kAcceptPauseMs = 100;
// Far beyond any machine's cores: a mistyped worker or loop count, not a tuning.
constexpr uint32_t kMaxWorkers = 1024;
constexpr uint32_t kMaxEventLoops = 256;
// Connections the kernel queues before the loop accepts them: as many as it allows
// (net.core.somaxconn caps it). Thousands of engine workers connect at once when a fleet
// starts; a full queue refuses a Unix socket's connect at once (EAGAIN) and makes TCP's wait
// for a SYN retry (a second or more).
constexpr int kListenBacklog = SOMAXCONN;

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
  if (::listen(fd.get(), kListenBacklog) != 0) return ErrnoStatus(path, "listen", errno);
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
  if (::listen(fd.get(), kListenBacklog) != 0) return ErrnoStatus(where, "listen", errno);
  sockaddr_storage bound{};
  socklen_t length = sizeof(bound);
  ::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&bound), &length);
  const uint16_t bound_port = bound.ss_family == AF_INET6 ? ntohs(reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port)
                                                          : ntohs(reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
  return std::pair<ScopedFd, uint16_t>(std::move(fd), bound_port);
}

// Adds the CPU time of the calling thread since its last report to the service's event-loop
// counter. A loop thread reports at each tick and when it ends, so the counter lags a loop by
// about a tick (25 ms, more while one batch of events runs longer); one clock_gettime per tick
// costs the loop nothing measurable.
// CLOCK_THREAD_CPUTIME_ID counts only time on a CPU: a loop asleep in epoll_wait adds nothing.
class LoopCpuMeter {
 public:
  explicit LoopCpuMeter(server::ServiceMetrics* metrics) : metrics_(metrics), reported_ns_(ThreadCpuNs()) {}
  void Report() {
    if (metrics_ == nullptr) return;
    const uint64_t now_ns = ThreadCpuNs();
    metrics_->EventLoopCpu(now_ns - reported_ns_);
    reported_ns_ = now_ns;
  }

 private:
  static uint64_t ThreadCpuNs() {
    timespec t{};
    // Cannot fail for the calling thread's own clock; a zeroed time would only add nothing.
    (void)::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return static_cast<uint64_t>(t.tv_sec) * 1'000'000'000u + static_cast<uint64_t>(t.tv_nsec);
  }

  server::ServiceMetrics* const metrics_;
  uint64_t reported_ns_;
};

// Whether a lookup may reach past this node's index, to a tier other nodes share.
bool HasSharedTier(TieredStore& store) {
  for (std::size_t t = 0; t < store.tier_count(); ++t) {
    if (store.tier(t).shared()) return true;
  }
  return false;
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
  if (event_loops > kMaxEventLoops) {
    return Status::InvalidArgument("event_loops must be at most " + std::to_string(kMaxEventLoops) +
                                   " (0: one per four hardware threads)");
  }
  if (workers > kMaxWorkers) {
    return Status::InvalidArgument("workers must be at most " + std::to_string(kMaxWorkers) + " (0: the machine's hardware threads)");
  }
  if (io_timeout_ms < 0) return Status::InvalidArgument("io_timeout_ms must be 0 (none) or positive");
  return limits.Validate();
}

uint32_t ServerOptions::event_loop_threads() const {
  return event_loops > 0 ? event_loops : DefaultEventLoops(std::thread::hardware_concurrency());
}

uint32_t ServerOptions::DefaultEventLoops(uint32_t hardware_threads) {
  return std::clamp(hardware_threads / 4, 1u, 16u);
}

uint64_t ServerOptions::request_memory_bytes() const {
  return max_request_memory > 0 ? max_request_memory : 2ull * worker_threads() * limits.max_payload_bytes;
}

uint32_t ServerOptions::worker_threads() const {
  return workers > 0 ? workers : std::clamp(4 * std::thread::hardware_concurrency(), 8u, 64u);
}

uint32_t ServerOptions::max_worker_threads() const {
  return std::max(max_workers > 0 ? max_workers : 256u, worker_threads());
}

// One event loop and the connections it serves: every member is its loop thread's, except
// what is posted to it from the acceptor's loop (new connections) or from workers (replies).
struct LoopShard {
  std::unique_ptr<server::EventLoop> loop;
  std::optional<server::RequestBudget> budget;
  std::optional<server::ConnectionContext> context;
  std::unordered_map<uint64_t, std::unique_ptr<server::Connection>> connections;
  bool stopping = false;
  std::thread thread;
};

// Lock order: shutdown_mu alone. Each shard's state belongs to its loop's thread; the
// listeners, next_id and accept_resumes to shard 0's (the acceptor's); `live` is atomic.
struct Server::Impl {
  using Clock = std::chrono::steady_clock;

  TieredStore& store;
  ServerOptions options;
  std::unique_ptr<server::TlsContext> tls;  // for TCP connections; none without options.tls
  ScopedFd unix_listener, tcp_listener;
  uint16_t bound_tcp_port = 0;
  std::vector<std::unique_ptr<LoopShard>> shards;  // shard 0 accepts
  std::unique_ptr<TaskPool> workers;  // destroyed before the loops: a worker's last act is a Post
  uint64_t next_id = 1;                              // shard 0's
  std::optional<Clock::time_point> accept_resumes;  // shard 0's: accepting paused (out of descriptors)
  std::atomic<uint32_t> live{0};
  std::mutex shutdown_mu;
  bool shut_down = false;  // GUARDED_BY(shutdown_mu)

  Impl(TieredStore& s, ServerOptions o) : store(s), options(std::move(o)) {}

  LoopShard& acceptor() { return *shards.front(); }

  Status StartLoops() {
    // Each connection has at most one request queued or running, so Submit never waits.
    workers = std::make_unique<TaskPool>(static_cast<int>(options.worker_threads()), options.max_connections + 1, "kvtier-worker",
                                         SpareThreads{.max_threads = static_cast<int>(options.max_worker_threads())});
    const bool lookups_on_loop = !HasSharedTier(store);
    const uint64_t loop_budget = std::max<uint64_t>(1, options.request_memory_bytes() / options.event_loop_threads());
    for (uint32_t i = 0; i < options.event_loop_threads(); ++i) {
      auto shard = std::make_unique<LoopShard>();
      KVTIER_ASSIGN_OR_RETURN(shard->loop, server::EventLoop::Create());
      LoopShard* const here = shard.get();
      shard->budget.emplace(*shard->loop, loop_budget, [here](uint64_t id) {
        if (const auto found = here->connections.find(id); found != here->connections.end()) found->second->ResumeReading();
      }, options.metrics);
      shard->context.emplace(server::ConnectionContext{
          .store = store,
          .options = options,
          .loop = *shard->loop,
          .budget = *shard->budget,
          .workers = *workers,
          .tls = tls.get(),
          .lookups_on_loop = lookups_on_loop,
          .finished = [this, here](uint64_t id) { here->loop->Post([this, here, id] { Forget(*here, id); }); }});
      shards.push_back(std::move(shard));
    }
    for (const ScopedFd* listener : {&unix_listener, &tcp_listener}) {
      if (!listener->valid()) continue;
      const int fd = listener->get();
      const bool tcp = listener == &tcp_listener;
      if (::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK) != 0) return ErrnoStatus("listener", "fcntl", errno);
      KVTIER_RETURN_IF_ERROR(acceptor().loop->Watch(fd, EPOLLIN, [this, fd, tcp](uint32_t) { AcceptAll(fd, tcp); }));
    }
    for (const std::unique_ptr<LoopShard>& shard : shards) {
      LoopShard* const here = shard.get();
      shard->thread = std::thread([this, here] {
        if (options.metrics) options.metrics->EventLoopsRunning(1);
        LoopCpuMeter cpu(options.metrics);
        here->loop->Run(kTickMs, [this, here, &cpu] {
          Tick(*here);
          cpu.Report();
        });
        cpu.Report();
        if (options.metrics) options.metrics->EventLoopsRunning(-1);
      });
    }
    return Status::Ok();
  }

  void AcceptAll(int listener, bool tcp) {
    for (;;) {
      ScopedFd client(::accept4(listener, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK));
      if (client.valid()) {
        if (tcp) {
          const int one = 1;
          ::setsockopt(client.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        }
        Admit(std::move(client), tcp);
        continue;
      }
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
        // Out of descriptors: the waiting client stays queued, and level-triggered epoll
        // would report it without pause. Try again shortly, when others may have left.
        PauseAccepting();
      }
      return;
    }
  }

  // On shard 0: refuses a connection over the limit, or hands it to a loop, in turn.
  void Admit(ScopedFd client, bool tcp) {
    if (live.load() >= options.max_connections) {
      if (options.metrics) options.metrics->ConnectionRejected();
      const std::vector<std::byte> refusal = server::ErrorFrame(
          Status::ResourceExhausted("the server has " + std::to_string(options.max_connections) + " connections, its limit"),
          0, protocol::MessageType::kError, options.limits);
      // A fresh socket's buffer takes the small frame whole; best effort.
      (void)server::NewPlainStream(client.get())->TryWrite(refusal, {});
      return;
    }
    const uint64_t id = next_id++;
    ++live;
    LoopShard& shard = *shards[id % shards.size()];
    if (&shard == &acceptor()) {
      Open(shard, id, std::move(client), tcp);
      return;
    }
    // A posted task must be copyable: the descriptor travels bare and is owned again there.
    shard.loop->Post([this, &shard, id, fd = client.Release(), tcp] { Open(shard, id, ScopedFd(fd), tcp); });
  }

  // On the shard's loop.
  void Open(LoopShard& shard, uint64_t id, ScopedFd client, bool tcp) {
    auto connection = std::make_unique<server::Connection>(*shard.context, id, std::move(client), tcp);
    if (shard.stopping || !connection->Open().ok()) {
      --live;
      return;
    }
    shard.connections.emplace(id, std::move(connection));
    if (options.metrics) options.metrics->ConnectionOpened();
  }

  // A finished connection goes, and its Session (pins, expectations, mappings) with it.
  void Forget(LoopShard& shard, uint64_t id) {
    if (shard.connections.erase(id) == 0) return;
    --live;
    if (options.metrics) options.metrics->ConnectionClosed();
    if (shard.stopping && shard.connections.empty()) shard.loop->Stop();
  }

  void PauseAccepting() {
    accept_resumes = Clock::now() + std::chrono::milliseconds(kAcceptPauseMs);
    for (const ScopedFd* listener : {&unix_listener, &tcp_listener}) {
      if (listener->valid()) (void)acceptor().loop->Change(listener->get(), 0);
    }
  }

  void Tick(LoopShard& shard) {
    const auto now = Clock::now();
    for (auto& [id, connection] : shard.connections) connection->CheckDeadline(now);
    if (&shard != &acceptor()) return;
    if (options.metrics != nullptr) {
      const TaskPool::Counts pool = workers->counts();
      options.metrics->WorkerPool(pool.threads, pool.blocked, pool.spares_started);
    }
    if (accept_resumes && now >= *accept_resumes && !shard.stopping) {
      accept_resumes.reset();
      for (const ScopedFd* listener : {&unix_listener, &tcp_listener}) {
        if (listener->valid()) (void)shard.loop->Change(listener->get(), EPOLLIN);
      }
    }
  }

  // On shard 0: stop accepting, then tell every loop (after the connections shard 0 handed
  // it, posted earlier) to let its connections finish what they are doing.
  void BeginStop() {
    for (ScopedFd* listener : {&unix_listener, &tcp_listener}) {
      if (!listener->valid()) continue;
      acceptor().loop->Unwatch(listener->get());
      *listener = ScopedFd();
    }
    for (const std::unique_ptr<LoopShard>& shard : shards) {
      LoopShard* const here = shard.get();
      here->loop->Post([this, here] { StopShard(*here); });
    }
  }

  void StopShard(LoopShard& shard) {
    shard.stopping = true;
    for (auto& [id, connection] : shard.connections) connection->BeginShutdown();
    if (shard.connections.empty()) shard.loop->Stop();
  }

  void Shutdown() {
    {
      std::lock_guard lock(shutdown_mu);
      if (shut_down) return;
      shut_down = true;
    }
    if (!shards.empty() && shards.front()->thread.joinable()) {
      acceptor().loop->Post([this] { BeginStop(); });
      for (const std::unique_ptr<LoopShard>& shard : shards) shard->thread.join();
    }
    workers.reset();
    if (!options.unix_socket_path.empty()) ::unlink(options.unix_socket_path.c_str());
  }
};

Result<std::unique_ptr<Server>> Server::Start(TieredStore& store, ServerOptions options) {
  KVTIER_RETURN_IF_ERROR(options.Validate());
  auto impl = std::make_unique<Impl>(store, std::move(options));
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
  KVTIER_RETURN_IF_ERROR(impl->StartLoops());
  return std::unique_ptr<Server>(new Server(std::move(impl)));
}

Server::Server(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Server::~Server() { Shutdown(); }
const std::string& Server::unix_socket_path() const { return impl_->options.unix_socket_path; }
uint16_t Server::tcp_port() const { return impl_->bound_tcp_port; }
uint32_t Server::connections() const { return impl_->live.load(); }
void Server::Shutdown() { impl_->Shutdown(); }

}  // namespace kvtier
