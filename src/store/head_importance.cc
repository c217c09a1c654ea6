#include "kvtier/head_importance.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <string>

namespace kvtier {
namespace {

// Bounds the matrix an untrusted shape can make us allocate: far above any model
// (DeepSeek-V3: 61 x 1, Llama-3.1-405B: 126 x 8).
constexpr std::size_t kMaxCells = std::size_t{1} << 24;

Status CheckFinite(std::span<const double> values, const char* what) {
  for (std::size_t i = 0; i < values.size(); ++i) {
    if (!std::isfinite(values[i])) {
      return Status::InvalidArgument(std::string(what) + " value " + std::to_string(i) + " is not finite");
    }
  }
  return Status::Ok();
}

}  // namespace

Status HeadImportanceOptions::Validate() const {
  if (!(ema_alpha > 0.0 && ema_alpha <= 1.0)) {
    return Status::InvalidArgument("head importance ema_alpha must be in (0, 1], got " + std::to_string(ema_alpha));
  }
  if (!std::isfinite(uniform_prior)) return Status::InvalidArgument("head importance uniform_prior must be finite");
  return CheckFinite(prior, "head importance prior");
}

Result<std::unique_ptr<HeadImportance>> HeadImportance::Create(uint32_t layers, uint32_t kv_heads,
                                                               const HeadImportanceOptions& options) {
  KVTIER_RETURN_IF_ERROR(options.Validate());
  const std::size_t cells = std::size_t{layers} * kv_heads;
  if (cells == 0 || cells > kMaxCells) {
    return Status::InvalidArgument("head importance matrix of " + std::to_string(layers) + " layers x " +
                                   std::to_string(kv_heads) + " heads must have 1 to 2^24 cells");
  }
  std::vector<double> values(cells, options.uniform_prior);
  if (!options.prior.empty()) {
    if (options.prior.size() != cells) {
      return Status::InvalidArgument("head importance prior has " + std::to_string(options.prior.size()) +
                                     " values; a " + std::to_string(layers) + " x " + std::to_string(kv_heads) +
                                     " matrix needs " + std::to_string(cells));
    }
    values = options.prior;
  }
  return std::unique_ptr<HeadImportance>(new HeadImportance(layers, kv_heads, options.ema_alpha, std::move(values)));
}

HeadImportance::HeadImportance(uint32_t layers, uint32_t kv_heads, double alpha, std::vector<double> values)
    : layers_(layers), kv_heads_(kv_heads), alpha_(alpha), values_(std::move(values)), reports_(values_.size(), 0) {}

void HeadImportance::FoldLocked(std::size_t cell, double value) {
  values_[cell] += alpha_ * (value - values_[cell]);
  if (reports_[cell]++ == 0) ++cells_reported_;
  ++total_reports_;
}

Status HeadImportance::Report(uint32_t layer, uint32_t head, double value) {
  if (layer >= layers_ || head >= kv_heads_) {
    return Status::InvalidArgument("head importance report for layer " + std::to_string(layer) + ", head " +
                                   std::to_string(head) + " is outside the " + std::to_string(layers_) + " x " +
                                   std::to_string(kv_heads_) + " matrix");
  }
  if (!std::isfinite(value)) return Status::InvalidArgument("head importance report is not finite");
  std::lock_guard lock(mutex_);
  FoldLocked(std::size_t{layer} * kv_heads_ + head, value);
  return Status::Ok();
}

Status HeadImportance::ReportMatrix(std::span<const double> values) {
  if (values.size() != values_.size()) {  // values_'s size never changes: safe unlocked
    return Status::InvalidArgument("head importance matrix report has " + std::to_string(values.size()) +
                                   " values, expected " + std::to_string(layers_) + " x " +
                                   std::to_string(kv_heads_));
  }
  KVTIER_RETURN_IF_ERROR(CheckFinite(values, "head importance report"));
  std::lock_guard lock(mutex_);
  for (std::size_t cell = 0; cell < values.size(); ++cell) FoldLocked(cell, values[cell]);
  return Status::Ok();
}

double HeadImportance::Importance(uint32_t layer, uint32_t head) const {
  assert(layer < layers_ && head < kv_heads_);
  std::lock_guard lock(mutex_);
  return values_[std::size_t{layer} * kv_heads_ + head];
}

bool HeadImportance::reported() const {
  std::lock_guard lock(mutex_);
  return total_reports_ > 0;
}

bool HeadImportance::assumed() const {
  std::lock_guard lock(mutex_);
  return cells_reported_ < values_.size();
}

std::vector<std::size_t> HeadImportance::RankUnits(const HeadUnitMask& candidates, bool* assumed) const {
  std::vector<double> values;
  {
    std::lock_guard lock(mutex_);
    values = values_;
    *assumed = cells_reported_ < values_.size();
  }
  std::vector<std::size_t> units;
  units.reserve(candidates.Count());
  for (std::size_t unit = 0; unit < values.size(); ++unit) {
    if (candidates.Test(unit)) units.push_back(unit);
  }
  // Units are numbered layer-major, so a higher unit is a later layer (or, within a layer, a
  // higher head): the documented tie-break.
  std::sort(units.begin(), units.end(), [&values](std::size_t a, std::size_t b) {
    return values[a] != values[b] ? values[a] < values[b] : a > b;
  });
  return units;
}

HeadSelection HeadImportance::LeastImportantUnits(std::size_t count) const {
  HeadSelection selection{.units = HeadUnitMask(values_.size())};
  const std::vector<std::size_t> order = RankUnits(HeadUnitMask::All(values_.size()), &selection.assumed_importance);
  for (std::size_t i = 0; i < std::min(count, order.size()); ++i) selection.units.Set(order[i]);
  return selection;
}

Result<HeadSelection> HeadImportance::PlanDemotion(const KvBlockLayout& layout, uint64_t bytes_to_free,
                                                   const HeadUnitMask& candidates) const {
  KVTIER_RETURN_IF_ERROR(layout.Validate());
  if (layout.layers != layers_ || layout.kv_heads != kv_heads_) {
    return Status::InvalidArgument("block layout of " + std::to_string(layout.layers) + " layers x " +
                                   std::to_string(layout.kv_heads) + " heads does not match the importance matrix (" +
                                   std::to_string(layers_) + " x " + std::to_string(kv_heads_) + ")");
  }
  if (candidates.size() != layout.unit_count()) {
    return Status::InvalidArgument("candidate mask has " + std::to_string(candidates.size()) + " units, the layout " +
                                   std::to_string(layout.unit_count()));
  }
  HeadSelection selection{.units = HeadUnitMask(values_.size())};
  const std::vector<std::size_t> order = RankUnits(candidates, &selection.assumed_importance);
  const uint64_t unit_bytes = layout.UnitBytes();
  const uint64_t wanted = bytes_to_free / unit_bytes + (bytes_to_free % unit_bytes != 0 ? 1 : 0);
  for (std::size_t i = 0; i < order.size() && i < wanted; ++i) selection.units.Set(order[i]);
  return selection;
}

Result<HeadSelection> HeadImportance::PlanDemotion(const KvBlockLayout& layout, uint64_t bytes_to_free) const {
  return PlanDemotion(layout, bytes_to_free, HeadUnitMask::All(layout.unit_count()));
}

ImportanceSnapshot HeadImportance::Snapshot() const {
  ImportanceSnapshot snapshot{.layers = layers_, .kv_heads = kv_heads_};
  std::lock_guard lock(mutex_);
  snapshot.values = values_;
  snapshot.reports = reports_;
  snapshot.assumed_importance = cells_reported_ < values_.size();
  return snapshot;
}

}  // namespace kvtier
