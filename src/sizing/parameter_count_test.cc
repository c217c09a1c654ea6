// Parameter totals computed from each config.json, checked against the totals Hugging Face
// reports for the released safetensors checkpoints (model cards / hub metadata).
#include <gtest/gtest.h>

#include "kvtier/capacity_plan.h"
#include "kvtier/model_catalog.h"

namespace kvtier {
namespace {

struct Published {
  const char* model;
  int64_t parameters;
};

// Exact counts of the released checkpoints (DeepSeek-V3 without its 14B MTP module).
const Published kExact[] = {
    {"deepseek-v2-lite", 15'706'484'224},  {"deepseek-v3", 671'026'419'200},
    {"falcon-7b", 6'921'720'704},          {"gemma-2-9b", 9'241'705'984},
    {"gpt-oss-20b", 20'914'757'184},       {"llama-3-70b", 70'553'706'496},
    {"llama-3-8b", 8'030'261'248},         {"llama-3.1-405b", 405'853'388'800},
    {"llama-3.1-8b", 8'030'261'248},       {"mistral-7b-v0.1", 7'241'732'096},
    {"mixtral-8x22b-v0.1", 140'620'634'112}, {"mixtral-8x7b-v0.1", 46'702'792'704},
    {"phi-3-mini-4k-instruct", 3'821'079'552}, {"qwen2.5-72b", 72'706'203'648},
    {"qwen2.5-7b", 7'615'616'512},         {"qwen3-235b-a22b", 235'093'634'560},
    {"qwen3-8b", 8'190'735'360},
};

class PublishedCount : public ::testing::TestWithParam<Published> {};

TEST_P(PublishedCount, MatchesTheReleasedCheckpoint) {
  Result<ModelSpec> spec = LoadCatalogModel(GetParam().model);
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  EXPECT_EQ(spec->parameters.total, GetParam().parameters);
}

INSTANTIATE_TEST_SUITE_P(All, PublishedCount, ::testing::ValuesIn(kExact), [](const auto& param_info) {
  std::string name = param_info.param.model;
  for (char& c : name) {
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
  }
  return name;
});

TEST(ParameterCount, MixtureOfExpertsActiveParameters) {
  // Published: Mixtral-8x7B 12.9B active, Qwen3-235B-A22B 22B, DeepSeek-V3 37B, Qwen3-Next 80B / 3B.
  auto active_billions = [](const char* model) {
    Result<ModelSpec> spec = LoadCatalogModel(model);
    EXPECT_TRUE(spec.ok());
    return static_cast<double>(spec->parameters.active_per_token) / 1e9;
  };
  EXPECT_NEAR(active_billions("mixtral-8x7b-v0.1"), 12.9, 0.05);
  EXPECT_NEAR(active_billions("qwen3-235b-a22b"), 22.2, 0.1);
  EXPECT_NEAR(active_billions("deepseek-v3"), 37.5, 0.1);
  Result<ModelSpec> next = LoadCatalogModel("qwen3-next-80b-a3b-thinking");
  ASSERT_TRUE(next.ok());
  EXPECT_NEAR(static_cast<double>(next->parameters.total) / 80e9, 1.0, 0.01);
}

TEST(WeightBytes, CheckpointFormatsAndOverrides) {
  Result<ModelSpec> llama = LoadCatalogModel("llama-3-8b");
  ASSERT_TRUE(llama.ok());
  Result<uint64_t> bf16 = WeightBytes(*llama, std::nullopt);
  ASSERT_TRUE(bf16.ok());
  EXPECT_EQ(*bf16, 2u * 8'030'261'248u);
  Result<uint64_t> fp8 = WeightBytes(*llama, std::string("fp8"));
  ASSERT_TRUE(fp8.ok());
  EXPECT_EQ(*fp8, 8'030'261'248u);

  // DeepSeek-V3 ships fp8 projections with one fp32 scale per 128x128 block; embeddings,
  // lm_head and norms stay bf16.
  Result<ModelSpec> v3 = LoadCatalogModel("deepseek-v3");
  ASSERT_TRUE(v3.ok());
  Result<uint64_t> v3_bytes = WeightBytes(*v3, std::nullopt);
  ASSERT_TRUE(v3_bytes.ok());
  const ParameterCount& p = v3->parameters;
  const double linear = static_cast<double>(p.total - p.embedding - p.lm_head - p.norms);
  const double expected = linear * (1.0 + 4.0 / (128 * 128)) + 2.0 * static_cast<double>(p.embedding + p.lm_head + p.norms);
  EXPECT_NEAR(static_cast<double>(*v3_bytes), expected, 2.0);

  Result<uint64_t> bad = WeightBytes(*llama, std::string("fp5"));
  EXPECT_FALSE(bad.ok());
}

}  // namespace
}  // namespace kvtier
