#include "port/cuda_device.h"

#ifdef KVTIER_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

namespace kvtier::port {

#ifdef KVTIER_HAVE_CUDA

bool BuiltWithCuda() { return true; }

Result<std::vector<GpuDevice>> ListGpus() {
  int count = 0;
  cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    return Status::Unavailable(std::string("no usable CUDA device: ") + cudaGetErrorString(err));
  }
  std::vector<GpuDevice> devices;
  for (int i = 0; i < count; ++i) {
    cudaDeviceProp prop{};
    err = cudaGetDeviceProperties(&prop, i);
    if (err != cudaSuccess) return Status::Unavailable("CUDA device " + std::to_string(i) + ": " + cudaGetErrorString(err));
    GpuDevice device;
    device.index = i;
    device.name = prop.name;
    device.total_bytes = prop.totalGlobalMem;
    device.compute_capability_major = prop.major;
    device.compute_capability_minor = prop.minor;
    if (cudaSetDevice(i) == cudaSuccess) {
      size_t free_bytes = 0, total_bytes = 0;
      if (cudaMemGetInfo(&free_bytes, &total_bytes) == cudaSuccess) device.free_bytes = free_bytes;
    }
    devices.push_back(std::move(device));
  }
  return devices;
}

#else

bool BuiltWithCuda() { return false; }

Result<std::vector<GpuDevice>> ListGpus() {
  return Status::Unsupported("this kvtier was built without CUDA (KVTIER_WITH_CUDA=OFF or no toolkit found)");
}

#endif

}  // namespace kvtier::port
