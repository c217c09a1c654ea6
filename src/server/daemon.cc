#include "kvtier/daemon.h"

#include <filesystem>
#include <iostream>
#include <variant>

#include "server/descriptor_limit.h"
#include "server/metrics_http.h"
#include "server/service_metrics.h"
#include "server/tier_health.h"

namespace kvtier {
namespace {

namespace fs = std::filesystem;

// The tier acknowledged blocks persist in: the one named, or the first that survives a restart.
Result<std::size_t> PersistTierIndex(const ServeConfig& c) {
  for (std::size_t i = 0; i < c.tiers.tiers.size(); ++i) {
    const TierOptions& t = c.tiers.tiers[i];
    const std::string& name = std::visit([](const auto& o) -> const std::string& { return o.name; }, t);
    const TierKind kind = TierKindOf(t);
    if (c.persist_tier.empty() ? (kind == TierKind::kNvme || kind == TierKind::kParallelFs) : name == c.persist_tier) {
      return i;
    }
  }
  if (!c.persist_tier.empty()) return Status::InvalidArgument("store.persist_tier: no tier is named '" + c.persist_tier + "'");
  return Status::InvalidArgument(
      "persistence needs an nvme or parallel_fs tier; add one, or set store.persistence: none");
}

// The tiers to open: only the persist tier's blocks can be indexed again (the journal lists
// them), so every other disk tier starts empty rather than bringing back blocks that nothing
// would index or evict.
TierConfig RecoveringOnly(TierConfig tiers, std::optional<std::size_t> persist_tier) {
  for (std::size_t i = 0; i < tiers.tiers.size(); ++i) {
    if (i == persist_tier) continue;
    std::visit(
        [](auto& options) {
          if constexpr (requires { options.recover; }) options.recover = false;
        },
        tiers.tiers[i]);
  }
  return tiers;
}

}  // namespace

struct Daemon::Impl {
  ServeConfig config;
  server::ServiceMetrics metrics;
  std::unique_ptr<TieredStore> store;
  std::unique_ptr<Server> server;
  std::unique_ptr<server::MetricsHttpServer> http;
  std::unique_ptr<server::TierHealth> health;
  uint64_t recovered = 0;
  bool stopped = false;

  // /healthz: the tiers' verdict (tier_health.h), then what the daemon serves.
  server::HealthReport Health() {
    const StoreStats stats = store->GetStats();
    std::vector<server::TierHealthInput> tiers;
    for (std::size_t i = 0; i < store->tier_count(); ++i) tiers.push_back({stats.tiers[i].name, store->tier(i).GetStats()});
    const server::TierHealthVerdict verdict = health->Check(tiers);
    const std::string serving = std::to_string(server->connections()) + " connections, " +
                                std::to_string(stats.index_blocks) + " blocks, " +
                                std::to_string(stats.corrupt_blocks) + " corrupt reads";
    return {.healthy = verdict.healthy,
            .degraded = verdict.degraded,
            .detail = verdict.detail.empty() ? serving : verdict.detail + "; " + serving};
  }
};

Result<std::unique_ptr<Daemon>> Daemon::Start(ServeConfig config) {
  auto impl = std::make_unique<Impl>();
  impl->config = std::move(config);
  const ServeConfig& c = impl->config;
  StoreOptions store_options = c.store;
  store_options.keys_name_prefix = true;  // clients' keys are engine block hashes, tenant-mapped
  if (c.persist != PersistChoice::kNone && c.store.head_layout) {
    return Status::InvalidArgument(
        "model.head_granular splits blocks across tiers, which persistence does not record yet; "
        "set store.persistence: none to use it");
  }
  std::optional<std::size_t> persist_tier;
  if (c.persist != PersistChoice::kNone) {
    KVTIER_ASSIGN_OR_RETURN(std::size_t tier, PersistTierIndex(c));
    persist_tier = tier;
    store_options.persistence = PersistenceOptions{
        .tier = tier,
        .journal_path = c.journal_path,
        .mode = c.persist == PersistChoice::kWriteThrough ? PersistenceOptions::PersistMode::kWriteThrough
                                                           : PersistenceOptions::PersistMode::kOnFlush,
        .sync = c.persist_sync,
        .verify_checksums = true};
    std::error_code ec;
    fs::create_directories(fs::path(c.journal_path).parent_path(), ec);
  }
  KVTIER_ASSIGN_OR_RETURN(std::vector<std::unique_ptr<Tier>> tiers, OpenTiers(RecoveringOnly(c.tiers, persist_tier)));
  Result<std::unique_ptr<TieredStore>> store = TieredStore::Open(std::move(tiers), std::move(store_options));
  if (!store.ok()) return store.status().WithContext("opening the store");
  impl->store = std::move(*store);
  impl->recovered = impl->store->GetStats().recovered_blocks;
  impl->health = std::make_unique<server::TierHealth>(persist_tier);

  ServerOptions server_options = c.server;
  server_options.metrics = &impl->metrics;
  KVTIER_ASSIGN_OR_RETURN(const std::string descriptors, server::RaiseDescriptorLimit(server_options));
  if (!descriptors.empty()) std::cerr << "kvtier serve: warning: " << descriptors << std::endl;
  if (!server_options.unix_socket_path.empty()) {
    std::error_code ec;
    fs::create_directories(fs::path(server_options.unix_socket_path).parent_path(), ec);
  }
  KVTIER_ASSIGN_OR_RETURN(impl->server, Server::Start(*impl->store, std::move(server_options)));

  if (c.metrics_port >= 0) {
    Impl* raw = impl.get();
    KVTIER_ASSIGN_OR_RETURN(
        impl->http,
        server::MetricsHttpServer::Start(
            c.metrics_host, static_cast<uint16_t>(c.metrics_port),
            [raw] { return server::RenderPrometheus(raw->metrics, raw->store->GetStats(), raw->store->predictor()); },
            [raw] { return raw->Health(); }));
  }
  return std::unique_ptr<Daemon>(new Daemon(std::move(impl)));
}

Daemon::Daemon(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Daemon::~Daemon() { (void)Stop(); }

TieredStore& Daemon::store() { return *impl_->store; }
Server& Daemon::server() { return *impl_->server; }
uint16_t Daemon::metrics_port() const { return impl_->http ? impl_->http->port() : 0; }
const ServeConfig& Daemon::config() const { return impl_->config; }
uint64_t Daemon::recovered_blocks() const { return impl_->recovered; }

Status Daemon::Stop() {
  if (impl_->stopped) return Status::Ok();
  impl_->stopped = true;
  impl_->server->Shutdown();
  Status flushed;
  if (impl_->config.persist != PersistChoice::kNone) flushed = impl_->store->Flush();
  impl_->store->Drain();
  if (impl_->http) impl_->http->Stop();
  return flushed;
}

}  // namespace kvtier
