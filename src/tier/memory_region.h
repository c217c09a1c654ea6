// One region of memory reserved up front for a memory tier's slots (the DRAM and CXL tiers;
// SizeClassAllocator carves it): anonymous memory, or a file or DAX device mapped shared,
// bound to a NUMA node, locked and page-locked for CUDA on request. Unmapped when destroyed.
//
// Thread-safety: immutable after Create; the bytes themselves are the owner's to guard.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "kvtier/status.h"

namespace kvtier {

struct MemoryRegionOptions {
  uint64_t capacity_bytes = 0;  // rounded up to whole 2 MiB pages
  int numa_node = -1;           // -1: no binding
  bool lock_memory = true;      // best effort
  bool huge_pages = true;       // best effort
  // A file or DAX device to map (shared) instead of anonymous memory: how CXL memory is
  // exposed (a devdax node, or a file on a CXL-backed tmpfs). Created and sized if absent.
  std::string backing_file;
  // Page-lock the region for CUDA copies where a GPU answers (port/cuda_host_memory.h); a
  // no-op without one.
  bool pin_for_gpu = false;
};

class MemoryRegion {
 public:
  static constexpr std::size_t kPageBytes = std::size_t{2} << 20;

  static Result<std::unique_ptr<MemoryRegion>> Create(const MemoryRegionOptions& options);
  ~MemoryRegion();
  MemoryRegion(const MemoryRegion&) = delete;
  MemoryRegion& operator=(const MemoryRegion&) = delete;

  std::byte* data() const { return data_; }
  uint64_t bytes() const { return bytes_; }
  bool memory_locked() const { return locked_; }
  bool pinned_for_gpu() const { return pinned_; }

 private:
  MemoryRegion(std::byte* data, uint64_t bytes, bool locked, bool pinned, int fd)
      : data_(data), bytes_(bytes), locked_(locked), pinned_(pinned), fd_(fd) {}

  std::byte* const data_;
  const uint64_t bytes_;
  const bool locked_;
  const bool pinned_;  // registered with CUDA: unregistered before the unmap
  const int fd_;       // the backing file, or -1
};

}  // namespace kvtier
