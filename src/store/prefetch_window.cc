#include "kvtier/prefetch_window.h"

#include <algorithm>
#include <cmath>
#include <string>

namespace kvtier {

Status PrefetchWindowOptions::Validate() const {
  if (min_window < 1 || min_window > initial_window || initial_window > max_window) {
    return Status::InvalidArgument("prefetch window: need 1 <= min_window <= initial_window <= max_window, got " +
                                   std::to_string(min_window) + ", " + std::to_string(initial_window) + ", " +
                                   std::to_string(max_window));
  }
  if (!(shrink_accuracy >= 0 && shrink_accuracy <= grow_accuracy && grow_accuracy <= 1)) {
    return Status::InvalidArgument("prefetch window: need 0 <= shrink_accuracy <= grow_accuracy <= 1");
  }
  if (!(grow_max_utilization >= 0 && grow_max_utilization <= 1)) {
    return Status::InvalidArgument("prefetch window: grow_max_utilization must be in [0, 1]");
  }
  if (evaluation_period == 0) return Status::InvalidArgument("prefetch window: evaluation_period must be positive");
  return Status::Ok();
}

Result<std::unique_ptr<PrefetchWindow>> PrefetchWindow::Create(const PrefetchWindowOptions& options) {
  KVTIER_RETURN_IF_ERROR(options.Validate());
  return std::unique_ptr<PrefetchWindow>(new PrefetchWindow(options));
}

PrefetchWindow::PrefetchWindow(const PrefetchWindowOptions& options)
    : options_(options), window_(options.initial_window) {}

void PrefetchWindow::OnPrefetched(uint64_t blocks, uint64_t bytes) {
  issued_blocks_.fetch_add(blocks, std::memory_order_relaxed);
  issued_bytes_.fetch_add(bytes, std::memory_order_relaxed);
}

void PrefetchWindow::OnUsed(uint64_t blocks) {
  used_blocks_.fetch_add(blocks, std::memory_order_relaxed);
  std::lock_guard<std::mutex> lock(mutex_);
  period_used_ += blocks;
  MaybeAdaptLocked();
}

void PrefetchWindow::OnWasted(uint64_t blocks, uint64_t bytes) {
  wasted_blocks_.fetch_add(blocks, std::memory_order_relaxed);
  wasted_bytes_.fetch_add(bytes, std::memory_order_relaxed);
  std::lock_guard<std::mutex> lock(mutex_);
  period_wasted_ += blocks;
  MaybeAdaptLocked();
}

void PrefetchWindow::SetBandwidthUtilization(double utilization) {
  if (std::isnan(utilization)) return;
  utilization_.store(std::clamp(utilization, 0.0, 1.0), std::memory_order_relaxed);
}

void PrefetchWindow::MaybeAdaptLocked() {
  const uint64_t resolved = period_used_ + period_wasted_;
  if (resolved < options_.evaluation_period) return;
  const double accuracy = static_cast<double>(period_used_) / static_cast<double>(resolved);
  period_used_ = period_wasted_ = 0;
  // Only this function stores window_, always under mutex_: the load and store cannot race.
  const int window = window_.load(std::memory_order_relaxed);
  int next = window;
  if (accuracy > options_.grow_accuracy &&
      utilization_.load(std::memory_order_relaxed) < options_.grow_max_utilization) {
    next = std::min(options_.max_window, window * 2);
  } else if (accuracy < options_.shrink_accuracy) {
    next = std::max(options_.min_window, window / 2);
  }
  if (next == window) return;
  (next > window ? grows_ : shrinks_).fetch_add(1, std::memory_order_relaxed);
  window_.store(next, std::memory_order_relaxed);
}

double PrefetchWindow::accuracy() const {
  const uint64_t issued = issued_blocks_.load(std::memory_order_relaxed);
  if (issued == 0) return 0;
  return static_cast<double>(used_blocks_.load(std::memory_order_relaxed)) / static_cast<double>(issued);
}

PrefetchCounters PrefetchWindow::Counters() const {
  constexpr auto kRelaxed = std::memory_order_relaxed;
  return {.issued_blocks = issued_blocks_.load(kRelaxed),
          .issued_bytes = issued_bytes_.load(kRelaxed),
          .used_blocks = used_blocks_.load(kRelaxed),
          .wasted_blocks = wasted_blocks_.load(kRelaxed),
          .wasted_bytes = wasted_bytes_.load(kRelaxed),
          .grows = grows_.load(kRelaxed),
          .shrinks = shrinks_.load(kRelaxed),
          .window = window_.load(kRelaxed)};
}

std::vector<uint64_t> PrefetchRange(uint64_t position_block, uint64_t chain_blocks, int window) {
  std::vector<uint64_t> out;
  if (window <= 0 || chain_blocks == 0 || position_block >= chain_blocks - 1) return out;
  const uint64_t last = position_block + std::min(static_cast<uint64_t>(window), chain_blocks - 1 - position_block);
  out.reserve(last - position_block);
  for (uint64_t block = position_block + 1; block <= last; ++block) out.push_back(block);
  return out;
}

}  // namespace kvtier
