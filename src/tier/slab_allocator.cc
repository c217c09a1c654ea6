#include "tier/slab_allocator.h"

#include <fcntl.h>
#include <numa.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <sys/stat.h>

#include "port/cuda_host_memory.h"

namespace kvtier {

std::size_t SlabAllocator::ClassSize(std::size_t size) {
  return (size + kClassGranularity - 1) / kClassGranularity * kClassGranularity;
}

Result<std::unique_ptr<SlabAllocator>> SlabAllocator::Create(const SlabRegionOptions& options) {
  if (options.capacity_bytes == 0) return Status::InvalidArgument("a DRAM region needs capacity_bytes > 0");
  const uint64_t bytes = (options.capacity_bytes + kSlabBytes - 1) / kSlabBytes * kSlabBytes;
  if (options.numa_node >= 0) {
    if (numa_available() < 0) return Status::Unsupported("numa_node is set but this kernel has no NUMA support");
    if (options.numa_node > numa_max_node()) {
      return Status::InvalidArgument("numa_node " + std::to_string(options.numa_node) + " does not exist (max " +
                                     std::to_string(numa_max_node()) + ")");
    }
  }
  int fd = -1;
  if (!options.backing_file.empty()) {
    fd = open(options.backing_file.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0) return Status::IoError(options.backing_file + ": cannot open (" + std::strerror(errno) + ")");
    struct stat st {};
    // A DAX character device has its own size; a regular file is sized to the capacity.
    if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && static_cast<uint64_t>(st.st_size) < bytes &&
        ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
      const Status error = Status::ResourceExhausted(options.backing_file + ": cannot size to " + std::to_string(bytes) +
                                                     " bytes (" + std::strerror(errno) + ")");
      close(fd);
      return error;
    }
  }
  void* memory = fd >= 0 ? mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)
                         : mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (memory == MAP_FAILED) {
    const Status error = Status::ResourceExhausted("cannot map " + std::to_string(bytes) + " bytes" +
                                                   (fd >= 0 ? " of " + options.backing_file : std::string(" of DRAM")) +
                                                   ": " + std::strerror(errno));
    if (fd >= 0) close(fd);
    return error;
  }
  if (options.huge_pages) (void)madvise(memory, bytes, MADV_HUGEPAGE);
  // Bind before the first touch so that every page is placed on the node.
  if (options.numa_node >= 0) numa_tonode_memory(memory, bytes, options.numa_node);
  // mlock faults every page in and keeps it resident; refused above RLIMIT_MEMLOCK, which
  // is fine: the tier still works, it may just be swapped.
  const bool locked = options.lock_memory && mlock(memory, bytes) == 0;
  // After the NUMA binding, so that the pages cudaHostRegister faults in land on the node.
  const bool pinned = options.pin_for_gpu && port::PinForGpu(memory, bytes);
  return std::unique_ptr<SlabAllocator>(new SlabAllocator(static_cast<std::byte*>(memory), bytes, locked, pinned, fd));
}

SlabAllocator::~SlabAllocator() {
  if (pinned_) port::UnpinForGpu(region_);
  munmap(region_, region_bytes_);
  if (fd_ >= 0) close(fd_);
}

std::byte* SlabAllocator::Allocate(std::size_t size) {
  const std::size_t slot = ClassSize(size);
  const std::size_t units = (slot + kSlabBytes - 1) / kSlabBytes;
  std::lock_guard lock(mutex_);
  if (slabs_.empty()) slabs_.resize(region_bytes_ / kSlabBytes);
  SizeClass& c = classes_[slot];
  std::byte* out = nullptr;
  if (!c.free.empty()) {
    out = c.free.back();
    c.free.pop_back();
  } else {
    if (c.cursor == nullptr || c.cursor + slot > c.end) {
      // A new slab: a released one of the same span, else fresh space.
      std::size_t first_unit = 0;
      auto pool = free_slabs_.find(units);
      if (pool != free_slabs_.end() && !pool->second.empty()) {
        first_unit = pool->second.back();
        pool->second.pop_back();
      } else if (carved_ + units * kSlabBytes <= region_bytes_) {
        first_unit = carved_ / kSlabBytes;
        carved_ += units * kSlabBytes;
      } else {
        return nullptr;
      }
      slabs_[first_unit] = {.slot = slot, .units = units, .live = 0};
      c.cursor = region_ + first_unit * kSlabBytes;
      c.end = c.cursor + units * kSlabBytes;
    }
    out = c.cursor;
    c.cursor += slot;
  }
  ++slabs_[SlabOf(out)].live;
  return out;
}

void SlabAllocator::Free(std::byte* slot, std::size_t size) {
  std::lock_guard lock(mutex_);
  classes_[ClassSize(size)].free.push_back(slot);
  const std::size_t first_unit = SlabOf(slot);
  if (--slabs_[first_unit].live == 0) ReleaseSlabLocked(first_unit);
}

// A slab's first unit: slots of classes up to 2 MiB lie in one unit; a larger class's slab is
// one slot, which starts at the slab.
std::size_t SlabAllocator::SlabOf(const std::byte* slot) const {
  return static_cast<std::size_t>(slot - region_) / kSlabBytes;
}

void SlabAllocator::ReleaseSlabLocked(std::size_t first_unit) {
  Slab& slab = slabs_[first_unit];
  SizeClass& c = classes_[slab.slot];
  std::byte* const begin = region_ + first_unit * kSlabBytes;
  std::byte* const end = begin + slab.units * kSlabBytes;
  std::erase_if(c.free, [&](std::byte* p) { return p >= begin && p < end; });
  if (c.cursor >= begin && c.cursor <= end) c.cursor = c.end = nullptr;  // its unused tail goes too
  free_slabs_[slab.units].push_back(first_unit);
  slab = {};
}

}  // namespace kvtier
