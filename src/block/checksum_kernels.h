// The payload checksum's kernels (PayloadChecksum and CopyWithChecksum in block.h are the
// public entry points and pick one per CPU). All compute the same xxh3-64.
#pragma once

#include <cstddef>
#include <cstdint>

namespace kvtier::checksum_kernels {

// The portable CopyWithChecksum copies in chunks that stay in L1 and hashes each chunk from
// there, so the bytes cross the memory bus once for both jobs. The AVX2 kernel needs no chunks:
// it stores and hashes each 64-byte stripe from the same registers.
inline constexpr std::size_t kCopyChunk = 4 * 1024;

// Debian's libxxhash is built for baseline x86-64 (SSE2). Its AVX2 kernel is about twice as
// fast, which turns a copy-and-checksum from half of memcpy's speed into nearly all of it
// (docs/tiers.md), so an AVX2 build of the same code is compiled into kvtier and chosen at
// run time on CPUs that have AVX2.
uint64_t ChecksumAvx2(const std::byte* data, std::size_t size);
uint64_t CopyWithChecksumAvx2(std::byte* dst, const std::byte* src, std::size_t size);

}  // namespace kvtier::checksum_kernels
