// MetricsHttpServer: the HTTP side of `kvtier serve` for monitoring. Serves
//   GET /metrics  200, text/plain; version=0.0.4 (Prometheus): what render_metrics returns
//   GET /healthz  200 {"status":"ok" or "degraded","detail":...}, or 503 {"status":"unhealthy",...}
// and 404 for any other path. HTTP is cpp-httplib's (only metrics_http.cc includes it). Two
// threads serve scrapes: a scrape is rare and cheap, and a flood of them must not take CPU
// from the data path; read and write timeouts keep a stalled client from holding one.
//
// The callbacks run on the server's threads, possibly two at once, and must be thread-safe.
//
// Thread-safety: port() and Stop() may be called from any thread; Stop is idempotent.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "kvtier/status.h"

namespace kvtier::server {

struct HealthReport {
  bool healthy = true;
  bool degraded = false;  // healthy, but something is failing (status "degraded", still 200)
  std::string detail;  // why, for a person reading it (e.g. "tier nvme0: I/O errors")
};

class MetricsHttpServer {
 public:
  // Binds host:port (port 0: an ephemeral port, see port()) and serves on its own threads
  // until Stop. Errors: InvalidArgument for an empty host or no callback; Unavailable when
  // the address cannot be bound (in use, not local, not permitted), naming it.
  static Result<std::unique_ptr<MetricsHttpServer>> Start(const std::string& host, uint16_t port,
                                                          std::function<std::string()> render_metrics,
                                                          std::function<HealthReport()> health);
  ~MetricsHttpServer();  // Stop()
  MetricsHttpServer(const MetricsHttpServer&) = delete;
  MetricsHttpServer& operator=(const MetricsHttpServer&) = delete;

  // The bound port (the chosen one when Start was given 0).
  uint16_t port() const;

  // Closes the listening socket and returns when the serving threads have ended: a request
  // being served finishes first, an idle kept-alive connection is closed within a second.
  void Stop();

 private:
  struct Impl;
  explicit MetricsHttpServer(std::unique_ptr<Impl> impl);

  std::unique_ptr<Impl> impl_;
};

}  // namespace kvtier::server
