// Stores and tiers for tests of what sits on them (the store, the server and its clients):
// plain process memory, no mlock, no huge pages, no CUDA pinning, which every machine and
// sanitizer gives. Failures are test failures (EXPECT), and the result is then null.
//
// Thread-safety: the functions are; what they return is as its class says.
#pragma once

#include <cstdint>
#include <cstddef>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "kvtier/store.h"
#include "kvtier/tiers.h"
#include "testing/faulty_tier.h"

namespace kvtier::testing {

inline std::unique_ptr<Tier> TestDram(uint64_t capacity_bytes, std::string name = "dram") {
  Result<std::unique_ptr<Tier>> tier = NewDramTier({.name = std::move(name),
                                                    .capacity_bytes = capacity_bytes,
                                                    .lock_memory = false,
                                                    .huge_pages = false,
                                                    .pin_for_gpu = false});
  EXPECT_TRUE(tier.ok()) << tier.status().ToString();
  return tier.ok() ? std::move(*tier) : nullptr;
}

// A store of one TestDram tier with default options.
inline std::unique_ptr<TieredStore> DramOnlyStore(uint64_t capacity_bytes) {
  std::vector<std::unique_ptr<Tier>> tiers;
  tiers.push_back(TestDram(capacity_bytes));
  if (tiers.back() == nullptr) return nullptr;
  Result<std::unique_ptr<TieredStore>> store = TieredStore::Open(std::move(tiers), {});
  EXPECT_TRUE(store.ok()) << store.status().ToString();
  return store.ok() ? std::move(*store) : nullptr;
}

// A store of one TestDram tier inside a FaultyTier, and that FaultyTier, for the test to slow
// down or make fail (owned by the store).
inline std::pair<std::unique_ptr<TieredStore>, FaultyTier*> FaultyDramStore(uint64_t capacity_bytes) {
  std::unique_ptr<Tier> dram = TestDram(capacity_bytes);
  if (dram == nullptr) return {nullptr, nullptr};
  auto faulty = std::make_unique<FaultyTier>(std::move(dram));
  FaultyTier* const handle = faulty.get();
  std::vector<std::unique_ptr<Tier>> tiers;
  tiers.push_back(std::move(faulty));
  Result<std::unique_ptr<TieredStore>> store = TieredStore::Open(std::move(tiers), {});
  EXPECT_TRUE(store.ok()) << store.status().ToString();
  if (!store.ok()) return {nullptr, nullptr};
  return {std::move(*store), handle};
}

// Chains of blocks with known contents, for tests that put them and read them back: chain c's
// block i is Key(c, i), under Key(c, i - 1), holding Payload(c, i).
class TestChains {
 public:
  explicit TestChains(uint32_t block_bytes) : block_bytes_(block_bytes) {}

  static BlockKey Key(uint64_t chain, uint64_t i) { return {chain * 0x9E3779B97F4A7C15ull + 3, i + 1}; }
  static std::vector<BlockKey> Keys(uint64_t chain, uint64_t n) {
    std::vector<BlockKey> keys;
    for (uint64_t i = 0; i < n; ++i) keys.push_back(Key(chain, i));
    return keys;
  }
  std::vector<std::byte> Payload(uint64_t chain, uint64_t i) const {
    std::vector<std::byte> bytes(block_bytes_);
    for (std::size_t k = 0; k < bytes.size(); ++k) {
      bytes[k] = static_cast<std::byte>((k * 29 + chain * 5 + i * 11) & 0xff);
    }
    return bytes;
  }

  // `parent`: the stored block the chain continues (its first block's parent).
  Result<PutResult> Put(TieredStore& store, uint64_t chain, uint64_t n,
                        const std::optional<BlockKey>& parent = std::nullopt) const {
    std::vector<std::vector<std::byte>> payloads;
    std::vector<BlockPut> puts;
    for (uint64_t i = 0; i < n; ++i) payloads.push_back(Payload(chain, i));
    for (uint64_t i = 0; i < n; ++i) puts.push_back({.key = Key(chain, i), .payload = payloads[i], .tokens = 16});
    return store.Put(puts, parent);
  }

  // The blocks of the chain's stored prefix that read back; a wrong byte fails the test. With
  // `parent`, the chain is read after it (its bytes are not checked).
  std::size_t Get(TieredStore& store, uint64_t chain, uint64_t n,
                  const std::optional<BlockKey>& parent = std::nullopt) const {
    const std::size_t skip = parent ? 1 : 0;
    std::vector<BlockKey> keys = Keys(chain, n);
    if (parent) keys.insert(keys.begin(), *parent);
    std::vector<std::vector<std::byte>> buffers(keys.size(), std::vector<std::byte>(block_bytes_));
    std::vector<std::span<std::byte>> outs(buffers.begin(), buffers.end());
    Result<std::size_t> read = store.Get(keys, outs);
    EXPECT_TRUE(read.ok()) << read.status().ToString();
    if (!read.ok() || *read < skip) return 0;
    buffers.erase(buffers.begin(), buffers.begin() + static_cast<std::ptrdiff_t>(skip));
    for (std::size_t i = 0; i < *read - skip; ++i) {
      if (buffers[i] != Payload(chain, i)) {
        ADD_FAILURE() << "chain " << chain << " block " << i << " has wrong bytes";
        return i;
      }
    }
    return *read - skip;
  }

 private:
  uint32_t block_bytes_;
};

}  // namespace kvtier::testing
