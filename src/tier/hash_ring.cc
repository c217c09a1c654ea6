#include "tier/hash_ring.h"

#include <xxhash.h>

#include <algorithm>

namespace kvtier {

HashRing::HashRing(const std::vector<std::string>& node_names, int virtual_nodes) {
  points_.reserve(node_names.size() * static_cast<std::size_t>(virtual_nodes));
  for (std::size_t node = 0; node < node_names.size(); ++node) {
    for (int i = 0; i < virtual_nodes; ++i) {
      const std::string point = node_names[node] + "#" + std::to_string(i);
      points_.emplace_back(XXH3_64bits(point.data(), point.size()), node);
    }
  }
  std::sort(points_.begin(), points_.end());
}

std::size_t HashRing::NodeFor(std::string_view key) const {
  const uint64_t hash = XXH3_64bits(key.data(), key.size());
  auto it = std::lower_bound(points_.begin(), points_.end(), std::pair<uint64_t, std::size_t>(hash, 0));
  if (it == points_.end()) it = points_.begin();
  return it->second;
}

}  // namespace kvtier
