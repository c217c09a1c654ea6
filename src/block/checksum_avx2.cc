// Compiled with -mavx2 (block/sources.cmake); called only when HaveAvx2() is true.
#include <algorithm>
#include <cstring>

#define XXH_INLINE_ALL  // xxh3 compiled here, for AVX2, rather than the library's SSE2 build
#include <xxhash.h>

#include "block/checksum_kernels.h"

namespace kvtier::checksum_kernels {

uint64_t ChecksumAvx2(const std::byte* data, std::size_t size) { return XXH3_64bits(data, size); }

namespace {

// xxh3's long-input hash (XXH3_hashLong_64b_internal with the default secret), one 1 KiB
// block at a time, so that the copy can be interleaved with it.
constexpr std::size_t kSecretBytes = sizeof(XXH3_kSecret);
constexpr std::size_t kStripesPerBlock = (kSecretBytes - XXH_STRIPE_LEN) / XXH_SECRET_CONSUME_RATE;
constexpr std::size_t kBlockBytes = XXH_STRIPE_LEN * kStripesPerBlock;
static_assert(kCopyChunk % kBlockBytes == 0);

void AccumulateStripes(xxh_u64* acc, const xxh_u8* input, std::size_t stripes) {
  for (std::size_t n = 0; n < stripes; ++n) {
    XXH3_accumulate_512(acc, input + n * XXH_STRIPE_LEN, XXH3_kSecret + n * XXH_SECRET_CONSUME_RATE);
  }
}

void Prefetch(const std::byte* from, std::size_t bytes) {
  for (std::size_t offset = 0; offset < bytes; offset += 64) __builtin_prefetch(from + offset, 0, 3);
}

}  // namespace

// Copies a chunk, then hashes it from L1 block by block; while each block is hashed, a
// block's worth of the next chunk is prefetched, so the memory fetches overlap the hashing
// instead of waiting for it (the hash alone made a read 0.7-0.8x of memcpy; docs/tiers.md).
uint64_t CopyWithChecksumAvx2(std::byte* dst, const std::byte* src, std::size_t size) {
  if (size <= XXH3_MIDSIZE_MAX) {  // xxh3's short-input paths
    if (size != 0) std::memcpy(dst, src, size);  // an empty span may hold null pointers
    return XXH3_64bits(dst, size);
  }
  XXH_ALIGN(XXH_ACC_ALIGN) xxh_u64 acc[XXH_ACC_NB] = XXH3_INIT_ACC;
  const auto* out = reinterpret_cast<const xxh_u8*>(dst);
  const std::size_t blocks = (size - 1) / kBlockBytes;  // whole blocks before the last partial one
  std::size_t copied = 0;
  for (std::size_t n = 0; n < blocks; ++n) {
    if (copied < (n + 1) * kBlockBytes) {
      const std::size_t chunk = std::min(kCopyChunk, size - copied);
      std::memcpy(dst + copied, src + copied, chunk);
      copied += chunk;
    }
    const std::size_t ahead = copied + (n * kBlockBytes) % kCopyChunk;
    if (ahead < size) Prefetch(src + ahead, std::min(kBlockBytes, size - ahead));
    AccumulateStripes(acc, out + n * kBlockBytes, kStripesPerBlock);
    XXH3_scrambleAcc(acc, XXH3_kSecret + kSecretBytes - XXH_STRIPE_LEN);
  }
  std::memcpy(dst + copied, src + copied, size - copied);
  AccumulateStripes(acc, out + blocks * kBlockBytes, ((size - 1) - blocks * kBlockBytes) / XXH_STRIPE_LEN);
  XXH3_accumulate_512(acc, out + size - XXH_STRIPE_LEN,
                      XXH3_kSecret + kSecretBytes - XXH_STRIPE_LEN - XXH_SECRET_LASTACC_START);
  return XXH3_mergeAccs(acc, XXH3_kSecret + XXH_SECRET_MERGEACCS_START, static_cast<xxh_u64>(size) * XXH_PRIME64_1);
}

}  // namespace kvtier::checksum_kernels
