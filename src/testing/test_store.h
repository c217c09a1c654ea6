// Stores and tiers for tests of what sits on them (the store, the server and its clients):
// plain process memory, no mlock, no huge pages, no CUDA pinning, which every machine and
// sanitizer gives. Failures are test failures (EXPECT), and the result is then null.
//
// Thread-safety: the functions are; what they return is as its class says.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "kvtier/store.h"
#include "kvtier/tiers.h"

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

}  // namespace kvtier::testing
