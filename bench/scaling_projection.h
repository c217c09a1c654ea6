// How far `kvtier bench serve`'s operations would scale on a host with many cores, projected
// from what one operation cost on this one (docs/serve.md, "Scaling"): the daemon's CPU time
// per operation, which more cores share out, and the time per operation that it held the store's
// metadata lock exclusively, which no number of cores overlaps (Amdahl's serial part). The
// projected rate is the lower of `cores` / CPU time and 1 / hold time, and `bound` names which.
// It leaves out what only many cores would show (the lock's and the index's cache lines moving
// between sockets, memory bandwidth), so it is an upper bound, stated as such.
//
// Thread-safety: a pure function.
#pragma once

#include <nlohmann/json.hpp>

#include "kvtier/lock_profile.h"

namespace kvtier::bench {

// {cores, ops_per_s, bound: "cpu" | "metadata lock"}; null when no operation ran or no CPU
// time was measured.
nlohmann::json ProjectScaling(double cpu_us_per_op, double lock_hold_us_per_op, int cores);

// Adds lock_hold_us_per_op, lock_wait_us_per_op (both modes) and `projected` (ProjectScaling
// for 64 cores) to a phase's JSON entry, from the lock profiles read before and after it, `ops`
// operations and the entry's own CPU time per operation (`cpu_field`).
void AddLockFields(const LockProfile& before, const LockProfile& after, uint64_t ops, const char* cpu_field,
                   nlohmann::json& entry);

}  // namespace kvtier::bench
