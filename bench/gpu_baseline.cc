#include "gpu_baseline.h"

#include <cstdint>
#include <limits>
#include <string>

#ifdef KVTIER_HAVE_CUDA
#include <cuda_runtime_api.h>

#include <chrono>
#include <cstddef>
#endif

namespace kvtier::bench {

#ifdef KVTIER_HAVE_CUDA
namespace {

using Clock = std::chrono::steady_clock;

Status CudaError(const char* call, cudaError_t error) {
  const std::string message = std::string("CUDA baseline: ") + call + " failed: " + cudaGetErrorString(error);
  return error == cudaErrorMemoryAllocation ? Status::ResourceExhausted(message) : Status::Unavailable(message);
}

// The baseline's buffers, freed on every path out.
struct Buffers {
  ~Buffers() {
    if (device != nullptr) (void)cudaFree(device);
    if (host_in != nullptr) (void)cudaFreeHost(host_in);
    if (host_out != nullptr) (void)cudaFreeHost(host_out);
  }
  void* device = nullptr;
  void* host_in = nullptr;
  void* host_out = nullptr;
};

// One synchronous copy per block through `copy(i)`, timed; the GB/s of all of them.
template <typename Copy>
Result<double> TimeCopies(uint64_t block_bytes, uint64_t count, Measure& m, Copy copy) {
  const auto start = Clock::now();
  for (uint64_t i = 0; i < count; ++i) {
    const auto t0 = Clock::now();
    if (const cudaError_t error = copy(i); error != cudaSuccess) return CudaError("cudaMemcpy", error);
    m.latencies_us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
  }
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  return static_cast<double>(block_bytes * count) / 1e9 / seconds;
}

}  // namespace
#endif

Result<Measure> MeasureCudaMemcpyBaseline(int device, uint64_t block_bytes, uint64_t count) {
  if (block_bytes == 0 || count == 0) {
    return Status::InvalidArgument("CUDA baseline: block_bytes and count must be > 0");
  }
  if (count > std::numeric_limits<uint64_t>::max() / block_bytes) {
    return Status::InvalidArgument("CUDA baseline: " + std::to_string(count) + " blocks of " +
                                   std::to_string(block_bytes) + " bytes overflow");
  }
#ifdef KVTIER_HAVE_CUDA
  int devices = 0;
  if (const cudaError_t error = cudaGetDeviceCount(&devices); error != cudaSuccess) {
    return Status::Unavailable(std::string("CUDA baseline: no usable CUDA device: ") + cudaGetErrorString(error));
  }
  if (device < 0 || device >= devices) {
    return Status::InvalidArgument("CUDA baseline: device " + std::to_string(device) + " does not exist (" +
                                   std::to_string(devices) + " visible)");
  }
  if (const cudaError_t error = cudaSetDevice(device); error != cudaSuccess) return CudaError("cudaSetDevice", error);
  Buffers buffers;
  if (const cudaError_t error = cudaMalloc(&buffers.device, block_bytes * count); error != cudaSuccess) {
    return CudaError("cudaMalloc", error);
  }
  for (void** host : {&buffers.host_in, &buffers.host_out}) {
    if (const cudaError_t error = cudaHostAlloc(host, block_bytes, cudaHostAllocDefault); error != cudaSuccess) {
      return CudaError("cudaHostAlloc", error);
    }
  }
  auto* in = static_cast<std::byte*>(buffers.host_in);
  for (uint64_t i = 0; i < block_bytes; ++i) in[i] = static_cast<std::byte>((i * 2654435761u) >> 13);
  auto* dev = static_cast<std::byte*>(buffers.device);
  // Warm-up: the first copies pay for context and mapping set-up, which the tier pays once
  // at creation.
  if (const cudaError_t error = cudaMemcpy(dev, in, block_bytes, cudaMemcpyHostToDevice); error != cudaSuccess) {
    return CudaError("cudaMemcpy", error);
  }
  if (const cudaError_t error = cudaMemcpy(buffers.host_out, dev, block_bytes, cudaMemcpyDeviceToHost);
      error != cudaSuccess) {
    return CudaError("cudaMemcpy", error);
  }
  Measure m;
  KVTIER_ASSIGN_OR_RETURN(m.write_gbps, TimeCopies(block_bytes, count, m, [&](uint64_t i) {
                            return cudaMemcpy(dev + i * block_bytes, in, block_bytes, cudaMemcpyHostToDevice);
                          }));
  KVTIER_ASSIGN_OR_RETURN(m.read_gbps, TimeCopies(block_bytes, count, m, [&](uint64_t i) {
                            return cudaMemcpy(buffers.host_out, dev + i * block_bytes, block_bytes,
                                              cudaMemcpyDeviceToHost);
                          }));
  return m;
#else
  (void)device;
  return Status::Unsupported("CUDA baseline: kvtier was built without CUDA (configure with -DKVTIER_WITH_CUDA=ON)");
#endif
}

}  // namespace kvtier::bench
