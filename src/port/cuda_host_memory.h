// Page-locking host memory for CUDA copies, where a CUDA device answers. A region registered
// here is DMA-able by every GPU of the process: copies between it and device memory need no
// staging copy through a driver-owned pinned buffer.
//
// This is a seam so that the memory tiers have no #ifdef: in a build without CUDA, or on a
// machine without a GPU or driver, PinForGpu does nothing and says so (false); that is not
// an error, the region simply stays pageable.
//
// Thread-safety: safe to call from any thread; the CUDA runtime serializes registration.
#pragma once

#include <cstddef>

namespace kvtier::port {

// Registers [memory, memory + bytes) with the CUDA driver (cudaHostRegister; mapped and
// portable to every device under unified addressing). True when the range is now pinned;
// false when CUDA is not built in, no device answers, the device cannot register host
// memory, or the driver refuses (e.g. above the locked-memory limit).
bool PinForGpu(void* memory, std::size_t bytes);

// Unregisters a range that PinForGpu pinned (true); must run before the range is unmapped.
void UnpinForGpu(void* memory);

}  // namespace kvtier::port
