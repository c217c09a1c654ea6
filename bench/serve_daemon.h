// `kvtier bench serve`'s daemon: `kvtier serve` run from this very binary (/proc/self/exe) as a
// child process, so that its CPU time (/proc/<pid>/stat) is its own and it can be pinned to a
// number of cores. Its configuration (ServeDaemonConfigYaml) is the one the in-process
// baseline opens too: 1 GiB of DRAM (dram_mib) over a 4 GiB disk tier, the Unix socket, TCP and
// /metrics on ports of 127.0.0.1 the daemon picks (read back from the line it prints when it
// listens).
//
// Thread-safety: none; the benchmark's main thread drives it.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "kvtier/status.h"
#include "scaling_projection.h"
#include "temp_dir.h"

namespace kvtier::bench {

struct ServeDaemonOptions {
  std::string dir;               // data directory (ServeDaemonConfigYaml only; Start makes its own)
  bool persist = true;           // write-through to the disk tier, or none
  bool dram_prefault = true;     // the DRAM tier's `prefault` option
  uint64_t dram_mib = 1024;      // the DRAM tier's capacity
  uint32_t policy_shards = 0;    // store.policy_shards; 0 = the daemon's default (kServePolicyShards)
  uint32_t index_shards = 0;     // store.index_shards; 0 = the daemon's default (kServeIndexShards)
  uint32_t max_connections = 256;
  int cores = 0;                 // pinned to the first `cores` CPUs this process may use; 0 = not pinned
  uint32_t event_loops = 0;      // limits.event_loops; 0 = the daemon's default
  uint32_t workers = 0;          // limits.workers; 0 = the daemon's default
  uint32_t max_workers = 0;      // limits.max_workers; 0 = the daemon's default
};

// The daemon's YAML for `options` (also what the in-process baseline parses).
std::string ServeDaemonConfigYaml(const ServeDaemonOptions& options);

// Waits (up to 60 s) until process `pid` holds `bytes` resident (VmRSS): how a phase waits for
// a DRAM tier's background prefault (region_prefaulter.h) to end before it measures, so that
// the pass neither takes the measured process's CPU nor races its puts. The seconds waited.
double WaitUntilResident(pid_t pid, uint64_t bytes);
// A byte count of /proc/<pid>/status, as `field` ("VmRSS", "VmHWM"); 0 when it cannot be read.
uint64_t ProcessStatusBytes(pid_t pid, const std::string& field);

// Mean server-side time of one op, from the daemon's /metrics (kvtier_request_duration_seconds).
struct RequestTimeSample {
  double sum_seconds = 0;
  uint64_t count = 0;
};

// What one read of the daemon's /metrics says so far: one op's request time, the store's
// metadata lock profile (kvtier_metadata_lock_*) and each tier's lock hold time
// (kvtier_tier_lock_hold_seconds_total), and the event loops' CPU time
// (kvtier_event_loop_cpu_seconds_total, which each loop brings up to date every 25 ms tick).
struct MetricsSample {
  RequestTimeSample request;
  LockReadings locks;
  double event_loop_cpu_seconds = 0;
};

class ServeDaemon {
 public:
  // Writes the configuration into a fresh TempDir (removed when the daemon goes), spawns the daemon and waits (up to 60 s) for its listening line.
  // FailedPrecondition when it exits first (its log's last line says why), Unavailable when it
  // does not listen in time, InvalidArgument when `cores` exceeds the CPUs this process may use.
  static Result<std::unique_ptr<ServeDaemon>> Start(ServeDaemonOptions options);
  ~ServeDaemon();  // SIGKILLs it if Stop did not run
  ServeDaemon(const ServeDaemon&) = delete;
  ServeDaemon& operator=(const ServeDaemon&) = delete;

  // SIGTERM, then up to 30 s to drain and exit 0; SIGKILL after that (and an error).
  Status Stop();

  // Its user + system CPU time so far, in seconds.
  Result<double> CpuSeconds() const;
  // The most memory it has had resident so far (VmHWM), in bytes; 0 when unknown.
  uint64_t PeakResidentBytes() const { return ProcessStatusBytes(pid_, "VmHWM"); }
  // One read of /metrics: the totals of kvtier_request_duration_seconds for `op` ("lookup",
  // "put", "get"), the metadata lock's profile, the tier locks' hold times and the event loops'
  // CPU time.
  Result<MetricsSample> Metrics(const std::string& op) const;

  pid_t pid() const { return pid_; }
  const std::string& socket_path() const { return socket_; }
  uint16_t tcp_port() const { return tcp_port_; }
  uint16_t metrics_port() const { return metrics_port_; }

 private:
  ServeDaemon() = default;
  Status WaitUntilListening();
  std::string LastLogLine() const;

  std::optional<TempDir> dir_;
  std::string log_, socket_;
  uint16_t tcp_port_ = 0, metrics_port_ = 0;
  pid_t pid_ = -1;
};

}  // namespace kvtier::bench
