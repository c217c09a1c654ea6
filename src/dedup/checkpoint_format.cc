#include "dedup/checkpoint_format.h"

#include <algorithm>

namespace kvtier::checkpoint_format {
namespace {

// Appends fixed-width little-endian fields to a fixed-size record.
template <std::size_t N>
class RecordWriter {
 public:
  void U8(uint8_t value) { bytes_[at_++] = std::byte{value}; }
  void U32(uint32_t value) { Store(value, 4); }
  void U64(uint64_t value) { Store(value, 8); }
  void Bytes(std::span<const std::byte> value) {
    std::ranges::copy(value, bytes_.begin() + static_cast<std::ptrdiff_t>(at_));
    at_ += value.size();
  }
  std::array<std::byte, N> Done() const { return bytes_; }

 private:
  void Store(uint64_t value, std::size_t width) {
    for (std::size_t i = 0; i < width; ++i) bytes_[at_++] = static_cast<std::byte>(value >> (8 * i));
  }

  std::array<std::byte, N> bytes_{};
  std::size_t at_ = 0;
};

}  // namespace

uint32_t LoadU32(std::span<const std::byte> bytes) {
  uint32_t value = 0;
  for (std::size_t i = 0; i < 4; ++i) value |= std::to_integer<uint32_t>(bytes[i]) << (8 * i);
  return value;
}

uint64_t LoadU64(std::span<const std::byte> bytes) {
  uint64_t value = 0;
  for (std::size_t i = 0; i < 8; ++i) value |= std::to_integer<uint64_t>(bytes[i]) << (8 * i);
  return value;
}

std::array<std::byte, kHeaderBytes> EncodeHeader(const Header& header) {
  RecordWriter<kHeaderBytes> out;
  out.Bytes(kMagic);
  out.U32(header.version);
  out.U32(header.flags);
  out.U64(header.file_bytes);
  out.U64(header.block_count);
  out.U64(header.payload_count);
  return out.Done();
}

Header DecodeHeader(std::span<const std::byte, kHeaderBytes> bytes) {
  Header header;
  header.version = LoadU32(bytes.subspan(8));
  header.flags = LoadU32(bytes.subspan(12));
  header.file_bytes = LoadU64(bytes.subspan(16));
  header.block_count = LoadU64(bytes.subspan(24));
  header.payload_count = LoadU64(bytes.subspan(32));
  return header;
}

std::array<std::byte, kBlockRecordBytes> EncodeBlockRecord(const BlockRecord& record) {
  const BlockKey parent = record.parent.value_or(BlockKey{});
  RecordWriter<kBlockRecordBytes> out;
  out.U64(record.key.hi);
  out.U64(record.key.lo);
  out.U64(parent.hi);
  out.U64(parent.lo);
  out.U64(record.meta.fingerprint);
  out.U64(record.last_access);
  out.U32(record.meta.size_bytes);
  out.U32(record.payload);
  out.U8(record.parent.has_value() ? kHasParent : 0);
  out.U8(static_cast<uint8_t>(record.meta.type));
  out.U8(static_cast<uint8_t>(record.meta.transition));
  out.U8(record.meta.tiers);
  out.U32(0);  // reserved
  return out.Done();
}

std::optional<BlockRecord> DecodeBlockRecord(std::span<const std::byte, kBlockRecordBytes> bytes) {
  const auto u8 = [&bytes](std::size_t at) { return std::to_integer<uint8_t>(bytes[at]); };
  const uint8_t flags = u8(56);
  const uint8_t type = u8(57);
  const uint8_t transition = u8(58);
  if ((flags & ~kHasParent) != 0 || LoadU32(bytes.subspan(60)) != 0) return std::nullopt;
  if (type > static_cast<uint8_t>(BlockType::kIntermediateReasoning)) return std::nullopt;
  if (transition > static_cast<uint8_t>(TransitionType::kAgentHandoff)) return std::nullopt;

  BlockRecord record;
  record.key = {LoadU64(bytes.subspan(0)), LoadU64(bytes.subspan(8))};
  const BlockKey parent{LoadU64(bytes.subspan(16)), LoadU64(bytes.subspan(24))};
  if ((flags & kHasParent) != 0) {
    record.parent = parent;
  } else if (parent != BlockKey{}) {
    return std::nullopt;
  }
  record.meta.fingerprint = LoadU64(bytes.subspan(32));
  record.last_access = LoadU64(bytes.subspan(40));
  record.meta.size_bytes = LoadU32(bytes.subspan(48));
  record.payload = LoadU32(bytes.subspan(52));
  record.meta.type = static_cast<BlockType>(type);
  record.meta.transition = static_cast<TransitionType>(transition);
  record.meta.tiers = u8(59);
  return record;
}

std::array<std::byte, kPayloadRecordHeaderBytes> EncodePayloadRecordHeader(const PayloadRecordHeader& record) {
  RecordWriter<kPayloadRecordHeaderBytes> out;
  out.U64(record.length);
  out.U64(record.checksum);
  return out.Done();
}

PayloadRecordHeader DecodePayloadRecordHeader(std::span<const std::byte, kPayloadRecordHeaderBytes> bytes) {
  return {LoadU64(bytes.subspan(0)), LoadU64(bytes.subspan(8))};
}

}  // namespace kvtier::checkpoint_format
