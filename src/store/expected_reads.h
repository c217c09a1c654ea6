// Which blocks queued requests will read, and the soonest such read of each block: the
// table behind TieredStore::Expect (store.h). An order is an expectation's sequence number,
// so a smaller one is a request queued earlier, read sooner by a FIFO engine.
//
// Thread-safety: none; the store calls it under its mutex.
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <unordered_map>
#include <vector>

#include "kvtier/block.h"

namespace kvtier::store_internal {

class ExpectedReads {
 public:
  // Adds one expected read of `key`; returns the soonest read of it now.
  uint64_t Add(const BlockKey& key, uint64_t order) {
    std::vector<uint64_t>& orders = orders_[key];
    orders.insert(std::upper_bound(orders.begin(), orders.end(), order), order);
    return orders.front();
  }

  // Withdraws one expected read of `key` added with `order`; returns the soonest read left.
  std::optional<uint64_t> Remove(const BlockKey& key, uint64_t order) {
    auto it = orders_.find(key);
    if (it == orders_.end()) return std::nullopt;
    std::vector<uint64_t>& orders = it->second;
    if (auto at = std::lower_bound(orders.begin(), orders.end(), order); at != orders.end() && *at == order) {
      orders.erase(at);
    }
    if (orders.empty()) {
      orders_.erase(it);
      return std::nullopt;
    }
    return orders.front();
  }

  std::optional<uint64_t> Soonest(const BlockKey& key) const {
    auto it = orders_.find(key);
    if (it == orders_.end()) return std::nullopt;
    return it->second.front();
  }

  std::size_t size() const { return orders_.size(); }

 private:
  std::unordered_map<BlockKey, std::vector<uint64_t>, BlockKeyHash> orders_;  // ascending, never empty
};

}  // namespace kvtier::store_internal
