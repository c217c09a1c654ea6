#include "replay/ablation.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <unordered_set>
#include <variant>

#include "kvtier/kv_block_layout.h"
#include "replay/policy_run.h"
#include "util/checked_math.h"

namespace kvtier {
namespace {

// The paper's capacity per tier (PAPER.md, "Capacity and tiers": 40 GB, 200 GB, 712 GB,
// 4.7 TB, 38 TB in total), as each tier's own share in GB.
constexpr double kPaperLadderGb[] = {40, 160, 512, 3988, 33300};

// Why deduplication is never a row: the measurement would be invented, not taken.
constexpr const char* kDedupNotAblated =
    "deduplication: not ablated. TieredStore does not deduplicate (src/dedup/ dedups checkpoint payloads by "
    "content hash, outside the store), and a metadata replay has no bytes to hash; chained keys already store "
    "an equal prefix once, which is all the sharing a prefix cache gets from keys";

struct TraceSize {
  uint64_t unique_blocks = 0;
  uint64_t block_tokens = 1;  // of the largest block, as Replay sizes a full block
};

TraceSize MeasureTrace(const std::vector<ReplayRequest>& requests, bool cache_output) {
  TraceSize size;
  std::unordered_set<BlockKey, BlockKeyHash> seen;
  for (const ReplayRequest& r : requests) {
    for (const ReplayBlock& b : r.prompt) {
      seen.insert(b.key);
      size.block_tokens = std::max<uint64_t>(size.block_tokens, b.tokens);
    }
    if (cache_output) {
      for (const ReplayBlock& b : r.output) seen.insert(b.key);
    }
  }
  size.unique_blocks = seen.size();
  return size;
}

uint64_t CapacityOf(const TierOptions& t) {
  return std::visit([](const auto& o) { return o.capacity_bytes; }, t);
}

std::string TierLabel(const TierOptions& t) {
  const double gib = static_cast<double>(CapacityOf(t)) / (1u << 30);
  char buf[96];
  std::snprintf(buf, sizeof buf, "%s %.3g GiB", std::string(TierKindName(TierKindOf(t))).c_str(), gib);
  return buf;
}

// One run: the full system with what `name` says changed.
struct Variant {
  std::string name;
  PolicyKind policy = PolicyKind::kPredictive;
  TierConfig tiers;
  replay_internal::StoreTweaks tweaks;
};

// What every run of one trace shares.
struct Setup {
  TraceSize size;
  uint64_t block_bytes = 0;
  TierConfig tiers;  // the full system's
  std::optional<KvBlockLayout> head_layout;
  std::vector<std::string> not_ablated;
};

// The model's head layout when its blocks are exactly the replay's full blocks, else why not.
std::optional<KvBlockLayout> HeadLayout(const AblationOptions& options, const Setup& setup, std::string& why_not) {
  if (!options.model) {
    why_not = "head-granular eviction: not part of these runs: no model given, so no head layout";
    return std::nullopt;
  }
  Result<KvBlockLayout> layout =
      KvBlockLayout::ForModel(*options.model, static_cast<uint32_t>(setup.size.block_tokens), /*element_bytes=*/2);
  if (!layout.ok()) {
    why_not = "head-granular eviction: not part of these runs: " + layout.status().ToString();
    return std::nullopt;
  }
  if (layout->block_bytes() != setup.block_bytes) {
    // The store splits only blocks of exactly the layout's size.
    why_not = "head-granular eviction: not part of these runs: the model's bf16 head layout holds " +
              std::to_string(layout->block_bytes()) + " bytes a block, the replay's blocks " +
              std::to_string(setup.block_bytes);
    return std::nullopt;
  }
  return *layout;
}

Result<Setup> Prepare(const std::vector<ReplayRequest>& requests, const AblationOptions& options) {
  KVTIER_RETURN_IF_ERROR(options.Validate());
  Setup setup;
  setup.size = MeasureTrace(requests, options.replay.cache_output);
  if (setup.size.unique_blocks == 0) return Status::InvalidArgument("ablation: the trace has no blocks");
  setup.block_bytes = setup.size.block_tokens * options.replay.kv_bytes_per_token;
  if (setup.block_bytes > std::numeric_limits<uint32_t>::max()) {
    return Status::InvalidArgument("ablation: a block of " + std::to_string(setup.size.block_tokens) +
                                   " tokens holds 4 GiB or more");
  }
  if (options.tiers) {
    setup.tiers = *options.tiers;
  } else {
    const uint64_t t0_blocks =
        options.replay.capacity_blocks > 0
            ? options.replay.capacity_blocks
            : std::max<uint64_t>(1, static_cast<uint64_t>(std::llround(options.replay.capacity_fraction *
                                                                       static_cast<double>(setup.size.unique_blocks))));
    if (t0_blocks > std::numeric_limits<uint64_t>::max() / setup.block_bytes) {
      return Status::InvalidArgument("ablation: the capacity in bytes overflows");
    }
    KVTIER_ASSIGN_OR_RETURN(setup.tiers, PaperTierLadder(t0_blocks * setup.block_bytes));
  }
  std::string why_not;
  setup.head_layout = HeadLayout(options, setup, why_not);
  if (!why_not.empty()) setup.not_ablated.push_back(why_not);
  setup.not_ablated.push_back(kDedupNotAblated);
  return setup;
}

Variant FullSystem(const AblationOptions& options, const Setup& setup) {
  return {.name = std::string(AblationPartName(AblationPart::kNone)),
          .policy = options.policy,
          .tiers = setup.tiers,
          .tweaks = {.prefetch = true, .head_layout = setup.head_layout}};
}

Result<AblationRow> RunVariant(const std::vector<ReplayRequest>& requests, const AblationOptions& options,
                               const Setup& setup, const Variant& v) {
  ReplayOptions replay = options.replay;  // outlives the run, which keeps a reference
  replay.tiers = v.tiers;
  replay.move_bytes = false;
  AblationRow row{.name = v.name};
  uint64_t bytes = 0;
  for (const TierOptions& t : v.tiers.tiers) {
    row.tiers.push_back(TierLabel(t));
    bytes = SaturatingAdd(bytes, CapacityOf(t));
  }
  row.capacity_blocks = bytes / setup.block_bytes;
  KVTIER_ASSIGN_OR_RETURN(
      std::unique_ptr<replay_internal::PolicyRun> run,
      replay_internal::PolicyRun::Open(requests, v.policy, row.capacity_blocks, setup.block_bytes, replay, v.tweaks));
  KVTIER_ASSIGN_OR_RETURN(row.result, replay.engine ? run->ServeThroughEngine(*replay.engine) : run->ServeInstantly());
  return row;
}

// The full system less `part`, or nullopt (with the reason in `setup`) when this setup has
// no such part to remove.
std::optional<Variant> Without(AblationPart part, const AblationOptions& options, Setup& setup) {
  Variant v = FullSystem(options, setup);
  v.name = std::string(AblationPartName(part));
  switch (part) {
    case AblationPart::kNone:
      return v;
    case AblationPart::kPrediction:
      if (options.policy == PolicyKind::kLru) {
        setup.not_ablated.push_back("prediction: the full system's policy is already LRU");
        return std::nullopt;
      }
      v.policy = PolicyKind::kLru;
      return v;
    case AblationPart::kMultiTier:
      if (setup.tiers.tiers.size() < 2) {
        setup.not_ablated.push_back("multi-tier placement: the full system has one tier");
        return std::nullopt;
      }
      v.tiers.tiers.resize(1);
      return v;
    case AblationPart::kHeadGranular:
      if (!setup.head_layout) return std::nullopt;  // HeadLayout said why
      v.tweaks.head_layout.reset();
      return v;
    case AblationPart::kPrefetch:
      v.tweaks.prefetch = false;
      return v;
  }
  return std::nullopt;
}

AblationReport EmptyReport(const std::vector<ReplayRequest>& requests, const Setup& setup) {
  return {.requests = requests.size(), .unique_blocks = setup.size.unique_blocks, .block_bytes = setup.block_bytes};
}

}  // namespace

std::vector<AblationPart> AblationParts() {
  return {AblationPart::kNone, AblationPart::kPrediction, AblationPart::kMultiTier, AblationPart::kHeadGranular,
          AblationPart::kPrefetch};
}

std::string_view AblationPartName(AblationPart part) {
  switch (part) {
    case AblationPart::kNone:
      return "full";
    case AblationPart::kPrediction:
      return "-prediction";
    case AblationPart::kMultiTier:
      return "-multi-tier";
    case AblationPart::kHeadGranular:
      return "-head-granular";
    case AblationPart::kPrefetch:
      return "-prefetch";
  }
  return "unknown";
}

Status AblationOptions::Validate() const {
  KVTIER_RETURN_IF_ERROR(replay.Validate().WithContext("ablation"));
  if (replay.move_bytes) return Status::InvalidArgument("ablation: runs in metadata mode only, not with move_bytes");
  if (tiers) {
    if (tiers->tiers.empty()) return Status::InvalidArgument("ablation: the tier configuration has no tiers");
    for (const TierOptions& t : tiers->tiers) {
      if (CapacityOf(t) == 0) {
        return Status::InvalidArgument("ablation: tier " + std::string(TierKindName(TierKindOf(t))) +
                                       " has no capacity; give every tier one (metadata mode counts bytes)");
      }
    }
  }
  return Status::Ok();
}

Result<TierConfig> PaperTierLadder(uint64_t t0_bytes) {
  if (t0_bytes == 0) return Status::InvalidArgument("tier ladder: T0 must hold at least one byte");
  constexpr double kMaxScale = kPaperLadderGb[4] / kPaperLadderGb[0];
  if (static_cast<double>(t0_bytes) * kMaxScale >= 0x1p63) {
    return Status::InvalidArgument("tier ladder: T0 of " + std::to_string(t0_bytes) + " bytes overflows the ladder");
  }
  auto scaled = [&](std::size_t i) {
    return static_cast<uint64_t>(std::llround(static_cast<double>(t0_bytes) * kPaperLadderGb[i] / kPaperLadderGb[0]));
  };
  TierConfig config;
  config.tiers.push_back(GpuHbmTierOptions{.capacity_bytes = t0_bytes});
  config.tiers.push_back(DramTierOptions{.capacity_bytes = scaled(1)});
  config.tiers.push_back(CxlTierOptions{.capacity_bytes = scaled(2)});
  config.tiers.push_back(NvmeTierOptions{.capacity_bytes = scaled(3)});
  config.tiers.push_back(RemoteTierOptions{.capacity_bytes = scaled(4)});
  return config;
}

Result<AblationReport> RunAblation(const std::vector<ReplayRequest>& requests, const AblationOptions& options) {
  KVTIER_ASSIGN_OR_RETURN(Setup setup, Prepare(requests, options));
  AblationReport report = EmptyReport(requests, setup);
  for (AblationPart part : AblationParts()) {
    const std::optional<Variant> v = Without(part, options, setup);
    if (!v) continue;
    KVTIER_ASSIGN_OR_RETURN(AblationRow row, RunVariant(requests, options, setup, *v));
    report.rows.push_back(std::move(row));
  }
  report.not_ablated = setup.not_ablated;
  return report;
}

Result<AblationReport> RunTierLadder(const std::vector<ReplayRequest>& requests, const AblationOptions& options) {
  KVTIER_ASSIGN_OR_RETURN(const Setup setup, Prepare(requests, options));
  AblationReport report = EmptyReport(requests, setup);
  for (std::size_t n = 1; n <= setup.tiers.tiers.size(); ++n) {
    Variant v = FullSystem(options, setup);
    v.tiers.tiers.resize(n);
    const std::string kind(TierKindName(TierKindOf(setup.tiers.tiers[n - 1])));
    v.name = n == 1 ? kind + " only" : "+ " + kind;
    KVTIER_ASSIGN_OR_RETURN(AblationRow row, RunVariant(requests, options, setup, v));
    report.rows.push_back(std::move(row));
  }
  report.not_ablated = setup.not_ablated;
  return report;
}

}  // namespace kvtier
