#include "kvtier/tier_config.h"

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
  Result<TierConfig> config = LoadTierConfig(std::string(KVTIER_TEST_FIXTURES) + "/../../examples/tiers-full.yaml");
  ASSERT_TRUE(config.ok()) << config.status().ToString();
  ASSERT_EQ(config->tiers.size(), 4u);
  const auto& dram = std::get<DramTierOptions>(config->tiers[0]);
  EXPECT_EQ(dram.capacity_bytes, uint64_t{64} << 30);
  EXPECT_EQ(dram.numa_node, 0);
  const auto& cxl = std::get<CxlTierOptions>(config->tiers[1]);
  EXPECT_EQ(cxl.path, "/dev/dax0.0");
  EXPECT_EQ(cxl.numa_node, 2);
  const auto& nvme = std::get<NvmeTierOptions>(config->tiers[2]);
  EXPECT_EQ(nvme.files, (std::vector<std::string>{"/var/lib/kvtier/nvme/slab.0", "/var/lib/kvtier/nvme/slab.1"}));
  EXPECT_EQ(nvme.capacity_bytes, 2'000'000'000'000ull);
  EXPECT_EQ(nvme.queue_depth, 64);
  const auto& pfs = std::get<ParallelFsTierOptions>(config->tiers[3]);
  EXPECT_EQ(pfs.directory, "/lustre/kvtier");
  EXPECT_EQ(pfs.fsync, FsyncPolicy::kFile);
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
  Result<TierConfig> gpu = ParseTierConfig("tiers:\n  - kind: gpu_hbm\n    capacity: 1GiB\n", "t.yaml");
  EXPECT_EQ(gpu.status().code(), StatusCode::kUnsupported);
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
