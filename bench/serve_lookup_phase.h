// The lookup phases of `kvtier bench serve`: how lookups scale with clients and with the
// daemon's cores, next to redis-benchmark GET measured in the same run.
//
// For each core count, a `kvtier serve` child (serve_daemon.h) pinned to that many CPUs gets
// `chains` chains of `chain_blocks` 4 KiB blocks (DRAM holds them all), then for each client
// count a lookup load (lookup_load.h) over TCP for `seconds`, with the daemon's CPU time, and
// its lookup time and its event loops' CPU time from /metrics, read before and after. Then,
// unpinned, redis-benchmark GET with each client count and -P 1, values the size of a
// lookup's reply, as many requests as the fastest kvtier run made in `seconds` (so both run
// about as long).
//
// Thread-safety: none; the benchmark's main thread runs it.
#pragma once

#include <cstdint>
#include <vector>

#include <nlohmann/json.hpp>

#include "kvtier/status.h"

namespace kvtier::bench {

struct LookupPhaseOptions {
  std::vector<int> clients;  // client counts, one phase each
  std::vector<int> cores;    // the daemon's core counts, each runs every client count
  int chains = 256;
  int chain_blocks = 64;
  int threads = 2;           // load threads (and redis-benchmark --threads)
  uint32_t event_loops_per_core = 1;  // the daemon's limits.event_loops per core; 0 = its default
  bool tcp = false;          // TCP loopback to both servers; else their Unix sockets
  uint32_t policy_shards = 0;  // the daemon's store.policy_shards; 0 = its default
  uint32_t index_shards = 0;   // the daemon's store.index_shards; 0 = its default
  double seconds = 10;
  uint64_t seed = 1;
};

// One entry per client count: clients, lookups_per_s, baseline_lookups_per_s, p99_lookup_us,
// server_lookup_us, cpu_us_per_lookup, loop_cpu_us_per_lookup, errors and the same per core count (by_cores), the
// headline values being those of the largest core count. `errors` grows by every error.
Result<nlohmann::json> RunLookupPhases(const LookupPhaseOptions& options, uint64_t& errors);

}  // namespace kvtier::bench
