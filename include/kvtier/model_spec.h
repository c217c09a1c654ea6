// ModelSpec: what kvtier needs to know about a model's architecture, read from a Hugging
// Face config.json. It is the input of the sizing engine (sizing.h) and, later, of the
// store's recompute-cost estimates.
//
// Reading is strict about what it needs and explicit about what it assumes: a missing or
// mistyped field is an InvalidArgument naming the file and the field; each assumption
// (a default head_dim, an inferred layer pattern) is recorded in `notes`.
//
// Thread-safety: plain values.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kvtier/status.h"

namespace kvtier {

// What one decoder layer keeps per sequence.
enum class LayerMixer {
  kFullAttention,     // K and V (or one MLA latent) for every token
  kSlidingAttention,  // K and V for the last `window` tokens only
  kLinearAttention,   // a constant-size recurrent state (Mamba, Gated DeltaNet)
  kNoKv,              // nothing: an MLP-only layer of a hybrid stack
};
std::string_view LayerMixerName(LayerMixer mixer);  // "full_attention", ...

enum class AttentionKind { kMha, kGqa, kMqa, kMla };
std::string_view AttentionKindName(AttentionKind kind);  // "MHA", "GQA", "MQA", "MLA"

// The geometry shared by a model's attention layers (full and sliding alike).
struct AttentionGeometry {
  AttentionKind kind = AttentionKind::kMha;
  int64_t num_q_heads = 0;
  int64_t num_kv_heads = 0;  // MLA: 1 (one latent shared by all heads)
  int64_t head_dim_k = 0;    // MLA: kv_lora_rank + qk_rope_head_dim, the cached vector
  int64_t head_dim_v = 0;    // MLA: 0, the latent is not split into K and V
  // Per-head dimension a framework that sizes every model as MHA would use. For MLA it is
  // v_head_dim: the head dimension of the decompressed K/V, which the paper's table uses.
  int64_t naive_head_dim = 0;
  // MLA only.
  int64_t kv_lora_rank = 0;
  int64_t qk_rope_head_dim = 0;
};

enum class StateKind { kGatedDeltaNet, kMamba1, kMamba2 };
std::string_view StateKindName(StateKind kind);  // "gated_delta_net", "mamba", "mamba2"

// The recurrent state of linear-attention / SSM layers, as vLLM's MambaStateShapeCalculator
// lays it out: a short-convolution window and a temporal (SSM) state.
struct LinearStateGeometry {
  StateKind kind = StateKind::kMamba2;
  int64_t conv_kernel = 0;      // the conv state keeps conv_kernel - 1 columns
  // Gated DeltaNet
  int64_t num_k_heads = 0, num_v_heads = 0, head_k_dim = 0, head_v_dim = 0;
  // Mamba1 and Mamba2
  int64_t intermediate_size = 0, state_size = 0;
  // Mamba2
  int64_t num_heads = 0, head_dim = 0, n_groups = 0;
};

struct LayerSpec {
  LayerMixer mixer = LayerMixer::kFullAttention;
  int64_t window = 0;  // tokens kept by a sliding-attention layer; 0 otherwise
};

// Parameter counts by role, computed from the config (not read from a model card).
struct ParameterCount {
  int64_t embedding = 0;
  int64_t lm_head = 0;          // 0 when tied to the embedding
  int64_t attention = 0;        // projections of attention layers (and MLA's low-rank parts)
  int64_t linear_attention = 0; // Mamba / Gated DeltaNet mixers
  int64_t dense_mlp = 0;
  int64_t experts = 0;          // routed experts
  int64_t shared_and_router = 0;// shared experts, routers and their gates
  int64_t norms = 0;
  int64_t total = 0;
  int64_t active_per_token = 0; // total less the routed experts a token does not use
};

// How the checkpoint stores its weights, from `quantization_config` (or the model dtype).
struct WeightFormat {
  std::string name;            // "bfloat16", "fp8 (block 128x128)", "mxfp4 experts", ...
  double linear_bits = 16;     // attention/MLP projections, per parameter incl. scales
  double expert_bits = 16;     // routed experts, per parameter incl. scales
  double other_bits = 16;      // embeddings, lm_head, norms
};

struct ModelSpec {
  std::string name;          // catalog name or the file's stem
  std::string source;        // the path or "catalog:<name>"
  std::string model_type;    // config "model_type"
  std::string architecture;  // first of config "architectures", or ""
  std::string dtype;         // "bfloat16", "float16" or "float32"
  int64_t num_layers = 0;    // decoder layers (speculative MTP layers excluded)
  int64_t hidden_size = 0;
  int64_t vocab_size = 0;
  int64_t max_position_embeddings = 0;  // 0 when the config does not say
  int64_t intermediate_size = 0;        // dense MLP width (0 for pure MoE stacks)
  int64_t mtp_layers = 0;               // multi-token-prediction layers, not sized
  AttentionGeometry attention;
  std::optional<LinearStateGeometry> linear_state;
  std::optional<std::string> state_dtype;  // config's mamba_ssm_dtype, if any
  std::vector<LayerSpec> layers;           // one per decoder layer
  ParameterCount parameters;
  WeightFormat weights;
  std::vector<std::string> notes;          // assumptions made while reading

  int64_t CountLayers(LayerMixer mixer) const;
};

// Parses a config.json's text. `source` names it in errors (a path); `name` defaults to
// the source's file stem.
Result<ModelSpec> ParseModelConfig(std::string_view json_text, std::string_view source,
                                   std::string name = "");

// Reads and parses a config.json file.
Result<ModelSpec> LoadModelConfig(const std::string& path);

}  // namespace kvtier
