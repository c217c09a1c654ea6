#include "store/shared_card.h"

#include <bit>

#include <xxhash.h>

#include "util/little_endian.h"

namespace kvtier {
namespace {

using little_endian::GetU32;
using little_endian::GetU64;
using little_endian::PutU32;
using little_endian::PutU64;

constexpr uint64_t kMagic = 0x314452414354564Bull;  // "KVTCARD1" read as little-endian bytes
constexpr uint32_t kVersion = 1;
constexpr uint32_t kHasParent = 1;
constexpr std::size_t kChecked = 72;  // the bytes the checksum covers

}  // namespace

std::array<std::byte, kBlockCardBytes> EncodeBlockCard(const BlockCard& card) {
  std::array<std::byte, kBlockCardBytes> out{};
  std::byte* p = out.data();
  PutU64(p + 0, kMagic);
  PutU32(p + 8, kVersion);
  PutU32(p + 12, card.parent ? kHasParent : 0);
  PutU64(p + 16, card.key.hi);
  PutU64(p + 24, card.key.lo);
  PutU64(p + 32, card.parent ? card.parent->hi : 0);
  PutU64(p + 40, card.parent ? card.parent->lo : 0);
  PutU32(p + 48, card.bytes);
  PutU32(p + 52, card.tokens);
  p[56] = static_cast<std::byte>(card.type);
  p[57] = static_cast<std::byte>(card.transition);
  PutU64(p + 64, std::bit_cast<uint64_t>(card.recompute_seconds));
  PutU64(p + 72, XXH3_64bits(p, kChecked));
  return out;
}

std::optional<BlockCard> DecodeBlockCard(std::span<const std::byte> bytes) {
  if (bytes.size() != kBlockCardBytes) return std::nullopt;
  const std::byte* p = bytes.data();
  if (GetU64(p) != kMagic || GetU32(p + 8) != kVersion || GetU64(p + 72) != XXH3_64bits(p, kChecked)) {
    return std::nullopt;
  }
  const uint32_t flags = GetU32(p + 12);
  const auto type = static_cast<uint8_t>(p[56]);
  const auto transition = static_cast<uint8_t>(p[57]);
  if ((flags & ~kHasParent) != 0 || type > 3 || transition > 3) return std::nullopt;
  BlockCard card{.key = {GetU64(p + 16), GetU64(p + 24)},
                 .parent = std::nullopt,
                 .bytes = GetU32(p + 48),
                 .tokens = GetU32(p + 52),
                 .type = static_cast<BlockType>(type),
                 .transition = static_cast<TransitionType>(transition),
                 .recompute_seconds = std::bit_cast<double>(GetU64(p + 64))};
  if (flags & kHasParent) card.parent = BlockKey{GetU64(p + 32), GetU64(p + 40)};
  if (card.bytes == 0 || !(card.recompute_seconds >= 0)) return std::nullopt;
  return card;
}

}  // namespace kvtier
