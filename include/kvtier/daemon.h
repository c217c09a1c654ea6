// `kvtier serve`: the daemon around Server (server.h). One configuration (YAML, documented
// in examples/serve.yaml) names the tiers (tier_config.h's format), the store's policy and
// persistence, the served model (for load-or-recompute decisions), the listeners, tenants
// and limits. The embedded default (DefaultServeConfig) serves 1 GiB of DRAM over a 4 GiB
// disk tier under the data directory, with every acknowledged put persisted there, on a
// Unix socket in the data directory and /metrics on 127.0.0.1:9477.
//
// Lifecycle: Start opens the tiers and the store (recovering the blocks the journal names
// from the persistent tier, their checksums verified), then the listeners. Stop is the
// SIGTERM path: stop accepting, finish the requests in progress, flush what the persistence
// mode says, drain the movers.
//
// Thread-safety: Start and Stop from one thread; the accessors from any.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "kvtier/server.h"
#include "kvtier/status.h"
#include "kvtier/store.h"
#include "kvtier/tier_config.h"

namespace kvtier {

enum class PersistChoice { kNone, kWriteThrough, kOnShutdown };

// The shards of each tier's eviction policy in `kvtier serve` when `store.policy_shards` is not
// set (PolicyOptions::shards): each has its own lock, so that the daemon's threads working on
// different chains rarely meet, and the victims are the ones a single policy would pick
// (ShardsKeepOrder; docs/policies.md, "Sharded policies"). S3-FIFO and ARC, whose order
// sharding would change, keep one policy unless the setting asks otherwise. A library store
// keeps one policy unless told otherwise.
inline constexpr uint32_t kServePolicyShards = 8;
// The shards of the prefix index in `kvtier serve` when `store.index_shards` is not set
// (StoreOptions::index_shards): puts of different chains index their blocks under different
// locks; a lookup takes one shared lock per shard its keys fall in (at most this many). A
// library store keeps one.
inline constexpr uint32_t kServeIndexShards = 8;

struct ServeConfig {
  TierConfig tiers;
  StoreOptions store;  // everything but persistence, which the fields below set
  PersistChoice persist = PersistChoice::kWriteThrough;  // Default: write-through
  std::string persist_tier;  // a tier's name; Default: "" (the first NVMe or parallel-FS tier)
  std::string journal_path;  // Default: <data_dir>/store.journal
  bool persist_sync = false; // Default: false (survives a killed process, not a power loss)
  ServerOptions server;      // listeners, auth, tenants, limits
  std::string metrics_host = "127.0.0.1";  // Default: loopback
  int metrics_port = 9477;   // Default: 9477; 0 picks a free port, -1 turns /metrics off
};

// The embedded default under `data_dir`.
ServeConfig DefaultServeConfig(const std::string& data_dir = "kvtier-data");
// A configuration file: unknown keys are errors, naming the file and the key.
Result<ServeConfig> ParseServeConfig(const std::string& yaml_text, const std::string& source);
Result<ServeConfig> LoadServeConfig(const std::string& path);

class Daemon {
 public:
  static Result<std::unique_ptr<Daemon>> Start(ServeConfig config);
  ~Daemon();  // Stop()
  Daemon(const Daemon&) = delete;
  Daemon& operator=(const Daemon&) = delete;

  TieredStore& store();
  Server& server();
  uint16_t metrics_port() const;  // 0 when off
  const ServeConfig& config() const;
  // What recovery found at Start: blocks back in the index, and blocks dropped (corrupt or
  // orphaned).
  uint64_t recovered_blocks() const;

  // Graceful shutdown; idempotent. Returns the first error of the flush.
  Status Stop();

 private:
  struct Impl;
  explicit Daemon(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace kvtier
