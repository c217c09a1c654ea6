#include "kvtier/capacity_plan.h"

#include <gtest/gtest.h>

#include "kvtier/model_catalog.h"

namespace kvtier {
namespace {

constexpr uint64_t kGiB = 1024ull * 1024 * 1024;

struct Sized {
  ModelSpec model;
  KvSizing kv;
};

Sized SizeCatalog(const char* name, int64_t tp = 1) {
  Result<ModelSpec> model = LoadCatalogModel(name);
  EXPECT_TRUE(model.ok());
  SizingOptions options;
  options.parallel.tensor_parallel = tp;
  Result<KvSizing> kv = ComputeKvSizing(*model, options);
  EXPECT_TRUE(kv.ok()) << kv.status().ToString();
  return {*model, *kv};
}

TEST(GpuMemoryPlan, Llama3_8BOnOne80GiBGpu) {
  Sized s = SizeCatalog("llama-3-8b");
  GpuMemoryOptions options;
  options.gpu_mem_gib = 80;
  options.gpu_util = 0.9;
  options.context = 8192;
  options.activation_reserve_gib = 2;
  Result<GpuMemoryPlan> plan = PlanGpuMemory(s.model, s.kv, options);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  const uint64_t usable = static_cast<uint64_t>(80 * 0.9 * static_cast<double>(kGiB));
  const uint64_t weights = 2ull * 8'030'261'248ull;
  const uint64_t budget = usable - weights - 2 * kGiB;
  const uint64_t per_token = 32ull * 2 * 8 * 128 * 2;
  EXPECT_EQ(plan->weight_bytes_per_gpu, weights);
  EXPECT_EQ(static_cast<uint64_t>(plan->kv_budget_bytes), budget);
  EXPECT_EQ(static_cast<uint64_t>(plan->max_tokens), budget / per_token);
  EXPECT_EQ(static_cast<uint64_t>(plan->max_batch), budget / (8192 * per_token));
  EXPECT_EQ(plan->limited_by, "kv_cache");
}

TEST(GpuMemoryPlan, NaiveMhaBatchUsesTheSameBudget) {
  Sized s = SizeCatalog("deepseek-v3", 8);
  GpuMemoryOptions options;
  options.gpu_mem_gib = 141;
  options.context = 8192;
  options.activation_reserve_gib = 1;
  Result<GpuMemoryPlan> plan = PlanGpuMemory(s.model, s.kv, options);
  ASSERT_TRUE(plan.ok());
  ASSERT_GT(plan->kv_budget_bytes, 0);
  const auto budget = static_cast<uint64_t>(plan->kv_budget_bytes);
  // Per GPU under TP 8: naive MHA keeps 128 / 8 heads x 2 x 128 x 2 bytes, MLA one 576 x 2 latent.
  EXPECT_EQ(static_cast<uint64_t>(plan->naive_mha_max_batch), budget / (8192ull * 61 * (2 * 16 * 128 * 2)));
  EXPECT_EQ(static_cast<uint64_t>(plan->max_batch), budget / (8192ull * 61 * 1152));
}

TEST(GpuMemoryPlan, WeightsThatDoNotFitAreNamed) {
  Sized s = SizeCatalog("llama-3.1-405b");
  GpuMemoryOptions options;
  options.gpu_mem_gib = 80;
  options.context = 4096;
  Result<GpuMemoryPlan> plan = PlanGpuMemory(s.model, s.kv, options);
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->limited_by, "weights");
  EXPECT_EQ(plan->max_batch, 0);
  EXPECT_LT(plan->kv_budget_bytes, 0);
  EXPECT_NE(plan->explanation.find("--tp"), std::string::npos);
}

TEST(GpuMemoryPlan, ContextTooLongForOneSequence) {
  Sized s = SizeCatalog("llama-3-8b");
  GpuMemoryOptions options;
  options.gpu_mem_gib = 24;
  options.context = 1'000'000;
  Result<GpuMemoryPlan> plan = PlanGpuMemory(s.model, s.kv, options);
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->limited_by, "context");
  EXPECT_EQ(plan->max_batch, 0);
  EXPECT_GT(plan->max_tokens, 0);
}

TEST(GpuMemoryPlan, MaxNumSeqsCapsTheBatch) {
  Sized s = SizeCatalog("llama-3-8b");
  GpuMemoryOptions options;
  options.gpu_mem_gib = 80;
  options.context = 1024;
  options.max_num_seqs = 16;
  Result<GpuMemoryPlan> plan = PlanGpuMemory(s.model, s.kv, options);
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->max_batch, 16);
  EXPECT_EQ(plan->limited_by, "max_num_seqs");
}

