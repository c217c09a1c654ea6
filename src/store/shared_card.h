// A block's card: what another node needs to index a block it finds in a shared tier
// (Tier::shared), written beside the block under CardKey(key) whenever the store writes the
// block there. A node that lacks a chain's keys reads their cards in one batch, checks that
// each names its key and continues the chain from the one before, and indexes the blocks
// (TieredStore::Lookup; docs/cluster.md). 80 bytes, little-endian:
//   0 u64 magic "KVTCARD1"   8 u32 version (1)   12 u32 flags (bit 0: has a parent)
//  16 u64 key.hi    24 u64 key.lo    32 u64 parent.hi    40 u64 parent.lo
//  48 u32 payload bytes   52 u32 tokens   56 u8 block type   57 u8 transition   58 u16 0
//  60 u32 0   64 f64 recompute seconds   72 u64 xxh3-64 of bytes [0, 72)
// Its own checksum because the tier's covers the value, not who wrote it: a card written by
// an older or a foreign writer under the same prefix is rejected, not trusted.
//
// Thread-safety: pure functions.
#pragma once

#include <array>
#include <cstddef>
#include <optional>
#include <span>

#include "kvtier/block.h"

namespace kvtier {

struct BlockCard {
  BlockKey key;
  std::optional<BlockKey> parent;
  uint32_t bytes = 0;
  uint32_t tokens = 0;
  BlockType type = BlockType::kUserContext;
  TransitionType transition = TransitionType::kSameToolRepeat;
  double recompute_seconds = 0;
};

inline constexpr std::size_t kBlockCardBytes = 80;

// Where a block's card lives: a key no block has (as likely as a collision of two blocks).
inline BlockKey CardKey(const BlockKey& key) { return {key.hi ^ 0x6361726463617264ull, key.lo ^ 2}; }

std::array<std::byte, kBlockCardBytes> EncodeBlockCard(const BlockCard& card);
// nullopt when the bytes are not a whole, intact card of this version.
std::optional<BlockCard> DecodeBlockCard(std::span<const std::byte> bytes);

}  // namespace kvtier
