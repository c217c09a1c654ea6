// The checkpoint file's layout (docs/checkpoint.md), and its fixed-size parts encoded and
// decoded little-endian field by field, so the file reads the same on any host.
//
// On disk: do not change. A different layout takes a new kVersion, and the reader keeps
// reading the old ones.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>

#include "kvtier/block.h"
#include "kvtier/prefix_index.h"

namespace kvtier::checkpoint_format {

inline constexpr std::array<std::byte, 8> kMagic = {std::byte{'K'}, std::byte{'V'}, std::byte{'T'}, std::byte{'I'},
                                                    std::byte{'E'}, std::byte{'R'}, std::byte{'C'}, std::byte{'P'}};
inline constexpr uint32_t kVersion = 1;

inline constexpr std::size_t kHeaderBytes = 40;
inline constexpr std::size_t kBlockRecordBytes = 64;
inline constexpr std::size_t kPayloadRecordHeaderBytes = 16;  // length, checksum; the bytes follow
inline constexpr std::size_t kTrailerBytes = 8;                // xxh3-64 of everything before it

inline constexpr uint32_t kNoPayload = 0xFFFFFFFF;  // a block whose payload was not in the store
inline constexpr uint8_t kHasParent = 0x01;         // BlockRecord flags; other bits must be 0

struct Header {
  uint32_t version = kVersion;
  uint32_t flags = 0;  // reserved: 0
  uint64_t file_bytes = 0;
  uint64_t block_count = 0;
  uint64_t payload_count = 0;
};

struct BlockRecord {
  BlockKey key;
  std::optional<BlockKey> parent;
  BlockMeta meta;
  uint64_t last_access = 0;
  uint32_t payload = kNoPayload;  // index of a payload record
};

struct PayloadRecordHeader {
  uint64_t length = 0;
  uint64_t checksum = 0;  // PayloadChecksum (xxh3-64) of the bytes
};

std::array<std::byte, kHeaderBytes> EncodeHeader(const Header& header);
std::array<std::byte, kBlockRecordBytes> EncodeBlockRecord(const BlockRecord& record);
std::array<std::byte, kPayloadRecordHeaderBytes> EncodePayloadRecordHeader(const PayloadRecordHeader& record);

// Decoders read fields only; what the values mean is the restorer's to check. DecodeHeader
// expects the magic already checked. DecodeBlockRecord returns nullopt when a reserved
// field or flag is set or an enum is out of range.
Header DecodeHeader(std::span<const std::byte, kHeaderBytes> bytes);
std::optional<BlockRecord> DecodeBlockRecord(std::span<const std::byte, kBlockRecordBytes> bytes);
PayloadRecordHeader DecodePayloadRecordHeader(std::span<const std::byte, kPayloadRecordHeaderBytes> bytes);

}  // namespace kvtier::checkpoint_format
