#include "kvtier/promotion_gate.h"

#include <algorithm>
#include <string>

namespace kvtier {
namespace {

// SplitMix64's output function (Steele, Lea and Flood 2014): consecutive counters map to
// well-spread 64-bit values, so a shared counter is a cheap, repeatable random stream.
uint64_t SplitMix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

}  // namespace

Status PromotionGateOptions::Validate() const {
  if (!(min_rate > 0 && min_rate <= 1)) {
    return Status::InvalidArgument("promotion gate: min_rate must be in (0, 1], got " + std::to_string(min_rate));
  }
  if (evaluation_period == 0) return Status::InvalidArgument("promotion gate: evaluation_period must be positive");
  return Status::Ok();
}

Result<std::unique_ptr<PromotionGate>> PromotionGate::Create(const PromotionGateOptions& options) {
  KVTIER_RETURN_IF_ERROR(options.Validate());
  return std::unique_ptr<PromotionGate>(new PromotionGate(options));
}

bool PromotionGate::Admit(double break_even_yield) {
  const double rate = options_.adaptive ? rate_.load(std::memory_order_relaxed) : 1.0;
  // The top 53 bits of the draw as a uniform double in [0, 1).
  const double draw =
      static_cast<double>(SplitMix64(draws_.fetch_add(1, std::memory_order_relaxed)) >> 11) * 0x1.0p-53;
  const bool admit = draw < rate;
  (admit ? admitted_ : declined_).fetch_add(1, std::memory_order_relaxed);
  if (admit) break_even_.store(break_even_yield, std::memory_order_relaxed);
  return admit;
}

void PromotionGate::OnUsed() {
  used_.fetch_add(1, std::memory_order_relaxed);
  std::lock_guard lock(mutex_);
  ++period_used_;
  AdaptLocked();
}

void PromotionGate::OnWasted() {
  wasted_.fetch_add(1, std::memory_order_relaxed);
  std::lock_guard lock(mutex_);
  ++period_wasted_;
  AdaptLocked();
}

void PromotionGate::AdaptLocked() {
  const uint64_t resolved = period_used_ + period_wasted_;
  if (resolved < options_.evaluation_period) return;
  const double yield = static_cast<double>(period_used_) / static_cast<double>(resolved);
  period_used_ = period_wasted_ = 0;
  // Only this function stores rate_, always under mutex_: the load and store cannot race.
  const double rate = rate_.load(std::memory_order_relaxed);
  const bool pays = yield >= break_even_.load(std::memory_order_relaxed);  // false for an infinite one
  rate_.store(pays ? std::min(1.0, rate * 2) : std::max(options_.min_rate, rate / 2), std::memory_order_relaxed);
}

PromotionGateCounters PromotionGate::counters() const {
  return {.admitted = admitted_.load(std::memory_order_relaxed),
          .declined = declined_.load(std::memory_order_relaxed),
          .used = used_.load(std::memory_order_relaxed),
          .wasted = wasted_.load(std::memory_order_relaxed),
          .rate = rate()};
}

}  // namespace kvtier
