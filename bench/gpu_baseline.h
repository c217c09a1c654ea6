// The CUDA copy baseline next to the GPU HBM tier in `kvtier bench tiers`: what the PCIe (or
// NVLink-C2C) link gives to plain cudaMemcpy between pinned host memory and device memory,
// block by block, with no staging, checksums or index. The tier's numbers divided by these
// are its overhead.
#pragma once

#include <cstdint>

#include "kvtier/status.h"
#include "measure.h"

namespace kvtier::bench {

// Copies `count` blocks of `block_bytes` from one pinned host buffer into consecutive
// device memory (write_gbps, host to device) and back out into another pinned buffer
// (read_gbps, device to host), one synchronous cudaMemcpy per block, after one warm-up copy
// each way; latencies_us holds every copy. Unsupported in a build without CUDA, Unavailable
// where no device answers, ResourceExhausted when the device or pinned memory runs out.
Result<Measure> MeasureCudaMemcpyBaseline(int device, uint64_t block_bytes, uint64_t count);

}  // namespace kvtier::bench
