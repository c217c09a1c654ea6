#include "port/cuda_host_memory.h"

#ifdef KVTIER_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

namespace kvtier::port {

#ifdef KVTIER_HAVE_CUDA

bool PinForGpu(void* memory, std::size_t bytes) {
  // cudaGetDeviceCount fails cleanly (no abort) where the driver is missing: the runtime is
  // linked statically and loads libcuda.so on this first call.
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) return false;
  // Registration goes through the calling thread's current device; under unified
  // addressing the pinned range is portable to the others as well.
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) return false;
  // Some platforms (e.g. without I/O coherence) cannot register host memory at all.
  int supported = 0;
  if (cudaDeviceGetAttribute(&supported, cudaDevAttrHostRegisterSupported, device) != cudaSuccess || supported == 0) {
    return false;
  }
  if (cudaHostRegister(memory, bytes, cudaHostRegisterDefault) != cudaSuccess) {
    // The refusal is not a sticky error, but it stays this thread's last error: clear it so
    // that no later cudaGetLastError reports it against an unrelated call.
    (void)cudaGetLastError();
    return false;
  }
  return true;
}

void UnpinForGpu(void* memory) {
  // Failure here (the runtime already torn down at exit) leaves nothing to undo: unmapping
  // the range releases the pages either way.
  if (cudaHostUnregister(memory) != cudaSuccess) (void)cudaGetLastError();
}

#else

bool PinForGpu(void*, std::size_t) { return false; }
void UnpinForGpu(void*) {}

#endif

}  // namespace kvtier::port
