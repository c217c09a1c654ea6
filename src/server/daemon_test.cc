#include "kvtier/daemon.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>

#include "kvtier/client.h"
#include "store/block_journal.h"
#include "testing/test_paths.h"
#include "tier/nvme_tier.h"

namespace kvtier {
namespace {

constexpr uint32_t kBlockBytes = 128 << 10;

BlockKey Key(uint64_t chain, uint64_t i) { return {chain + 1, i + 1}; }

void Fill(std::span<std::byte> bytes, uint64_t chain, uint64_t i) {
  for (std::size_t k = 0; k < bytes.size(); ++k) bytes[k] = static_cast<std::byte>((k * 131 + chain * 17 + i * 3) & 0xff);
}

class DaemonTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char pattern[] = "/tmp/kvtier-daemon-XXXXXX";
    ASSERT_NE(::mkdtemp(pattern), nullptr);
    dir_ = pattern;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  ServeConfig Config() {
    ServeConfig c = DefaultServeConfig(dir_);
    std::get<DramTierOptions>(c.tiers.tiers[0]).capacity_bytes = 32u << 20;
    std::get<DramTierOptions>(c.tiers.tiers[0]).lock_memory = false;
    std::get<NvmeTierOptions>(c.tiers.tiers[1]).capacity_bytes = 64u << 20;
    c.metrics_port = 0;
    return c;
  }

  static void PutChains(Client& client, uint64_t chains, uint64_t blocks) {
    std::span<std::byte> shm = client.shared_memory();
    for (uint64_t chain = 0; chain < chains; ++chain) {
      std::vector<ClientBlock> put;
      for (uint64_t i = 0; i < blocks; ++i) {
        std::span<std::byte> slot = shm.subspan(i * kBlockBytes, kBlockBytes);
        Fill(slot, chain, i);
        put.push_back({.key = Key(chain, i), .payload = slot, .tokens = 16});
      }
      Result<protocol::PutReply> r = client.Put(put);
      ASSERT_TRUE(r.ok()) << r.status().ToString();
      ASSERT_EQ(r->refused_blocks, 0u);
    }
  }

  static uint64_t ChainsReadBack(Client& client, uint64_t chains, uint64_t blocks) {
    std::span<std::byte> shm = client.shared_memory();
    std::vector<std::byte> expected(kBlockBytes);
    uint64_t whole = 0;
    for (uint64_t chain = 0; chain < chains; ++chain) {
      std::vector<BlockKey> keys;
      std::vector<std::span<std::byte>> outs;
      for (uint64_t i = 0; i < blocks; ++i) {
        keys.push_back(Key(chain, i));
        outs.push_back(shm.subspan(i * kBlockBytes, kBlockBytes));
      }
      Result<std::vector<uint32_t>> sizes = client.Get(keys, outs);
      if (!sizes.ok() || sizes->size() != blocks) continue;
      bool same = true;
      for (uint64_t i = 0; i < blocks; ++i) {
        Fill(expected, chain, i);
        same = same && std::ranges::equal(outs[i], expected);
      }
      whole += same ? 1 : 0;
    }
    return whole;
  }

