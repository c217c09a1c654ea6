#include "server/metrics_http.h"

#include <sys/socket.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <mutex>
#include <system_error>
#include <thread>

#include <httplib.h>
#include <nlohmann/json.hpp>

namespace kvtier::server {
namespace {

constexpr std::size_t kThreads = 2;
constexpr time_t kIoTimeoutS = 5;         // a client that stalls a read or write this long is dropped
constexpr time_t kKeepAliveTimeoutS = 1;  // bounds Stop's wait on an idle kept-alive connection
constexpr std::size_t kMaxRequestBodyBytes = 4096;  // the routes are GETs: no body is needed

std::string Address(const std::string& host, uint16_t port) {
  const bool ipv6 = host.find(':') != std::string::npos;
  return (ipv6 ? "[" + host + "]" : host) + ":" + std::to_string(port);
}

}  // namespace

struct MetricsHttpServer::Impl {
  httplib::Server http;
  uint16_t port = 0;
  std::thread listener;
  std::atomic<bool> listen_ended{false};
  std::mutex stop_mutex;  // Stop from two threads joins the listener once
};

MetricsHttpServer::MetricsHttpServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

MetricsHttpServer::~MetricsHttpServer() { Stop(); }

Result<std::unique_ptr<MetricsHttpServer>> MetricsHttpServer::Start(const std::string& host, uint16_t port,
                                                                    std::function<std::string()> render_metrics,
                                                                    std::function<HealthReport()> health) {
  if (host.empty()) return Status::InvalidArgument("metrics endpoint: the host to listen on is empty");
  if (!render_metrics || !health) return Status::InvalidArgument("metrics endpoint: a callback is missing");

  auto impl = std::make_unique<Impl>();
  httplib::Server& http = impl->http;
  http.new_task_queue = [] { return new httplib::ThreadPool(kThreads); };
  http.set_read_timeout(kIoTimeoutS, 0);
  http.set_write_timeout(kIoTimeoutS, 0);
  http.set_keep_alive_timeout(kKeepAliveTimeoutS);
  http.set_payload_max_length(kMaxRequestBodyBytes);
  // httplib's default sets SO_REUSEPORT, which lets a second daemon bind the same port and
  // silently take half the scrapes; SO_REUSEADDR alone still allows a quick restart.
  http.set_socket_options([](int sock) {
    const int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
  });

  http.Get("/metrics", [render = std::move(render_metrics)](const httplib::Request&, httplib::Response& res) {
    res.set_content(render(), "text/plain; version=0.0.4; charset=utf-8");
  });
  http.Get("/healthz", [health = std::move(health)](const httplib::Request&, httplib::Response& res) {
    const HealthReport report = health();
    res.status = report.healthy ? 200 : 503;
    const char* status = !report.healthy ? "unhealthy" : report.degraded ? "degraded" : "ok";
    const nlohmann::json body = {{"status", status}, {"detail", report.detail}};
    // A detail that is not UTF-8 (a path, an OS message) must not fail the probe.
    res.set_content(body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace), "application/json");
  });

  errno = 0;
  const int bound = port == 0 ? http.bind_to_any_port(host) : (http.bind_to_port(host, port) ? port : -1);
  if (bound <= 0) {
    // errno is bind's when the host resolved ("Address already in use"); a failed resolution
    // may leave anything there, hence the hint.
    const int err = errno;
    return Status::Unavailable("metrics endpoint: cannot listen on " + Address(host, port) +
                               (err != 0 ? " (" + std::generic_category().message(err) + ")" : std::string()) +
                               ": choose a free port and an address of this machine");
  }
  impl->port = static_cast<uint16_t>(bound);

  Impl* raw = impl.get();
  impl->listener = std::thread([raw] {
    raw->http.listen_after_bind();
    raw->listen_ended.store(true);
  });
  // httplib's stop() does nothing before the accept loop has started, so Stop could then wait
  // forever: return only once it runs.
  while (!raw->http.is_running() && !raw->listen_ended.load()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  if (raw->listen_ended.load()) {
    raw->listener.join();
    return Status::Unavailable("metrics endpoint: " + Address(host, raw->port) + " stopped accepting at once");
  }
  return std::unique_ptr<MetricsHttpServer>(new MetricsHttpServer(std::move(impl)));
}

uint16_t MetricsHttpServer::port() const { return impl_->port; }

void MetricsHttpServer::Stop() {
  std::lock_guard lock(impl_->stop_mutex);
  if (!impl_->listener.joinable()) return;
  impl_->http.stop();
  impl_->listener.join();
}

}  // namespace kvtier::server
