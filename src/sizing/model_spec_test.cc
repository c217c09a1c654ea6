#include "kvtier/model_spec.h"

#include <gtest/gtest.h>

#include "kvtier/model_catalog.h"
#include "kvtier/sizing.h"
#include "testing/test_paths.h"

namespace kvtier {
namespace {

const std::string kFixtures = testing::FixturesDir();

ModelSpec Load(const std::string& fixture) {
  Result<ModelSpec> spec = LoadModelConfig(kFixtures + "/configs/" + fixture);
  EXPECT_TRUE(spec.ok()) << spec.status().ToString();
  return spec.ok() ? *spec : ModelSpec{};
}

TEST(ModelSpec, MlaIsDetectedFromKvLoraRank) {
  Result<ModelSpec> spec = LoadCatalogModel("deepseek-v3");
  ASSERT_TRUE(spec.ok());
  EXPECT_EQ(spec->attention.kind, AttentionKind::kMla);
  EXPECT_EQ(spec->attention.head_dim_k, 512 + 64);
  EXPECT_EQ(spec->attention.num_kv_heads, 1);
  EXPECT_EQ(spec->mtp_layers, 1);
  EXPECT_EQ(spec->num_layers, 61);
}

TEST(ModelSpec, LegacyFalconKeysAndMultiQuery) {
  Result<ModelSpec> spec = LoadCatalogModel("falcon-7b");
  ASSERT_TRUE(spec.ok());
  EXPECT_EQ(spec->num_layers, 32);  // n_layer
  EXPECT_EQ(spec->attention.num_q_heads, 71);  // n_head
  EXPECT_EQ(spec->attention.num_kv_heads, 1);  // multi_query
  EXPECT_EQ(spec->attention.kind, AttentionKind::kMqa);
  EXPECT_EQ(spec->attention.head_dim_k, 4544 / 71);
}

TEST(ModelSpec, LegacyNHeadKv) {
  ModelSpec spec = Load("legacy_n_head_kv.json");
  EXPECT_EQ(spec.attention.num_kv_heads, 8);
  EXPECT_EQ(spec.attention.kind, AttentionKind::kGqa);
  EXPECT_EQ(spec.attention.head_dim_k, 8192 / 128);
}

TEST(ModelSpec, AbsentKvHeadsMeansMha) {
  ModelSpec spec = Load("mha_no_kv_heads.json");
  EXPECT_EQ(spec.attention.kind, AttentionKind::kMha);
  EXPECT_EQ(spec.attention.num_kv_heads, 32);
  EXPECT_EQ(spec.dtype, "float16");
}

TEST(ModelSpec, NonFiniteLiteralsAreAcceptedAndNullHeadDimDefaults) {
  ModelSpec spec = Load("nonfinite_literals.json");
  EXPECT_EQ(spec.attention.head_dim_k, 2048 / 32);
  EXPECT_EQ(spec.attention.num_kv_heads, 8);
  bool noted = false;
  for (const std::string& note : spec.notes) noted |= note.find("head_dim") != std::string::npos;
  EXPECT_TRUE(noted);
}

TEST(ModelSpec, NestedTextConfigAndGemma3SlidingPattern) {
  ModelSpec spec = Load("multimodal_wrapper.json");
  EXPECT_EQ(spec.model_type, "gemma3_text");
  EXPECT_EQ(spec.architecture, "Gemma3ForConditionalGeneration");
  EXPECT_EQ(spec.num_layers, 34);
  // Every 6th layer (5, 11, ...) attends fully: 34 / 6 = 5 full layers.
  EXPECT_EQ(spec.CountLayers(LayerMixer::kFullAttention), 5);
  EXPECT_EQ(spec.CountLayers(LayerMixer::kSlidingAttention), 29);
  EXPECT_EQ(spec.layers[5].mixer, LayerMixer::kFullAttention);
  EXPECT_EQ(spec.layers[0].window, 1024);
}

TEST(ModelSpec, Gemma2AlternatesStartingWithSliding) {
  Result<ModelSpec> spec = LoadCatalogModel("gemma-2-9b");
  ASSERT_TRUE(spec.ok());
  EXPECT_EQ(spec->layers[0].mixer, LayerMixer::kSlidingAttention);
  EXPECT_EQ(spec->layers[1].mixer, LayerMixer::kFullAttention);
}

TEST(ModelSpec, GptOssLayerTypesAreExplicit) {
  Result<ModelSpec> spec = LoadCatalogModel("gpt-oss-20b");
  ASSERT_TRUE(spec.ok());
  EXPECT_EQ(spec->layers[0].mixer, LayerMixer::kSlidingAttention);
  EXPECT_EQ(spec->layers[0].window, 128);
  EXPECT_EQ(spec->layers[1].mixer, LayerMixer::kFullAttention);
}

TEST(ModelSpec, Qwen25SlidingWindowDisabledByUseSlidingWindow) {
  Result<ModelSpec> spec = LoadCatalogModel("qwen2.5-7b");
  ASSERT_TRUE(spec.ok());
  EXPECT_EQ(spec->CountLayers(LayerMixer::kFullAttention), 28);
}

TEST(ModelSpec, MistralSlidingWindowSizeKeyIsRead) {
  Result<ModelSpec> spec = LoadCatalogModel("mistral-7b-v0.1");
  ASSERT_TRUE(spec.ok());
  EXPECT_EQ(spec->CountLayers(LayerMixer::kSlidingAttention), 32);
  EXPECT_EQ(spec->layers[31].window, 4096);
}

TEST(ModelSpec, Qwen3NextInterleavesGatedDeltaNet) {
  Result<ModelSpec> spec = LoadCatalogModel("qwen3-next-80b-a3b-thinking");
  ASSERT_TRUE(spec.ok());
  ASSERT_TRUE(spec->linear_state.has_value());
  EXPECT_EQ(spec->linear_state->kind, StateKind::kGatedDeltaNet);
  EXPECT_EQ(spec->layers[3].mixer, LayerMixer::kFullAttention);
  EXPECT_EQ(spec->layers[0].mixer, LayerMixer::kLinearAttention);
  EXPECT_EQ(spec->CountLayers(LayerMixer::kFullAttention), 12);
}

TEST(ModelSpec, JambaMamba1State) {
  ModelSpec spec = Load("jamba.json");
  ASSERT_TRUE(spec.linear_state.has_value());
  EXPECT_EQ(spec.linear_state->kind, StateKind::kMamba1);
  EXPECT_EQ(spec.CountLayers(LayerMixer::kFullAttention), 4);  // 4, 12, 20, 28
  EXPECT_EQ(spec.layers[4].mixer, LayerMixer::kFullAttention);
  Result<KvSizing> s = ComputeKvSizing(spec, {});
  ASSERT_TRUE(s.ok());
  // Mamba1: conv (2 x 4096) x (4 - 1) and SSM (2 x 4096) x 16, bf16; 28 Mamba layers.
  EXPECT_EQ(s->state_bytes_per_sequence, 28u * (8192u * 3u * 2u + 8192u * 16u * 2u));
  EXPECT_EQ(s->kv_bytes_per_token, 4u * 2u * 8u * 128u * 2u);
}

TEST(ModelSpec, NemotronHPatternWithNoKvLayers) {
  ModelSpec spec = Load("nemotron_h_small.json");
  EXPECT_EQ(spec.CountLayers(LayerMixer::kLinearAttention), 3);
  EXPECT_EQ(spec.CountLayers(LayerMixer::kFullAttention), 1);
  EXPECT_EQ(spec.CountLayers(LayerMixer::kNoKv), 4);
  Result<KvSizing> s = ComputeKvSizing(spec, {});
  ASSERT_TRUE(s.ok());
  // Mamba2: conv (32 x 64 + 2 x 8 x 128) x 3 and SSM 32 x 64 x 128, bf16.
  EXPECT_EQ(s->state_bytes_per_sequence, 3u * ((2048u + 2048u) * 3u * 2u + 32u * 64u * 128u * 2u));
  EXPECT_EQ(s->kv_bytes_per_token, 2u * 4u * 64u * 2u);
  // TP 16 replicates the 8 groups to 16 before splitting the conv channels.
  SizingOptions tp16;
  tp16.parallel.tensor_parallel = 16;
  Result<KvSizing> split = ComputeKvSizing(spec, tp16);
  ASSERT_TRUE(split.ok()) << split.status().ToString();
  EXPECT_EQ(split->state_bytes_per_sequence,
            3u * ((2048u + 2u * 16u * 128u) / 16u * 3u * 2u + 2u * 64u * 128u * 2u));
}

TEST(ModelSpec, PureMamba2HasNoKvAndAConstantState) {
  ModelSpec spec = Load("mamba2.json");
  EXPECT_EQ(spec.CountLayers(LayerMixer::kLinearAttention), 64);
  Result<KvSizing> s = ComputeKvSizing(spec, {});
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->kv_bytes_per_token, 0u);
  EXPECT_EQ(s->state_bytes_per_sequence, 64u * ((5120u + 2u * 128u) * 3u * 2u + 80u * 64u * 128u * 2u));
}

struct BadConfig {
  const char* file;
  const char* expected_in_message;
};

class BadConfigTest : public ::testing::TestWithParam<BadConfig> {};

TEST_P(BadConfigTest, IsAClearErrorNamingFileAndField) {
  const std::string path = kFixtures + "/bad_configs/" + GetParam().file;
  Result<ModelSpec> spec = LoadModelConfig(path);
  ASSERT_FALSE(spec.ok());
  EXPECT_EQ(spec.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(spec.status().message().find(path), std::string::npos) << spec.status().message();
  EXPECT_NE(spec.status().message().find(GetParam().expected_in_message), std::string::npos)
      << spec.status().message();
}

INSTANTIATE_TEST_SUITE_P(
    All, BadConfigTest,
    ::testing::Values(BadConfig{"not_json.json", "not valid JSON"}, BadConfig{"empty.json", "not valid JSON"},
                      BadConfig{"array_top_level.json", "JSON object"},
                      BadConfig{"missing_heads.json", "num_attention_heads"},
                      BadConfig{"negative_layers.json", "num_hidden_layers' must be >= 1, got -3"},
                      BadConfig{"zero_hidden.json", "hidden_size' must be >= 1, got 0"},
                      BadConfig{"string_heads.json", "num_attention_heads' must be an integer, got string"},
                      BadConfig{"kv_heads_not_dividing.json", "num_key_value_heads"},
                      BadConfig{"layer_types_wrong_length.json", "has 2 entries but num_hidden_layers is 3"},
                      BadConfig{"unknown_layer_type.json", "telepathy"},
                      BadConfig{"no_model_type.json", "model_type"},
                      BadConfig{"infinite_layers.json", "finite integer, got Infinity"},
                      BadConfig{"unknown_dtype.json", "float7"},
                      BadConfig{"head_dim_not_integral.json", "head_dim"},
                      BadConfig{"mla_missing_rope.json", "qk_rope_head_dim"}),
    [](const auto& param_info) {
      std::string name = param_info.param.file;
      return name.substr(0, name.find('.'));
    });

TEST(ModelSpec, MissingFileIsNotFound) {
  Result<ModelSpec> spec = LoadModelConfig(kFixtures + "/no/such/config.json");
  ASSERT_FALSE(spec.ok());
  EXPECT_EQ(spec.status().code(), StatusCode::kNotFound);
}

TEST(Catalog, NamesMatchIgnoringCaseAndPunctuation) {
  EXPECT_TRUE(LoadCatalogModel("DeepSeek-V3").ok());
  EXPECT_TRUE(LoadCatalogModel("qwen-2.5-72b").ok());
  Result<ModelSpec> missing = LoadCatalogModel("gpt-5");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("deepseek-v3"), std::string::npos);
}

}  // namespace
}  // namespace kvtier
