// ReusePredictor: the paper's Bayesian reuse model. For each of the 16 pairs (block type,
// transition type) a Beta(alpha, beta) posterior over "the block is accessed again within
// horizon_s of its last access"; P_reuse(b, t) = alpha / (alpha + beta).
//
// The pair of a block is its block type with the transition type of the access that last
// touched it (or brought it into the tier). Each access opens an interval of horizon_s; its
// outcome is a reuse when the next access comes inside it (alpha + 1) and no reuse when the
// interval ends without one (beta + 1). Who observes: the Bayes eviction policy
// (eviction_policy.h) or a trace replayer; see docs/policies.md.
//
// Forgetting (optional) lets old evidence fade so the model follows a changing workload:
// before each observation of a pair, its evidence beyond the prior is scaled by
// 2^(-1 / half_life_observations) and by 2^(-dt / half_life_s), dt the time since the pair's
// previous observation, i.e. alpha <- alpha0 + (alpha - alpha0) * factor and likewise beta.
// Evidence from half_life observations (or seconds) ago weighs half as much as new evidence;
// the effective sample size stays bounded near 1 / (1 - factor).
//
// Calibration: RecordOutcome pairs each prediction (P at the moment the interval opened)
// with its outcome, giving a Brier score per pair and 10 reliability bins.
//
// Thread-safety: all methods may be called concurrently; the tiers of a store share one
// predictor. Observations and calibration take one mutex (`mutex_`); PReuse reads an atomic
// copy of each mean without locking, so eviction never waits on learning.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "kvtier/block.h"
#include "kvtier/status.h"

namespace kvtier {

inline constexpr int kReusePairCount = 16;
// type * 4 + transition: the row of a pair in Snapshot() and in the calibration arrays.
constexpr int ReusePairIndex(BlockType type, TransitionType transition) {
  return static_cast<int>(type) * 4 + static_cast<int>(transition);
}

struct BetaPrior {
  double alpha = 1;  // Default: 1 (with beta 1, uniform: P_reuse starts at 0.5)
  double beta = 1;   // Default: 1
};

struct ReusePredictorOptions {
  BetaPrior prior;  // Default: Beta(1, 1) for every pair
  // Per-pair priors by ReusePairIndex, overriding `prior` (e.g. a system prompt starting
  // near 1). Default: none.
  std::array<std::optional<BetaPrior>, kReusePairCount> pair_priors{};
  // An access counts as a reuse of the previous one when it comes within this many seconds.
  double horizon_s = 300;  // Default: 300 s (5 minutes: a turn of a chat or agent loop)
  double half_life_observations = 0;  // Default: 0 (no forgetting by count)
  double half_life_s = 0;             // Default: 0 (no forgetting by time)

  Status Validate() const;
};

// One pair's fitted posterior.
struct ReusePosterior {
  BlockType type = BlockType::kUserContext;
  TransitionType transition = TransitionType::kSameToolRepeat;
  double alpha = 0;
  double beta = 0;
  double mean = 0;            // alpha / (alpha + beta)
  uint64_t observations = 0;  // outcomes seen, before forgetting
};

struct ReliabilityBin {
  uint64_t count = 0;
  double mean_predicted = 0;     // average P of the predictions in the bin
  double observed_frequency = 0;  // share of them that were reused
};

struct CalibrationReport {
  static constexpr int kBins = 10;  // [0, 0.1), [0.1, 0.2), ... [0.9, 1]

  std::array<uint64_t, kReusePairCount> count{};  // predictions with an outcome, per pair
  std::array<double, kReusePairCount> brier{};     // mean (P - outcome)^2 per pair; 0 when count is 0
  uint64_t total = 0;
  double brier_overall = 0;
  std::array<ReliabilityBin, kBins> bins{};

  // {"total":..,"brier":..,"pairs":[{"block_type","transition","count","brier"}..],
  //  "bins":[{"lo","hi","count","mean_predicted","observed_frequency"}..]}
  std::string ToJson() const;
};

class ReusePredictor {
 public:
  static Result<std::shared_ptr<ReusePredictor>> Create(const ReusePredictorOptions& options);

  const ReusePredictorOptions& options() const { return options_; }
  double horizon_s() const { return options_.horizon_s; }

  // The posterior mean for the pair. Lock-free.
  double PReuse(BlockType type, TransitionType transition) const {
    return mean_[static_cast<std::size_t>(ReusePairIndex(type, transition))].load(std::memory_order_relaxed);
  }

  // One outcome of the pair (`now_s` drives time-based forgetting).
  void ObserveReuse(BlockType type, TransitionType transition, double now_s);
  void ObserveNoReuse(BlockType type, TransitionType transition, double now_s);
  // An outcome and the prediction made when its interval opened: updates the posterior
  // and the calibration record.
  void RecordOutcome(BlockType type, TransitionType transition, double predicted, bool reused, double now_s);

  std::array<ReusePosterior, kReusePairCount> Snapshot() const;
  CalibrationReport Calibration() const;
  // {"horizon_s":..,"posteriors":[{"block_type","transition","alpha","beta","mean",
  //  "observations"}..],"calibration":{CalibrationReport::ToJson}}
  std::string ToJson() const;

 private:
  struct Pair {
    double alpha = 1;
    double beta = 1;
    double alpha0 = 1;
    double beta0 = 1;
    uint64_t observations = 0;
    double last_observation_s = 0;
    double calibration_sq_error = 0;
    uint64_t calibration_count = 0;
  };
  struct Bin {
    uint64_t count = 0;
    double sum_predicted = 0;
    uint64_t reused = 0;
  };

  explicit ReusePredictor(const ReusePredictorOptions& options);
  void ObserveLocked(std::size_t pair, bool reused, double now_s);

  const ReusePredictorOptions options_;
  const double count_decay_;  // per-observation factor; 1 without count forgetting
  std::array<std::atomic<double>, kReusePairCount> mean_;  // written under mutex_, read anywhere

  mutable std::mutex mutex_;
  std::array<Pair, kReusePairCount> pairs_;                // GUARDED_BY(mutex_)
  std::array<Bin, CalibrationReport::kBins> bins_{};       // GUARDED_BY(mutex_)
};

}  // namespace kvtier
