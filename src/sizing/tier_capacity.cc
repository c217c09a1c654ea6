#include <cctype>
#include <cmath>

#include <yaml-cpp/yaml.h>

#include "kvtier/capacity_plan.h"
#include "util/json_document.h"

namespace kvtier {

Result<uint64_t> ParseByteSize(const std::string& text) {
  std::size_t pos = 0;
  while (pos < text.size() && (std::isdigit(static_cast<unsigned char>(text[pos])) || text[pos] == '.')) ++pos;
  if (pos == 0) return Status::InvalidArgument("'" + text + "' is not a size (expected e.g. 80GiB, 512GB, 1048576)");
  double number = 0;
  try {
    number = std::stod(text.substr(0, pos));
  } catch (const std::exception&) {
    return Status::InvalidArgument("'" + text + "' is not a size (expected e.g. 80GiB, 512GB, 1048576)");
  }
  std::string unit = text.substr(pos);
  while (!unit.empty() && unit.front() == ' ') unit.erase(unit.begin());
  struct Unit { std::string_view name; double factor; };
  static constexpr Unit kUnits[] = {{"", 1}, {"B", 1}, {"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"TB", 1e12},
                                    {"KiB", 1024.0}, {"MiB", 1048576.0}, {"GiB", 1073741824.0},
                                    {"TiB", 1099511627776.0}};
  for (const Unit& u : kUnits) {
    if (unit == u.name) {
      const double bytes = number * u.factor;
      if (!std::isfinite(bytes) || bytes >= 1.8e19) return Status::InvalidArgument("'" + text + "' is too large");
      return static_cast<uint64_t>(bytes);
    }
  }
  return Status::InvalidArgument("'" + text + "' has an unknown unit '" + unit + "' (use B, KB, MB, GB, TB, KiB, MiB, GiB or TiB)");
}

Result<std::vector<TierCapacity>> ParseTierCapacities(const std::string& yaml_text, const std::string& source) {
  YAML::Node root;
  try {
    root = YAML::Load(yaml_text);
  } catch (const YAML::Exception& e) {
    return Status::InvalidArgument(source + ": not valid YAML (" + e.what() + ")");
  }
  if (!root.IsMap() || !root["tiers"] || !root["tiers"].IsSequence()) {
    return Status::InvalidArgument(source + ": expected a top-level 'tiers:' list");
  }
  std::vector<TierCapacity> tiers;
  std::size_t index = 0;
  try {
    for (const YAML::Node& node : root["tiers"]) {
      const std::string where = source + ": tiers[" + std::to_string(index++) + "]";
      if (!node.IsMap() || !node["name"] || !node["name"].IsScalar()) return Status::InvalidArgument(where + " needs a 'name'");
      TierCapacity tier;
      tier.name = node["name"].as<std::string>();
      if (node["capacity_bytes"]) {
        Result<uint64_t> bytes = ParseByteSize(node["capacity_bytes"].as<std::string>());
        if (!bytes.ok()) return bytes.status().WithContext(where + ".capacity_bytes");
        tier.capacity_bytes = *bytes;
      } else if (node["capacity"]) {
        Result<uint64_t> bytes = ParseByteSize(node["capacity"].as<std::string>());
        if (!bytes.ok()) return bytes.status().WithContext(where + ".capacity");
        tier.capacity_bytes = *bytes;
      } else {
        return Status::InvalidArgument(where + " ('" + tier.name + "') needs 'capacity' (e.g. 512GiB) or 'capacity_bytes'");
      }
      if (tier.capacity_bytes == 0) return Status::InvalidArgument(where + " ('" + tier.name + "') has zero capacity");
      tiers.push_back(std::move(tier));
    }
  } catch (const YAML::Exception& e) {
    return Status::InvalidArgument(source + ": unexpected YAML shape (" + e.what() + ")");
  }
  if (tiers.empty()) return Status::InvalidArgument(source + ": 'tiers' is empty");
  return tiers;
}

Result<std::vector<TierCapacity>> LoadTierCapacities(const std::string& path) {
  KVTIER_ASSIGN_OR_RETURN(std::string text, ReadTextFile(path));
  return ParseTierCapacities(text, path);
}

std::vector<TierFit> FitTiers(const KvSizing& sizing, const std::vector<TierCapacity>& tiers, int64_t context,
                              int64_t max_batched_tokens) {
  // A tier holds every rank's share of a token (ranks offload their own KV), so a token
  // costs kv_bytes_per_token_all_gpus there. A sequence is counted at the reported GPU's
  // bytes on every GPU: exact without pipeline parallelism, an upper bound with uneven stages.
  const uint64_t gpus = static_cast<uint64_t>(sizing.parallel.tensor_parallel * sizing.parallel.pipeline_parallel);
  const uint64_t per_sequence = context > 0 ? sizing.BytesPerSequence(context, max_batched_tokens) * gpus : 0;
  std::vector<TierFit> out;
  for (const TierCapacity& tier : tiers) {
    TierFit fit{tier.name, tier.capacity_bytes, 0, 0};
    if (sizing.kv_bytes_per_token_all_gpus > 0) fit.tokens = static_cast<int64_t>(tier.capacity_bytes / sizing.kv_bytes_per_token_all_gpus);
    if (per_sequence > 0) fit.sequences = static_cast<int64_t>(tier.capacity_bytes / per_sequence);
    out.push_back(std::move(fit));
  }
  return out;
}

}  // namespace kvtier
