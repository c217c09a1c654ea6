// What one benchmark pass measures: throughput each way and per-operation latencies. Shared
// by the tier benchmark and the baselines it runs next to each tier (memcpy, files, Redis,
// CUDA copies).
#pragma once

#include <vector>

namespace kvtier::bench {

struct Measure {
  double write_gbps = 0, read_gbps = 0;
  std::vector<double> latencies_us;  // reads and writes; baselines may leave it empty
};

}  // namespace kvtier::bench
