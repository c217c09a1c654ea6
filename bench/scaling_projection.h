// How far `kvtier bench serve`'s operations would scale on a host with many cores, projected
// from what one operation cost on this one (docs/serve.md, "Scaling"). Five bounds:
//  - the daemon's CPU time per operation, which more cores share out: cores / CPU time;
//  - the time per operation it held the store's metadata lock exclusively, which no number of
//    cores overlaps (Amdahl's serial part): 1 / hold time;
//  - the time per operation the busiest tier's policy and accounting lock was held: each tier's
//    lock is a serial section of its own (puts of different chains share the metadata lock,
//    not a tier's), so 1 / the longest of them;
//  - the time per operation the prefix index's lock was held exclusively (its inserts and
//    evictions, which puts of different chains also share): 1 / hold time;
//  - the event loops' CPU time per operation: each loop is one thread, a serial section of its
//    own (lookups are answered on it), so the loops a host of that size gets by default
//    (ServerOptions::DefaultEventLoops) / loop CPU time, connections spread evenly over them.
// The projected rate is the lowest, and `bound` names which. It leaves out what only many
// cores would show (the lock's and the index's cache lines moving between sockets, memory
// bandwidth, loops unevenly loaded), so it is an upper bound, stated as such.
//
// Thread-safety: pure functions.
#pragma once

#include <map>
#include <string>

#include <nlohmann/json.hpp>

#include "kvtier/lock_profile.h"

namespace kvtier::bench {

// What one operation cost the daemon on this host, in microseconds.
struct OperationCost {
  double cpu_us = 0;           // CPU time, all its threads
  double lock_hold_us = 0;     // the metadata lock held exclusively; 0: never (no lock bound)
  double tier_lock_hold_us = 0;  // the busiest tier's lock held; 0: not measured (no tier lock bound)
  double index_lock_hold_us = 0;  // the prefix index's lock held exclusively; 0: not measured (no bound)
  double event_loop_cpu_us = 0;  // CPU time of its event loop threads; 0: not measured (no loop bound)
};

// {cores, event_loops, ops_per_s, bound: "cpu" | "metadata lock" | "tier lock" | "index lock" |
// "event loops"};
// null when no CPU time was measured or `cores` is not positive. A tie goes to "cpu".
nlohmann::json ProjectScaling(const OperationCost& cost, int cores);

// The serial sections one read of the daemon's counters shows: the store's metadata lock, and
// the seconds each tier's lock was held keyed by the tier's label set on /metrics (a daemon
// that does not export them leaves it empty).
struct LockReadings {
  LockProfile metadata;
  std::map<std::string, double> tier_hold_seconds;
  // The prefix index's, keyed by each shard's label set (empty from a daemon that exports none).
  std::map<std::string, double> index_hold_seconds;
};

// Adds lock_hold_us_per_op, lock_wait_us_per_op (both modes), tier_lock_hold_us_per_op (the
// busiest tier's), index_lock_hold_us_per_op (the busiest index shard's; and its total over
// the shards, index_lock_total_hold_us_per_op) and `projected` (ProjectScaling for 64 cores) to a phase's JSON entry, from
// the locks read before and after it, `ops` operations and the entry's own CPU time per
// operation (`cpu_field`) and, when `event_loop_cpu_field` is not null, its event loops' CPU
// time per operation.
void AddLockFields(const LockReadings& before, const LockReadings& after, uint64_t ops, const char* cpu_field,
                   const char* event_loop_cpu_field, nlohmann::json& entry);

}  // namespace kvtier::bench
