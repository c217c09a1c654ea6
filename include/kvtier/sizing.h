// The architecture-aware sizing engine: exact KV-cache bytes per token, per block and per
// sequence for a model (model_spec.h), a KV storage format and a parallel layout.
//
// What it counts, per decoder layer on one GPU:
//   full / sliding attention  kv_heads_per_gpu x (bytes of a K vector + bytes of a V vector)
//   MLA                       bytes of one (kv_lora_rank + qk_rope_head_dim) vector,
//                             replicated on every tensor-parallel rank
//   linear attention / Mamba  a constant state per sequence (conv window + SSM state)
//   no-KV layers              nothing
// These equal vLLM's FullAttentionSpec / SlidingWindowSpec / MLAAttentionSpec / MambaSpec
// page sizes divided by the block size (checked in tests/sizing/vllm_reference_check.py).
//
// Thread-safety: pure functions over values.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kvtier/model_spec.h"
#include "kvtier/status.h"

namespace kvtier {

// How KV (or state) elements are stored. Quantized formats carry scales, counted here.
struct KvDtype {
  std::string name;        // canonical: "bf16", "fp16", "fp32", "fp8", "int8", "int4", "nvfp4"
  int bits = 16;           // per element
  // Scales: none when scale_bytes is 0. Otherwise one scale of scale_bytes per group of
  // group_size elements of a vector, or one per vector when group_size is 0.
  int64_t group_size = 0;
  int scale_bytes = 0;

  // Bytes to store one vector (a head's K or V for one token, or an MLA latent).
  uint64_t VectorBytes(int64_t elements) const;
};

// Accepts "auto" (the model's dtype), bf16/bfloat16, fp16/float16/half, fp32/float32,
// fp8 (per-tensor scale, as vLLM's fp8/fp8_e4m3/fp8_e5m2), int8 (one fp32 scale per token
// and head, as vLLM's int8_per_token_head), int4 (one fp16 scale per group, default 32)
// and nvfp4 (one fp8 scale per 16). `group_size` > 0 overrides the group of int4/nvfp4.
Result<KvDtype> ParseKvDtype(std::string_view name, std::string_view model_dtype, int64_t group_size = 0);

struct ParallelConfig {
  int64_t tensor_parallel = 1;    // Default: 1
  int64_t pipeline_parallel = 1;  // Default: 1
};

struct SizingOptions {
  std::string kv_dtype = "auto";    // Default: the model's dtype. See ParseKvDtype.
  int64_t kv_quant_group = 0;       // Default: 0, the format's own group size
  std::string state_dtype = "auto"; // Default: config's mamba_ssm_dtype, else the model's dtype
  ParallelConfig parallel;
  int64_t block_size = 16;          // Default: 16 tokens (vLLM's default)

  Status Validate() const;
};

// One kind of layer on the GPU being reported.
struct LayerGroupSizing {
  LayerMixer mixer = LayerMixer::kFullAttention;
  int64_t layers = 0;                       // on the reported GPU (its pipeline stage)
  int64_t window = 0;                       // sliding window, tokens
  uint64_t kv_bytes_per_token_per_layer = 0;
  uint64_t state_bytes_per_sequence_per_layer = 0;
};

// All byte counts are for one GPU: the pipeline stage that holds the most KV per token
// (every stage when pipeline_parallel == 1), one tensor-parallel rank of it.
struct KvSizing {
  KvDtype kv_dtype;
  KvDtype state_dtype;
  ParallelConfig parallel;
  int64_t block_size = 0;
  int64_t kv_heads_per_gpu = 0;    // after TP split or replication; 1 for MLA
  int64_t layers_per_gpu = 0;      // decoder layers of the reported stage
  int64_t pipeline_stage = 0;      // which stage that is
  std::vector<LayerGroupSizing> groups;  // in order: full, sliding, linear, no_kv (present ones)

  uint64_t kv_bytes_per_token = 0;                    // all layers; sliding counted uncapped
  uint64_t kv_bytes_per_token_per_layer = 0;          // of a full-attention layer (sliding if none)
  uint64_t naive_mha_bytes_per_token_per_layer = 0;   // 2 x q_heads/TP x naive head_dim x dtype
  double overprovision_ratio = 0;                     // naive MHA over all layers / kv_bytes_per_token
  uint64_t state_bytes_per_sequence = 0;              // recurrent state of linear layers
  uint64_t kv_bytes_per_block = 0;                    // block_size x kv_bytes_per_token
  uint64_t kv_bytes_per_token_all_gpus = 0;           // summed over every rank of every stage

  // Bytes one sequence of `context` tokens holds on this GPU, as vLLM allocates it: whole
  // blocks, sliding layers capped at window - 1 + max_batched_tokens tokens plus one block,
  // plus the recurrent state.
  uint64_t BytesPerSequence(int64_t context, int64_t max_batched_tokens) const;
};

Result<KvSizing> ComputeKvSizing(const ModelSpec& model, const SizingOptions& options);

// Layers of each pipeline stage, as vLLM's get_pp_indices splits them (the remainder goes
// to the stages before the last). Returns [first, last) per stage.
std::vector<std::pair<int64_t, int64_t>> PipelineStages(int64_t num_layers, int64_t stages);

}  // namespace kvtier
