#include "tier/memory_region.h"

#include <fcntl.h>
#include <numa.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <sys/stat.h>

#include "port/cuda_host_memory.h"

namespace kvtier {

Result<std::unique_ptr<MemoryRegion>> MemoryRegion::Create(const MemoryRegionOptions& options) {
  if (options.capacity_bytes == 0) return Status::InvalidArgument("a DRAM region needs capacity_bytes > 0");
  const uint64_t bytes = (options.capacity_bytes + kPageBytes - 1) / kPageBytes * kPageBytes;
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
  return std::unique_ptr<MemoryRegion>(new MemoryRegion(static_cast<std::byte*>(memory), bytes, locked, pinned, fd));
}

MemoryRegion::~MemoryRegion() {
  if (pinned_) port::UnpinForGpu(data_);
  munmap(data_, bytes_);
  if (fd_ >= 0) close(fd_);
}

}  // namespace kvtier
