#include "kvtier/reuse_predictor.h"

#include <algorithm>
#include <cmath>
#include <string>

#include <nlohmann/json.hpp>

namespace kvtier {
namespace {

bool PositiveFinite(double x) { return std::isfinite(x) && x > 0; }

BlockType PairType(std::size_t pair) { return static_cast<BlockType>(pair / 4); }
TransitionType PairTransition(std::size_t pair) { return static_cast<TransitionType>(pair % 4); }

nlohmann::json PairJson(std::size_t pair) {
  return {{"block_type", BlockTypeName(PairType(pair))}, {"transition", TransitionTypeName(PairTransition(pair))}};
}

}  // namespace

Status ReusePredictorOptions::Validate() const {
  auto check_prior = [](const BetaPrior& p, const std::string& what) {
    if (!PositiveFinite(p.alpha) || !PositiveFinite(p.beta)) {
      return Status::InvalidArgument("reuse predictor: " + what + " alpha and beta must be positive, got (" +
                                     std::to_string(p.alpha) + ", " + std::to_string(p.beta) + ")");
    }
    return Status::Ok();
  };
  KVTIER_RETURN_IF_ERROR(check_prior(prior, "prior"));
  for (std::size_t i = 0; i < pair_priors.size(); ++i) {
    if (pair_priors[i]) {
      const std::string pair = std::string(BlockTypeName(PairType(i))) + ", " +
                               std::string(TransitionTypeName(PairTransition(i)));
      KVTIER_RETURN_IF_ERROR(check_prior(*pair_priors[i], "prior of (" + pair + ")"));
    }
  }
  if (!PositiveFinite(horizon_s)) {
    return Status::InvalidArgument("reuse predictor: horizon_s must be positive seconds, got " +
                                   std::to_string(horizon_s));
  }
  if (!std::isfinite(half_life_observations) || half_life_observations < 0 || !std::isfinite(half_life_s) ||
      half_life_s < 0) {
    return Status::InvalidArgument("reuse predictor: half_life_observations and half_life_s must be >= 0 (0 = off)");
  }
  return Status::Ok();
}

ReusePredictor::ReusePredictor(const ReusePredictorOptions& options)
    : options_(options),
      count_decay_(options.half_life_observations > 0 ? std::exp2(-1.0 / options.half_life_observations) : 1.0) {
  for (std::size_t i = 0; i < pairs_.size(); ++i) {
    const BetaPrior prior = options.pair_priors[i].value_or(options.prior);
    pairs_[i].alpha = pairs_[i].alpha0 = prior.alpha;
    pairs_[i].beta = pairs_[i].beta0 = prior.beta;
    mean_[i].store(prior.alpha / (prior.alpha + prior.beta), std::memory_order_relaxed);
  }
}

Result<std::shared_ptr<ReusePredictor>> ReusePredictor::Create(const ReusePredictorOptions& options) {
  KVTIER_RETURN_IF_ERROR(options.Validate());
  return std::shared_ptr<ReusePredictor>(new ReusePredictor(options));
}

void ReusePredictor::ObserveLocked(std::size_t index, bool reused, double now_s) {
  Pair& pair = pairs_[index];
  double factor = count_decay_;
  if (options_.half_life_s > 0 && pair.observations > 0) {
    factor *= std::exp2(-std::max(0.0, now_s - pair.last_observation_s) / options_.half_life_s);
  }
  pair.alpha = pair.alpha0 + (pair.alpha - pair.alpha0) * factor;
  pair.beta = pair.beta0 + (pair.beta - pair.beta0) * factor;
  (reused ? pair.alpha : pair.beta) += 1;
  ++pair.observations;
  pair.last_observation_s = now_s;
  mean_[index].store(pair.alpha / (pair.alpha + pair.beta), std::memory_order_relaxed);
}

void ReusePredictor::ObserveReuse(BlockType type, TransitionType transition, double now_s) {
  std::lock_guard lock(mutex_);
  ObserveLocked(static_cast<std::size_t>(ReusePairIndex(type, transition)), true, now_s);
}

void ReusePredictor::ObserveNoReuse(BlockType type, TransitionType transition, double now_s) {
  std::lock_guard lock(mutex_);
  ObserveLocked(static_cast<std::size_t>(ReusePairIndex(type, transition)), false, now_s);
}

void ReusePredictor::RecordOutcome(BlockType type, TransitionType transition, double predicted, bool reused,
                                   double now_s) {
  // A prediction outside [0, 1] is clamped; NaN (never from PReuse) counts as 0.
  const double p = std::isnan(predicted) ? 0.0 : std::clamp(predicted, 0.0, 1.0);
  const double outcome = reused ? 1.0 : 0.0;
  const auto bin = static_cast<std::size_t>(std::min(CalibrationReport::kBins - 1, static_cast<int>(p * 10)));
  const auto index = static_cast<std::size_t>(ReusePairIndex(type, transition));
  std::lock_guard lock(mutex_);
  ObserveLocked(index, reused, now_s);
  pairs_[index].calibration_sq_error += (p - outcome) * (p - outcome);
  ++pairs_[index].calibration_count;
  ++bins_[bin].count;
  bins_[bin].sum_predicted += p;
  if (reused) ++bins_[bin].reused;
}

std::array<ReusePosterior, kReusePairCount> ReusePredictor::Snapshot() const {
  std::array<ReusePosterior, kReusePairCount> out;
  std::lock_guard lock(mutex_);
  for (std::size_t i = 0; i < out.size(); ++i) {
    const Pair& pair = pairs_[i];
    out[i] = {PairType(i), PairTransition(i), pair.alpha, pair.beta, pair.alpha / (pair.alpha + pair.beta),
              pair.observations};
  }
  return out;
}

CalibrationReport ReusePredictor::Calibration() const {
  CalibrationReport report;
  double sq_error = 0;
  std::lock_guard lock(mutex_);
  for (std::size_t i = 0; i < pairs_.size(); ++i) {
    const Pair& pair = pairs_[i];
    report.count[i] = pair.calibration_count;
    const auto n = static_cast<double>(pair.calibration_count);
    report.brier[i] = pair.calibration_count == 0 ? 0 : pair.calibration_sq_error / n;
    report.total += pair.calibration_count;
    sq_error += pair.calibration_sq_error;
  }
  report.brier_overall = report.total == 0 ? 0 : sq_error / static_cast<double>(report.total);
  for (std::size_t b = 0; b < bins_.size(); ++b) {
    const Bin& bin = bins_[b];
    if (bin.count == 0) continue;
    const auto n = static_cast<double>(bin.count);
    report.bins[b] = {bin.count, bin.sum_predicted / n, static_cast<double>(bin.reused) / n};
  }
  return report;
}

namespace {

nlohmann::json CalibrationJson(const CalibrationReport& report) {
  nlohmann::json pairs = nlohmann::json::array();
  for (std::size_t i = 0; i < report.count.size(); ++i) {
    nlohmann::json row = PairJson(i);
    row["count"] = report.count[i];
    row["brier"] = report.brier[i];
    pairs.push_back(std::move(row));
  }
  nlohmann::json bins = nlohmann::json::array();
  for (std::size_t b = 0; b < report.bins.size(); ++b) {
    const ReliabilityBin& bin = report.bins[b];
    bins.push_back({{"lo", static_cast<double>(b) / CalibrationReport::kBins},
                    {"hi", static_cast<double>(b + 1) / CalibrationReport::kBins},
                    {"count", bin.count},
                    {"mean_predicted", bin.mean_predicted},
                    {"observed_frequency", bin.observed_frequency}});
  }
  return {{"total", report.total},
          {"brier", report.brier_overall},
          {"pairs", std::move(pairs)},
          {"bins", std::move(bins)}};
}

}  // namespace

std::string CalibrationReport::ToJson() const { return CalibrationJson(*this).dump(); }

std::string ReusePredictor::ToJson() const {
  nlohmann::json posteriors = nlohmann::json::array();
  for (const ReusePosterior& row : Snapshot()) {
    nlohmann::json out = PairJson(static_cast<std::size_t>(ReusePairIndex(row.type, row.transition)));
    out["alpha"] = row.alpha;
    out["beta"] = row.beta;
    out["mean"] = row.mean;
    out["observations"] = row.observations;
    posteriors.push_back(std::move(out));
  }
  return nlohmann::json{{"horizon_s", options_.horizon_s},
                        {"posteriors", std::move(posteriors)},
                        {"calibration", CalibrationJson(Calibration())}}
      .dump();
}

}  // namespace kvtier
