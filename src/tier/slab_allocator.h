// Fixed-size slots for block payloads, carved from one region reserved up front.
//
// The region is split into 2 MiB slabs on demand; a slab serves one size class (a payload
// size rounded up to 4 KiB) for its lifetime, and freed slots return to their class's free
// list. A model's blocks all have one size, so they fill whole slabs and never fragment the
// region. A slab whose slots are all free again goes back to a pool of free slabs, from which
// any class takes its next slab: that is the rebalancing between classes, so a workload that
// changes block sizes (or head-granular splits, which store parts of blocks) does not strand
// the space of the old class. Written here because the general allocators (malloc, jemalloc)
// neither reserve and lock one NUMA-bound region nor keep a tier's capacity exact; CacheLib's
// slab allocator, which does, is not packaged for Debian. Costs: a slab goes back only when
// every slot in it is free; a slab with one live slot keeps its class.
//
// Thread-safety: Allocate and Free may be called concurrently (one internal mutex).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <map>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "kvtier/status.h"

namespace kvtier {

struct SlabRegionOptions {
  uint64_t capacity_bytes = 0;  // rounded up to whole slabs
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

class SlabAllocator {
 public:
  static constexpr std::size_t kSlabBytes = std::size_t{2} << 20;
  static constexpr std::size_t kClassGranularity = 4096;

  static Result<std::unique_ptr<SlabAllocator>> Create(const SlabRegionOptions& options);
  ~SlabAllocator();
  SlabAllocator(const SlabAllocator&) = delete;
  SlabAllocator& operator=(const SlabAllocator&) = delete;

  // A slot of at least `size` bytes, or nullptr when the region has no room for its class.
  std::byte* Allocate(std::size_t size);
  // Returns a slot from Allocate(size) with the same size.
  void Free(std::byte* slot, std::size_t size);

  static std::size_t ClassSize(std::size_t size);
  uint64_t region_bytes() const { return region_bytes_; }
  bool memory_locked() const { return locked_; }
  bool pinned_for_gpu() const { return pinned_; }

 private:
  struct SizeClass {
    std::vector<std::byte*> free;
    std::byte* cursor = nullptr;  // next unused slot of the class's newest slab
    std::byte* end = nullptr;
  };
  // Per 2 MiB unit of the region; meaningful on the first unit of a slab.
  struct Slab {
    std::size_t slot = 0;   // the class's slot size; 0 while the unit is in no slab
    std::size_t units = 0;  // 2 MiB units the slab spans
    uint32_t live = 0;      // slots handed out and not freed
  };

  std::size_t SlabOf(const std::byte* slot) const;
  void ReleaseSlabLocked(std::size_t first_unit);

  SlabAllocator(std::byte* region, uint64_t bytes, bool locked, bool pinned, int fd)
      : region_(region), region_bytes_(bytes), locked_(locked), pinned_(pinned), fd_(fd) {}

  std::byte* const region_;
  const uint64_t region_bytes_;
  const bool locked_;
  const bool pinned_;  // registered with CUDA: unregistered before the unmap
  const int fd_;  // the backing file, or -1
  std::mutex mutex_;
  uint64_t carved_ = 0;                                   // GUARDED_BY(mutex_)
  std::unordered_map<std::size_t, SizeClass> classes_;    // GUARDED_BY(mutex_)
  std::vector<Slab> slabs_;                               // GUARDED_BY(mutex_): per 2 MiB unit
  std::map<std::size_t, std::vector<std::size_t>> free_slabs_;  // GUARDED_BY(mutex_): by units, first units
};

}  // namespace kvtier
