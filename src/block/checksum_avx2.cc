// Compiled with -mavx2 (block/sources.cmake); called only when HaveAvx2() is true.
#include <algorithm>
#include <cstring>

#define XXH_INLINE_ALL  // xxh3 compiled here, for AVX2, rather than the library's SSE2 build
#include <xxhash.h>

#include "block/checksum_kernels.h"

namespace kvtier::checksum_kernels {

uint64_t ChecksumAvx2(const std::byte* data, std::size_t size) { return XXH3_64bits(data, size); }

uint64_t CopyWithChecksumAvx2(std::byte* dst, const std::byte* src, std::size_t size) {
  XXH3_state_t state;
  XXH3_64bits_reset(&state);
  for (std::size_t offset = 0; offset < size; offset += kCopyChunk) {
    const std::size_t n = std::min(kCopyChunk, size - offset);
    std::memcpy(dst + offset, src + offset, n);
    XXH3_64bits_update(&state, dst + offset, n);
  }
  return XXH3_64bits_digest(&state);
}

}  // namespace kvtier::checksum_kernels
