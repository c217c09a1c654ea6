// Quantiles of a sample, the one way the replay reports P50 and P99: the value at rank
// floor(n * q) of the sorted sample (the largest for q = 1), 0 for an empty sample.
//
// Thread-safety: a pure function.
#pragma once

#include <algorithm>
#include <cstddef>
#include <vector>

namespace kvtier {

template <typename T>
T Quantile(std::vector<T> values, double q) {
  if (values.empty()) return T{};
  const std::size_t n = values.size();
  // The epsilon keeps n * q exact where it is a whole number (0.99 * 300 is 296.99999...).
  const std::size_t rank = std::min(n - 1, static_cast<std::size_t>(static_cast<double>(n) * q + 1e-9));
  std::nth_element(values.begin(), values.begin() + static_cast<std::ptrdiff_t>(rank), values.end());
  return values[rank];
}

}  // namespace kvtier
