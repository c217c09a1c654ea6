// `kvtier serve`'s configuration file (examples/serve.yaml is the annotated reference).
#include <array>
#include <bit>
#include <filesystem>
#include <string_view>

#include "kvtier/cost_model.h"
#include "kvtier/daemon.h"
#include "kvtier/head_importance.h"
#include "kvtier/kv_block_layout.h"
#include "kvtier/model_catalog.h"
#include "kvtier/prefix_index.h"
#include "policy/sharded_policy.h"
#include "util/json_document.h"
#include "util/yaml_map.h"

namespace kvtier {
namespace {

namespace fs = std::filesystem;

constexpr std::array<std::string_view, 8> kServeKeys = {"store",   "model",   "listen",      "auth_token",
                                                        "auth_token_expires", "tenants", "tenant_keys", "limits"};

std::string UnderDataDir(const std::string& data_dir, const std::string& path) {
  return path.empty() || fs::path(path).is_absolute() ? path : (fs::path(data_dir) / path).string();
}

Status ParseStore(const YAML::Node& node, const std::string& where, ServeConfig& c) {
  const YamlMap m(node, where);
  KVTIER_RETURN_IF_ERROR(m.CheckKeys({"policy", "high_watermark", "low_watermark", "mover_threads", "prefetch",
                                      "promotion", "persistence", "persist_tier", "journal", "persist_sync",
                                      "publish", "expected_blocks", "policy_shards", "index_shards"}));
  if (m.Has("policy")) {
    KVTIER_ASSIGN_OR_RETURN(std::string name, m.String("policy"));
    Result<PolicyKind> policy = ParsePolicyKind(name);
    if (!policy.ok()) return policy.status().WithContext(where + ".policy");
    c.store.policy = *policy;
  }
  if (m.Has("high_watermark")) {
    KVTIER_ASSIGN_OR_RETURN(c.store.high_watermark, m.Double("high_watermark", 0.01, 1));
  }
  if (m.Has("low_watermark")) {
    KVTIER_ASSIGN_OR_RETURN(c.store.low_watermark, m.Double("low_watermark", 0, 1));
  }
  if (m.Has("mover_threads")) {
    KVTIER_ASSIGN_OR_RETURN(c.store.mover_threads, m.SmallInt("mover_threads", 1, 64));
  }
  if (m.Has("policy_shards")) {
    KVTIER_ASSIGN_OR_RETURN(const int shards, m.SmallInt("policy_shards", 1, static_cast<int>(ShardedPolicy::kMaxShards)));
    if (!std::has_single_bit(static_cast<unsigned>(shards))) {
      return Status::InvalidArgument(where + ".policy_shards: " + std::to_string(shards) + " is not a power of two");
    }
    c.store.policy_options.shards = static_cast<uint32_t>(shards);
  } else if (!ShardsKeepOrder(c.store.policy)) {
    c.store.policy_options.shards = 1;  // sharded, their order would be another (kServePolicyShards)
  }
  if (m.Has("index_shards")) {
    KVTIER_ASSIGN_OR_RETURN(const int shards,
                            m.SmallInt("index_shards", 1, static_cast<int>(PrefixIndexOptions::kMaxShards)));
    if (!std::has_single_bit(static_cast<unsigned>(shards))) {
      return Status::InvalidArgument(where + ".index_shards: " + std::to_string(shards) + " is not a power of two");
    }
    c.store.index_shards = static_cast<uint32_t>(shards);
  }
  if (m.Has("expected_blocks")) {
    KVTIER_ASSIGN_OR_RETURN(const int64_t blocks, m.Int("expected_blocks", 1, int64_t{1} << 31));
    c.store.expected_blocks = static_cast<std::size_t>(blocks);
  }
  if (m.Has("prefetch")) {
    KVTIER_ASSIGN_OR_RETURN(c.store.prefetch, m.Bool("prefetch"));
  }
  if (m.Has("promotion")) {
    KVTIER_ASSIGN_OR_RETURN(std::string promotion, m.String("promotion"));
    if (promotion != "adaptive" && promotion != "always") {
      return Status::InvalidArgument(where + ".promotion: '" + promotion + "' is not adaptive or always");
    }
    c.store.promotion_gate.adaptive = promotion == "adaptive";
  }
  if (m.Has("publish")) {
    KVTIER_ASSIGN_OR_RETURN(std::string publish, m.String("publish"));
    if (publish != "acknowledged" && publish != "background") {
      return Status::InvalidArgument(where + ".publish: '" + publish + "' is not acknowledged or background");
    }
    c.store.publish_in_background = publish == "background";
  }
  if (m.Has("persistence")) {
    KVTIER_ASSIGN_OR_RETURN(std::string mode, m.String("persistence"));
    if (mode == "write_through") {
      c.persist = PersistChoice::kWriteThrough;
    } else if (mode == "on_shutdown") {
      c.persist = PersistChoice::kOnShutdown;
    } else if (mode == "none") {
      c.persist = PersistChoice::kNone;
    } else {
      return Status::InvalidArgument(where + ".persistence: '" + mode + "' is not write_through, on_shutdown or none");
    }
  }
  if (m.Has("persist_tier")) {
    KVTIER_ASSIGN_OR_RETURN(c.persist_tier, m.String("persist_tier"));
  }
  if (m.Has("journal")) {
    KVTIER_ASSIGN_OR_RETURN(std::string journal, m.String("journal"));
    c.journal_path = UnderDataDir(c.tiers.data_dir, journal);
  }
  if (m.Has("persist_sync")) {
    KVTIER_ASSIGN_OR_RETURN(c.persist_sync, m.Bool("persist_sync"));
  }
  return c.store.Validate();
}

// The served model on its GPUs: the cost model behind Lookup's load-or-recompute decisions
// and the Bayesian policy's value of a block.
Status ParseModel(const YAML::Node& node, const std::string& where, ServeConfig& c) {
  const YamlMap m(node, where);
  KVTIER_RETURN_IF_ERROR(
      m.CheckKeys({"name", "gpu", "tensor_parallel", "block_tokens", "head_granular", "kv_element_bytes"}));
  KVTIER_ASSIGN_OR_RETURN(std::string name, m.String("name"));
  std::string gpu_name = "h100";
  if (m.Has("gpu")) {
    KVTIER_ASSIGN_OR_RETURN(gpu_name, m.String("gpu"));
  }
  int64_t tensor_parallel = 1, block_tokens = 16;
  if (m.Has("tensor_parallel")) {
    KVTIER_ASSIGN_OR_RETURN(tensor_parallel, m.Int("tensor_parallel", 1, 1024));
  }
  if (m.Has("block_tokens")) {
    KVTIER_ASSIGN_OR_RETURN(block_tokens, m.Int("block_tokens", 1, 65536));
  }
  Result<ModelSpec> model = LoadCatalogModel(name);
  if (!model.ok()) return model.status().WithContext(where + ".name");
  Result<GpuSpec> gpu = GpuPreset(gpu_name);
  if (!gpu.ok()) return gpu.status().WithContext(where + ".gpu");
  Result<PrefillCostModel> cost = PrefillCostModel::Create(*model, *gpu, tensor_parallel);
  if (!cost.ok()) return cost.status().WithContext(where);
  c.store.cost_model = *cost;
  c.store.recompute_seconds_per_token =
      cost->RecomputeSeconds(static_cast<uint64_t>(block_tokens), 0) / static_cast<double>(block_tokens);
  bool head_granular = false;
  if (m.Has("head_granular")) {
    KVTIER_ASSIGN_OR_RETURN(head_granular, m.Bool("head_granular"));
  }
  if (!head_granular) return Status::Ok();
  // Head-granular eviction: blocks of exactly this layout's size demote their least
  // important heads first, ranked by the engines' Importance reports.
  int64_t element_bytes = 2;
  if (m.Has("kv_element_bytes")) {
    KVTIER_ASSIGN_OR_RETURN(element_bytes, m.Int("kv_element_bytes", 1, 8));
  }
  Result<KvBlockLayout> layout = KvBlockLayout::ForModel(*model, static_cast<uint32_t>(block_tokens),
                                                         static_cast<uint32_t>(element_bytes),
                                                         static_cast<int>(tensor_parallel));
  if (!layout.ok()) return layout.status().WithContext(where + ".head_granular");
  Result<std::unique_ptr<HeadImportance>> importance = HeadImportance::Create(layout->layers, layout->kv_heads);
  if (!importance.ok()) return importance.status().WithContext(where + ".head_granular");
  c.store.head_layout = *layout;
  c.store.head_importance = std::move(*importance);
  c.server.head_importance = c.store.head_importance;
  return Status::Ok();
}

// TLS on the TCP listener; the files are loaded (and a key that is not the certificate's
// refused) when the server starts.
Status ParseTls(const YAML::Node& node, const std::string& where, ServeConfig& c) {
  if (!node.IsMap()) return Status::InvalidArgument(where + " must be a map with cert and key");
  const YamlMap m(node, where);
  KVTIER_RETURN_IF_ERROR(m.CheckKeys({"cert", "key", "client_ca", "handshake_timeout_ms"}));
  ServerTlsOptions& tls = c.server.tls;
  for (auto [key, field] : {std::pair{"cert", &tls.cert_file}, {"key", &tls.key_file}, {"client_ca", &tls.client_ca_file}}) {
    if (!m.Has(key)) continue;
    KVTIER_ASSIGN_OR_RETURN(std::string path, m.String(key));
    *field = UnderDataDir(c.tiers.data_dir, path);
  }
  if (tls.cert_file.empty() || tls.key_file.empty()) return Status::InvalidArgument(where + ": needs both cert and key");
  if (m.Has("handshake_timeout_ms")) {
    KVTIER_ASSIGN_OR_RETURN(tls.handshake_timeout_ms, m.SmallInt("handshake_timeout_ms", 0, 3600 * 1000));
  }
  return Status::Ok();
}

Status ParseListen(const YAML::Node& node, const std::string& where, ServeConfig& c) {
  const YamlMap m(node, where);
  KVTIER_RETURN_IF_ERROR(
      m.CheckKeys({"unix_socket", "tcp", "tcp_host", "tcp_port", "tls", "metrics_host", "metrics_port"}));
  if (m.Has("tls")) KVTIER_RETURN_IF_ERROR(ParseTls(node["tls"], where + ".tls", c));
  if (m.Has("unix_socket")) {
    KVTIER_ASSIGN_OR_RETURN(std::string path, m.String("unix_socket"));
    c.server.unix_socket_path = UnderDataDir(c.tiers.data_dir, path);
  }
  if (m.Has("tcp")) {
    KVTIER_ASSIGN_OR_RETURN(c.server.tcp, m.Bool("tcp"));
  }
  if (m.Has("tcp_host")) {
    KVTIER_ASSIGN_OR_RETURN(c.server.tcp_host, m.String("tcp_host"));
  }
  if (m.Has("tcp_port")) {
    KVTIER_ASSIGN_OR_RETURN(int64_t port, m.Int("tcp_port", 0, 65535));
    c.server.tcp_port = static_cast<uint16_t>(port);
  }
  if (m.Has("metrics_host")) {
    KVTIER_ASSIGN_OR_RETURN(c.metrics_host, m.String("metrics_host"));
  }
  if (m.Has("metrics_port")) {
    KVTIER_ASSIGN_OR_RETURN(c.metrics_port, m.SmallInt("metrics_port", -1, 65535));
  }
  return Status::Ok();
}

Status ParseLimits(const YAML::Node& node, const std::string& where, ServerOptions& s) {
  const YamlMap m(node, where);
  KVTIER_RETURN_IF_ERROR(m.CheckKeys({"max_connections", "max_frame_bytes", "max_batch", "max_segments_per_client",
                                      "max_shared_bytes_per_client", "max_pins_per_client", "max_expectations_per_client",
                                      "io_timeout_ms", "workers", "max_workers", "event_loops", "max_request_memory"}));
  if (m.Has("max_connections")) {
    KVTIER_ASSIGN_OR_RETURN(int64_t v, m.Int("max_connections", 1, 1 << 20));
    s.max_connections = static_cast<uint32_t>(v);
  }
  if (m.Has("max_frame_bytes")) {
    KVTIER_ASSIGN_OR_RETURN(uint64_t v, m.Bytes("max_frame_bytes"));
    if (v < 64 || v > (uint64_t{1} << 31)) return Status::InvalidArgument(where + ".max_frame_bytes: from 64 B to 2 GiB");
    s.limits.max_payload_bytes = static_cast<uint32_t>(v);
  }
  if (m.Has("max_batch")) {
    KVTIER_ASSIGN_OR_RETURN(int64_t v, m.Int("max_batch", 1, 1 << 24));
    s.limits.max_batch = static_cast<uint32_t>(v);
  }
  if (m.Has("max_segments_per_client")) {
    KVTIER_ASSIGN_OR_RETURN(int64_t v, m.Int("max_segments_per_client", 0, 64));
    s.max_segments_per_client = static_cast<uint32_t>(v);
  }
  if (m.Has("max_shared_bytes_per_client")) {
    KVTIER_ASSIGN_OR_RETURN(s.max_shared_bytes_per_client, m.Bytes("max_shared_bytes_per_client"));
  }
  if (m.Has("max_pins_per_client")) {
    KVTIER_ASSIGN_OR_RETURN(int64_t v, m.Int("max_pins_per_client", 0, 1 << 24));
    s.max_pins_per_client = static_cast<uint32_t>(v);
  }
  if (m.Has("max_expectations_per_client")) {
    KVTIER_ASSIGN_OR_RETURN(int64_t v, m.Int("max_expectations_per_client", 0, 1 << 24));
    s.max_expectations_per_client = static_cast<uint32_t>(v);
  }
  if (m.Has("io_timeout_ms")) {
    KVTIER_ASSIGN_OR_RETURN(s.io_timeout_ms, m.SmallInt("io_timeout_ms", 0, 3600 * 1000));
  }
  if (m.Has("workers")) {
    KVTIER_ASSIGN_OR_RETURN(int64_t v, m.Int("workers", 0, 1024));
    s.workers = static_cast<uint32_t>(v);
  }
  if (m.Has("max_workers")) {
    KVTIER_ASSIGN_OR_RETURN(int64_t v, m.Int("max_workers", 0, 4096));
    s.max_workers = static_cast<uint32_t>(v);
  }
  if (m.Has("event_loops")) {
    KVTIER_ASSIGN_OR_RETURN(int64_t v, m.Int("event_loops", 0, 256));
    s.event_loops = static_cast<uint32_t>(v);
  }
  if (m.Has("max_request_memory")) {
    KVTIER_ASSIGN_OR_RETURN(s.max_request_memory, m.Bytes("max_request_memory"));
  }
  return Status::Ok();
}

Status ParseTenants(const YAML::Node& node, const std::string& where, ServerOptions& s) {
  if (!node.IsSequence()) return Status::InvalidArgument(where + " must be a list of {name, auth_token, expires}");
  std::size_t i = 0;
  for (const YAML::Node& item : node) {
    const std::string here = where + "[" + std::to_string(i++) + "]";
    if (!item.IsMap()) return Status::InvalidArgument(here + " must be a map with 'name'");
    const YamlMap m(item, here);
    KVTIER_RETURN_IF_ERROR(m.CheckKeys({"name", "auth_token", "expires"}));
    TenantOptions t;
    KVTIER_ASSIGN_OR_RETURN(t.name, m.String("name"));
    if (m.Has("auth_token")) {
      KVTIER_ASSIGN_OR_RETURN(t.auth_token, m.String("auth_token"));
    }
    if (m.Has("expires")) {
      if (t.auth_token.empty()) return Status::InvalidArgument(here + ": 'expires' needs the tenant's own auth_token");
      KVTIER_ASSIGN_OR_RETURN(t.expires, m.UtcTime("expires"));
    }
    for (const TenantOptions& other : s.tenants) {
      if (other.name == t.name) return Status::InvalidArgument(here + ": tenant '" + t.name + "' is listed twice");
    }
    s.tenants.push_back(std::move(t));
  }
  return Status::Ok();
}

}  // namespace

ServeConfig DefaultServeConfig(const std::string& data_dir) {
  ServeConfig c;
  c.tiers.data_dir = data_dir;
  c.tiers.tiers.push_back(DramTierOptions{.capacity_bytes = uint64_t{1} << 30});
  NvmeTierOptions disk;
  disk.name = "disk";
  disk.files = {(fs::path(data_dir) / "disk" / "slab.0").string()};
  disk.capacity_bytes = uint64_t{4} << 30;
  c.tiers.tiers.push_back(disk);
  c.journal_path = (fs::path(data_dir) / "store.journal").string();
  c.server.unix_socket_path = (fs::path(data_dir) / "kvtier.sock").string();
  c.store.policy_options.shards = kServePolicyShards;
  c.store.index_shards = kServeIndexShards;
  return c;
}

Result<ServeConfig> ParseServeConfig(const std::string& yaml_text, const std::string& source) {
  KVTIER_ASSIGN_OR_RETURN(TierConfig tiers, ParseTierConfig(yaml_text, source, kServeKeys));
  ServeConfig c = DefaultServeConfig(tiers.data_dir);
  c.tiers = std::move(tiers);
  YAML::Node root = YAML::Load(yaml_text);  // ParseTierConfig has checked that it parses
  try {
    for (const char* section : {"store", "model", "listen", "limits"}) {
      if (root[section] && !root[section].IsMap()) return Status::InvalidArgument(source + ": " + section + " must be a map");
    }
    if (root["store"]) KVTIER_RETURN_IF_ERROR(ParseStore(root["store"], source + ": store", c));
    if (root["model"]) KVTIER_RETURN_IF_ERROR(ParseModel(root["model"], source + ": model", c));
    if (root["listen"]) KVTIER_RETURN_IF_ERROR(ParseListen(root["listen"], source + ": listen", c));
    if (root["auth_token"]) {
      if (!root["auth_token"].IsScalar()) return Status::InvalidArgument(source + ": auth_token must be a string");
      c.server.auth_token = root["auth_token"].as<std::string>();
    }
    if (root["auth_token_expires"]) {
      if (c.server.auth_token.empty()) return Status::InvalidArgument(source + ": auth_token_expires needs auth_token");
      KVTIER_ASSIGN_OR_RETURN(c.server.auth_token_expires, YamlMap(root, source).UtcTime("auth_token_expires"));
    }
    if (root["tenants"]) KVTIER_RETURN_IF_ERROR(ParseTenants(root["tenants"], source + ": tenants", c.server));
    if (root["tenant_keys"]) {
      KVTIER_ASSIGN_OR_RETURN(const std::string mapping, YamlMap(root, source).String("tenant_keys"));
      if (mapping == "aes_mmo") {
        c.server.tenant_keys = TenantKeyMapping::kAesMmo;
      } else if (mapping == "sha256") {
        c.server.tenant_keys = TenantKeyMapping::kSha256;
      } else {
        return Status::InvalidArgument(source + ": tenant_keys must be aes_mmo (the default) or sha256 (stores and "
                                       "pools written before kvtier-tenant-v2), not '" + mapping + "'");
      }
    }
    if (root["limits"]) KVTIER_RETURN_IF_ERROR(ParseLimits(root["limits"], source + ": limits", c.server));
  } catch (const YAML::Exception& e) {
    return Status::InvalidArgument(source + ": unexpected YAML shape (" + e.what() + ")");
  }
  if (Status valid = c.server.Validate(); !valid.ok()) return valid.WithContext(source);
  return c;
}

Result<ServeConfig> LoadServeConfig(const std::string& path) {
  KVTIER_ASSIGN_OR_RETURN(std::string text, ReadTextFile(path));
  return ParseServeConfig(text, path);
}

}  // namespace kvtier
