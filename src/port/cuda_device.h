// The CUDA devices this process can see, through the CUDA runtime when kvtier was built
// with it. The runtime is linked statically and loads the driver on first use, so on a
// machine without a GPU or without libcuda.so this returns Unavailable; it never aborts.
//
// Thread-safety: safe to call from any thread (the CUDA runtime serializes its own init).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kvtier/status.h"

namespace kvtier::port {

struct GpuDevice {
  int index = 0;
  std::string name;
  uint64_t total_bytes = 0;
  uint64_t free_bytes = 0;
  int compute_capability_major = 0;
  int compute_capability_minor = 0;
};

// True when this build links the CUDA runtime.
bool BuiltWithCuda();

// Unsupported when built without CUDA; Unavailable when no driver or no device answers.
Result<std::vector<GpuDevice>> ListGpus();

}  // namespace kvtier::port
