// Arithmetic on sizes derived from untrusted input (config files, command lines), where a
// product of a few plausible-looking fields can overflow 64 bits. Sizes are computed in
// 128 bits and narrowed with a check, so a hostile config yields an error, never UB.
#pragma once

#include <cstdint>
#include <limits>
#include <string>
#include <string_view>

#include "kvtier/status.h"

namespace kvtier {

__extension__ using Int128 = __int128;

// The largest byte count or parameter count kvtier accepts: 2^53, exact in a double (so
// JSON readers in other languages read it back exactly) and far above any real model.
inline constexpr Int128 kMaxExactCount = Int128{1} << 53;

// `value` as int64_t, or InvalidArgument naming `what` when it is negative or past 2^53.
inline Result<int64_t> NarrowCount(Int128 value, std::string_view what) {
  if (value < 0 || value > kMaxExactCount) {
    return Status::InvalidArgument(std::string(what) +
                                   " is implausibly large (over 2^53); check the config's dimensions");
  }
  return static_cast<int64_t>(value);
}

inline uint64_t SaturatingMul(uint64_t a, uint64_t b) {
  uint64_t out = 0;
  return __builtin_mul_overflow(a, b, &out) ? std::numeric_limits<uint64_t>::max() : out;
}

inline uint64_t SaturatingAdd(uint64_t a, uint64_t b) {
  uint64_t out = 0;
  return __builtin_add_overflow(a, b, &out) ? std::numeric_limits<uint64_t>::max() : out;
}

}  // namespace kvtier
