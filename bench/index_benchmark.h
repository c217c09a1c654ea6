// `kvtier bench index`: the prefix index against the vLLM design (a std::unordered_map keyed
// by block hash) on the same keys in the same run, plus block-hash throughput per algorithm,
// and the index's inserts from several threads at once against its inserts from one.
#pragma once

#include <cstdint>
#include <string>

#include "kvtier/status.h"

namespace kvtier::bench {

struct IndexBenchmarkOptions {
  int64_t blocks = 10'000'000;   // Default: 10 million blocks indexed
  int64_t chain_length = 64;     // Default: 64 blocks per request (1,024 tokens of 16)
  int64_t lookups = 200'000;     // Default: 200,000 longest-prefix lookups
  int64_t hash_blocks = 200'000; // Default: blocks hashed per algorithm
  uint32_t shards = 1;           // Default: 1 (PrefixIndexOptions::shards; kvtier serve uses 8)
  int threads = 2;               // Default: 2 threads inserting at once in the parallel phase
  uint64_t seed = 1;             // Default: 1
  bool json_flag = false;        // --json; the output is always JSON

  Status Validate() const;
};

// Runs the benchmark and returns its results as a JSON object (see docs/index.md).
Result<std::string> RunIndexBenchmark(const IndexBenchmarkOptions& options);

}  // namespace kvtier::bench
