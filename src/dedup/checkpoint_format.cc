#include "dedup/checkpoint_format.h"

#include "util/little_endian.h"

namespace kvtier::checkpoint_format {

using little_endian::GetU32;
using little_endian::GetU64;

std::array<std::byte, kHeaderBytes> EncodeHeader(const Header& header) {
  std::array<std::byte, kHeaderBytes> bytes{};
  little_endian::Writer out(bytes);
  out.Bytes(kMagic);
  out.U32(header.version);
  out.U32(header.flags);
  out.U64(header.file_bytes);
  out.U64(header.block_count);
  out.U64(header.payload_count);
  return bytes;
}

Header DecodeHeader(std::span<const std::byte, kHeaderBytes> bytes) {
  Header header;
  header.version = GetU32(bytes.data() + 8);
  header.flags = GetU32(bytes.data() + 12);
  header.file_bytes = GetU64(bytes.data() + 16);
  header.block_count = GetU64(bytes.data() + 24);
  header.payload_count = GetU64(bytes.data() + 32);
  return header;
}

std::array<std::byte, kBlockRecordBytes> EncodeBlockRecord(const BlockRecord& record) {
  const BlockKey parent = record.parent.value_or(BlockKey{});
  std::array<std::byte, kBlockRecordBytes> bytes{};
  little_endian::Writer out(bytes);
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
  return bytes;
}

std::optional<BlockRecord> DecodeBlockRecord(std::span<const std::byte, kBlockRecordBytes> bytes) {
  const auto u8 = [&bytes](std::size_t at) { return std::to_integer<uint8_t>(bytes[at]); };
  const uint8_t flags = u8(56);
  const uint8_t type = u8(57);
  const uint8_t transition = u8(58);
  if ((flags & ~kHasParent) != 0 || GetU32(bytes.data() + 60) != 0) return std::nullopt;
  if (type > static_cast<uint8_t>(BlockType::kIntermediateReasoning)) return std::nullopt;
  if (transition > static_cast<uint8_t>(TransitionType::kAgentHandoff)) return std::nullopt;

  BlockRecord record;
  record.key = {GetU64(bytes.data() + 0), GetU64(bytes.data() + 8)};
  const BlockKey parent{GetU64(bytes.data() + 16), GetU64(bytes.data() + 24)};
  if ((flags & kHasParent) != 0) {
    record.parent = parent;
  } else if (parent != BlockKey{}) {
    return std::nullopt;
  }
  record.meta.fingerprint = GetU64(bytes.data() + 32);
  record.last_access = GetU64(bytes.data() + 40);
  record.meta.size_bytes = GetU32(bytes.data() + 48);
  record.payload = GetU32(bytes.data() + 52);
  record.meta.type = static_cast<BlockType>(type);
  record.meta.transition = static_cast<TransitionType>(transition);
  record.meta.tiers = u8(59);
  return record;
}

std::array<std::byte, kPayloadRecordHeaderBytes> EncodePayloadRecordHeader(const PayloadRecordHeader& record) {
  std::array<std::byte, kPayloadRecordHeaderBytes> bytes{};
  little_endian::Writer out(bytes);
  out.U64(record.length);
  out.U64(record.checksum);
  return bytes;
}

PayloadRecordHeader DecodePayloadRecordHeader(std::span<const std::byte, kPayloadRecordHeaderBytes> bytes) {
  return {GetU64(bytes.data() + 0), GetU64(bytes.data() + 8)};
}

}  // namespace kvtier::checkpoint_format
