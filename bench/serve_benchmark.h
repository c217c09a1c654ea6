// `kvtier bench serve`: the service (`kvtier serve`, daemon.h) under load from many engine
// clients, next to an in-process baseline measured in the same run: the same mix, client
// count, block sizes and duration driven straight on a TieredStore (no sockets, no shared
// memory, no tenant mapping), opened from the same configuration. The ratio of the two is
// what the service costs.
//
// Each client is a thread with its own connection (Client): a Unix socket with a shared
// segment holding one put and one get request (payloads by reference, one copy in the
// server), or with `tcp` a TCP connection with payloads inline. Its requests, drawn by `mix`:
//  - put: a new chain of `chain_blocks` blocks of random sizes in [min, max] (4 KiB
//    multiples), each filled with a pattern of (client, chain, block) before the clock starts;
//  - get: one of the client's `recent_chains` most recent stored chains, read back and every
//    byte checked against its pattern after the clock stops (a wrong byte or size is an error;
//    a chain the store has evicted, wholly or in part, is a miss);
//  - lookup: one of those chains, looked up.
// Latency is per request (a chain), in microseconds; bytes are payload bytes put and got.
//
// Order: the baseline runs first on its own store, which is closed and removed before the
// service starts, so that the two never share the CPUs or the page cache's dirty pages.
//
// Without `connect` the benchmark starts its own daemon in this process: DefaultServeConfig
// under a fresh directory in /tmp (removed after), /metrics off, TCP on 127.0.0.1 with `tcp`.
#pragma once

#include <cstdint>
#include <string>

#include "kvtier/status.h"

namespace kvtier::bench {

struct ServeBenchmarkOptions {
  // Default: "" = start a daemon in-process. Else a running server: its Unix socket path, or
  // with `tcp` its "host:port". The baseline still runs in-process.
  std::string connect;
  int clients = 32;                            // Default: 32 client threads
  double seconds = 20;                         // Default: 20 s per phase (baseline, service)
  uint64_t min_block_bytes = 256u << 10;       // Default: 256 KiB
  uint64_t max_block_bytes = 2u << 20;         // Default: 2 MiB
  std::string mix = "20:40:40";                // Default: lookup:put:get weights 20:40:40
  int chain_blocks = 4;                        // Default: 4 blocks per put, get and lookup
  int recent_chains = 8;                       // Default: gets and lookups pick among the last 8
  bool tcp = false;                            // Default: Unix socket and shared memory
  // The self-started daemons' persistence: write-through (the default config's: every put
  // also goes to disk) or none (DRAM then disk as a cache: what the service itself costs).
  bool persist = true;                         // Default: write-through
  uint64_t seed = 1;                           // Default: 1
  bool json_flag = false;                      // --json; the output is always JSON

  Status Validate() const;
};

Result<std::string> RunServeBenchmark(const ServeBenchmarkOptions& options);

}  // namespace kvtier::bench
