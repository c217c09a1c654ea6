// Test helpers for checkpoints: a deterministic cache that grows block by block, and a
// by-content dump of an index and store to compare a restored cache with the one written.
//
// Block i of the test cache is the same in every process: its key, its parent (an earlier
// block, or none: the blocks form many small trees), its meta and its payload. Payloads
// repeat every kPayloadVariants blocks, so checkpoints dedup, and every seventh block has
// metadata only.
//
// Thread-safety: functions only; each works on the objects it is given.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <tuple>
#include <vector>

#include "kvtier/payload_store.h"
#include "kvtier/prefix_index.h"

namespace kvtier::checkpoint_testing {

inline constexpr uint64_t kPayloadVariants = 29;

inline uint64_t SplitMix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

inline BlockKey TestBlockKey(uint64_t i) { return {SplitMix(2 * i), SplitMix(2 * i + 1)}; }

inline std::optional<uint64_t> TestBlockParent(uint64_t i) {
  if (i % 6 == 0) return std::nullopt;
  return i % 3 == 0 ? i - 2 : i - 1;
}

inline bool TestBlockHasPayload(uint64_t i) { return i % 7 != 3; }

inline const std::vector<std::byte>& TestPayload(uint64_t i) {
  // Made once: a crash test's writer rebuilds thousands of blocks before it may be killed.
  static const std::vector<std::vector<std::byte>> variants = [] {
    std::vector<std::vector<std::byte>> out;
    for (uint64_t v = 0; v < kPayloadVariants; ++v) {
      std::vector<std::byte>& bytes = out.emplace_back(4096 + 512 * v);
      for (std::size_t b = 0; b < bytes.size(); ++b) bytes[b] = static_cast<std::byte>(SplitMix(v * 65536 + b));
    }
    return out;
  }();
  return variants[i % kPayloadVariants];
}

inline BlockMeta TestBlockMeta(uint64_t i) {
  return {.size_bytes = static_cast<uint32_t>(4096 + 512 * (i % kPayloadVariants)),
          .type = static_cast<BlockType>(i % 4),
          .transition = static_cast<TransitionType>((i / 4) % 4),
          .fingerprint = SplitMix(i ^ 0xF00D),
          .tiers = static_cast<TierMask>(i & 0x3F)};
}

// Adds blocks [begin, end) (their parents must be in already). Returns false on any error.
inline bool AddTestBlocks(PrefixIndex& index, PayloadStore& store, uint64_t begin, uint64_t end) {
  for (uint64_t i = begin; i < end; ++i) {
    const BlockKey key = TestBlockKey(i);
    const BlockMeta meta = TestBlockMeta(i);
    const std::optional<uint64_t> parent = TestBlockParent(i);
    Result<std::size_t> added = index.Insert({&key, 1}, {&meta, 1}, /*now=*/i + 1,
                                             parent ? std::optional(TestBlockKey(*parent)) : std::nullopt);
    if (!added.ok() || *added != 1) return false;
    if (TestBlockHasPayload(i) && !store.Put(key, TestPayload(i)).ok()) return false;
  }
  return true;
}

// One block as a checkpoint must preserve it.
struct DumpedBlock {
  std::optional<BlockKey> parent;
  std::tuple<uint32_t, BlockType, TransitionType, uint64_t, TierMask> meta;
  uint64_t last_access = 0;
  std::optional<std::vector<std::byte>> payload;  // nullopt: none, or unreadable
  friend bool operator==(const DumpedBlock&, const DumpedBlock&) = default;
};
using CacheDump = std::map<BlockKey, DumpedBlock>;

inline CacheDump DumpCache(const PrefixIndex& index, const PayloadStore& store) {
  std::vector<BlockInfo> infos;
  index.ForEachBlock([&infos](const BlockInfo& info) { infos.push_back(info); });
  CacheDump dump;
  for (const BlockInfo& info : infos) {
    Result<std::vector<std::byte>> payload = store.Get(info.key);
    dump[info.key] = {.parent = info.parent,
                      .meta = {info.meta.size_bytes, info.meta.type, info.meta.transition, info.meta.fingerprint,
                               info.meta.tiers},
                      .last_access = info.last_access,
                      .payload = payload.ok() ? std::optional(std::move(payload).value()) : std::nullopt};
  }
  return dump;
}

}  // namespace kvtier::checkpoint_testing
