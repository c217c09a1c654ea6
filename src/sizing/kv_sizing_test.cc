// Every expected number here is derived in the test from the model's published config
// values (layers, heads, head_dim, ...) with the formulas written out, never by calling
// the code under test.
#include "kvtier/sizing.h"

#include <gtest/gtest.h>

#include "kvtier/model_catalog.h"

namespace kvtier {
namespace {

KvSizing Size(std::string_view model, SizingOptions options = {}) {
  Result<ModelSpec> spec = LoadCatalogModel(model);
  EXPECT_TRUE(spec.ok()) << spec.status().ToString();
  Result<KvSizing> sizing = ComputeKvSizing(*spec, options);
  EXPECT_TRUE(sizing.ok()) << sizing.status().ToString();
  return *sizing;
}

SizingOptions WithTp(int64_t tp) {
  SizingOptions options;
  options.parallel.tensor_parallel = tp;
  return options;
}

SizingOptions WithDtype(std::string dtype) {
  SizingOptions options;
  options.kv_dtype = std::move(dtype);
  return options;
}

// The paper's table, at bf16 (2 bytes).
TEST(PaperTable, DeepSeekV3MlaIs1152Versus65536) {
  KvSizing s = Size("deepseek-v3");
  EXPECT_EQ(s.kv_bytes_per_token_per_layer, (512u + 64u) * 2u);
  EXPECT_EQ(s.naive_mha_bytes_per_token_per_layer, 2u * 128u * 128u * 2u);
  EXPECT_NEAR(s.overprovision_ratio, 65536.0 / 1152.0, 1e-9);
  EXPECT_EQ(static_cast<int>(s.overprovision_ratio + 0.5), 57);
}

TEST(PaperTable, Llama3_70B) {
  KvSizing s = Size("llama-3-70b");
  EXPECT_EQ(s.kv_bytes_per_token_per_layer, 2u * 8u * 128u * 2u);
  EXPECT_EQ(s.naive_mha_bytes_per_token_per_layer, 2u * 64u * 128u * 2u);
  EXPECT_DOUBLE_EQ(s.overprovision_ratio, 8.0);
}

TEST(PaperTable, Mixtral8x22B) {
  KvSizing s = Size("mixtral-8x22b-v0.1");
  EXPECT_EQ(s.kv_bytes_per_token_per_layer, 4096u);
  EXPECT_EQ(s.naive_mha_bytes_per_token_per_layer, 2u * 48u * 128u * 2u);
  EXPECT_DOUBLE_EQ(s.overprovision_ratio, 6.0);
}

TEST(PaperTable, Qwen25_72B) {
  KvSizing s = Size("qwen2.5-72b");
  EXPECT_EQ(s.kv_bytes_per_token_per_layer, 4096u);
  EXPECT_EQ(s.naive_mha_bytes_per_token_per_layer, 32768u);
}

struct CatalogExpectation {
  const char* model;
  uint64_t per_layer;    // bytes per token of one attention layer, bf16, TP 1
  uint64_t naive;        // 2 x q_heads x head_dim x 2
  int64_t full_layers;
  int64_t sliding_layers;
  int64_t window;
  int64_t linear_layers;
  uint64_t state_per_layer;
};

// Values from each config.json (data/models), formulas written out.
const CatalogExpectation kCatalog[] = {
    {"deepseek-v2-lite", (512 + 64) * 2, 2 * 16 * 128 * 2, 27, 0, 0, 0, 0},
    {"deepseek-v3", (512 + 64) * 2, 2 * 128 * 128 * 2, 61, 0, 0, 0, 0},
    {"falcon-7b", 2 * 1 * (4544 / 71) * 2, 2 * 71 * 64 * 2, 32, 0, 0, 0, 0},
    {"gemma-2-9b", 2 * 8 * 256 * 2, 2 * 16 * 256 * 2, 21, 21, 4096, 0, 0},
    {"gpt-oss-20b", 2 * 8 * 64 * 2, 2 * 64 * 64 * 2, 12, 12, 128, 0, 0},
    {"llama-3-70b", 2 * 8 * 128 * 2, 2 * 64 * 128 * 2, 80, 0, 0, 0, 0},
    {"llama-3-8b", 2 * 8 * 128 * 2, 2 * 32 * 128 * 2, 32, 0, 0, 0, 0},
    {"llama-3.1-405b", 2 * 8 * 128 * 2, 2 * 128 * 128 * 2, 126, 0, 0, 0, 0},
    {"llama-3.1-8b", 2 * 8 * 128 * 2, 2 * 32 * 128 * 2, 32, 0, 0, 0, 0},
    {"mistral-7b-v0.1", 2 * 8 * 128 * 2, 2 * 32 * 128 * 2, 0, 32, 4096, 0, 0},
    {"mixtral-8x22b-v0.1", 2 * 8 * 128 * 2, 2 * 48 * 128 * 2, 56, 0, 0, 0, 0},
    {"mixtral-8x7b-v0.1", 2 * 8 * 128 * 2, 2 * 32 * 128 * 2, 32, 0, 0, 0, 0},
    {"phi-3-mini-4k-instruct", 2 * 32 * 96 * 2, 2 * 32 * 96 * 2, 0, 32, 2047, 0, 0},
    {"qwen2.5-72b", 2 * 8 * 128 * 2, 2 * 64 * 128 * 2, 80, 0, 0, 0, 0},
    {"qwen2.5-7b", 2 * 4 * 128 * 2, 2 * 28 * 128 * 2, 28, 0, 0, 0, 0},
    {"qwen3-235b-a22b", 2 * 4 * 128 * 2, 2 * 64 * 128 * 2, 94, 0, 0, 0, 0},
    {"qwen3-8b", 2 * 8 * 128 * 2, 2 * 32 * 128 * 2, 36, 0, 0, 0, 0},
    // Gated DeltaNet: conv (4 - 1) x (2 x 16 x 128 + 32 x 128) and SSM 32 x 128 x 128, bf16.
    {"qwen3-next-80b-a3b-thinking", 2 * 2 * 256 * 2, 2 * 16 * 256 * 2, 12, 0, 0, 36,
     3 * (2 * 16 * 128 + 32 * 128) * 2 + 32 * 128 * 128 * 2},
};

TEST(Catalog, EveryModelIsCoveredByTheExpectations) {
  EXPECT_EQ(ListCatalog().size(), std::size(kCatalog));
}

class CatalogModel : public ::testing::TestWithParam<CatalogExpectation> {};

TEST_P(CatalogModel, MatchesIndependentlyDerivedBytes) {
  const CatalogExpectation& e = GetParam();
  KvSizing s = Size(e.model);
  EXPECT_EQ(s.kv_bytes_per_token_per_layer, e.per_layer);
  EXPECT_EQ(s.naive_mha_bytes_per_token_per_layer, e.naive);
  EXPECT_EQ(s.kv_bytes_per_token, e.per_layer * static_cast<uint64_t>(e.full_layers + e.sliding_layers));
  EXPECT_EQ(s.state_bytes_per_sequence, e.state_per_layer * static_cast<uint64_t>(e.linear_layers));
  EXPECT_EQ(s.kv_bytes_per_block, 16 * s.kv_bytes_per_token);
  int64_t full = 0, sliding = 0, linear = 0;
  for (const LayerGroupSizing& g : s.groups) {
    if (g.mixer == LayerMixer::kFullAttention) full += g.layers;
    if (g.mixer == LayerMixer::kSlidingAttention) {
      sliding += g.layers;
      EXPECT_EQ(g.window, e.window);
    }
    if (g.mixer == LayerMixer::kLinearAttention) {
      linear += g.layers;
      EXPECT_EQ(g.state_bytes_per_sequence_per_layer, e.state_per_layer);
    }
  }
  EXPECT_EQ(full, e.full_layers);
  EXPECT_EQ(sliding, e.sliding_layers);
  EXPECT_EQ(linear, e.linear_layers);
}

INSTANTIATE_TEST_SUITE_P(All, CatalogModel, ::testing::ValuesIn(kCatalog),
                         [](const auto& param_info) {
                           std::string name = param_info.param.model;
                           for (char& c : name) {
                             if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
                           }
                           return name;
                         });

TEST(TensorParallel, GqaHeadsAreSplitThenReplicated) {
  EXPECT_EQ(Size("llama-3-70b", WithTp(8)).kv_bytes_per_token_per_layer, 2u * (8u / 8u) * 128u * 2u);
  EXPECT_EQ(Size("llama-3-70b", WithTp(2)).kv_bytes_per_token_per_layer, 2u * (8u / 2u) * 128u * 2u);
  KvSizing replicated = Size("llama-3-70b", WithTp(16));
  EXPECT_EQ(replicated.kv_heads_per_gpu, 1);
  EXPECT_EQ(replicated.kv_bytes_per_token_per_layer, 2u * 1u * 128u * 2u);
  EXPECT_EQ(replicated.kv_bytes_per_token_all_gpus, 2u * 128u * 2u * 80u * 16u);
  EXPECT_EQ(replicated.naive_mha_bytes_per_token_per_layer, 2u * (64u / 16u) * 128u * 2u);
}

TEST(TensorParallel, MlaLatentIsReplicatedOnEveryRank) {
  KvSizing s = Size("deepseek-v3", WithTp(8));
  EXPECT_EQ(s.kv_bytes_per_token_per_layer, 1152u);
  EXPECT_EQ(s.kv_bytes_per_token_all_gpus, 1152u * 61u * 8u);
  EXPECT_EQ(s.naive_mha_bytes_per_token_per_layer, 2u * (128u / 8u) * 128u * 2u);
  EXPECT_NEAR(s.overprovision_ratio, 8192.0 / 1152.0, 1e-9);
}

TEST(TensorParallel, MqaHeadIsReplicated) {
  SizingOptions options = WithTp(71);
  Result<ModelSpec> falcon = LoadCatalogModel("falcon-7b");
  ASSERT_TRUE(falcon.ok());
  Result<KvSizing> s = ComputeKvSizing(*falcon, options);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(s->kv_bytes_per_token_per_layer, 2u * 64u * 2u);
}

TEST(TensorParallel, SizeThatDoesNotDivideTheHeadsIsAnError) {
  Result<ModelSpec> falcon = LoadCatalogModel("falcon-7b");
  ASSERT_TRUE(falcon.ok());
  Result<KvSizing> s = ComputeKvSizing(*falcon, WithTp(2));  // 71 query heads
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.status().message().find("num_attention_heads"), std::string::npos);
}

TEST(TensorParallel, GatedDeltaNetStateIsSplitByValueHeads) {
  // conv channels and value heads are split; KV heads (2) replicate from TP 4 on.
  KvSizing tp2 = Size("qwen3-next-80b-a3b-thinking", WithTp(2));
  EXPECT_EQ(tp2.kv_bytes_per_token_per_layer, 2u * 1u * 256u * 2u);
  EXPECT_EQ(tp2.state_bytes_per_sequence, 36u * (3u * (8192u / 2u) * 2u + (32u / 2u) * 128u * 128u * 2u));
  KvSizing tp4 = Size("qwen3-next-80b-a3b-thinking", WithTp(4));
  EXPECT_EQ(tp4.kv_heads_per_gpu, 1);
  EXPECT_EQ(tp4.state_bytes_per_sequence, 36u * (3u * (8192u / 4u) * 2u + (32u / 4u) * 128u * 128u * 2u));
}

TEST(PipelineParallel, RemainderGoesToStagesBeforeTheLast) {
  auto stages = PipelineStages(32, 3);
  ASSERT_EQ(stages.size(), 3u);
  EXPECT_EQ(stages[0], std::make_pair(int64_t{0}, int64_t{11}));
  EXPECT_EQ(stages[1], std::make_pair(int64_t{11}, int64_t{22}));
  EXPECT_EQ(stages[2], std::make_pair(int64_t{22}, int64_t{32}));
  SizingOptions options;
  options.parallel.pipeline_parallel = 3;
  KvSizing s = Size("llama-3-8b", options);
  EXPECT_EQ(s.layers_per_gpu, 11);
  EXPECT_EQ(s.kv_bytes_per_token, 11u * 4096u);
  EXPECT_EQ(s.kv_bytes_per_token_all_gpus, 32u * 4096u);
}

TEST(PipelineParallel, HybridStagesReportTheHeaviest) {
  // Qwen3-Next: full attention at layers 3, 7, ..., 47. Four stages of 12 layers, 3 each.
  SizingOptions options;
  options.parallel.pipeline_parallel = 4;
  KvSizing s = Size("qwen3-next-80b-a3b-thinking", options);
  EXPECT_EQ(s.layers_per_gpu, 12);
  EXPECT_EQ(s.kv_bytes_per_token, 3u * 2048u);
  EXPECT_EQ(s.state_bytes_per_sequence, 9u * 1097728u);
}

TEST(PipelineParallel, MoreStagesThanLayersIsAnError) {
  Result<ModelSpec> model = LoadCatalogModel("llama-3-8b");
  ASSERT_TRUE(model.ok());
  SizingOptions options;
  options.parallel.pipeline_parallel = 33;
  EXPECT_FALSE(ComputeKvSizing(*model, options).ok());
}

TEST(KvDtypes, QuantizedFormatsCountTheirScales) {
  EXPECT_EQ(Size("llama-3-8b", WithDtype("fp32")).kv_bytes_per_token_per_layer, 2u * 8u * 128u * 4u);
  EXPECT_EQ(Size("llama-3-8b", WithDtype("fp8")).kv_bytes_per_token_per_layer, 2u * 8u * 128u * 1u);
  // int8: one fp32 scale per token and head (vLLM's int8_per_token_head).
  EXPECT_EQ(Size("llama-3-8b", WithDtype("int8")).kv_bytes_per_token_per_layer, 2u * 8u * (128u + 4u));
  // int4: 4 bits plus one fp16 scale per 32 elements.
  EXPECT_EQ(Size("llama-3-8b", WithDtype("int4")).kv_bytes_per_token_per_layer, 2u * 8u * (64u + 4u * 2u));
  // nvfp4: 4 bits plus one fp8 scale per 16 (vLLM's packed layout).
  EXPECT_EQ(Size("llama-3-8b", WithDtype("nvfp4")).kv_bytes_per_token_per_layer, 2u * 8u * (64u + 8u));
  EXPECT_EQ(Size("deepseek-v3", WithDtype("fp8")).kv_bytes_per_token_per_layer, 576u);
  EXPECT_EQ(Size("deepseek-v3", WithDtype("int8")).kv_bytes_per_token_per_layer, 576u + 4u);
  SizingOptions grouped = WithDtype("int4");
  grouped.kv_quant_group = 64;
  EXPECT_EQ(Size("llama-3-8b", grouped).kv_bytes_per_token_per_layer, 2u * 8u * (64u + 2u * 2u));
}

TEST(KvDtypes, UnknownNameIsAnError) {
  Result<KvDtype> dtype = ParseKvDtype("fp6", "bfloat16");
  ASSERT_FALSE(dtype.ok());
  EXPECT_NE(dtype.status().message().find("fp6"), std::string::npos);
}

TEST(KvDtypes, StateDtypeCanBeWidened) {
  SizingOptions options;
  options.state_dtype = "fp32";
  KvSizing s = Size("qwen3-next-80b-a3b-thinking", options);
  EXPECT_EQ(s.state_bytes_per_sequence, 36u * (3u * 8192u * 2u + 32u * 128u * 128u * 4u));
}

TEST(BytesPerSequence, SlidingLayersAreCappedAtTheirWindow) {
  KvSizing s = Size("gpt-oss-20b");
  // 12 full layers keep 8192 tokens; 12 sliding layers keep (128 - 1 + 256) tokens rounded
  // up to 16-token blocks, plus one block: 24 + 1 blocks.
  const uint64_t full = 12u * 8192u * 2048u;
  const uint64_t sliding = 12u * (24u + 1u) * 16u * 2048u;
  EXPECT_EQ(s.BytesPerSequence(8192, 256), full + sliding);
  // A chunk as large as the context keeps every block of the sliding layers too.
  EXPECT_EQ(s.BytesPerSequence(8192, 8192), 24u * 8192u * 2048u);
}

TEST(BytesPerSequence, PartialBlocksRoundUpAndStateIsAdded) {
  KvSizing s = Size("qwen3-next-80b-a3b-thinking");
  EXPECT_EQ(s.BytesPerSequence(1000, 8192), 12u * 1008u * 2048u + 36u * 1097728u);
}

TEST(Options, InvalidValuesAreRejected) {
  Result<ModelSpec> model = LoadCatalogModel("llama-3-8b");
  ASSERT_TRUE(model.ok());
  SizingOptions options;
  options.block_size = 0;
  EXPECT_FALSE(ComputeKvSizing(*model, options).ok());
  options = WithTp(0);
  EXPECT_FALSE(ComputeKvSizing(*model, options).ok());
  options = WithTp(-4);
  EXPECT_FALSE(ComputeKvSizing(*model, options).ok());
}

}  // namespace
}  // namespace kvtier
