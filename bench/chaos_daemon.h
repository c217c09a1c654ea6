// The chaos benchmark's daemon: `kvtier serve` run from this very binary (/proc/self/exe) as a
// child process, so that it can be SIGKILLed and started again on the same files, with a
// configuration written for it: 16 MiB of DRAM, the persist tier (an NVMe slot file and the
// block journal, both in `disk_dir`, write-through), then the Redis Cluster; LRU; a Unix
// socket and TCP on loopback.
//
// Thread-safety: none; the orchestrator's thread drives it.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kvtier/status.h"

namespace kvtier::bench::chaos {

struct DaemonSetup {
  std::string dir;        // configuration, socket and log
  std::string disk_dir;   // the persist tier's slot file and the journal
  uint64_t disk_bytes = 0;
  std::vector<std::string> redis_endpoints;
};

// What the daemon holds: memory, descriptors, and its block journal's size on disk.
struct ProcessSample {
  uint64_t rss_bytes = 0;
  uint64_t fds = 0;
  uint64_t journal_bytes = 0;
};

class ChaosDaemon {
 public:
  static Result<std::unique_ptr<ChaosDaemon>> Create(DaemonSetup setup);
  ~ChaosDaemon();  // kills it
  ChaosDaemon(const ChaosDaemon&) = delete;
  ChaosDaemon& operator=(const ChaosDaemon&) = delete;

  // Spawns it and waits (up to 120 s: recovery reads every journaled block) until a client
  // connects. Internal when it dies of a signal meanwhile (a crash), FailedPrecondition when
  // it exits with an error (it refused to start: the reason is its log's last line),
  // Unavailable when it does not answer in time.
  Status Start();
  // SIGKILLs it and reaps it; nothing when it is not running.
  void Kill();
  // SIGTERMs it and waits up to 60 s for it to drain and exit: Ok when it exited 0, else how
  // it ended (it is SIGKILLed after the wait).
  Status Terminate();
  // Reaps it if it has exited on its own: how it ended ("exit 1", "signal 11"), or nullopt
  // while it runs (or was never started).
  std::optional<std::string> Exited();
  // Its RSS and open descriptors (/proc) and its journal's size, nullopt when it is not
  // running.
  std::optional<ProcessSample> Sample() const;
  // Its open descriptors by kind ("socket", "anon_inode:[eventfd]", "file", ...), to say what
  // grew when they did.
  std::string FdKinds() const;

  const std::string& socket_path() const { return socket_; }
  uint16_t tcp_port() const { return tcp_port_; }
  const std::string& slot_file() const { return slot_file_; }
  const std::string& log_path() const { return log_; }
  // The last `bytes` of its log (stdout and stderr of every incarnation).
  std::string LogTail(std::size_t bytes) const;

 private:
  ChaosDaemon() = default;

  std::string config_, socket_, log_, slot_file_, journal_;
  uint16_t tcp_port_ = 0;
  pid_t pid_ = -1;
};

}  // namespace kvtier::bench::chaos
