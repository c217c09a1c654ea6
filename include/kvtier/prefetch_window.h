// PrefetchWindow: how far ahead the store prefetches along a chain (the paper's RoPE-aware
// prefetch). RoPE gives attention positional locality: a request that reaches block i of a
// chain held in a lower tier goes on to read i + 1, i + 2, ... So when block i is read from
// a lower tier, blocks i + 1 .. i + w (PrefetchRange) are copied up ahead of use.
//
// The window w adapts to what the prefetches achieve. Every prefetched block ends either
// used (OnUsed: read from the upper tier before it left) or wasted (OnWasted: evicted or
// expired unread). After every `evaluation_period` resolved blocks (used + wasted) the
// window is judged on that period's accuracy, used / (used + wasted):
//   - above grow_accuracy and the tier's bandwidth utilization below grow_max_utilization:
//     w doubles (up to max_window);
//   - below shrink_accuracy: w halves (down to min_window);
//   - otherwise it holds.
// Multiplicative both ways, as Linux readahead ramps its window: from the initial 8 the
// window reaches either bound of 1..64 within three periods, where additive steps would take
// dozens; the band between the thresholds keeps it from oscillating. Judging resolved
// blocks rather than used / issued keeps prefetches still in flight from counting as misses.
// Bandwidth is a brake on growth only: a tier near saturation serves demand reads first,
// and more prefetch would queue behind them.
//
// Benefits: a sequential chain is read at the tier's bandwidth instead of one latency per
// block; a random one stops paying for prefetch within a few periods.
// Costs: wasted bytes of tier bandwidth and upper-tier space, counted in wasted_bytes.
//
// Thread-safety: every method may be called concurrently. window() and the counters are
// atomics read without locking, so the read path never waits; the period's tallies and the
// window update take `mutex_` (one short critical section per OnUsed / OnWasted).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "kvtier/status.h"

namespace kvtier {

struct PrefetchWindowOptions {
  int min_window = 1;                 // Default: 1 block
  int max_window = 64;                // Default: 64 blocks (1,024 tokens at 16 per block)
  int initial_window = 8;             // Default: 8 blocks
  double grow_accuracy = 0.8;         // Default: 0.8; grow when a period's accuracy is above
  double shrink_accuracy = 0.5;       // Default: 0.5; shrink when it is below
  double grow_max_utilization = 0.8;  // Default: 0.8; grow only while the tier is less busy
  uint64_t evaluation_period = 64;    // Default: 64 resolved (used or wasted) blocks

  // min <= initial <= max, 0 <= shrink_accuracy <= grow_accuracy <= 1, utilization in
  // [0, 1], period > 0.
  Status Validate() const;
};

struct PrefetchCounters {
  uint64_t issued_blocks = 0;
  uint64_t issued_bytes = 0;
  uint64_t used_blocks = 0;
  uint64_t wasted_blocks = 0;
  uint64_t wasted_bytes = 0;
  uint64_t grows = 0;    // window changes, by direction
  uint64_t shrinks = 0;
  int window = 0;
};

class PrefetchWindow {
 public:
  // InvalidArgument when the options do not validate.
  static Result<std::unique_ptr<PrefetchWindow>> Create(const PrefetchWindowOptions& options);

  // Blocks to prefetch ahead now.
  int window() const { return window_.load(std::memory_order_relaxed); }

  // `blocks` prefetches of `bytes` in all were issued.
  void OnPrefetched(uint64_t blocks, uint64_t bytes);
  // `blocks` prefetched blocks were read before they left the upper tier.
  void OnUsed(uint64_t blocks);
  // `blocks` prefetched blocks (`bytes` in all) were evicted or expired unread.
  void OnWasted(uint64_t blocks, uint64_t bytes);
  // The tier's measured bandwidth utilization (queue occupancy), clamped to [0, 1]. A NaN
  // is ignored.
  void SetBandwidthUtilization(double utilization);

  // Lifetime used / issued (0 before any prefetch); prefetches in flight count as not used.
  double accuracy() const;
  PrefetchCounters Counters() const;

 private:
  explicit PrefetchWindow(const PrefetchWindowOptions& options);
  // Judges the current period once it holds evaluation_period resolved blocks.
  void MaybeAdaptLocked();

  const PrefetchWindowOptions options_;
  std::atomic<int> window_;
  std::atomic<double> utilization_{0};
  std::atomic<uint64_t> issued_blocks_{0}, issued_bytes_{0}, used_blocks_{0}, wasted_blocks_{0}, wasted_bytes_{0};
  std::atomic<uint64_t> grows_{0}, shrinks_{0};

  std::mutex mutex_;
  uint64_t period_used_ = 0;    // GUARDED_BY(mutex_)
  uint64_t period_wasted_ = 0;  // GUARDED_BY(mutex_)
};

// The blocks to prefetch when a request reaches block `position_block` of a chain of
// `chain_blocks` blocks: position + 1 .. min(position + window, chain_blocks - 1). Empty when
// the position is the chain's last block (or past it) or the window is not positive.
std::vector<uint64_t> PrefetchRange(uint64_t position_block, uint64_t chain_blocks, int window);

}  // namespace kvtier
