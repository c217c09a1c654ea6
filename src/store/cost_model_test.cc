#include "kvtier/cost_model.h"

#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "kvtier/model_catalog.h"
#include "kvtier/sizing.h"

namespace kvtier {
namespace {

ModelSpec Catalog(const char* name) {
  Result<ModelSpec> spec = LoadCatalogModel(name);
  EXPECT_TRUE(spec.ok()) << spec.status().ToString();
  return std::move(spec).value();
}

GpuSpec H100() {
  Result<GpuSpec> gpu = GpuPreset("H100 SXM");
  EXPECT_TRUE(gpu.ok()) << gpu.status().ToString();
  return std::move(gpu).value();
}

PrefillCostModel Make(const char* model, const GpuSpec& gpu, int64_t tp = 1) {
  Result<PrefillCostModel> out = PrefillCostModel::Create(Catalog(model), gpu, tp);
  EXPECT_TRUE(out.ok()) << out.status().ToString();
  return std::move(out).value();
}

TEST(CostModelGpu, PresetsMatchTheDatasheets) {
  EXPECT_DOUBLE_EQ(H100().dense_flops, 989e12);
  EXPECT_DOUBLE_EQ(H100().hbm_bytes_per_s, 3.35e12);
  EXPECT_DOUBLE_EQ(H100().mfu, 0.5);
  Result<GpuSpec> h200 = GpuPreset("h200");
  ASSERT_TRUE(h200.ok());
  EXPECT_DOUBLE_EQ(h200->hbm_bytes_per_s, 4.8e12);
  Result<GpuSpec> a100 = GpuPreset("A100");
  ASSERT_TRUE(a100.ok());
  EXPECT_EQ(a100->name, "a100-80gb");
  EXPECT_DOUBLE_EQ(a100->dense_flops, 312e12);
  Result<GpuSpec> b200 = GpuPreset("B200");
  ASSERT_TRUE(b200.ok());
  EXPECT_DOUBLE_EQ(b200->dense_flops, 2.25e15);
  Result<GpuSpec> missing = GpuPreset("rtx-4090");
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("h100-sxm"), std::string::npos) << "lists the presets";
}

TEST(CostModelGpu, ValidateRejectsNonsense) {
  GpuSpec gpu = H100();
  gpu.mfu = 0;
  EXPECT_FALSE(gpu.Validate().ok());
  gpu.mfu = 1.5;
  EXPECT_FALSE(gpu.Validate().ok());
  gpu = H100();
  gpu.dense_flops = -1;
  EXPECT_FALSE(PrefillCostModel::Create(Catalog("llama-3-8b"), gpu).ok());
  EXPECT_FALSE(PrefillCostModel::Create(Catalog("llama-3-8b"), H100(), 0).ok());
  EXPECT_FALSE(PrefillCostModel::Create(ModelSpec{}, H100()).ok());
}

TEST(CostModelPairs, CausalAndWindowedCountsAreExact) {
  // Full: token p sees p + 1 keys. 4 tokens after 10: 11 + 12 + 13 + 14.
  EXPECT_DOUBLE_EQ(AttendedPairs(4, 10, 0), 50);
  EXPECT_DOUBLE_EQ(AttendedPairs(1, 0, 0), 1);
  EXPECT_DOUBLE_EQ(AttendedPairs(0, 100, 0), 0);
  // Window 8, tokens at p = 5..14: 6, 7, then eight tokens capped at 8.
  EXPECT_DOUBLE_EQ(AttendedPairs(10, 5, 8), 6 + 7 + 8 * 8);
  // Entirely past the window: every token sees exactly `window` keys.
  EXPECT_DOUBLE_EQ(AttendedPairs(16, 100, 8), 16 * 8);
  // Entirely inside it: the same as no window.
  EXPECT_DOUBLE_EQ(AttendedPairs(4, 10, 1000), AttendedPairs(4, 10, 0));
  // Brute force over small cases.
  for (uint64_t window : {0u, 1u, 3u, 7u}) {
    for (uint64_t context = 0; context < 12; ++context) {
      for (uint64_t tokens = 0; tokens < 12; ++tokens) {
        uint64_t pairs = 0;
        for (uint64_t p = context; p < context + tokens; ++p) pairs += window == 0 ? p + 1 : std::min(p + 1, window);
        EXPECT_DOUBLE_EQ(AttendedPairs(tokens, context, window), static_cast<double>(pairs))
            << "tokens " << tokens << " context " << context << " window " << window;
      }
    }
  }
}

TEST(CostModelFlops, Llama3_8bByHand) {
  const PrefillCostModel model = Make("llama-3-8b", H100());
  // 8,030,261,248 parameters less the embedding and the untied lm_head (128,256 x 4,096 each).
  EXPECT_DOUBLE_EQ(model.matmul_params(), 8'030'261'248.0 - 2 * 128'256.0 * 4'096);
  EXPECT_DOUBLE_EQ(model.matmul_params(), 6'979'588'096.0);
  // 32 q heads, head_dim 128 for K and for V: 2 * 32 * 256 FLOPs per pair per layer.
  EXPECT_DOUBLE_EQ(model.flops_per_pair_per_layer(), 16'384.0);
  EXPECT_EQ(model.full_attention_layers(), 32);
  // 1,024 new tokens after 3,072 cached: pairs 1,024 * 3,072 + 1,024 * 1,025 / 2 = 3,670,528.
  EXPECT_DOUBLE_EQ(model.LinearFlops(1024), 14'294'196'420'608.0);
  EXPECT_DOUBLE_EQ(model.AttentionFlops(1024, 3072), 32 * 16'384.0 * 3'670'528);
  EXPECT_DOUBLE_EQ(model.PrefillFlops(1024, 3072), 16'218'610'204'672.0);
  // At 989 TFLOP/s and MFU 0.5: 32.8 ms.
  EXPECT_DOUBLE_EQ(model.RecomputeSeconds(1024, 3072), 16'218'610'204'672.0 / (989e12 * 0.5));
  EXPECT_NEAR(model.RecomputeSeconds(1024, 3072), 0.0328, 0.0001);
  // Tensor parallelism splits the same FLOPs over more GPUs.
  EXPECT_DOUBLE_EQ(Make("llama-3-8b", H100(), 4).RecomputeSeconds(1024, 3072), model.RecomputeSeconds(1024, 3072) / 4);
}

TEST(CostModelFlops, MlaUsesActiveParametersAndTheAbsorbedForm) {
  const ModelSpec spec = Catalog("deepseek-v3");
  const PrefillCostModel model = Make("deepseek-v3", H100(), 8);
  // The sizing engine's 37.5B active per token (of 671B), less embedding and lm_head.
  EXPECT_NEAR(static_cast<double>(spec.parameters.active_per_token) / 1e9, 37.5, 0.1);
  const double active = static_cast<double>(spec.parameters.active_per_token);
  EXPECT_DOUBLE_EQ(model.matmul_params(), active - 2 * 129'280.0 * 7'168);
  EXPECT_LT(model.matmul_params(), 0.06 * static_cast<double>(spec.parameters.total)) << "routed experts left out";
  // Absorbed MLA: scores over the 512 + 64 cached vector, values as 512-wide latents, 128 heads.
  EXPECT_DOUBLE_EQ(model.flops_per_pair_per_layer(), 2.0 * 128 * ((512 + 64) + 512));
  EXPECT_EQ(model.full_attention_layers(), 61);
  EXPECT_DOUBLE_EQ(model.PrefillFlops(16, 0),
                   2 * model.matmul_params() * 16 + 61 * model.flops_per_pair_per_layer() * (16.0 * 17 / 2));
}

TEST(CostModelFlops, SlidingWindowCapsAttention) {
  // Mistral-7B-v0.1: every layer slides over 4,096 tokens.
  const PrefillCostModel mistral = Make("mistral-7b-v0.1", H100());
  EXPECT_EQ(mistral.full_attention_layers(), 0);
  ASSERT_EQ(mistral.sliding_groups().size(), 1u);
  EXPECT_EQ(mistral.sliding_groups()[0].window, 4096u);
  EXPECT_DOUBLE_EQ(mistral.AttentionFlops(16, 8192), mistral.AttentionFlops(16, 1'000'000));
  EXPECT_DOUBLE_EQ(mistral.AttentionFlops(16, 8192), 32 * mistral.flops_per_pair_per_layer() * 16 * 4096);
  EXPECT_LT(mistral.AttentionFlops(16, 1000), mistral.AttentionFlops(16, 3000));
  // Gemma-2-9B alternates: the full half keeps growing with context, the sliding half stops.
  const PrefillCostModel gemma = Make("gemma-2-9b", H100());
  EXPECT_EQ(gemma.full_attention_layers(), 21);
  ASSERT_EQ(gemma.sliding_groups().size(), 1u);
  EXPECT_EQ(gemma.sliding_groups()[0].layers, 21);
  const double growth = gemma.AttentionFlops(16, 20'000) - gemma.AttentionFlops(16, 10'000);
  EXPECT_DOUBLE_EQ(growth, 21 * gemma.flops_per_pair_per_layer() * 16 * 10'000.0);
}

TEST(CostModelFlops, LinearAttentionLayersAddOnlyTheirProjections) {
  const ModelSpec spec = Catalog("qwen3-next-80b-a3b-thinking");
  const PrefillCostModel model = Make("qwen3-next-80b-a3b-thinking", H100());
  ASSERT_GT(spec.CountLayers(LayerMixer::kLinearAttention), 0);
  EXPECT_EQ(model.full_attention_layers(), spec.CountLayers(LayerMixer::kFullAttention));
  EXPECT_DOUBLE_EQ(model.AttentionFlops(16, 1000),
                   static_cast<double>(model.full_attention_layers()) * model.flops_per_pair_per_layer() *
                       AttendedPairs(16, 1000, 0));
}

TEST(CostModelTier, DefaultsFollowThePaperTable) {
  EXPECT_DOUBLE_EQ(DefaultTierCost(TierKind::kGpuHbm).bandwidth_bytes_per_s, 3.35e12);
  EXPECT_DOUBLE_EQ(DefaultTierCost(TierKind::kCpuDram).bandwidth_bytes_per_s, 204e9);
  EXPECT_DOUBLE_EQ(DefaultTierCost(TierKind::kCxlMemory).latency_s, 500e-9);
  EXPECT_DOUBLE_EQ(DefaultTierCost(TierKind::kNvme).bandwidth_bytes_per_s, 12e9);
  EXPECT_DOUBLE_EQ(DefaultTierCost(TierKind::kRemotePool).bandwidth_bytes_per_s, 50e9);
  const TierCost fs = DefaultTierCost(TierKind::kParallelFs);
  EXPECT_DOUBLE_EQ(fs.LoadSeconds(2'000'000), 1e-3 + 1e-3);
  EXPECT_TRUE(fs.Validate().ok());
  EXPECT_DOUBLE_EQ(GpuHbmTierCost(H100()).bandwidth_bytes_per_s, 3.35e12);
  EXPECT_FALSE((TierCost{0, 0}.Validate().ok()));
}

TEST(CostModelTier, FitRecoversLatencyAndBandwidth) {
  const TierCost truth{.bandwidth_bytes_per_s = 10e9, .latency_s = 20e-6};
  std::vector<LoadSample> samples;
  for (uint64_t bytes : {4096u, 65536u, 1u << 20, 16u << 20}) samples.push_back({bytes, truth.LoadSeconds(bytes)});
  Result<TierCost> fit = FitTierCost(samples);
  ASSERT_TRUE(fit.ok()) << fit.status().ToString();
  EXPECT_NEAR(fit->bandwidth_bytes_per_s / truth.bandwidth_bytes_per_s, 1, 1e-9);
  EXPECT_NEAR(fit->latency_s, truth.latency_s, 1e-12);

  EXPECT_FALSE(FitTierCost(std::vector<LoadSample>{{4096, 1e-5}}).ok());
  EXPECT_FALSE(FitTierCost(std::vector<LoadSample>{{4096, 1e-5}, {4096, 2e-5}}).ok()) << "one size only";
  EXPECT_FALSE(FitTierCost(std::vector<LoadSample>{{4096, 1e-3}, {1 << 20, 1e-5}}).ok()) << "bigger was faster";
  // Noise that would give a negative latency gives zero.
  Result<TierCost> noisy = FitTierCost(std::vector<LoadSample>{{1000, 0.5e-6}, {2000, 2e-6}});
  ASSERT_TRUE(noisy.ok());
  EXPECT_DOUBLE_EQ(noisy->latency_s, 0);
}

TEST(CostModelDecision, FlipsWhereLoadTimeCrossesRecomputeTime) {
  const PrefillCostModel model = Make("llama-3-8b", H100());
  Result<KvSizing> sizing = ComputeKvSizing(Catalog("llama-3-8b"), SizingOptions{});
  ASSERT_TRUE(sizing.ok());
  const uint64_t bytes = sizing->kv_bytes_per_block;  // 16 tokens x 128 KiB
  ASSERT_EQ(bytes, 16u * 131'072);
  const double recompute = model.RecomputeSeconds(16, 0);

  // The bandwidth at which loading (100 us latency) takes exactly as long as recomputing.
  const double latency = 100e-6;
  const double crossover = static_cast<double>(bytes) / (recompute - latency);
  const LoadDecision faster = DecideLoad(model, {crossover * 1.01, latency}, bytes, 16, 0);
  const LoadDecision slower = DecideLoad(model, {crossover * 0.99, latency}, bytes, 16, 0);
  EXPECT_TRUE(faster.load);
  EXPECT_FALSE(slower.load);
  EXPECT_LT(faster.load_seconds, faster.recompute_seconds);
  EXPECT_GT(slower.load_seconds, slower.recompute_seconds);
  EXPECT_DOUBLE_EQ(faster.recompute_seconds, recompute);

  // With paper defaults: DRAM and NVMe beat recomputing a 16-token block; the parallel
  // filesystem (1 ms) does not at the start of a sequence, but does deep into one, where
  // the attention part of the recompute has grown.
  EXPECT_TRUE(DecideLoad(model, DefaultTierCost(TierKind::kCpuDram), bytes, 16, 0).load);
  EXPECT_TRUE(DecideLoad(model, DefaultTierCost(TierKind::kNvme), bytes, 16, 0).load);
  EXPECT_FALSE(DecideLoad(model, DefaultTierCost(TierKind::kParallelFs), bytes, 16, 0).load);
  EXPECT_TRUE(DecideLoad(model, DefaultTierCost(TierKind::kParallelFs), bytes, 16, 100'000).load);
}

TEST(CostModelDecision, JsonShowsTheDecisionAndItsInputs) {
  const PrefillCostModel model = Make("llama-3-8b", H100());
  const LoadDecision decision = DecideLoad(model, DefaultTierCost(TierKind::kNvme), 1 << 21, 16, 4096);
  const nlohmann::json json = nlohmann::json::parse(LoadDecisionJson(model, decision));
  EXPECT_EQ(json["load"], decision.load);
  EXPECT_EQ(json["bytes"], 1 << 21);
  EXPECT_EQ(json["tokens"], 16);
  EXPECT_EQ(json["context_before"], 4096);
  EXPECT_DOUBLE_EQ(json["recompute_seconds"].get<double>(), decision.recompute_seconds);
  EXPECT_DOUBLE_EQ(json["tier"]["bandwidth_bytes_per_s"].get<double>(), 12e9);
  EXPECT_EQ(json["model"]["model"], "llama-3-8b");
  EXPECT_EQ(json["model"]["gpu"], "h100-sxm");
  EXPECT_DOUBLE_EQ(json["model"]["matmul_params"].get<double>(), model.matmul_params());
}

}  // namespace
}  // namespace kvtier
