// Fixed-width little-endian integers, the byte order of every kvtier format on disk and on
// the wire (NVMe slot headers and superblocks, the remote pool's value header, parallel-FS
// block files, the block journal, checkpoints). Each byte is placed by its significance, so
// a format reads the same on any host; a memcpy of a native integer would not.
//
// PutU16/U32/U64 and GetU16/U32/U64 work at a pointer the caller has checked holds enough
// bytes (LevelDB's EncodeFixed32 / DecodeFixed32). Writer lays fields one after another into
// a span and checks the bounds itself: a field that does not fit is not written, and ok()
// turns false for good.
//
// Thread-safety: the functions are pure; a Writer is used by one thread at a time.
#pragma once

#include <algorithm>
#include <bit>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <type_traits>

namespace kvtier::little_endian {
namespace detail {

// On a little-endian host the bytes are the integer's own: one unaligned load or store. GCC 12
// at -O2 kept the byte loops below as loops (8 shifts and stores for a U64), which was most of
// a tenant key mapping's time (tenant_namespace.cc).
template <std::unsigned_integral T>
constexpr void Put(std::byte* out, T value) {
  if (!std::is_constant_evaluated() && std::endian::native == std::endian::little) {
    std::memcpy(out, &value, sizeof(T));
    return;
  }
  for (std::size_t i = 0; i < sizeof(T); ++i) out[i] = static_cast<std::byte>(value >> (8 * i));
}

template <std::unsigned_integral T>
constexpr T Get(const std::byte* in) {
  T value = 0;
  if (!std::is_constant_evaluated() && std::endian::native == std::endian::little) {
    std::memcpy(&value, in, sizeof(T));
    return value;
  }
  for (std::size_t i = 0; i < sizeof(T); ++i) value = static_cast<T>(value | (std::to_integer<T>(in[i]) << (8 * i)));
  return value;
}

}  // namespace detail

constexpr void PutU16(std::byte* out, uint16_t value) { detail::Put(out, value); }
constexpr void PutU32(std::byte* out, uint32_t value) { detail::Put(out, value); }
constexpr void PutU64(std::byte* out, uint64_t value) { detail::Put(out, value); }
constexpr uint16_t GetU16(const std::byte* in) { return detail::Get<uint16_t>(in); }
constexpr uint32_t GetU32(const std::byte* in) { return detail::Get<uint32_t>(in); }
constexpr uint64_t GetU64(const std::byte* in) { return detail::Get<uint64_t>(in); }

// Writes fields one after another into `out`.
class Writer {
 public:
  explicit constexpr Writer(std::span<std::byte> out) : out_(out) {}

  constexpr void U8(uint8_t value) {
    if (std::byte* at = Take(1)) *at = std::byte{value};
  }
  constexpr void U16(uint16_t value) {
    if (std::byte* at = Take(2)) PutU16(at, value);
  }
  constexpr void U32(uint32_t value) {
    if (std::byte* at = Take(4)) PutU32(at, value);
  }
  constexpr void U64(uint64_t value) {
    if (std::byte* at = Take(8)) PutU64(at, value);
  }
  constexpr void Bytes(std::span<const std::byte> value) {
    if (std::byte* at = Take(value.size())) std::ranges::copy(value, at);
  }

  // False once a field did not fit: the fields from there on were not written.
  constexpr bool ok() const { return ok_; }
  constexpr std::size_t written() const { return at_; }

 private:
  constexpr std::byte* Take(std::size_t bytes) {
    if (!ok_ || out_.size() - at_ < bytes) {
      ok_ = false;
      return nullptr;
    }
    std::byte* at = out_.data() + at_;
    at_ += bytes;
    return at;
  }

  std::span<std::byte> out_;
  std::size_t at_ = 0;
  bool ok_ = true;
};

}  // namespace kvtier::little_endian
