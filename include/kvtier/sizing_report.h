// Rendering of sizing results for people (a table) and for programs (JSON). The JSON
// field names are an interface: scripts and tests read them. Add fields; do not rename.
//
// Thread-safety: pure functions over values.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "kvtier/capacity_plan.h"
#include "kvtier/model_spec.h"
#include "kvtier/sizing.h"

namespace kvtier {

struct SizingReport {
  ModelSpec model;
  KvSizing kv;
  std::optional<GpuMemoryOptions> gpu_options;
  std::optional<GpuMemoryPlan> gpu;
  std::vector<TierFit> tiers;
};

std::string SizingReportJson(const SizingReport& report);   // one JSON object, indented
std::string SizingReportTable(const SizingReport& report);  // several lines of text

// One row per model: the catalog summary that `kvtier size --all` prints.
std::string SizingSummaryTable(const std::vector<SizingReport>& reports);
std::string SizingSummaryJson(const std::vector<SizingReport>& reports);  // a JSON array

}  // namespace kvtier
