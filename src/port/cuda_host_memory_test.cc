#include "port/cuda_host_memory.h"

#include <sys/mman.h>

#include <gtest/gtest.h>

#include "port/cuda_device.h"

namespace kvtier::port {
namespace {

// Without CUDA or a GPU, pinning is a quiet no-op (the DRAM tier relies on that); with a
// GPU it pins a page-aligned mapping and unpins it before the unmap.
TEST(CudaHostMemory, PinsOnlyWhereAGpuAnswers) {
  constexpr std::size_t kBytes = std::size_t{2} << 20;
  void* memory = mmap(nullptr, kBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(memory, MAP_FAILED);
  const bool pinned = PinForGpu(memory, kBytes);
  Result<std::vector<GpuDevice>> gpus = ListGpus();
  if (!gpus.ok() || gpus->empty()) {
    EXPECT_FALSE(pinned);
  } else {
    EXPECT_TRUE(pinned) << "a GPU answers, but cudaHostRegister refused a 2 MiB mapping";
  }
  if (pinned) UnpinForGpu(memory);
  static_cast<std::byte*>(memory)[kBytes - 1] = std::byte{1};  // still ordinary memory
  munmap(memory, kBytes);
}

}  // namespace
}  // namespace kvtier::port
