// `kvtier bench chaos`: a real `kvtier serve` daemon (a child process of this binary) over
// DRAM, an NVMe slot file on a small tmpfs (the persist tier, write-through) and a Redis
// Cluster of three masters, driven by many clients over both transports while a seeded fault
// schedule breaks things at random moments: the daemon SIGKILLed and restarted, a Redis node
// SIGKILLed and restarted, the disk filled, bytes flipped in the slot file and in Redis
// values, a Redis node stopped (a slow, then silent, tier), clients that vanish mid-frame and
// malformed frames.
//
// A model of every acknowledged block is kept (a block's size and bytes are functions of its
// key, so any read can be checked exactly), and the invariants are checked all along:
//  - every get returns a miss or exactly the bytes put (`wrong_bytes` counts blocks);
//  - after each daemon restart every acknowledged block the persist tier must still hold is
//    back (`lost_blocks`; what "must" means is in chaos_model.h);
//  - the daemon never exits unless killed (`crashes`);
//  - its RSS and open descriptors stay flat (`max_rss_mib`, `fd_growth`).
// The schedule is printed on stderr as it runs; the same seed gives the same schedule (fault
// kinds, moments and targets), though the clients' interleaving with it differs run to run.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kvtier/status.h"

namespace kvtier::bench {

struct ChaosBenchmarkOptions {
  double seconds = 120;             // Default: 120 s of load and faults
  uint64_t seed = 1;                // Default: 1 (the fault schedule and the workload)
  int clients = 8;                  // Default: 8 (even ones on the Unix socket, odd ones over TCP)
  std::string work_dir;             // Default: "" = a fresh /tmp/kvtier-chaos-* (removed after)
  double fault_interval_s = 2;      // Default: a fault every 2 s on average (exponential gaps)
  // Which fault kinds to inject (names as in the JSON's `faults`); Default: all of them.
  std::vector<std::string> faults;
  uint64_t disk_mib = 256;          // Default: the persist tier's capacity, 256 MiB
  bool keep_work_dir = false;       // Default: remove it (logs and all) after the run
  bool json_flag = false;           // --json; the output is always JSON

  Status Validate() const;
};

Result<std::string> RunChaosBenchmark(const ChaosBenchmarkOptions& options);

}  // namespace kvtier::bench
