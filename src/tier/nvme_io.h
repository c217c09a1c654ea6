// Block I/O for the NVMe tier: a batch of reads and writes at file offsets, run together.
//
// Two engines. The io_uring one (liburing) puts every request of a batch in flight at once,
// up to the queue depth, on one of a few rings (a batch holds its ring until all of its
// requests completed; concurrent batches take other rings); the files are registered with
// each ring. Buffers are not registered: blocks come in many sizes and each batch allocates
// its own aligned buffers, so fixed buffers would need a staging arena per ring (future
// work). The pread/pwrite engine runs the requests one after another; it serves kernels and
// sandboxes that refuse io_uring (seccomp, kernel.io_uring_disabled).
//
// Buffers, lengths and offsets must be 4 KiB-aligned when the files use O_DIRECT.
//
// Thread-safety: Run may be called concurrently from many threads.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "kvtier/status.h"

namespace kvtier {

struct IoRequest {
  uint32_t file = 0;  // index into the engine's descriptors
  bool write = false;
  std::byte* buffer = nullptr;
  std::size_t length = 0;
  uint64_t offset = 0;
  int error = 0;  // set by Run: 0 when all `length` bytes moved, else an errno (EIO for a
                  // transfer that stopped short without one)
};

class BlockIo {
 public:
  virtual ~BlockIo() = default;
  virtual std::string_view name() const = 0;  // "io_uring", "pread"
  // Runs every request and fills in each one's `error`; returns when all have completed.
  virtual void Run(std::span<IoRequest> requests) = 0;
};

// The descriptors stay owned by the caller and must outlive the engine.
std::unique_ptr<BlockIo> NewPosixBlockIo(std::vector<int> fds);
// Unavailable (with the kernel's reason) when io_uring is refused.
Result<std::unique_ptr<BlockIo>> NewUringBlockIo(std::vector<int> fds, unsigned queue_depth, unsigned rings);

}  // namespace kvtier
