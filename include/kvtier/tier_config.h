// The tier configuration: which tiers a node has, their capacities, paths and endpoints, in
// one YAML document (examples/tiers-full.yaml is the annotated reference):
//
//   data_dir: /var/lib/kvtier        # relative paths below are under it
//   tiers:
//     - kind: cpu_dram               # gpu_hbm | cpu_dram | cxl_memory | nvme | remote_pool | parallel_fs
//       capacity: 64GiB
//       numa_node: 0
//     - kind: nvme
//       files: [nvme/slab.0, nvme/slab.1]
//       capacity: 2TB
//
// Tiers are listed fastest first; that order is the store's demotion order. Unknown keys are
// errors (a typo must not silently fall back to a default).
//
// Thread-safety: plain values and pure functions.
#pragma once

#include <memory>
#include <span>
#include <string_view>
#include <string>
#include <variant>
#include <vector>

#include "kvtier/status.h"
#include "kvtier/tier.h"
#include "kvtier/tiers.h"

namespace kvtier {

using TierOptions = std::variant<DramTierOptions, CxlTierOptions, ParallelFsTierOptions, NvmeTierOptions,
                                 GpuHbmTierOptions, RemoteTierOptions>;

// The kind of tier an options value makes.
TierKind TierKindOf(const TierOptions& options);

struct TierConfig {
  std::string data_dir = "kvtier-data";  // Default: ./kvtier-data
  std::vector<TierOptions> tiers;
};

// Parses a configuration; `source` names it in errors. Relative paths are resolved against
// data_dir. `enclosing_keys` are top-level keys of a document that embeds this one (kvtier
// serve's configuration) and that its own parser reads: they are skipped, not errors.
Result<TierConfig> ParseTierConfig(const std::string& yaml_text, const std::string& source,
                                   std::span<const std::string_view> enclosing_keys = {});
Result<TierConfig> LoadTierConfig(const std::string& path);

// The embedded default: 4 GiB of DRAM, then a 16 GiB NVMe slab file under `data_dir`.
TierConfig DefaultTierConfig(const std::string& data_dir = "kvtier-data");

// Opens every tier of `config`, fastest first. Creates data_dir and the directories of
// relative paths. Fails on the first tier that cannot open, naming it.
Result<std::vector<std::unique_ptr<Tier>>> OpenTiers(const TierConfig& config);

}  // namespace kvtier
