// The load-or-recompute cost model: is it faster to load a block's KV from a tier or to
// recompute it with a prefill? The store asks before it loads a block from a lower tier; the
// Bayesian policy weighs a block's reuse probability by the recompute time it saves.
//
//   recompute_seconds = PrefillFlops(tokens, context_before) / (dense_flops * mfu * tp)
//   PrefillFlops      = 2 * matmul_params * tokens + sum over attention layers of
//                       2 * q_heads * (d_qk + d_v) * attended_pairs(layer)
//   load_seconds      = latency_s + bytes / bandwidth_bytes_per_s
//   load              = load_seconds < recompute_seconds
//
// matmul_params is the sizing engine's active_per_token less the embedding (a lookup, no
// FLOPs) and the lm_head (recomputing KV needs no logits). attended_pairs counts the (query,
// key) pairs of causal attention exactly: a new token at absolute position p attends to p + 1
// keys, or to min(p + 1, window) in a sliding layer; linear-attention and no-KV layers add
// nothing beyond their projections. MLA is counted in its absorbed form (d_qk = kv_lora_rank +
// qk_rope_head_dim, d_v = kv_lora_rank), the form that attends over a cached latent without
// decompressing it. Every formula and assumption, with its error bars: docs/cost_model.md.
//
// Thread-safety: values and pure functions; a PrefillCostModel is immutable after Create and
// may be shared by any number of threads.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kvtier/model_spec.h"
#include "kvtier/status.h"
#include "kvtier/tier.h"

namespace kvtier {

// A GPU's compute and memory rates, as its datasheet gives them.
struct GpuSpec {
  std::string name;
  double dense_flops = 0;      // bf16 dense tensor-core FLOP/s (no 2:4 sparsity)
  double mfu = 0.5;            // Default: 0.5, the fraction of dense_flops a prefill achieves
  double hbm_bytes_per_s = 0;  // HBM bandwidth: the T0 tier's rate on this GPU (GpuHbmTierCost)

  Status Validate() const;
};

// "h100-sxm" (alias "h100"), "h200", "a100-80gb" (alias "a100"), "b200"; case and punctuation
// are ignored. NotFound lists the presets.
Result<GpuSpec> GpuPreset(std::string_view name);

// Prefill FLOPs and recompute time of a model on tp GPUs of one kind.
class PrefillCostModel {
 public:
  // InvalidArgument when the GPU does not validate, tensor_parallel < 1, or the model has no
  // layers or no matmul parameters (a ModelSpec not made by ParseModelConfig).
  static Result<PrefillCostModel> Create(const ModelSpec& model, const GpuSpec& gpu, int64_t tensor_parallel = 1);

  // FLOPs to prefill `tokens` new tokens after `context_before` cached ones: the KV they add.
  double PrefillFlops(uint64_t tokens, uint64_t context_before) const;
  // The projection (matmul) part alone: 2 * matmul_params * tokens.
  double LinearFlops(uint64_t tokens) const;
  // The attention part alone (QK^T and AV over the attended context, all layers).
  double AttentionFlops(uint64_t tokens, uint64_t context_before) const;
  // PrefillFlops / (dense_flops * mfu * tensor_parallel).
  double RecomputeSeconds(uint64_t tokens, uint64_t context_before) const;

  // Sliding-attention layers, grouped by window.
  struct SlidingGroup {
    uint64_t window = 0;
    int64_t layers = 0;
  };

  const std::string& model_name() const { return model_name_; }
  const GpuSpec& gpu() const { return gpu_; }
  int64_t tensor_parallel() const { return tensor_parallel_; }
  double matmul_params() const { return matmul_params_; }
  // FLOPs of one attended (query, key) pair in one layer: 2 * q_heads * (d_qk + d_v).
  double flops_per_pair_per_layer() const { return flops_per_pair_; }
  int64_t full_attention_layers() const { return full_layers_; }
  const std::vector<SlidingGroup>& sliding_groups() const { return sliding_; }
  // The model's inputs to this cost model, as one line of JSON.
  std::string ToJson() const;

 private:
  PrefillCostModel() = default;

  std::string model_name_;
  GpuSpec gpu_;
  int64_t tensor_parallel_ = 1;
  double matmul_params_ = 0;
  double flops_per_pair_ = 0;
  int64_t full_layers_ = 0;
  std::vector<SlidingGroup> sliding_;  // one per distinct window
};

// (query, key) pairs a causal attention layer evaluates when `tokens` new tokens follow
// `context_before` cached ones: sum over p in [context_before, context_before + tokens) of
// min(p + 1, window); window 0 means no window.
double AttendedPairs(uint64_t tokens, uint64_t context_before, uint64_t window);

// How fast a tier delivers a block to the GPU.
struct TierCost {
  double bandwidth_bytes_per_s = 0;
  double latency_s = 0;  // per load, before the first byte

  double LoadSeconds(uint64_t bytes) const;
  Status Validate() const;
};

// The paper's table (PAPER.md, "Six memory tiers"): T0 3.35 TB/s and 100 ns; T1 204 GB/s and
// 5 us (the top of its 1-5 us); T2 64 GB/s and 500 ns; T3 12 GB/s and 10 us; T4 50 GB/s and
// 100 us (the top of its 1-100 us); T5 2 GB/s and 1 ms. Where the paper gives a range the
// slow end is taken, so a projected load is never optimistic. Measure the real tier and use
// FitTierCost where it matters.
TierCost DefaultTierCost(TierKind kind);

// The T0 tier of a given GPU: its HBM bandwidth and the paper's 100 ns.
TierCost GpuHbmTierCost(const GpuSpec& gpu);

// One measured load: `bytes` delivered in `seconds`.
struct LoadSample {
  uint64_t bytes = 0;
  double seconds = 0;
};

// Least-squares fit of seconds = latency_s + bytes / bandwidth over measured loads, e.g. a
// tier benchmark's small and large reads. A negative intercept (measurement noise) becomes a
// latency of 0. InvalidArgument with fewer than two distinct sizes, a non-finite or negative
// time, or a fit where larger loads are not slower.
Result<TierCost> FitTierCost(std::span<const LoadSample> samples);

// The decision for one load of `bytes` holding `tokens` tokens that follow `context_before`
// tokens, with its inputs, so a log line or a metric can show why it went the way it did.
struct LoadDecision {
  bool load = false;  // load_seconds < recompute_seconds: on a tie, recompute (keeps the tier idle)
  double load_seconds = 0;
  double recompute_seconds = 0;
  double recompute_flops = 0;
  uint64_t bytes = 0;
  uint64_t tokens = 0;
  uint64_t context_before = 0;
  TierCost tier;
};

// Pass a run of consecutive blocks as one call: a tier's latency is paid once per load, so
// a chain loaded in one batch amortizes it where block-by-block calls would not.
LoadDecision DecideLoad(const PrefillCostModel& model, const TierCost& tier, uint64_t bytes, uint64_t tokens,
                        uint64_t context_before);

// One line of JSON: the decision, its inputs and the model's (PrefillCostModel::ToJson).
std::string LoadDecisionJson(const PrefillCostModel& model, const LoadDecision& decision);

}  // namespace kvtier
