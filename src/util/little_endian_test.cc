#include "util/little_endian.h"

#include <gtest/gtest.h>

#include <array>

namespace kvtier::little_endian {
namespace {

std::array<std::byte, 8> Bytes(std::initializer_list<uint8_t> values) {
  std::array<std::byte, 8> out{};
  std::size_t i = 0;
  for (uint8_t v : values) out[i++] = std::byte{v};
  return out;
}

// The constant-evaluated path (the byte loops) lays out and reads the same bytes as the
// runtime one (one load or store on a little-endian host), which the tests below check.
constexpr std::array<std::byte, 8> PutAtCompileTime(uint64_t value) {
  std::array<std::byte, 8> out{};
  PutU64(out.data(), value);
  return out;
}
static_assert(PutAtCompileTime(0x0102030405060708ull)[0] == std::byte{0x08});
static_assert(PutAtCompileTime(0x0102030405060708ull)[7] == std::byte{0x01});
static_assert(GetU64(PutAtCompileTime(0x0102030405060708ull).data()) == 0x0102030405060708ull);

TEST(LittleEndian, LeastSignificantByteFirst) {
  std::array<std::byte, 8> out{};
  PutU16(out.data(), 0x0102);
  EXPECT_EQ(out, Bytes({0x02, 0x01}));
  out = {};
  PutU32(out.data(), 0x01020304);
  EXPECT_EQ(out, Bytes({0x04, 0x03, 0x02, 0x01}));
  PutU64(out.data(), 0x0102030405060708ull);
  EXPECT_EQ(out, Bytes({0x08, 0x07, 0x06, 0x05, 0x04, 0x03, 0x02, 0x01}));
}

TEST(LittleEndian, GetReadsWhatPutWrote) {
  std::array<std::byte, 8> buffer{};
  for (const uint64_t value :
       {uint64_t{0}, uint64_t{1}, uint64_t{0x8000000000000000}, ~uint64_t{0}, uint64_t{0x32454D564E54564B}}) {
    PutU64(buffer.data(), value);
    EXPECT_EQ(GetU64(buffer.data()), value);
    PutU32(buffer.data(), static_cast<uint32_t>(value));
    EXPECT_EQ(GetU32(buffer.data()), static_cast<uint32_t>(value));
    PutU16(buffer.data(), static_cast<uint16_t>(value));
    EXPECT_EQ(GetU16(buffer.data()), static_cast<uint16_t>(value));
  }
  // A magic is its ASCII bytes in order: "KVTNVME2" is the NVMe tier's slot magic.
  const std::array<std::byte, 8> magic = Bytes({'K', 'V', 'T', 'N', 'V', 'M', 'E', '2'});
  EXPECT_EQ(GetU64(magic.data()), 0x32454D564E54564Bull);
}

TEST(LittleEndian, WriterLaysFieldsOneAfterAnother) {
  std::array<std::byte, 16> out{};
  Writer writer(out);
  writer.U8(0xAA);
  writer.U16(0x0102);
  writer.U32(0x03040506);
  writer.U64(0x0708090A0B0C0D0Eull);
  writer.Bytes(std::array<std::byte, 1>{std::byte{0xFF}});
  ASSERT_TRUE(writer.ok());
  EXPECT_EQ(writer.written(), 16u);
  const std::array<std::byte, 16> expected = {std::byte{0xAA}, std::byte{0x02}, std::byte{0x01}, std::byte{0x06},
                                              std::byte{0x05}, std::byte{0x04}, std::byte{0x03}, std::byte{0x0E},
                                              std::byte{0x0D}, std::byte{0x0C}, std::byte{0x0B}, std::byte{0x0A},
                                              std::byte{0x09}, std::byte{0x08}, std::byte{0x07}, std::byte{0xFF}};
  EXPECT_EQ(out, expected);
}

TEST(LittleEndian, WriterStopsAtTheEndOfItsSpan) {
  std::array<std::byte, 6> out{};
  Writer writer(out);
  writer.U32(0x01020304);
  writer.U32(0x05060708);  // does not fit: nothing of it is written
  EXPECT_FALSE(writer.ok());
  EXPECT_EQ(writer.written(), 4u);
  EXPECT_EQ(out[4], std::byte{0});
  writer.U8(0x09);  // fits, but the writer failed already
  EXPECT_FALSE(writer.ok());
  EXPECT_EQ(out[4], std::byte{0});
}

}  // namespace
}  // namespace kvtier::little_endian
