// Compiled with -mavx2 (block/sources.cmake); called only when HaveAvx2() is true.
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#define XXH_INLINE_ALL  // xxh3 compiled here, for AVX2, rather than the library's SSE2 build
#include <xxhash.h>

#include "block/checksum_kernels.h"

namespace kvtier::checksum_kernels {

uint64_t ChecksumAvx2(const std::byte* data, std::size_t size) { return XXH3_64bits(data, size); }

namespace {

// xxh3's long-input hash (XXH3_hashLong_64b_internal with the default secret), written out
// stripe by stripe so that each 64-byte stripe is loaded once, stored to the destination and
// folded into the accumulators from the same registers (XXH3_accumulate_512_avx2 and
// XXH3_scrambleAcc_avx2, with the accumulators kept in registers).
constexpr std::size_t kSecretBytes = sizeof(XXH3_kSecret);
constexpr std::size_t kStripesPerBlock = (kSecretBytes - XXH_STRIPE_LEN) / XXH_SECRET_CONSUME_RATE;
constexpr std::size_t kBlockBytes = XXH_STRIPE_LEN * kStripesPerBlock;

// How far ahead of the stripe being copied the source is prefetched. The hardware prefetcher
// alone left a read at 0.85x of memcpy; 1-4 KiB ahead measured the same (1.0-1.1x) on this
// VM's EPYC (docs/tiers.md), and 2 KiB is in the middle. Non-temporal: the source is not
// wanted in cache after the copy.
constexpr std::size_t kPrefetchAhead = 2048;

struct Accumulators {
  __m256i lo, hi;
};

__m256i Load(const void* at) { return _mm256_loadu_si256(static_cast<const __m256i*>(at)); }

__m256i Accumulate(__m256i acc, __m256i data, const xxh_u8* key) {
  const __m256i data_key = _mm256_xor_si256(data, Load(key));
  const __m256i product = _mm256_mul_epu32(data_key, _mm256_shuffle_epi32(data_key, _MM_SHUFFLE(0, 3, 0, 1)));
  const __m256i swapped = _mm256_shuffle_epi32(data, _MM_SHUFFLE(1, 0, 3, 2));
  return _mm256_add_epi64(product, _mm256_add_epi64(acc, swapped));
}

__m256i Scramble(__m256i acc, const xxh_u8* key) {
  const __m256i data_key = _mm256_xor_si256(_mm256_xor_si256(acc, _mm256_srli_epi64(acc, 47)), Load(key));
  const __m256i prime = _mm256_set1_epi32(static_cast<int>(XXH_PRIME32_1));
  const __m256i low = _mm256_mul_epu32(data_key, prime);
  const __m256i high = _mm256_mul_epu32(_mm256_shuffle_epi32(data_key, _MM_SHUFFLE(0, 3, 0, 1)), prime);
  return _mm256_add_epi64(low, _mm256_slli_epi64(high, 32));
}

// Copies stripe `n` of a block and folds it in; the same registers are stored and hashed, so
// the checksum is of exactly the bytes written, even if the source changes meanwhile.
void CopyStripe(Accumulators& acc, std::byte* dst, const std::byte* src, std::size_t n) {
  const __m256i lo = Load(src);
  const __m256i hi = Load(src + 32);
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst), lo);
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + 32), hi);
  const xxh_u8* key = XXH3_kSecret + n * XXH_SECRET_CONSUME_RATE;
  acc.lo = Accumulate(acc.lo, lo, key);
  acc.hi = Accumulate(acc.hi, hi, key + 32);
}

}  // namespace

uint64_t CopyWithChecksumAvx2(std::byte* dst, const std::byte* src, std::size_t size) {
  if (size <= XXH3_MIDSIZE_MAX) {  // xxh3's short-input paths
    if (size != 0) std::memcpy(dst, src, size);  // an empty span may hold null pointers
    return XXH3_64bits(dst, size);
  }
  XXH_ALIGN(32) xxh_u64 acc[XXH_ACC_NB] = XXH3_INIT_ACC;
  Accumulators a{Load(acc), Load(acc + 4)};
  const xxh_u8* scramble_key = XXH3_kSecret + kSecretBytes - XXH_STRIPE_LEN;
  const std::size_t blocks = (size - 1) / kBlockBytes;  // whole blocks before the last partial one
  for (std::size_t b = 0; b < blocks; ++b) {
    const std::size_t start = b * kBlockBytes;
    for (std::size_t n = 0; n < kStripesPerBlock; ++n) {
      const std::size_t at = start + n * XXH_STRIPE_LEN;
      __builtin_prefetch(src + std::min(at + kPrefetchAhead, size - 1), 0, 0);  // never past the source
      CopyStripe(a, dst + at, src + at, n);
    }
    a.lo = Scramble(a.lo, scramble_key);
    a.hi = Scramble(a.hi, scramble_key + 32);
  }
  // The last block: its whole stripes but the final one, then the bytes left; xxh3 hashes the
  // input's last 64 bytes as the final stripe, read back from dst (already copied).
  const std::size_t start = blocks * kBlockBytes;
  const std::size_t stripes = ((size - 1) - start) / XXH_STRIPE_LEN;
  for (std::size_t n = 0; n < stripes; ++n) CopyStripe(a, dst + start + n * XXH_STRIPE_LEN, src + start + n * XXH_STRIPE_LEN, n);
  const std::size_t copied = start + stripes * XXH_STRIPE_LEN;
  std::memcpy(dst + copied, src + copied, size - copied);
  _mm256_store_si256(reinterpret_cast<__m256i*>(acc), a.lo);
  _mm256_store_si256(reinterpret_cast<__m256i*>(acc + 4), a.hi);
  XXH3_accumulate_512(acc, reinterpret_cast<const xxh_u8*>(dst) + size - XXH_STRIPE_LEN,
                      XXH3_kSecret + kSecretBytes - XXH_STRIPE_LEN - XXH_SECRET_LASTACC_START);
  return XXH3_mergeAccs(acc, XXH3_kSecret + XXH_SECRET_MERGEACCS_START, static_cast<xxh_u64>(size) * XXH_PRIME64_1);
}

}  // namespace kvtier::checksum_kernels
