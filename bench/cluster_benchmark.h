// `kvtier bench cluster`: running `kvtier serve` nodes that share one Redis Cluster as their
// remote pool (docs/cluster.md), against what the cluster itself gives in the same run.
//
// Phases, in order:
//  1. put: one client on the first node puts `chains` chains of `chain_blocks` blocks of
//     `block_bytes` (random bytes, kept in this process to check reads against; keys fresh
//     per run, so an earlier run's blocks are never found).
//  2. lookup: one client on every other node looks each chain up once, one 64-block chain per
//     request: the first lookup of a chain on a node reads its cards from the pool. Latency
//     p50/p99 per request; found_ratio = blocks found / blocks put.
//  3. get: `clients` threads, spread round-robin over the other nodes (one connection each),
//     read every chain `passes` times, one chain per request, checked as any client checks
//     them: each block against the checksum its node sent (the client library's end-to-end
//     check; a mismatch is a byte error) and its size. get_gbps = payload bytes read / wall
//     seconds. Then, off that clock, the same threads read every chain once more and compare
//     every byte with what was put (`get.checked_pass`, with its own GB/s; its byte errors
//     count in byte_errors): a reference copy to compare against is the benchmark's, which
//     neither a serving client nor the baseline has.
//  4. baseline: `redis-benchmark --cluster -t get` from this process's network namespace with
//     the same value size and `clients` connections, `-P pipeline` each (the command is in the
//     JSON). redis-benchmark rather than bench/redis_baseline.cc's hiredis loop because the
//     issue's 0.8x target and the earlier measurements (tools/cluster/check.py) were set
//     against it, and because it speaks the cluster's password.
//  5. failover (only with `failover_command`): the get threads read again for
//     `failover_seconds`; one second in, the command runs through /bin/sh (e.g. `kill -9 PID`
//     of a master, given by tools/cluster/check.sh, which knows the pids). failover_errors =
//     failed requests + byte errors in that phase; misses while the replica takes over are
//     allowed. Without the command, failover_errors is null.
//
// Nodes: an address containing '/' is a Unix socket (payloads through shared memory),
// anything else host:port over TCP (payloads inline).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kvtier/status.h"

namespace kvtier::bench {

struct ClusterBenchmarkOptions {
  std::vector<std::string> nodes;       // Required, at least 2: the first writes, the others read
  std::string auth_token;               // Default: none
  // PEM CAs that sign the nodes' certificates: TCP nodes are reached over TLS. Default: none
  // (plain TCP, which a node allows on loopback only)
  std::string tls_ca_file;
  std::string tenant;                   // Default: the default tenant
  std::vector<std::string> redis;       // Required: Redis Cluster endpoints, host:port (the first is asked)
  std::string redis_password;           // Default: none (the cluster's requirepass)
  int chains = 100;                     // Default: 100 chains
  int chain_blocks = 64;                // Default: 64 blocks per chain
  uint64_t block_bytes = 32u << 10;     // Default: 32 KiB
  int clients = 8;                      // Default: 8 reading threads (and baseline connections)
  int passes = 3;                       // Default: every chain read 3 times
  int pipeline = 8;                     // Default: redis-benchmark -P 8
  std::string failover_command;         // Default: none (no failover phase)
  double failover_seconds = 10;         // Default: 10 s of reads around the command
  bool json_flag = false;               // --json; the output is always JSON

  Status Validate() const;
};

Result<std::string> RunClusterBenchmark(const ClusterBenchmarkOptions& options);

}  // namespace kvtier::bench
