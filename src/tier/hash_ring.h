// A consistent-hash ring: each node owns `virtual_nodes` points, at xxh3-64 of
// "<node name>#<i>"; a key belongs to the node of the first point at or after its hash
// (wrapping around). Adding or removing a node moves only about 1/N of the keys.
//
// Thread-safety: immutable after construction.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace kvtier {

class HashRing {
 public:
  // `node_names` must not be empty; `virtual_nodes` > 0.
  HashRing(const std::vector<std::string>& node_names, int virtual_nodes);

  // The index (into `node_names`) of the node that owns `key`.
  std::size_t NodeFor(std::string_view key) const;

 private:
  std::vector<std::pair<uint64_t, std::size_t>> points_;  // sorted by hash
};

}  // namespace kvtier
