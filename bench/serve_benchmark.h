// `kvtier bench serve`: does the service (`kvtier serve`, daemon.h) scale with clients and
// cores, next to a baseline measured in the same run. Without `connect` every daemon is a
// `kvtier serve` child of this process (serve_daemon.h), so its CPU time is its own. Phases:
//
// Lookups (serve_lookup_phase.h): 64-block chains looked up by 1 to thousands of clients,
// each with one request in flight, from a few epoll threads over the Unix socket (with `tcp`
// TCP loopback; lookup_load.h), with the daemon pinned to each of `cores` CPUs in turn; next to
// redis-benchmark GET with the same client count, -P 1 and transport (redis_benchmark_baseline.h). Per client count: lookups/s, p99, the
// daemon's own mean lookup time (/metrics) and CPU per lookup, and the speed-up over cores.
//
// Put+get, per client count in `clients` (and per `dram_prefault` setting): an in-process baseline first (the same mix, client
// count, block sizes and duration driven straight on a TieredStore opened from the daemon's
// configuration: no sockets, no shared memory, no tenant mapping), then the service. Each
// client is a thread with its own connection (Client): a Unix socket with a shared segment
// holding one put and one get request (payloads by reference), or with `tcp` a TCP
// connection with payloads inline. Its requests, drawn by `mix`:
//  - put: a new chain of `chain_blocks` blocks of random sizes in [min, max] (4 KiB
//    multiples), each filled with a pattern of (client, chain, block) before the clock starts;
//  - get: one of the client's `recent_chains` most recent stored chains, read back and every
//    byte checked against its pattern after the clock stops (a wrong byte or size is an error;
//    a chain the store has evicted, wholly or in part, is a miss);
//  - lookup: one of those chains, looked up.
// Latency is per request (a chain), in microseconds; bytes are payload bytes put and got. The
// baseline's store is closed and removed before the service starts, so that the two never
// share the CPUs or the page cache's dirty pages.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kvtier/status.h"

namespace kvtier::bench {

struct ServeBenchmarkOptions {
  // Default: "" = start `kvtier serve` children. Else a running server for the put+get phases:
  // its Unix socket path, or with `tcp` its "host:port" (the baseline still runs in-process,
  // and the lookup phases, which need a daemon of their own, are skipped).
  std::string connect;
  std::vector<int> clients = {32, 256};        // Default: put+get phases with 32 and 256 client threads
  std::vector<int> lookup_clients = {1, 16, 256, 2048};  // Default: lookup phases with these clients
  std::vector<int> cores = {1, 2};             // Default: each lookup phase on a daemon pinned to 1, then 2 CPUs
  int lookup_chains = 256;                     // Default: 256 chains stored for the lookups ...
  int lookup_chain_blocks = 64;                // Default: ... of 64 blocks of 4 KiB each
  int load_threads = 2;                        // Default: 2 epoll threads drive the lookup clients
  uint32_t loops_per_core = 1;                 // Default: the lookup daemon runs an event loop per core
  uint32_t workers = 0;                        // Default: 0, the put+get daemon's own worker count
  uint32_t max_workers = 0;                    // Default: 0, what its pool may grow to by default
  double seconds = 10;                         // Default: 10 s per phase
  uint64_t min_block_bytes = 256u << 10;       // Default: 256 KiB
  uint64_t max_block_bytes = 2u << 20;         // Default: 2 MiB
  std::string mix = "0:50:50";                 // Default: put+get phases' lookup:put:get weights 0:50:50
  int chain_blocks = 4;                        // Default: 4 blocks per put, get and lookup
  int recent_chains = 8;                       // Default: gets and lookups pick among the last 8
  bool tcp = false;                            // Default: Unix socket and shared memory
  // The self-started daemons' persistence: write-through (the default config's: every put
  // also goes to disk) or none (DRAM then disk as a cache: what the service itself costs).
  bool persist = true;                         // Default: write-through
  // The DRAM tier's prefault (DramTierOptions::prefault) in the self-started daemons and the
  // baseline: "on", "off", or "both" (each client count off, then on, in the same run).
  std::string dram_prefault = "on";            // Default: "on", as the tier's own default
  // The put+get phases' DRAM tier, in MiB: large enough to hold a put-only phase's blocks
  // measures puts into DRAM alone, not demotion to disk.
  uint64_t dram_mib = 1024;                    // Default: 1 GiB
  // The shards of each tier's policy in the daemons and the baseline (store.policy_shards).
  uint32_t policy_shards = 0;                  // Default: 0 = the daemon's default (kServePolicyShards)
  // The shards of the prefix index in the daemons and the baseline (store.index_shards).
  uint32_t index_shards = 0;                   // Default: 0 = the daemon's default (kServeIndexShards)
  bool lookups = true;                         // Default: run the lookup phases (--no-lookups skips them)
  uint64_t seed = 1;                           // Default: 1
  bool json_flag = false;                      // --json; the output is always JSON

  Status Validate() const;
};

Result<std::string> RunServeBenchmark(const ServeBenchmarkOptions& options);

}  // namespace kvtier::bench
