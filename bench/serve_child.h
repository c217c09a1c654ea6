// `kvtier serve` as a child process of a benchmark (bench serve, bench chaos): this binary
// (/proc/self/exe) run with a config file, its output appended to a log, killed with its
// parent so that a benchmark stopped by its user leaves no daemon serving.
#pragma once

#include <sched.h>
#include <sys/types.h>

#include <string>

#include "kvtier/status.h"

namespace kvtier::bench {

// Forks and execs `kvtier serve --config <config>`, stdout and stderr appended to `log`,
// pinned to `cpus` when given. Returns the child's pid (the caller waits for it); the child
// exits 126 when it cannot be pinned and 127 when the exec fails.
Result<pid_t> SpawnServe(const std::string& config, const std::string& log, const cpu_set_t* cpus = nullptr);

}  // namespace kvtier::bench
