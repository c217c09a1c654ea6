// The head-importance matrix behind head-granular eviction (docs/head_granular.md): one
// value per (KV layer, kv head), i.e. per head unit of a KvBlockLayout; MLA's is [layer][1].
// Under memory pressure the least important head units of a block are demoted first.
//
// What "importance" is comes from the inference engine, not from kvtier: how much attention
// a head's cached K/V receives, or how much the output changes without it, can only be
// measured by running the model. kvtier keeps an exponential moving average of what the
// engine reports (Report / ReportMatrix) and, until it has reported, a configured prior
// (uniform by default). Any decision made while some cell has had no report rests on that
// prior, so it is labelled `assumed_importance`; results derived from it (hit rates, bytes
// saved) must say "assumed importance", not present it as measured.
//
// Ranking: ascending importance; ties go to the later layer first, then the higher head.
// The later-layer tie-break is itself an assumption (PyramidKV and similar work report that
// later layers attend to fewer tokens and lose less when compressed); with a uniform prior
// and no reports it decides the whole order, which is why such plans are labelled assumed.
//
// Benefits: demoting part of a block frees memory without losing the block, and the
// parts that stay are the ones the engine says matter. Costs: a read of a split block
// gathers from two or more tiers, and a wrong importance moves the wrong heads.
//
// Thread-safety: every method may be called concurrently (one internal mutex); engine
// threads report while the store ranks. A ranking sees either all or none of a ReportMatrix.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <vector>

#include "kvtier/kv_block_layout.h"
#include "kvtier/status.h"

namespace kvtier {

struct HeadImportanceOptions {
  // Weight of a new report: v <- (1 - alpha) v + alpha x, starting from the prior. In (0, 1].
  double ema_alpha = 0.1;  // Default: 0.1 (a report's weight halves in about 7 reports)
  // Every cell's importance before any report, when `prior` is empty.
  double uniform_prior = 1.0;  // Default: 1.0
  // An explicit prior, layers x kv_heads values, row-major [layer][head], e.g. measured
  // offline for this model. Default: empty (the uniform prior).
  std::vector<double> prior;

  // InvalidArgument when alpha is outside (0, 1] or a prior value is not finite. The size
  // of `prior` is checked by HeadImportance::Create, which knows the shape.
  Status Validate() const;
};

// A set of head units chosen by importance, labelled with whether the choice rests on an
// assumed (prior) importance for any cell.
struct HeadSelection {
  HeadUnitMask units;
  bool assumed_importance = true;
};

struct ImportanceSnapshot {
  uint32_t layers = 0;
  uint32_t kv_heads = 0;
  std::vector<double> values;    // [layer][head]
  std::vector<uint64_t> reports; // per cell: reports folded into it
  bool assumed_importance = true;

  double at(uint32_t layer, uint32_t head) const { return values[std::size_t{layer} * kv_heads + head]; }
};

class HeadImportance {
 public:
  // A matrix of `layers` KV layers (KvLayerIndex numbering) x `kv_heads` heads of one rank.
  static Result<std::unique_ptr<HeadImportance>> Create(uint32_t layers, uint32_t kv_heads,
                                                        const HeadImportanceOptions& options = {});
  HeadImportance(const HeadImportance&) = delete;
  HeadImportance& operator=(const HeadImportance&) = delete;

  uint32_t layers() const { return layers_; }
  uint32_t kv_heads() const { return kv_heads_; }

  // Folds one measurement into (layer, head). InvalidArgument when out of range or not finite;
  // the matrix is unchanged then.
  Status Report(uint32_t layer, uint32_t head, double value);
  // Folds a whole [layer][head] matrix (layers x kv_heads values) in, all cells at once.
  // InvalidArgument on a wrong size or a non-finite value; the matrix is unchanged then.
  Status ReportMatrix(std::span<const double> values);

  // `layer` and `head` must be in range (checked by assert in debug builds).
  double Importance(uint32_t layer, uint32_t head) const;
  // Whether any report has arrived.
  bool reported() const;
  // Whether some cell has had no report, so its value is the prior: true until every cell
  // has been reported at least once.
  bool assumed() const;

  // The `count` least important units (all when count exceeds them).
  HeadSelection LeastImportantUnits(std::size_t count) const;
  // The least important of `candidates` (e.g. the units of a block still in the tier under
  // pressure) whose bytes in `layout` reach `bytes_to_free`: ceil(bytes / UnitBytes) units,
  // or all candidates when they hold less. InvalidArgument when the layout's shape is not
  // this matrix's or the candidate mask is not the layout's size.
  Result<HeadSelection> PlanDemotion(const KvBlockLayout& layout, uint64_t bytes_to_free,
                                     const HeadUnitMask& candidates) const;
  // The same over every unit.
  Result<HeadSelection> PlanDemotion(const KvBlockLayout& layout, uint64_t bytes_to_free) const;

  ImportanceSnapshot Snapshot() const;

 private:
  HeadImportance(uint32_t layers, uint32_t kv_heads, double alpha, std::vector<double> values);

  // Units of `candidates` in demotion order (least important first) and the assumed label,
  // from one consistent view of the matrix.
  std::vector<std::size_t> RankUnits(const HeadUnitMask& candidates, bool* assumed) const;
  void FoldLocked(std::size_t cell, double value);

  const uint32_t layers_;
  const uint32_t kv_heads_;
  const double alpha_;
  mutable std::mutex mutex_;
  std::vector<double> values_;     // GUARDED_BY(mutex_)
  std::vector<uint64_t> reports_;  // GUARDED_BY(mutex_): per cell
  std::size_t cells_reported_ = 0; // GUARDED_BY(mutex_): cells with reports_ > 0
  uint64_t total_reports_ = 0;     // GUARDED_BY(mutex_)
};

}  // namespace kvtier
