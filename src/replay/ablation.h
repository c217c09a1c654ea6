// The paper's ablation and tier ladder (PAPER.md, "Ablation" and "Capacity and tiers"),
// measured on a trace with the replay's metadata mode (replay.h): every run is the real
// TieredStore with CapacityTiers of the tiers' kinds, loads priced per kind (DefaultTierCost),
// and TTFT and throughput from the cost model or, with `replay.engine`, the engine model.
//
//   - RunAblation: the full system, then the same with one part removed at a time
//     (AblationParts). Parts the metadata mode cannot remove honestly are listed, with the
//     reason, in the report's `not_ablated` rather than faked (docs/replay.md, "Ablation").
//   - RunTierLadder: the full system on the first tier only, then on the first two, ... up to
//     all of them: the paper's GPU only, + DRAM, + CXL, + NVMe, + RDMA pool.
//
// The full system's tiers are `tiers` or, by default, PaperTierLadder: T0 holds the replay's
// capacity (capacity_blocks or capacity_fraction of the unique blocks), each lower tier the
// paper's capacity relative to its 40 GB of HBM.
//
// Thread-safety: pure functions of their inputs; calls may run concurrently.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kvtier/model_spec.h"
#include "kvtier/replay.h"
#include "kvtier/tier_config.h"

namespace kvtier {

// What an ablation run removes from the full system.
enum class AblationPart : uint8_t {
  kNone = 0,          // the full system
  kPrediction = 1,    // the full policy becomes LRU
  kMultiTier = 2,     // only the first tier (T0) is left
  kHeadGranular = 3,  // blocks leave a tier whole, never head by head
  kPrefetch = 4,      // no RoPE-aware prefetch
};

// Every part RunAblation removes, in the order of its rows (kNone first).
std::vector<AblationPart> AblationParts();
std::string_view AblationPartName(AblationPart part);  // "full", "-prediction", ...

struct AblationOptions {
  // The trace's settings: capacity (T0's), block bytes, cost model, engine model, outputs.
  // Its `policies`, `tiers` and `move_bytes` are not used (metadata mode always).
  ReplayOptions replay;
  // The full system's tiers, fastest first. Default: none, PaperTierLadder scaled to T0.
  std::optional<TierConfig> tiers;
  // The full system's policy. Default: predictive (keeps the blocks of the engine's waiting
  // requests; with no engine model it has nothing to predict from and behaves as LRU).
  PolicyKind policy = PolicyKind::kPredictive;
  // The served model: the head layout of its blocks, for head-granular eviction. Default:
  // none (head-granular eviction is then not part of the system, and says so).
  std::optional<ModelSpec> model;

  Status Validate() const;
};

// One run: its name ("full", "-prediction", ... or, on the ladder, "gpu only", "+ cpu_dram"),
// the tiers it had and the replay's result (the policy field names the policy it ran).
struct AblationRow {
  std::string name;
  std::vector<std::string> tiers;  // "kind capacity", fastest first
  uint64_t capacity_blocks = 0;    // all its tiers together, in full blocks
  ReplayPolicyResult result;
};

struct AblationReport {
  uint64_t requests = 0;
  uint64_t unique_blocks = 0;
  uint64_t block_bytes = 0;
  std::vector<AblationRow> rows;
  // Parts of the paper's system that these runs could not remove (or add), each with why.
  std::vector<std::string> not_ablated;
};

// The paper's ladder: tiers T0..T4 (HBM, DRAM, CXL, NVMe, RDMA pool) whose capacities are the
// paper's increments (40 GB, +160 GB, +512 GB, +3,988 GB, +33,300 GB) scaled so that T0 holds
// `t0_bytes`. InvalidArgument when t0_bytes is 0 or the scaled capacities overflow.
Result<TierConfig> PaperTierLadder(uint64_t t0_bytes);

Result<AblationReport> RunAblation(const std::vector<ReplayRequest>& requests, const AblationOptions& options);
Result<AblationReport> RunTierLadder(const std::vector<ReplayRequest>& requests, const AblationOptions& options);

}  // namespace kvtier
