#include "port/cuda_device.h"

#include <gtest/gtest.h>

namespace kvtier::port {
namespace {

// On a machine without a GPU (or without a driver) the query must fail cleanly; on a GPU
// machine it must describe every device.
TEST(CudaDevice, ListGpusNeverCrashes) {
  Result<std::vector<GpuDevice>> gpus = ListGpus();
  if (!BuiltWithCuda()) {
    ASSERT_FALSE(gpus.ok());
    EXPECT_EQ(gpus.status().code(), StatusCode::kUnsupported);
    return;
  }
  if (!gpus.ok()) {
    EXPECT_EQ(gpus.status().code(), StatusCode::kUnavailable);
    GTEST_SKIP() << "no GPU here: " << gpus.status().message();
  }
  for (const GpuDevice& gpu : *gpus) {
    EXPECT_FALSE(gpu.name.empty());
    EXPECT_GT(gpu.total_bytes, 0u);
    EXPECT_LE(gpu.free_bytes, gpu.total_bytes);
  }
}

}  // namespace
}  // namespace kvtier::port
