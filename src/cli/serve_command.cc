// `kvtier serve`: the cache service for the inference engines of a node (daemon.h).
#include <malloc.h>
#include <pthread.h>
#include <signal.h>

#include <iostream>
#include <memory>
#include <string>

#include "cli/commands.h"
#include "kvtier/daemon.h"

namespace kvtier::cli {
namespace {

struct ServeCommandOptions {
  std::string config;
  std::string data_dir = "kvtier-data";
};

// A request's buffers (a Get's inline blocks and its reply frame over TCP, a few MiB) are freed
// when it is answered. glibc hands a heap's free top back to the kernel past its trim threshold,
// which it sets (dynamically) to about twice the largest block it has mmapped: about one
// request's worth here, so every request faulted its pages in again and the kernel zeroed
// them. That was a fifth of a node's CPU on TLS reads (docs/cluster.md); keeping 64 MiB of free
// top per arena, and serving blocks of up to 32 MiB (glibc's largest mmap threshold; a frame is
// at most 16 MiB by default) from the heap, took those reads from 0.42-0.46 to 0.56-0.57 GB/s.
// Memory freed stays with the process only up to what it used at its peak. The daemon's own
// process only: a library embedding the server keeps its host's malloc settings.
void KeepFreedMemoryForReuse() {
  constexpr int kMmapThreshold = 32 << 20;
  constexpr int kTrimThreshold = 64 << 20;
  // An allocator that replaces glibc's (a sanitizer's, jemalloc preloaded) refuses these and
  // keeps its own policy, which is then what applies: nothing to report.
  (void)::mallopt(M_MMAP_THRESHOLD, kMmapThreshold);
  (void)::mallopt(M_TRIM_THRESHOLD, kTrimThreshold);
}

int RunServe(const ServeCommandOptions& o) {
  auto fail = [](const Status& s) {
    std::cerr << "kvtier serve: " << s.ToString() << "\n";
    return kExitError;
  };
  ServeConfig config;
  if (o.config.empty()) {
    config = DefaultServeConfig(o.data_dir);
  } else {
    Result<ServeConfig> loaded = LoadServeConfig(o.config);
    if (!loaded.ok()) return fail(loaded.status());
    config = std::move(*loaded);
  }
  // Every thread the daemon starts inherits this mask, so SIGTERM and SIGINT reach only the
  // sigwait below, which turns them into a graceful Stop.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  ::signal(SIGPIPE, SIG_IGN);
  KeepFreedMemoryForReuse();

  Result<std::unique_ptr<Daemon>> daemon = Daemon::Start(std::move(config));
  if (!daemon.ok()) return fail(daemon.status());
  Daemon& d = **daemon;
  const ServeConfig& c = d.config();
  std::cout << "kvtier serve: " << d.recovered_blocks() << " blocks recovered; listening on";
  if (!c.server.unix_socket_path.empty()) std::cout << " unix:" << c.server.unix_socket_path;
  if (c.server.tcp) {
    std::cout << (c.server.tls.enabled() ? " tls:" : " tcp:") << c.server.tcp_host << ":" << d.server().tcp_port();
  }
  if (d.metrics_port() != 0) std::cout << "; metrics http://" << c.metrics_host << ":" << d.metrics_port() << "/metrics";
  std::cout << std::endl;

  int received = 0;
  sigwait(&signals, &received);
  std::cout << "kvtier serve: " << (received == SIGTERM ? "SIGTERM" : "SIGINT")
            << ": draining requests in progress and flushing" << std::endl;
  const Status stopped = d.Stop();
  if (!stopped.ok()) return fail(stopped.WithContext("shutdown"));
  std::cout << "kvtier serve: stopped cleanly" << std::endl;
  return 0;
}

}  // namespace

void AddServeCommand(CLI::App& app, int& exit_code) {
  auto options = std::make_shared<ServeCommandOptions>();
  CLI::App* serve = app.add_subcommand(
      "serve", "Serve the tiered KV store to inference engines (Unix socket + shared memory, TCP, /metrics)");
  serve->add_option("--config", options->config, "Configuration file (see examples/serve.yaml); default: embedded")
      ->check(CLI::ExistingFile);
  serve->add_option("--data-dir", options->data_dir, "Data directory of the embedded default configuration")
      ->capture_default_str();
  serve->callback([options, &exit_code] { exit_code = RunServe(*options); });
}

}  // namespace kvtier::cli