  std::string dir_;
};

TEST_F(DaemonTest, WriteThroughBlocksSurviveARestart) {
  {
    Result<std::unique_ptr<Daemon>> daemon = Daemon::Start(Config());
    ASSERT_TRUE(daemon.ok()) << daemon.status().ToString();
    EXPECT_NE((*daemon)->metrics_port(), 0);
    EXPECT_EQ((*daemon)->recovered_blocks(), 0u);
    auto client = Client::ConnectUnix((*daemon)->server().unix_socket_path(), {.shared_memory_bytes = 8 * kBlockBytes});
    ASSERT_TRUE(client.ok()) << client.status().ToString();
    PutChains(**client, 20, 4);
    EXPECT_TRUE((*daemon)->Stop().ok());
  }
  Result<std::unique_ptr<Daemon>> daemon = Daemon::Start(Config());
  ASSERT_TRUE(daemon.ok()) << daemon.status().ToString();
  EXPECT_EQ((*daemon)->recovered_blocks(), 80u);
  auto client = Client::ConnectUnix((*daemon)->server().unix_socket_path(), {.shared_memory_bytes = 8 * kBlockBytes});
  ASSERT_TRUE(client.ok());
  EXPECT_EQ(ChainsReadBack(**client, 20, 4), 20u);
}

TEST_F(DaemonTest, OnShutdownPersistsAtStop) {
  ServeConfig config = Config();
  config.persist = PersistChoice::kOnShutdown;
  {
    Result<std::unique_ptr<Daemon>> daemon = Daemon::Start(config);
    ASSERT_TRUE(daemon.ok()) << daemon.status().ToString();
    auto client = Client::ConnectUnix((*daemon)->server().unix_socket_path(), {.shared_memory_bytes = 8 * kBlockBytes});
    ASSERT_TRUE(client.ok());
    PutChains(**client, 5, 4);
    EXPECT_TRUE((*daemon)->Stop().ok());
  }
  Result<std::unique_ptr<Daemon>> daemon = Daemon::Start(config);
  ASSERT_TRUE(daemon.ok()) << daemon.status().ToString();
  EXPECT_EQ((*daemon)->recovered_blocks(), 20u);
}

// Issue 18, hole 4: with persistence none the NVMe tier starts empty rather than bringing
// back the previous run's blocks, which nothing would index or evict.
TEST_F(DaemonTest, WithoutPersistenceTheDiskTierStartsEmpty) {
  ServeConfig config = Config();
  config.persist = PersistChoice::kNone;
  const std::vector<std::byte> payload(kBlockBytes, std::byte{1});
  {
    Result<std::unique_ptr<Daemon>> daemon = Daemon::Start(config);
    ASSERT_TRUE(daemon.ok()) << daemon.status().ToString();
    for (uint64_t i = 0; i < 100; ++i) ASSERT_TRUE((*daemon)->store().tier(1).Write(Key(50, i), payload).ok());
    EXPECT_TRUE((*daemon)->Stop().ok());
  }
  Result<std::unique_ptr<Daemon>> daemon = Daemon::Start(config);
  ASSERT_TRUE(daemon.ok()) << daemon.status().ToString();
  const auto* nvme = dynamic_cast<const NvmeTier*>(&(*daemon)->store().tier(1));
  ASSERT_NE(nvme, nullptr);
  EXPECT_EQ(nvme->recovered_blocks(), 0u);  // formatted, not recovered
  EXPECT_EQ(nvme->GetStats().blocks, 0u);
  EXPECT_EQ(nvme->GetStats().used_bytes, 0u);
}

// Issue 18, hole 4: on_shutdown blocks whose journal records were lost (a journal tail that a
// power loss cut off) are evicted at the restart instead of filling the tier unindexed.
TEST_F(DaemonTest, OnShutdownBlocksTheJournalLostAreEvictedAtRestart) {
  ServeConfig config = Config();
  config.persist = PersistChoice::kOnShutdown;
  {
    Result<std::unique_ptr<Daemon>> daemon = Daemon::Start(config);
    ASSERT_TRUE(daemon.ok()) << daemon.status().ToString();
    auto client = Client::ConnectUnix((*daemon)->server().unix_socket_path(), {.shared_memory_bytes = 8 * kBlockBytes});
    ASSERT_TRUE(client.ok());
    PutChains(**client, 5, 4);
    EXPECT_TRUE((*daemon)->Stop().ok());
    EXPECT_EQ((*daemon)->store().tier(1).GetStats().blocks, 20u);
  }
  std::filesystem::resize_file(config.journal_path, BlockJournal::kHeaderBytes + 8 * BlockJournal::kRecordBytes);
  Result<std::unique_ptr<Daemon>> daemon = Daemon::Start(config);
  ASSERT_TRUE(daemon.ok()) << daemon.status().ToString();
  EXPECT_LE((*daemon)->recovered_blocks(), 8u);
  EXPECT_EQ((*daemon)->store().tier(1).GetStats().blocks, (*daemon)->recovered_blocks());
  EXPECT_EQ((*daemon)->store().tier(1).GetStats().used_bytes, (*daemon)->recovered_blocks() * kBlockBytes);
}

TEST_F(DaemonTest, PersistenceWithoutADiskTierIsRefused) {
  ServeConfig config = Config();
  config.tiers.tiers.pop_back();
  Result<std::unique_ptr<Daemon>> daemon = Daemon::Start(config);
  EXPECT_EQ(daemon.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(daemon.status().message().find("store.persistence: none"), std::string::npos) << daemon.status().ToString();
  config.persist = PersistChoice::kNone;
  EXPECT_TRUE(Daemon::Start(config).ok());
}

TEST_F(DaemonTest, HeadGranularTakesImportanceReportsOverTheWire) {
  const std::string yaml = "data_dir: " + dir_ +
                           "\ntiers:\n  - kind: cpu_dram\n    capacity: 64MiB\n    lock_memory: false\n"
                           "  - kind: cpu_dram\n    name: slow\n    capacity: 64MiB\n    lock_memory: false\n"
                           "model:\n  name: Llama-3.1-8B\n  head_granular: true\n"
                           "listen:\n  metrics_port: -1\n";
  Result<ServeConfig> config = ParseServeConfig(yaml + "store:\n  persistence: none\n", "head.yaml");
  ASSERT_TRUE(config.ok()) << config.status().ToString();
  ASSERT_TRUE(config->store.head_layout.has_value());
  EXPECT_EQ(config->store.head_layout->kv_heads, 8u);  // Llama-3.1-8B: 8 KV heads
  Result<std::unique_ptr<Daemon>> daemon = Daemon::Start(*config);
  ASSERT_TRUE(daemon.ok()) << daemon.status().ToString();
  auto client = Client::ConnectUnix((*daemon)->server().unix_socket_path(), {.shared_memory_bytes = 1 << 20});
  ASSERT_TRUE(client.ok());
  const std::vector<protocol::ImportanceReport> good = {{.layer = 0, .head = 7, .value = 0.9}, {.layer = 31, .head = 0, .value = 0.1}};
  EXPECT_TRUE((*client)->ReportImportance(good).ok());
  const std::vector<protocol::ImportanceReport> bad = {{.layer = 0, .head = 8, .value = 1}};
  EXPECT_EQ((*client)->ReportImportance(bad).code(), StatusCode::kInvalidArgument);
  // Persistence does not record split blocks yet: the combination is refused with a reason.
  Result<ServeConfig> persisted = ParseServeConfig(yaml, "head.yaml");
  ASSERT_TRUE(persisted.ok());
  persisted->tiers.data_dir = dir_ + "/other";
  EXPECT_EQ(Daemon::Start(*persisted).status().code(), StatusCode::kInvalidArgument);
}

TEST(ServeConfig, TheShippedExampleParses) {
  Result<ServeConfig> c = LoadServeConfig(testing::SourceDir() + "/examples/serve.yaml");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->tiers.tiers.size(), 2u);
  EXPECT_EQ(c->store.policy, PolicyKind::kBayes);
  EXPECT_EQ(c->persist, PersistChoice::kWriteThrough);
  EXPECT_EQ(c->metrics_port, 9477);
  EXPECT_TRUE(c->store.cost_model.has_value());
  EXPECT_EQ(c->server.tenants.size(), 2u);
  EXPECT_EQ(c->server.tenants[0].expires, std::chrono::sys_days(std::chrono::year(2030) / 1 / 1));
}

TEST(ServeConfig, TlsAndExpiringTokens) {
  const std::string yaml =
      "data_dir: /tmp/x\ntiers:\n  - kind: cpu_dram\n    capacity: 1GiB\nstore:\n  persistence: none\n"
      "listen:\n  tcp: true\n  tcp_host: 0.0.0.0\n  tls:\n    cert: tls/server.pem\n    key: /etc/k.key\n"
      "    client_ca: ca.pem\n    handshake_timeout_ms: 500\n"
      "auth_token: t\nauth_token_expires: 1800000000\n"
      "tenants:\n  - name: a\n    auth_token: s\n    expires: 2027-03-04T05:06:07Z\n"
      "  - name: b\n    auth_token: u\n    expires: 2027-03-04\n";
  Result<ServeConfig> c = ParseServeConfig(yaml, "tls.yaml");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->server.tls.cert_file, "/tmp/x/tls/server.pem");
  EXPECT_EQ(c->server.tls.key_file, "/etc/k.key");
  EXPECT_EQ(c->server.tls.client_ca_file, "/tmp/x/ca.pem");
  EXPECT_EQ(c->server.tls.handshake_timeout_ms, 500);
  EXPECT_EQ(c->server.auth_token_expires->time_since_epoch().count(), 1800000000);
  using namespace std::chrono;
  EXPECT_EQ(c->server.tenants[0].expires, sys_days(year(2027) / 3 / 4) + hours(5) + minutes(6) + seconds(7));
  EXPECT_EQ(c->server.tenants[1].expires, sys_days(year(2027) / 3 / 4));
  EXPECT_EQ(c->server.tenant_keys, TenantKeyMapping::kAesMmo);
  Result<ServeConfig> v1 = ParseServeConfig(yaml + "tenant_keys: sha256\n", "v1.yaml");
  ASSERT_TRUE(v1.ok()) << v1.status().ToString();
  EXPECT_EQ(v1->server.tenant_keys, TenantKeyMapping::kSha256);
}

