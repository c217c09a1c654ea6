// A canonical CBOR (RFC 8949 §4.2.1, "core deterministic") encoder for the few types block
// keys need: unsigned and negative integers, byte and text strings, arrays and null. Written
// here because it is 60 lines and must match Python's cbor2 `canonical=True` byte for byte
// (the vLLM-compatible keys depend on it); no Debian C++ CBOR library guarantees that.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

namespace kvtier {

class CborWriter {
 public:
  void Unsigned(uint64_t value) { Head(0, value); }
  void Integer(int64_t value) {
    if (value >= 0) {
      Head(0, static_cast<uint64_t>(value));
    } else {
      Head(1, static_cast<uint64_t>(-(value + 1)));
    }
  }
  void Bytes(std::span<const uint8_t> bytes) {
    Head(2, bytes.size());
    out_.insert(out_.end(), bytes.begin(), bytes.end());
  }
  void Text(std::string_view text) {
    Head(3, text.size());
    out_.insert(out_.end(), text.begin(), text.end());
  }
  void ArrayHeader(std::size_t count) { Head(4, count); }
  void Null() { out_.push_back(0xf6); }
  // Not CBOR: raw bytes and fixed-width words for kvtier's own key layout.
  void Raw(std::span<const uint8_t> bytes) { out_.insert(out_.end(), bytes.begin(), bytes.end()); }
  void LittleEndian32(uint32_t value) {
    for (int i = 0; i < 4; ++i) out_.push_back(static_cast<uint8_t>(value >> (8 * i)));
  }

  const std::vector<uint8_t>& bytes() const { return out_; }
  void Clear() { out_.clear(); }

 private:
  // Major type in the top 3 bits; the argument in the shortest form that holds it.
  void Head(uint8_t major, uint64_t value) {
    const auto type = static_cast<uint8_t>(major << 5);
    if (value < 24) {
      out_.push_back(static_cast<uint8_t>(type | value));
    } else if (value <= 0xff) {
      out_.push_back(type | 24);
      out_.push_back(static_cast<uint8_t>(value));
    } else if (value <= 0xffff) {
      out_.push_back(type | 25);
      BigEndian(value, 2);
    } else if (value <= 0xffffffffull) {
      out_.push_back(type | 26);
      BigEndian(value, 4);
    } else {
      out_.push_back(type | 27);
      BigEndian(value, 8);
    }
  }
  void BigEndian(uint64_t value, int bytes) {
    for (int i = bytes - 1; i >= 0; --i) out_.push_back(static_cast<uint8_t>(value >> (8 * i)));
  }

  std::vector<uint8_t> out_;
};

}  // namespace kvtier
