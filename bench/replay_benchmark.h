// `kvtier bench replay`: how fast trace replay runs in metadata mode (the target is 2
// million block accesses per second per core), per policy, next to a baseline measured in the
// same run on the same requests: a minimal prefix-cache LRU simulator (a hash map and a list,
// no store, no policy interface), i.e. the cost of the replay's machinery itself.
//
// The workload is synthetic and seeded: sessions drawn Zipf-like over `sessions`, each
// request the session's shared system prompt (one of `prompts`), its history so far and a
// few new blocks, so that prefixes are shared and grow as in a chat.
#pragma once

#include <cstdint>
#include <string>

#include "kvtier/status.h"

namespace kvtier::bench {

struct ReplayBenchmarkOptions {
  int64_t requests = 200'000;   // Default: 200,000 requests
  int64_t sessions = 5'000;     // Default: 5,000 sessions
  int64_t prompts = 20;         // Default: 20 system prompts of 8 blocks
  double capacity_fraction = 0.05;  // Default: 5% of the unique blocks
  uint64_t seed = 1;            // Default: 1
  bool json_flag = false;       // --json; the output is always JSON

  Status Validate() const;
};

Result<std::string> RunReplayBenchmark(const ReplayBenchmarkOptions& options);

}  // namespace kvtier::bench
