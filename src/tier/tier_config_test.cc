#include "kvtier/tier_config.h"
#include "testing/test_paths.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

namespace kvtier {
namespace {

std::string ErrorOf(const std::string& yaml) {
  Result<TierConfig> config = ParseTierConfig(yaml, "t.yaml");
  EXPECT_FALSE(config.ok());
  return config.ok() ? "" : config.status().message();
}

TEST(TierConfig, TheAnnotatedExampleParses) {
  Result<TierConfig> config = LoadTierConfig(testing::SourceDir() + "/examples/tiers-full.yaml");
  ASSERT_TRUE(config.ok()) << config.status().ToString();
  ASSERT_EQ(config->tiers.size(), 6u);
  EXPECT_EQ(std::get<GpuHbmTierOptions>(config->tiers[0]).capacity_bytes, uint64_t{40} << 30);
  const auto& dram = std::get<DramTierOptions>(config->tiers[1]);
  EXPECT_EQ(dram.capacity_bytes, uint64_t{64} << 30);
  EXPECT_EQ(dram.numa_node, 0);
  const auto& cxl = std::get<CxlTierOptions>(config->tiers[2]);
  EXPECT_EQ(cxl.path, "/dev/dax0.0");
  EXPECT_EQ(cxl.numa_node, 2);
  const auto& nvme = std::get<NvmeTierOptions>(config->tiers[3]);
  EXPECT_EQ(nvme.files, (std::vector<std::string>{"/var/lib/kvtier/nvme/slab.0", "/var/lib/kvtier/nvme/slab.1"}));
  EXPECT_EQ(nvme.capacity_bytes, 2'000'000'000'000ull);
  EXPECT_EQ(nvme.queue_depth, 64);
  EXPECT_TRUE(nvme.recover);
  const auto& remote = std::get<RemoteTierOptions>(config->tiers[4]);
  EXPECT_EQ(remote.topology, RemoteTopology::kCluster);
  EXPECT_EQ(remote.endpoints.size(), 2u);
  EXPECT_EQ(remote.capacity_bytes, 1'000'000'000'000ull);
  const auto& pfs = std::get<ParallelFsTierOptions>(config->tiers[5]);
  EXPECT_EQ(pfs.directory, "/lustre/kvtier");
  EXPECT_EQ(pfs.fsync, FsyncPolicy::kFile);
  EXPECT_FALSE(pfs.shared);
}

TEST(TierConfig, MistakesAreNamed) {
  EXPECT_NE(ErrorOf("tiers: [").find("not valid YAML"), std::string::npos);
  EXPECT_NE(ErrorOf("teirs: []").find("unknown key 'teirs'"), std::string::npos);
  EXPECT_NE(ErrorOf("tiers: []").find("non-empty"), std::string::npos);
  EXPECT_NE(ErrorOf("tiers:\n  - capacity: 1GiB\n").find("needs a 'kind'"), std::string::npos);
  EXPECT_NE(ErrorOf("tiers:\n  - kind: dram\n").find("unknown kind 'dram'"), std::string::npos);
  EXPECT_NE(ErrorOf("tiers:\n  - kind: cpu_dram\n    capacty: 1GiB\n").find("unknown key 'capacty'"), std::string::npos);
  EXPECT_NE(ErrorOf("tiers:\n  - kind: cpu_dram\n    capacity: lots\n").find("tiers[0].capacity"), std::string::npos);
  EXPECT_NE(ErrorOf("tiers:\n  - kind: cpu_dram\n    capacity: 0\n").find("capacity_bytes must be > 0"), std::string::npos);
  EXPECT_NE(ErrorOf("tiers:\n  - kind: cpu_dram\n    capacity: 1GiB\n    numa_node: x\n").find("numa_node"),
            std::string::npos);
  EXPECT_NE(ErrorOf("tiers:\n  - kind: parallel_fs\n    directory: d\n    fsync: always\n").find("fsync must be"),
            std::string::npos);
  EXPECT_NE(ErrorOf("tiers:\n  - kind: parallel_fs\n    directory: d\n    shared: maybe\n").find("shared"),
            std::string::npos);
  EXPECT_NE(ErrorOf("tiers:\n  - kind: parallel_fs\n    directory: d\n    shared: true\n    recover: false\n")
                .find("'recover: false' deletes"),
            std::string::npos);
  EXPECT_NE(ErrorOf("tiers:\n  - kind: remote_pool\n    endpoints: [a:1]\n    topology: mesh\n").find("topology must be"),
            std::string::npos);
  EXPECT_NE(ErrorOf("tiers:\n  - kind: remote_pool\n    topology: cluster\n").find("'endpoints'"), std::string::npos);
  EXPECT_NE(ErrorOf("tiers:\n  - kind: gpu_hbm\n    capacity: 1GiB\n    streams: 99\n").find("streams"),
            std::string::npos);
}

TEST(TierConfig, GpuAndRemoteTiers) {
  Result<TierConfig> config = ParseTierConfig(
      "tiers:\n"
      "  - kind: gpu_hbm\n    capacity: 2GiB\n    device: 1\n    streams: 4\n    staging: 16MiB\n"
      "  - kind: remote_pool\n    topology: hash_ring\n    endpoints: [10.0.0.1:6379, 10.0.0.2:6379]\n"
      "    connections_per_node: 8\n    timeout_ms: 250\n    ttl_seconds: 3600\n    key_prefix: \"kv:\"\n"
      "    username: kvtier\n    password: s3cret\n    shared: true\n"
      "  - kind: nvme\n    files: [a]\n    capacity: 1GiB\n    recover: false\n"
      "  - kind: parallel_fs\n    directory: p\n    recover: false\n"
      "  - kind: parallel_fs\n    name: pool\n    directory: q\n    shared: true\n",
      "t.yaml");
  ASSERT_TRUE(config.ok()) << config.status().ToString();
  const auto& gpu = std::get<GpuHbmTierOptions>(config->tiers[0]);
  EXPECT_EQ(gpu.capacity_bytes, uint64_t{2} << 30);
  EXPECT_EQ(gpu.device, 1);
  EXPECT_EQ(gpu.streams, 4);
  EXPECT_EQ(gpu.staging_bytes, uint64_t{16} << 20);
  const auto& remote = std::get<RemoteTierOptions>(config->tiers[1]);
  EXPECT_EQ(remote.topology, RemoteTopology::kHashRing);
  EXPECT_EQ(remote.endpoints, (std::vector<std::string>{"10.0.0.1:6379", "10.0.0.2:6379"}));
  EXPECT_EQ(remote.connections_per_node, 8);
  EXPECT_EQ(remote.timeout_ms, 250);
  EXPECT_EQ(remote.ttl_seconds, 3600u);
  EXPECT_EQ(remote.key_prefix, "kv:");
  EXPECT_EQ(remote.username, "kvtier");
  EXPECT_EQ(remote.password, "s3cret");
  EXPECT_TRUE(remote.shared);
  EXPECT_FALSE(std::get<NvmeTierOptions>(config->tiers[2]).recover);
  EXPECT_FALSE(std::get<ParallelFsTierOptions>(config->tiers[3]).recover);
  EXPECT_FALSE(std::get<ParallelFsTierOptions>(config->tiers[3]).shared);
  EXPECT_TRUE(std::get<ParallelFsTierOptions>(config->tiers[4]).shared);
}

TEST(TierConfig, DefaultIsDramThenNvmeUnderTheDataDir) {
  const TierConfig config = DefaultTierConfig("/tmp/x");
  ASSERT_EQ(config.tiers.size(), 2u);
  EXPECT_EQ(std::get<DramTierOptions>(config.tiers[0]).capacity_bytes, uint64_t{4} << 30);
  EXPECT_EQ(std::get<NvmeTierOptions>(config.tiers[1]).files, std::vector<std::string>{"/tmp/x/nvme/slab.0"});
}

TEST(TierConfig, OpensEveryTierFastestFirst) {
  const std::string dir = ::testing::TempDir() + "/kvtier-tier-config-" + std::to_string(::getpid());
  const std::string yaml = "data_dir: " + dir + "\ntiers:\n"
                           "  - kind: cpu_dram\n    capacity: 4MiB\n    lock_memory: false\n"
                           "  - kind: cxl_memory\n    path: cxl.bin\n    capacity: 4MiB\n"
                           "  - kind: nvme\n    files: [nvme/a, nvme/b]\n    capacity: 8MiB\n"
                           "  - kind: parallel_fs\n    directory: pfs\n    fsync: never\n";
  Result<TierConfig> config = ParseTierConfig(yaml, "t.yaml");
  ASSERT_TRUE(config.ok()) << config.status().ToString();
  Result<std::vector<std::unique_ptr<Tier>>> tiers = OpenTiers(*config);
  ASSERT_TRUE(tiers.ok()) << tiers.status().ToString();
  ASSERT_EQ(tiers->size(), 4u);
  EXPECT_EQ((*tiers)[0]->kind(), TierKind::kCpuDram);
  EXPECT_EQ((*tiers)[1]->kind(), TierKind::kCxlMemory);
  EXPECT_EQ((*tiers)[2]->kind(), TierKind::kNvme);
  EXPECT_EQ((*tiers)[3]->kind(), TierKind::kParallelFs);
  std::vector<std::byte> payload(5000, std::byte{3});
  for (auto& tier : *tiers) EXPECT_TRUE(tier->Write({1, 1}, payload).ok()) << tier->name();
  tiers->clear();
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace kvtier

namespace kvtier {
namespace {

Result<TierConfig> ParseDram(const std::string& extra) {
  return ParseTierConfig("tiers:\n  - kind: cpu_dram\n    capacity: 1GiB\n" + extra +
                             "  - kind: cxl_memory\n    path: /dev/shm/x\n    capacity: 1GiB\n" + extra,
                         "t.yaml");
}

// Issue 17: the DRAM and CXL tiers prefault by default; `prefault: false` turns it off.
TEST(TierConfig, PrefaultDefaultsToTrueAndParses) {
  for (const auto& [extra, expected] : {std::pair<std::string, bool>{"", true},
                                        {"    prefault: true\n", true},
                                        {"    prefault: false\n", false}}) {
    Result<TierConfig> config = ParseDram(extra);
    ASSERT_TRUE(config.ok()) << config.status().ToString();
    EXPECT_EQ(std::get<DramTierOptions>(config->tiers[0]).prefault, expected) << extra;
    EXPECT_EQ(std::get<CxlTierOptions>(config->tiers[1]).prefault, expected) << extra;
  }
}

TEST(TierConfig, PrefaultOfTheWrongTypeIsAnErrorNamingTheField) {
  for (const std::string value : {"yes", "1", "[true]"}) {
    Result<TierConfig> config = ParseDram("    prefault: " + value + "\n");
    ASSERT_FALSE(config.ok()) << value;
    EXPECT_EQ(config.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(config.status().message().find("tiers[0]"), std::string::npos) << config.status().ToString();
    EXPECT_NE(config.status().message().find("'prefault'"), std::string::npos) << config.status().ToString();
  }
}

}  // namespace
}  // namespace kvtier
