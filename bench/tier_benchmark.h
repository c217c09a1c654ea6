// `kvtier bench tiers`: each tier's write and read throughput and per-block latency, per
// block size, next to a baseline doing the same work directly in the same run: memcpy for
// the memory tiers (DRAM, CXL), plain pwrite/pread of one file with O_DIRECT for NVMe, and
// through the page cache for the parallel filesystem. Each tier is measured in its steady
// state (after one warm-up pass that faults its memory or creates its directories).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kvtier/status.h"

namespace kvtier::bench {

struct TierBenchmarkOptions {
  std::string config_path;                 // Default: "" = DRAM, CXL on /dev/shm, NVMe and a directory under `scratch_dir`
  std::string scratch_dir = "/tmp/kvtier-bench";  // Default: /tmp/kvtier-bench (removed after)
  std::vector<uint64_t> block_bytes = {64u << 10, 256u << 10, 1u << 20, 4u << 20};
  uint64_t bytes_per_size = 256u << 20;    // Default: 256 MiB written and read per block size
  bool json_flag = false;                  // --json; the output is always JSON

  Status Validate() const;
};

Result<std::string> RunTierBenchmark(const TierBenchmarkOptions& options);

}  // namespace kvtier::bench
