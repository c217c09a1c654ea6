// `kvtier bench tiers`: each tier's write and read throughput and latency, per block size and
// queue depth, next to a baseline doing the same work directly in the same run:
//   cpu_dram, cxl_memory  memcpy between buffers of the same sizes
//   nvme                  fio (O_DIRECT, io_uring, the same queue depth, block size and
//                         bytes, a file beside the tier's); a plain O_DIRECT pwrite/pread
//                         loop at queue depth 1 where fio is not installed
//   parallel_fs           one file per block (create, write, close; open, read, close)
//   remote_pool           raw pipelined hiredis SET/GET, same value size and connections
//   gpu_hbm               cudaMemcpy between pinned host memory and the device
// Queue depth n means the tier gets batches of n blocks (WriteBatch / ReadBatch), and the
// latency percentiles are those of whole batches. Each tier is measured in its steady state,
// after one warm-up pass that faults its memory or creates its directories and slabs.
//
// Without --config the benchmark builds its own tiers under `scratch_dir`: DRAM, CXL on
// /dev/shm, an NVMe slot file, a parallel-FS directory, a 3-node Redis Cluster on loopback
// (started from redis-server on PATH; skipped, with a note, where there is none) and GPU HBM
// (where a CUDA device answers).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kvtier/status.h"

namespace kvtier::bench {

struct TierBenchmarkOptions {
  std::string config_path;                 // Default: "" = the tiers listed above, under `scratch_dir`
  std::string scratch_dir = "/tmp/kvtier-bench";  // Default: /tmp/kvtier-bench (removed after)
  std::vector<uint64_t> block_bytes = {64u << 10, 256u << 10, 1u << 20, 4u << 20};
  std::vector<int> queue_depths = {1, 16};  // Default: 1 and 16 blocks per batch
  uint64_t bytes_per_size = 256u << 20;    // Default: 256 MiB written and read per block size
  std::vector<std::string> only_kinds;     // Default: every tier; else these kinds (e.g. nvme)
  bool json_flag = false;                  // --json; the output is always JSON

  Status Validate() const;
};

Result<std::string> RunTierBenchmark(const TierBenchmarkOptions& options);

}  // namespace kvtier::bench