TEST(GpuMemoryPlan, TensorParallelSplitsWeightsAndHeads) {
  Sized tp1 = SizeCatalog("llama-3-70b", 1);
  Sized tp8 = SizeCatalog("llama-3-70b", 8);
  GpuMemoryOptions options;
  options.gpu_mem_gib = 80;
  options.context = 4096;
  options.activation_reserve_gib = 4;
  Result<GpuMemoryPlan> single = PlanGpuMemory(tp1.model, tp1.kv, options);
  Result<GpuMemoryPlan> eight = PlanGpuMemory(tp8.model, tp8.kv, options);
  ASSERT_TRUE(single.ok() && eight.ok());
  EXPECT_EQ(single->limited_by, "weights");  // 141 GB of bf16 weights on one 80 GiB GPU
  EXPECT_EQ(eight->weight_bytes_per_gpu, (2ull * 70'553'706'496ull + 7) / 8);
  EXPECT_EQ(eight->limited_by, "kv_cache");
  EXPECT_GT(eight->max_batch, 0);
}

TEST(GpuMemoryPlan, InvalidOptionsAreRejected) {
  Sized s = SizeCatalog("llama-3-8b");
  GpuMemoryOptions options;
  options.gpu_mem_gib = 80;
  options.context = 0;
  EXPECT_FALSE(PlanGpuMemory(s.model, s.kv, options).ok());
  options.context = 10;
  options.gpu_util = 1.5;
  EXPECT_FALSE(PlanGpuMemory(s.model, s.kv, options).ok());
  options.gpu_util = 0.9;
  options.gpu_mem_gib = -1;
  EXPECT_FALSE(PlanGpuMemory(s.model, s.kv, options).ok());
}

TEST(ByteSize, UnitsAndErrors) {
  EXPECT_EQ(*ParseByteSize("80GiB"), 80 * kGiB);
  EXPECT_EQ(*ParseByteSize("512GB"), 512'000'000'000ull);
  EXPECT_EQ(*ParseByteSize("1.5TiB"), 3 * 512 * kGiB);
  EXPECT_EQ(*ParseByteSize("4096"), 4096u);
  EXPECT_FALSE(ParseByteSize("lots").ok());
  EXPECT_FALSE(ParseByteSize("12 parsecs").ok());
  EXPECT_FALSE(ParseByteSize("").ok());
  EXPECT_FALSE(ParseByteSize("1e30TB").ok());
}

TEST(Tiers, YamlIsParsedAndTokensFit) {
  Result<std::vector<TierCapacity>> tiers = ParseTierCapacities(
      "tiers:\n  - name: gpu_hbm\n    capacity: 64GiB\n  - name: cpu_dram\n    capacity_bytes: 1099511627776\n",
      "tiers.yaml");
  ASSERT_TRUE(tiers.ok()) << tiers.status().ToString();
  ASSERT_EQ(tiers->size(), 2u);
  Sized s = SizeCatalog("deepseek-v3", 8);
  std::vector<TierFit> fits = FitTiers(s.kv, *tiers, 4096, 8192);
  const uint64_t per_token_all_gpus = 1152ull * 61 * 8;
  EXPECT_EQ(static_cast<uint64_t>(fits[0].tokens), 64 * kGiB / per_token_all_gpus);
  EXPECT_EQ(static_cast<uint64_t>(fits[1].tokens), 1024 * kGiB / per_token_all_gpus);
  EXPECT_EQ(static_cast<uint64_t>(fits[1].sequences), 1024 * kGiB / (4096 * per_token_all_gpus));
}

TEST(Tiers, BadYamlIsAClearError) {
  auto error_of = [](const std::string& text) {
    Result<std::vector<TierCapacity>> tiers = ParseTierCapacities(text, "t.yaml");
    EXPECT_FALSE(tiers.ok());
    return tiers.ok() ? std::string() : tiers.status().message();
  };
  EXPECT_NE(error_of("tiers: [").find("not valid YAML"), std::string::npos);
  EXPECT_NE(error_of("layers: []").find("'tiers:'"), std::string::npos);
  EXPECT_NE(error_of("tiers: []").find("empty"), std::string::npos);
  EXPECT_NE(error_of("tiers:\n  - name: x\n").find("capacity"), std::string::npos);
  EXPECT_NE(error_of("tiers:\n  - name: x\n    capacity: 0\n").find("zero"), std::string::npos);
  EXPECT_NE(error_of("tiers:\n  - name: x\n    capacity: lots\n").find("tiers[0].capacity"), std::string::npos);
  EXPECT_NE(error_of("tiers:\n  - capacity: 1GB\n").find("name"), std::string::npos);
}

}  // namespace
}  // namespace kvtier
