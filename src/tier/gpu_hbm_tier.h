// Engine-facing access to the T0 GPU HBM tier and its test seam (the tier itself is made by
// NewGpuHbmTier in tiers.h).
//
// Layout: one cudaMalloc'd pool on the tier's device, carved into 4 KiB-aligned slots in
// size classes by the tiers' offset allocator (size_class_allocator.h, over one region:
// the pool). Each stored block is a reference-counted slot plus its size and xxh3-64
// checksum, indexed in 16 sharded maps. A slot returns to the allocator only when the index
// and every reader or DeviceSpan have let go of it, so an evicted or replaced block is never
// overwritten while a copy (or an engine) still reads it.
//
// Copies: two pools of lanes, one per direction, `streams` lanes each; a lane is a
// non-blocking stream, a pinned staging buffer (cudaHostAlloc) split in two halves and one
// event per half. A block moves in chunks of half the staging buffer, double-buffered: the
// CPU fills (or drains) one half, hashing it as it goes, while the DMA of the other half runs.
// A batch spreads its blocks over every free lane of its direction, one chunk per lane in
// turn, so several copies are in flight at once. Write fills a new slot, waits for its
// stream, and only then switches the index (a failed or concurrent Write never exposes a
// partial block); Read verifies the checksum of the bytes it copied out before reporting
// success.
//
// Locking: a shard's reader-writer lock guards its map only; no lock is held during a copy
// (a copy holds its slot by reference instead). Lane pools have their own mutex, taken
// alone. Lock order where two meet: a shard lock, then the allocator's mutex (a slot freed
// under a shard lock). The CUDA runtime's current device is per thread, so every entry
// point that touches the device makes the tier's device current (cudaSetDevice) for the
// call and gives the caller's back after.
//
// Thread-safety: every method of the tier, and the functions below, may be called
// concurrently from many threads.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "kvtier/tier.h"

namespace kvtier {

// Where a block lives on the GPU, for an engine that wants to use it in place (e.g. copy
// it into its paged KV cache with its own kernel). The bytes are complete and visible to
// every stream of `device` (the write finished before the block was indexed). `hold` keeps
// the memory from reuse, even after the block is evicted or replaced, until the last copy of
// this span is destroyed. Treat the memory as read-only: writing it makes the next Read of
// the block fail its checksum.
struct DeviceSpan {
  void* data = nullptr;  // a device pointer on `device`
  std::size_t size = 0;
  int device = 0;
  uint64_t checksum = 0;  // PayloadChecksum of the block
  std::shared_ptr<const void> hold;
};

// InvalidArgument when `tier` is not a GPU HBM tier (decorators hide it: pass the tier
// itself), NotFound when it holds no such block, Unsupported in a build without CUDA.
Result<DeviceSpan> DeviceLocation(Tier* tier, const BlockKey& key);

// Flips one byte of a block in device memory, as an HBM fault would. False when `tier` is
// not a GPU HBM tier, holds no such block, or the device refused the copy.
bool CorruptGpuBlockForTesting(Tier* tier, const BlockKey& key);

}  // namespace kvtier