TEST(ServeConfig, MistakesAreNamed) {
  const std::string tiers = "data_dir: /tmp/x\ntiers:\n  - kind: cpu_dram\n    capacity: 1GiB\n";
  struct Case {
    std::string yaml, needle;
  };
  const std::vector<Case> cases = {
      {tiers + "colour: blue\n", "unknown key 'colour'"},
      {tiers + "store:\n  persistence: sometimes\n", "store.persistence"},
      {tiers + "store:\n  policy: random\n", "store.policy"},
      {tiers + "store: fast\n", "store must be a map"},
      {tiers + "listen:\n  tcp: true\n  tcp_host: 0.0.0.0\n", "auth_token"},
      {tiers + "listen:\n  tcp: true\n  tcp_host: 0.0.0.0\nauth_token: x\n", "listen.tls.cert"},
      {tiers + "listen:\n  tls:\n    cert: a.pem\n", "needs both cert and key"},
      {tiers + "listen:\n  tls: yes\n", "listen.tls must be a map"},
      {tiers + "listen:\n  tls:\n    cert: a\n    key: b\n    ca: c\n", "unknown key 'ca'"},
      {tiers + "tenants:\n  - name: a\n    auth_token: s\n    expires: next week\n", "Unix seconds or a UTC time"},
      {tiers + "tenants:\n  - name: a\n    auth_token: s\n    expires: 2027-02-30\n", "expires"},
      {tiers + "tenants:\n  - name: a\n    auth_token: s\n    expires: 2027-01-01T00:00:00+02:00\n", "expires"},
      {tiers + "tenants:\n  - name: a\n    expires: 2027-01-01\n", "needs the tenant's own auth_token"},
      {tiers + "auth_token_expires: 2027-01-01\n", "auth_token_expires needs auth_token"},
      {tiers + "listen:\n  metrics_port: 70000\n", "metrics_port"},
      {tiers + "tenants:\n  - name: a\n  - name: a\n", "listed twice"},
      {tiers + "tenant_keys: md5\n", "tenant_keys must be aes_mmo (the default) or sha256"},
      {tiers + "limits:\n  max_frame_bytes: 10\n", "max_frame_bytes"},
      {tiers + "limits:\n  workers: 5000\n", "'workers' must be an integer from 0 to 1024"},
      {tiers + "limits:\n  workers: -1\n", "'workers' must be an integer from 0 to 1024"},
      {tiers + "limits:\n  max_workers: 5000\n", "'max_workers' must be an integer from 0 to 4096"},
      {tiers + "limits:\n  event_loops: 300\n", "'event_loops' must be an integer from 0 to 256"},
      {tiers + "limits:\n  max_request_memory: lots\n", "max_request_memory"},
      {tiers + "store:\n  promotion: sometimes\n", "'sometimes' is not adaptive or always"},
      {tiers + "store:\n  expected_blocks: 0\n", "'expected_blocks' must be an integer from 1 to 2147483648"},
      {tiers + "store:\n  policy_shards: 3\n", "policy_shards: 3 is not a power of two"},
      {tiers + "store:\n  policy_shards: 128\n", "'policy_shards' must be an integer from 1 to 64"},
      {tiers + "store:\n  index_shards: 6\n", "index_shards: 6 is not a power of two"},
      {tiers + "store:\n  index_shards: 0\n", "'index_shards' must be an integer from 1 to 64"},
      {tiers + "model:\n  name: no-such-model\n", "model.name"},
      {"tiers: [\n", "not valid YAML"},
  };
  for (const Case& c : cases) {
    Result<ServeConfig> parsed = ParseServeConfig(c.yaml, "test.yaml");
    ASSERT_FALSE(parsed.ok()) << c.yaml;
    EXPECT_TRUE(parsed.status().code() == StatusCode::kInvalidArgument || parsed.status().code() == StatusCode::kNotFound);
    EXPECT_NE(parsed.status().message().find(c.needle), std::string::npos) << parsed.status().ToString();
  }
  Result<ServeConfig> ok = ParseServeConfig(tiers + "listen:\n  unix_socket: s.sock\nstore:\n  persistence: none\n", "t");
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_EQ(ok->server.unix_socket_path, "/tmp/x/s.sock");
  EXPECT_EQ(ok->server.workers, 0u) << "the machine's hardware threads";
  EXPECT_EQ(ok->server.max_connections, 4096u);
  EXPECT_EQ(ok->server.event_loops, 0u) << "one per four hardware threads";
  EXPECT_TRUE(ok->store.promotion_gate.adaptive);
  EXPECT_EQ(ok->store.expected_blocks, 65536u);
  ok = ParseServeConfig(tiers + "store:\n  persistence: none\n  promotion: always\n  expected_blocks: 1000000\n", "t");
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_FALSE(ok->store.promotion_gate.adaptive);
  EXPECT_EQ(ok->store.expected_blocks, 1'000'000u);
  // Policies whose sharded order is one policy's are sharded unless told; S3-FIFO and ARC not.
  EXPECT_EQ(ok->store.policy_options.shards, kServePolicyShards);
  ok = ParseServeConfig(tiers + "store:\n  policy: arc\n", "t");
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_EQ(ok->store.policy_options.shards, 1u);
  ok = ParseServeConfig(tiers + "store:\n  policy: s3fifo\n  policy_shards: 4\n", "t");
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_EQ(ok->store.policy_options.shards, 4u);
  EXPECT_EQ(ok->store.index_shards, kServeIndexShards) << "the index is sharded whatever the policy";
  ok = ParseServeConfig(tiers + "store:\n  index_shards: 1\n", "t");
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_EQ(ok->store.index_shards, 1u);
  ok = ParseServeConfig(tiers + "store:\n  persistence: none\nlimits:\n  workers: 6\n  event_loops: 3\n", "t");
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_EQ(ok->server.workers, 6u);
  EXPECT_EQ(ok->server.worker_threads(), 6u);
  EXPECT_EQ(ok->server.max_worker_threads(), 256u) << "the default";
  EXPECT_EQ(ok->server.event_loop_threads(), 3u);
  EXPECT_EQ(ok->server.request_memory_bytes(), 2ull * 6 * ok->server.limits.max_payload_bytes)
      << "two frames of the largest size per worker";
  ok = ParseServeConfig(tiers + "store:\n  persistence: none\nlimits:\n  max_request_memory: 64MiB\n", "t");
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_EQ(ok->server.request_memory_bytes(), 64ull << 20);
  ok = ParseServeConfig(tiers + "store:\n  persistence: none\nlimits:\n  workers: 300\n  max_workers: 100\n", "t");
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_EQ(ok->server.max_worker_threads(), 300u) << "never fewer than the workers";
  ok = ParseServeConfig(tiers + "store:\n  persistence: none\nlimits:\n  max_workers: 512\n", "t");
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_EQ(ok->server.max_worker_threads(), 512u);
}

}  // namespace
}  // namespace kvtier
