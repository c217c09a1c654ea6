// PromotionGate: which of the blocks that Gets read from one networked tier (a remote pool, a
// parallel FS) are copied up into the store's fastest tier, decided from what such promotions
// have been worth. The store has one per networked tier.
//
// A promotion costs a copy into the top tier and the room it takes there (the top tier's policy
// demotes or drops something for it). It pays when the block is read again from the top tier
// before it leaves: each such read saves a read from below. When the reads that come from
// below loop over more blocks than the top tier holds (a node reading chain after chain from
// a fleet's pool through a DRAM tier of a few MiB), every block promoted is evicted before the
// loop comes back to it: promoting them all copies every block and flushes the top tier for no
// hit at all, where promoting a sample that fits lets that sample be hit.
//
// So every admitted promotion ends used (OnUsed: read from the tier it went to before it left)
// or wasted (OnWasted: it left unread), and the gate adapts the share of blocks it admits, the
// rate, once per `evaluation_period` outcomes, on that period's yield, used / (used + wasted):
//   - at least the break-even yield: the rate doubles (up to 1, every block);
//   - below it: the rate halves (down to `min_rate`).
// The break-even yield is the caller's, passed with each block: the yield at which a
// promotion pays for its copy, the top tier's load time over what a read from it saves against
// the tier below (the tiers' TierCost, cost_model.h; with the paper's table about 5% for 32 KiB
// from a remote pool into DRAM, 0.5% from a parallel FS). A promotion is worth its copy's cost
// times (yield / break_even - 1), and promoting more evicts more, so the yield falls as the
// rate rises: the controller settles near the rate at which promotions still pay, or at 1 where
// they pay at every rate. Multiplicative steps, as the prefetch window's (prefetch_window.h):
// from 1 to the floor in five periods. The floor keeps promoting a sample, whose outcomes keep
// measuring: a workload whose reads come back doubles the rate again in a few periods.
// Admission is random (a counter hashed with SplitMix64, so a run is repeatable), not every
// k-th block: a periodic choice would always pick the same positions of equal-length chains.
//
// What it does not model: the value of what a promotion evicts (a top tier holding hot blocks
// loses more than one holding earlier promotions). Promotions from local tiers (NVMe, CXL)
// and prefetches (prefetch_window.h, which has its own measure) do not go through a gate.
//
// Thread-safety: every method may be called concurrently. Admit reads the rate from an atomic
// and draws from an atomic counter (a read from a networked tier costs far more than that cache
// line); the outcomes are tallied, and the rate changed, under `mutex_`.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>

#include "kvtier/status.h"

namespace kvtier {

struct PromotionGateOptions {
  // Default: true. False admits every block (every read from a networked tier is promoted, as
  // StoreOptions::promote_on_read alone does).
  bool adaptive = true;
  double min_rate = 1.0 / 32;      // Default: 1/32 of the blocks keep being promoted, to measure
  uint64_t evaluation_period = 64;  // Default: 64 outcomes (used or wasted) per decision

  // min_rate in (0, 1], evaluation_period > 0.
  Status Validate() const;
};

struct PromotionGateCounters {
  uint64_t admitted = 0;
  uint64_t declined = 0;
  uint64_t used = 0;
  uint64_t wasted = 0;
  double rate = 1;  // the share of blocks admitted now
};

class PromotionGate {
 public:
  // InvalidArgument when the options do not validate.
  static Result<std::unique_ptr<PromotionGate>> Create(const PromotionGateOptions& options);

  // Whether to promote one block, whose promotion pays once `break_even_yield` of promotions
  // are used (infinite: it never pays).
  bool Admit(double break_even_yield);
  // An admitted block was read from the tier it was promoted into before it left it.
  void OnUsed();
  // An admitted block left that tier unread.
  void OnWasted();

  double rate() const { return rate_.load(std::memory_order_relaxed); }
  PromotionGateCounters counters() const;

 private:
  explicit PromotionGate(const PromotionGateOptions& options) : options_(options) {}
  void AdaptLocked();

  const PromotionGateOptions options_;
  std::mutex mutex_;
  uint64_t period_used_ = 0;    // GUARDED_BY(mutex_)
  uint64_t period_wasted_ = 0;  // GUARDED_BY(mutex_)
  std::atomic<double> rate_{1};
  // The break-even of the latest block admitted: what this period's promotions are judged by
  // (one tier's blocks differ only in size, which moves it little).
  std::atomic<double> break_even_{0};
  std::atomic<uint64_t> draws_{0};
  std::atomic<uint64_t> admitted_{0}, declined_{0}, used_{0}, wasted_{0};
};

}  // namespace kvtier
