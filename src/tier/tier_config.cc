#include "kvtier/tier_config.h"

#include <algorithm>
#include <filesystem>
#include <set>

#include <yaml-cpp/yaml.h>

#include "kvtier/capacity_plan.h"
#include "util/json_document.h"
#include "util/yaml_map.h"

namespace kvtier {
namespace {

namespace fs = std::filesystem;

std::string Resolve(const std::string& data_dir, const std::string& path) {
  return fs::path(path).is_absolute() ? path : (fs::path(data_dir) / path).string();
}

Result<TierOptions> ParseDramTier(const YamlMap& t) {
  KVTIER_RETURN_IF_ERROR(t.CheckKeys({"kind", "name", "capacity", "numa_node", "lock_memory", "huge_pages", "prefault",
                                      "shards", "pin_for_gpu"}));
  DramTierOptions o;
  if (t.Has("name")) {
    KVTIER_ASSIGN_OR_RETURN(o.name, t.String("name"));
  }
  KVTIER_ASSIGN_OR_RETURN(o.capacity_bytes, t.Bytes("capacity"));
  if (t.Has("numa_node")) {
    KVTIER_ASSIGN_OR_RETURN(o.numa_node, t.SmallInt("numa_node", -1, 4095));
  }
  if (t.Has("lock_memory")) {
    KVTIER_ASSIGN_OR_RETURN(o.lock_memory, t.Bool("lock_memory"));
  }
  if (t.Has("huge_pages")) {
    KVTIER_ASSIGN_OR_RETURN(o.huge_pages, t.Bool("huge_pages"));
  }
  if (t.Has("prefault")) {
    KVTIER_ASSIGN_OR_RETURN(o.prefault, t.Bool("prefault"));
  }
  if (t.Has("shards")) {
    KVTIER_ASSIGN_OR_RETURN(o.shards, t.SmallInt("shards", 1, 4096));
  }
  if (t.Has("pin_for_gpu")) {
    KVTIER_ASSIGN_OR_RETURN(o.pin_for_gpu, t.Bool("pin_for_gpu"));
  }
  return TierOptions(o);
}

Result<TierOptions> ParseCxlTier(const YamlMap& t, const std::string& data_dir) {
  KVTIER_RETURN_IF_ERROR(t.CheckKeys({"kind", "name", "capacity", "path", "numa_node", "shards", "prefault"}));
  CxlTierOptions o;
  if (t.Has("name")) {
    KVTIER_ASSIGN_OR_RETURN(o.name, t.String("name"));
  }
  KVTIER_ASSIGN_OR_RETURN(o.capacity_bytes, t.Bytes("capacity"));
  KVTIER_ASSIGN_OR_RETURN(std::string path, t.String("path"));
  o.path = Resolve(data_dir, path);
  if (t.Has("numa_node")) {
    KVTIER_ASSIGN_OR_RETURN(o.numa_node, t.SmallInt("numa_node", -1, 4095));
  }
  if (t.Has("shards")) {
    KVTIER_ASSIGN_OR_RETURN(o.shards, t.SmallInt("shards", 1, 4096));
  }
  if (t.Has("prefault")) {
    KVTIER_ASSIGN_OR_RETURN(o.prefault, t.Bool("prefault"));
  }
  return TierOptions(o);
}

Result<TierOptions> ParseNvmeTier(const YamlMap& t, const std::string& data_dir) {
  KVTIER_RETURN_IF_ERROR(
      t.CheckKeys({"kind", "name", "capacity", "files", "slot_bytes", "queue_depth", "io_uring", "recover"}));
  NvmeTierOptions o;
  if (t.Has("name")) {
    KVTIER_ASSIGN_OR_RETURN(o.name, t.String("name"));
  }
  KVTIER_ASSIGN_OR_RETURN(o.capacity_bytes, t.Bytes("capacity"));
  KVTIER_ASSIGN_OR_RETURN(std::vector<std::string> files, t.Strings("files"));
  for (const std::string& file : files) o.files.push_back(Resolve(data_dir, file));
  if (t.Has("slot_bytes")) {
    KVTIER_ASSIGN_OR_RETURN(uint64_t slot, t.Bytes("slot_bytes"));
    if (slot > (uint64_t{1} << 31)) return Status::InvalidArgument(t.where() + ": slot_bytes above 2 GiB");
    o.slot_bytes = static_cast<uint32_t>(slot);
  }
  if (t.Has("queue_depth")) {
    KVTIER_ASSIGN_OR_RETURN(o.queue_depth, t.SmallInt("queue_depth", 1, 4096));
  }
  if (t.Has("io_uring")) {
    KVTIER_ASSIGN_OR_RETURN(o.use_io_uring, t.Bool("io_uring"));
  }
  if (t.Has("recover")) {
    KVTIER_ASSIGN_OR_RETURN(o.recover, t.Bool("recover"));
  }
  return TierOptions(o);
}

Result<TierOptions> ParseParallelFsTier(const YamlMap& t, const std::string& data_dir) {
  KVTIER_RETURN_IF_ERROR(t.CheckKeys({"kind", "name", "capacity", "directory", "shard_levels", "fsync", "recover",
                                      "shared"}));
  ParallelFsTierOptions o;
  if (t.Has("name")) {
    KVTIER_ASSIGN_OR_RETURN(o.name, t.String("name"));
  }
  if (t.Has("capacity")) {
    KVTIER_ASSIGN_OR_RETURN(o.capacity_bytes, t.Bytes("capacity"));
  }
  KVTIER_ASSIGN_OR_RETURN(std::string directory, t.String("directory"));
  o.directory = Resolve(data_dir, directory);
  if (t.Has("shard_levels")) {
    KVTIER_ASSIGN_OR_RETURN(o.shard_levels, t.SmallInt("shard_levels", 0, 4));
  }
  if (t.Has("fsync")) {
    KVTIER_ASSIGN_OR_RETURN(std::string policy, t.String("fsync"));
    if (policy == "never") {
      o.fsync = FsyncPolicy::kNever;
    } else if (policy == "file") {
      o.fsync = FsyncPolicy::kFile;
    } else if (policy == "file_and_dir") {
      o.fsync = FsyncPolicy::kFileAndDir;
    } else {
      return Status::InvalidArgument(t.where() + ": fsync must be never, file or file_and_dir, got '" + policy + "'");
    }
  }
  if (t.Has("recover")) {
    KVTIER_ASSIGN_OR_RETURN(o.recover, t.Bool("recover"));
  }
  if (t.Has("shared")) {
    KVTIER_ASSIGN_OR_RETURN(o.shared, t.Bool("shared"));
  }
  return TierOptions(o);
}

Result<TierOptions> ParseGpuHbmTier(const YamlMap& t) {
  KVTIER_RETURN_IF_ERROR(t.CheckKeys({"kind", "name", "capacity", "device", "streams", "staging"}));
  GpuHbmTierOptions o;
  if (t.Has("name")) {
    KVTIER_ASSIGN_OR_RETURN(o.name, t.String("name"));
  }
  KVTIER_ASSIGN_OR_RETURN(o.capacity_bytes, t.Bytes("capacity"));
  if (t.Has("device")) {
    KVTIER_ASSIGN_OR_RETURN(o.device, t.SmallInt("device", 0, 1023));
  }
  if (t.Has("streams")) {
    KVTIER_ASSIGN_OR_RETURN(o.streams, t.SmallInt("streams", 1, 16));
  }
  if (t.Has("staging")) {
    KVTIER_ASSIGN_OR_RETURN(o.staging_bytes, t.Bytes("staging"));
  }
  return TierOptions(o);
}

Result<TierOptions> ParseRemoteTier(const YamlMap& t) {
  KVTIER_RETURN_IF_ERROR(t.CheckKeys({"kind", "name", "capacity", "topology", "endpoints", "key_prefix", "username",
                                      "password", "connections_per_node", "timeout_ms", "reconnect_interval_ms",
                                      "virtual_nodes", "ttl_seconds", "shared"}));
  RemoteTierOptions o;
  if (t.Has("name")) {
    KVTIER_ASSIGN_OR_RETURN(o.name, t.String("name"));
  }
  if (t.Has("capacity")) {
    KVTIER_ASSIGN_OR_RETURN(o.capacity_bytes, t.Bytes("capacity"));
  }
  if (t.Has("topology")) {
    KVTIER_ASSIGN_OR_RETURN(std::string topology, t.String("topology"));
    if (topology == "cluster") {
      o.topology = RemoteTopology::kCluster;
    } else if (topology == "hash_ring") {
      o.topology = RemoteTopology::kHashRing;
    } else {
      return Status::InvalidArgument(t.where() + ": topology must be cluster or hash_ring, got '" + topology + "'");
    }
  }
  KVTIER_ASSIGN_OR_RETURN(o.endpoints, t.Strings("endpoints"));
  if (t.Has("key_prefix")) {
    KVTIER_ASSIGN_OR_RETURN(o.key_prefix, t.String("key_prefix"));
  }
  if (t.Has("username")) {
    KVTIER_ASSIGN_OR_RETURN(o.username, t.String("username"));
  }
  if (t.Has("password")) {
    KVTIER_ASSIGN_OR_RETURN(o.password, t.String("password"));
  }
  if (t.Has("connections_per_node")) {
    KVTIER_ASSIGN_OR_RETURN(o.connections_per_node, t.SmallInt("connections_per_node", 1, 64));
  }
  if (t.Has("timeout_ms")) {
    KVTIER_ASSIGN_OR_RETURN(o.timeout_ms, t.SmallInt("timeout_ms", 1, 600000));
  }
  if (t.Has("reconnect_interval_ms")) {
    KVTIER_ASSIGN_OR_RETURN(o.reconnect_interval_ms, t.SmallInt("reconnect_interval_ms", 1, 3600000));
  }
  if (t.Has("virtual_nodes")) {
    KVTIER_ASSIGN_OR_RETURN(o.virtual_nodes, t.SmallInt("virtual_nodes", 1, 4096));
  }
  if (t.Has("ttl_seconds")) {
    KVTIER_ASSIGN_OR_RETURN(int64_t ttl, t.Int("ttl_seconds", 0, int64_t{365} * 24 * 3600));
    o.ttl_seconds = static_cast<uint32_t>(ttl);
  }
  if (t.Has("shared")) {
    KVTIER_ASSIGN_OR_RETURN(o.shared, t.Bool("shared"));
  }
  return TierOptions(o);
}

Result<TierOptions> ParseTier(const YamlMap& t, const std::string& kind, const std::string& data_dir) {
  if (kind == "cpu_dram") return ParseDramTier(t);
  if (kind == "cxl_memory") return ParseCxlTier(t, data_dir);
  if (kind == "nvme") return ParseNvmeTier(t, data_dir);
  if (kind == "parallel_fs") return ParseParallelFsTier(t, data_dir);
  if (kind == "gpu_hbm") return ParseGpuHbmTier(t);
  if (kind == "remote_pool") return ParseRemoteTier(t);
  return Status::InvalidArgument(t.where() + ": unknown kind '" + kind +
                                 "' (expected gpu_hbm, cpu_dram, cxl_memory, nvme, remote_pool or parallel_fs)");
}

Status Validate(const TierOptions& options) {
  return std::visit([](const auto& o) { return o.Validate(); }, options);
}

}  // namespace

Result<TierConfig> ParseTierConfig(const std::string& yaml_text, const std::string& source,
                                   std::span<const std::string_view> enclosing_keys) {
  YAML::Node root;
  try {
    root = YAML::Load(yaml_text);
  } catch (const YAML::Exception& e) {
    return Status::InvalidArgument(source + ": not valid YAML (" + e.what() + ")");
  }
  if (!root.IsMap()) return Status::InvalidArgument(source + ": expected a map with 'tiers:'");
  TierConfig config;
  try {
    for (const auto& entry : root) {
      const std::string key = entry.first.as<std::string>();
      if (key == "data_dir" || key == "tiers" || std::ranges::find(enclosing_keys, key) != enclosing_keys.end()) continue;
      return Status::InvalidArgument(source + ": unknown key '" + key + "' (known: data_dir, tiers)");
    }
    if (root["data_dir"]) config.data_dir = root["data_dir"].as<std::string>();
    if (!root["tiers"] || !root["tiers"].IsSequence() || root["tiers"].size() == 0) {
      return Status::InvalidArgument(source + ": 'tiers' must be a non-empty list");
    }
    std::size_t index = 0;
    for (const YAML::Node& node : root["tiers"]) {
      const std::string where = source + ": tiers[" + std::to_string(index++) + "]";
      if (!node.IsMap() || !node["kind"] || !node["kind"].IsScalar()) return Status::InvalidArgument(where + " needs a 'kind'");
      YamlMap tier(node, where);
      KVTIER_ASSIGN_OR_RETURN(TierOptions options, ParseTier(tier, node["kind"].as<std::string>(), config.data_dir));
      Status valid = Validate(options);
      if (!valid.ok()) return valid.WithContext(where);
      config.tiers.push_back(std::move(options));
    }
  } catch (const YAML::Exception& e) {
    return Status::InvalidArgument(source + ": unexpected YAML shape (" + e.what() + ")");
  }
  return config;
}

Result<TierConfig> LoadTierConfig(const std::string& path) {
  KVTIER_ASSIGN_OR_RETURN(std::string text, ReadTextFile(path));
  return ParseTierConfig(text, path);
}

TierConfig DefaultTierConfig(const std::string& data_dir) {
  TierConfig config;
  config.data_dir = data_dir;
  config.tiers.push_back(DramTierOptions{.capacity_bytes = uint64_t{4} << 30});
  NvmeTierOptions nvme;
  nvme.files = {(fs::path(data_dir) / "nvme" / "slab.0").string()};
  nvme.capacity_bytes = uint64_t{16} << 30;
  config.tiers.push_back(nvme);
  return config;
}

TierKind TierKindOf(const TierOptions& options) {
  return std::visit(
      [](const auto& o) {
        using T = std::decay_t<decltype(o)>;
        if constexpr (std::is_same_v<T, GpuHbmTierOptions>) return TierKind::kGpuHbm;
        if constexpr (std::is_same_v<T, DramTierOptions>) return TierKind::kCpuDram;
        if constexpr (std::is_same_v<T, CxlTierOptions>) return TierKind::kCxlMemory;
        if constexpr (std::is_same_v<T, NvmeTierOptions>) return TierKind::kNvme;
        if constexpr (std::is_same_v<T, RemoteTierOptions>) return TierKind::kRemotePool;
        return TierKind::kParallelFs;
      },
      options);
}

Result<std::vector<std::unique_ptr<Tier>>> OpenTiers(const TierConfig& config) {
  std::vector<std::unique_ptr<Tier>> tiers;
  std::error_code ec;
  fs::create_directories(config.data_dir, ec);
  if (ec) return Status::IoError(config.data_dir + ": cannot create the data directory (" + ec.message() + ")");
  auto make_parent = [](const std::string& path) -> Status {
    std::error_code error;
    const fs::path parent = fs::path(path).parent_path();
    if (!parent.empty()) fs::create_directories(parent, error);
    if (error) return Status::IoError(parent.string() + ": cannot create (" + error.message() + ")");
    return Status::Ok();
  };
  for (std::size_t i = 0; i < config.tiers.size(); ++i) {
    const TierOptions& options = config.tiers[i];
    Result<std::unique_ptr<Tier>> tier = Status::Internal("unhandled tier kind");
    if (const auto* dram = std::get_if<DramTierOptions>(&options)) {
      tier = NewDramTier(*dram);
    } else if (const auto* cxl = std::get_if<CxlTierOptions>(&options)) {
      KVTIER_RETURN_IF_ERROR(make_parent(cxl->path));
      tier = NewCxlTier(*cxl);
    } else if (const auto* nvme = std::get_if<NvmeTierOptions>(&options)) {
      for (const std::string& file : nvme->files) KVTIER_RETURN_IF_ERROR(make_parent(file));
      tier = NewNvmeTier(*nvme);
    } else if (const auto* pfs = std::get_if<ParallelFsTierOptions>(&options)) {
      tier = NewParallelFsTier(*pfs);
    } else if (const auto* gpu = std::get_if<GpuHbmTierOptions>(&options)) {
      tier = NewGpuHbmTier(*gpu);
    } else if (const auto* remote = std::get_if<RemoteTierOptions>(&options)) {
      tier = NewRemoteTier(*remote);
    }
    if (!tier.ok()) return tier.status().WithContext("tier " + std::to_string(i));
    tiers.push_back(std::move(*tier));
  }
  return tiers;
}

}  // namespace kvtier
