// Parameter counts computed from a config.json, by role, and the checkpoint's weight
// format. Counts follow the module structure of each family's transformers model (which
// projections exist, which carry biases, how many norms a layer has); small families'
// differences are named where they are handled. Checked against published model-card
// totals in parameter_count_test.cc.
#include <set>

#include "sizing/config_internal.h"
#include "util/checked_math.h"

namespace kvtier::sizing_internal {
namespace {

bool IsOneOf(const std::string& value, std::initializer_list<std::string_view> options) {
  for (std::string_view option : options) {
    if (value == option) return true;
  }
  return false;
}

struct MoeLayout {
  int64_t experts = 0;
  int64_t experts_per_token = 0;
  int64_t expert_width = 0;
  int64_t shared_width = 0;      // total width of always-on shared experts
  bool shared_gate = false;      // Qwen MoE gates the shared expert with a scalar
  bool router_bias = false;      // a bias per expert on the router (gpt-oss, DeepSeek-V3's noaux_tc)
  std::set<int64_t> dense_layers;// layers with a dense MLP instead of experts
};

Result<std::optional<MoeLayout>> ReadMoe(const JsonFields& config, const ModelSpec& spec) {
  KVTIER_ASSIGN_OR_RETURN(auto experts, config.OptionalInt({"num_local_experts", "n_routed_experts", "num_experts"}, 0));
  if (!experts || *experts == 0) return std::optional<MoeLayout>();
  MoeLayout moe;
  moe.experts = *experts;
  KVTIER_ASSIGN_OR_RETURN(auto per_token, config.OptionalInt({"num_experts_per_tok", "experts_per_token",
                                                              "moe_topk", "num_experts_per_token"}, 1, *experts));
  moe.experts_per_token = per_token.value_or(1);
  KVTIER_ASSIGN_OR_RETURN(auto width, config.OptionalInt({"moe_intermediate_size"}, 1));
  moe.expert_width = width.value_or(spec.intermediate_size);
  if (moe.expert_width == 0) return config.FieldError("moe_intermediate_size", "is missing for a mixture-of-experts model");

  KVTIER_ASSIGN_OR_RETURN(auto n_shared, config.OptionalInt({"n_shared_experts"}, 0));
  KVTIER_ASSIGN_OR_RETURN(auto shared_width, config.OptionalInt({"shared_expert_intermediate_size"}, 0));
  if (n_shared) moe.shared_width = *n_shared * moe.expert_width;  // DeepSeek
  if (shared_width) {
    moe.shared_width = *shared_width;  // Qwen2-MoE, Qwen3-Next
    moe.shared_gate = true;
  }
  KVTIER_ASSIGN_OR_RETURN(auto topk_method, config.OptionalString({"topk_method"}));
  moe.router_bias = spec.model_type == "gpt_oss" || topk_method.value_or("") == "noaux_tc";
  // DeepSeek: the first first_k_dense_replace layers are dense, then every moe_layer_freq-th is MoE.
  KVTIER_ASSIGN_OR_RETURN(auto first_dense, config.OptionalInt({"first_k_dense_replace"}, 0));
  KVTIER_ASSIGN_OR_RETURN(auto layer_freq, config.OptionalInt({"moe_layer_freq"}, 1));
  // Qwen MoE: mlp_only_layers are dense, and only every decoder_sparse_step-th layer is MoE.
  KVTIER_ASSIGN_OR_RETURN(auto mlp_only, config.OptionalIntArray({"mlp_only_layers"}, 0));
  KVTIER_ASSIGN_OR_RETURN(auto sparse_step, config.OptionalInt({"decoder_sparse_step"}, 1));
  // Jamba: MoE where i % expert_layer_period == expert_layer_offset.
  KVTIER_ASSIGN_OR_RETURN(auto expert_period, config.OptionalInt({"expert_layer_period"}, 1));
  KVTIER_ASSIGN_OR_RETURN(auto expert_offset, config.OptionalInt({"expert_layer_offset"}, 0));
  for (int64_t i = 0; i < spec.num_layers; ++i) {
    bool dense = false;
    if (first_dense && i < *first_dense) dense = true;
    if (layer_freq && first_dense && (i - *first_dense) % *layer_freq != 0) dense = true;
    if (sparse_step && (i + 1) % *sparse_step != 0) dense = true;
    if (expert_period && i % *expert_period != expert_offset.value_or(0)) dense = true;
    if (dense) moe.dense_layers.insert(i);
  }
  if (mlp_only) moe.dense_layers.insert(mlp_only->begin(), mlp_only->end());
  return std::optional<MoeLayout>(moe);
}

// Projections of one attention layer, with biases and per-head norms.
Result<Int128> AttentionParameters(const JsonFields& config, const ModelSpec& spec) {
  const AttentionGeometry& a = spec.attention;
  const Int128 h = spec.hidden_size;
  if (a.kind == AttentionKind::kMla) {
    KVTIER_ASSIGN_OR_RETURN(auto q_lora, config.OptionalInt({"q_lora_rank"}, 1));
    KVTIER_ASSIGN_OR_RETURN(int64_t nope, config.RequireInt({"qk_nope_head_dim"}, 0));
    const Int128 q_head = nope + a.qk_rope_head_dim;
    const Int128 v_head = a.naive_head_dim;
    const Int128 q = q_lora ? h * *q_lora + *q_lora + Int128{*q_lora} * a.num_q_heads * q_head  // q_a, q_a_norm, q_b
                            : h * a.num_q_heads * q_head;
    const Int128 kv = h * (a.kv_lora_rank + a.qk_rope_head_dim) + a.kv_lora_rank +  // kv_a, kv_a_norm
                      Int128{a.kv_lora_rank} * a.num_q_heads * (nope + v_head);     // kv_b
    return q + kv + a.num_q_heads * v_head * h;                                     // o_proj
  }
  const Int128 q_width = Int128{a.num_q_heads} * a.head_dim_k;
  const Int128 kv_width = Int128{a.num_kv_heads} * (a.head_dim_k + a.head_dim_v);
  // Qwen3-Next's full-attention layers project a sigmoid output gate along with Q.
  const Int128 q_out = spec.model_type == "qwen3_next" ? 2 * q_width : q_width;
  Int128 params = h * (q_out + kv_width) + Int128{a.num_q_heads} * a.head_dim_v * h;
  KVTIER_ASSIGN_OR_RETURN(auto attention_bias, config.OptionalBool({"attention_bias", "bias", "add_bias_linear"}));
  if (attention_bias.value_or(false)) {
    params += q_out + kv_width + h;
  } else if (IsOneOf(spec.model_type, {"qwen2", "qwen2_moe", "qwen2_vl"})) {
    params += q_width + kv_width;  // Qwen2 has Q/K/V biases and no o_proj bias
  }
  if (IsOneOf(spec.model_type, {"qwen3", "qwen3_moe", "qwen3_next", "gemma3", "gemma3_text", "olmo2"})) {
    params += 2 * a.head_dim_k;  // q_norm and k_norm over the head dimension
  }
  if (spec.model_type == "gpt_oss") params += a.num_q_heads;  // attention sinks
  return params;
}

Int128 LinearStateParameters(const LinearStateGeometry& s, Int128 hidden) {
  switch (s.kind) {
    case StateKind::kGatedDeltaNet: {
      const Int128 key_dim = Int128{s.num_k_heads} * s.head_k_dim;
      const Int128 value_dim = Int128{s.num_v_heads} * s.head_v_dim;
      const Int128 conv_dim = 2 * key_dim + value_dim;
      return hidden * (2 * key_dim + 2 * value_dim) + hidden * 2 * s.num_v_heads  // in_proj_qkvz, in_proj_ba
             + conv_dim * s.conv_kernel + 2 * s.num_v_heads + s.head_v_dim      // conv1d, dt_bias, A_log, norm
             + value_dim * hidden;                                               // out_proj
    }
    case StateKind::kMamba2: {
      const Int128 conv_dim = s.intermediate_size + 2 * Int128{s.n_groups} * s.state_size;
      return hidden * (s.intermediate_size + conv_dim + s.num_heads)  // in_proj: z, xBC, dt
             + conv_dim * (s.conv_kernel + 1) + 3 * s.num_heads        // conv1d with bias, dt_bias, A_log, D
             + s.intermediate_size + s.intermediate_size * hidden;     // gated norm, out_proj
    }
    case StateKind::kMamba1: {
      const Int128 inner = s.intermediate_size;
      const Int128 dt_rank = (hidden + 15) / 16;
      return hidden * 2 * inner + inner * (s.conv_kernel + 1) + inner * (dt_rank + 2 * s.state_size) +
             dt_rank * inner + inner + inner * s.state_size + inner + inner * hidden;
    }
  }
  return 0;
}

// Hugging Face's PretrainedConfig ties embeddings unless told otherwise; these families'
// config classes default the other way or differently.
bool DefaultTieEmbeddings(const std::string& model_type) {
  return !IsOneOf(model_type, {"llama", "mistral", "mixtral", "qwen2", "qwen2_moe", "qwen3", "qwen3_moe",
                               "qwen3_next", "phi3", "deepseek_v2", "deepseek_v3", "gpt_oss", "jamba",
                               "nemotron_h"});
}

}  // namespace

double DtypeBits(std::string_view dtype) {
  if (dtype == "float32") return 32;
  return 16;
}

Result<ParameterCount> CountParameters(const JsonFields& config, const ModelSpec& spec) {
  // Summed in 128 bits: hostile configs must not overflow (see util/checked_math.h).
  struct {
    Int128 embedding = 0, lm_head = 0, attention = 0, linear_attention = 0, dense_mlp = 0, experts = 0,
           shared_and_router = 0, norms = 0;
  } p;
  const Int128 h = spec.hidden_size;
  const bool falcon_rw = IsOneOf(spec.model_type, {"RefinedWebModel", "RefinedWeb", "falcon"});
  KVTIER_ASSIGN_OR_RETURN(auto tie, config.OptionalBool({"tie_word_embeddings"}));
  p.embedding = spec.vocab_size * h;
  p.lm_head = tie.value_or(DefaultTieEmbeddings(spec.model_type)) ? 0 : spec.vocab_size * h;

  KVTIER_ASSIGN_OR_RETURN(const Int128 attention_layer, AttentionParameters(config, spec));
  const Int128 state_layer = spec.linear_state ? LinearStateParameters(*spec.linear_state, h) : 0;
  KVTIER_ASSIGN_OR_RETURN(auto moe, ReadMoe(config, spec));
  KVTIER_ASSIGN_OR_RETURN(auto mlp_bias, config.OptionalBool({"mlp_bias"}));
  // Falcon's RW models use a plain GELU MLP of 4 x hidden; the others are gated (SwiGLU/GeGLU).
  const Int128 dense_width = falcon_rw && spec.intermediate_size == 0 ? 4 * h : Int128{spec.intermediate_size};
  const Int128 dense_matrices = falcon_rw ? 2 : 3;
  const Int128 dense_layer_mlp = dense_matrices * h * dense_width +
                                  (mlp_bias.value_or(false) ? (dense_matrices - 1) * dense_width + h : 0);
  const bool gpt_oss = spec.model_type == "gpt_oss";
  // gpt-oss experts carry biases on gate_up (2 x width) and down (hidden); its router has a bias.
  const Int128 expert = moe ? 3 * h * moe->expert_width + (gpt_oss ? 2 * moe->expert_width + h : 0) : 0;
  // Norms per layer: LayerNorm with bias in Falcon (one shared by the parallel branches),
  // four RMSNorms in Gemma 2/3, two RMSNorms elsewhere.
  const Int128 norms_per_layer = falcon_rw ? 2 * h : IsOneOf(spec.model_type, {"gemma2", "gemma3", "gemma3_text"}) ? 4 * h : 2 * h;

  for (int64_t i = 0; i < spec.num_layers; ++i) {
    const LayerSpec& layer = spec.layers[static_cast<std::size_t>(i)];
    switch (layer.mixer) {
      case LayerMixer::kFullAttention:
      case LayerMixer::kSlidingAttention: p.attention += attention_layer; break;
      case LayerMixer::kLinearAttention: p.linear_attention += state_layer; break;
      case LayerMixer::kNoKv: break;
    }
    p.norms += norms_per_layer;
    // Nemotron-H's pattern gives mixer and MLP their own layers; Mamba stacks have no MLP.
    if (spec.model_type == "nemotron_h" ? layer.mixer != LayerMixer::kNoKv
                                        : IsOneOf(spec.model_type, {"mamba", "mamba2", "falcon_mamba"})) {
      continue;
    }
    if (moe && moe->dense_layers.count(i) == 0) {
      p.experts += moe->experts * expert;
      p.shared_and_router += h * moe->experts + (moe->router_bias ? moe->experts : 0) +
                             3 * h * moe->shared_width + (moe->shared_gate ? h : 0);
    } else {
      p.dense_mlp += dense_layer_mlp;
    }
  }
  p.norms += falcon_rw ? 2 * h : h;  // final norm
  const Int128 total = p.embedding + p.lm_head + p.attention + p.linear_attention + p.dense_mlp + p.experts +
                       p.shared_and_router + p.norms;
  const Int128 unused_experts = moe ? p.experts / moe->experts * (moe->experts - moe->experts_per_token) : 0;

  ParameterCount out;
  KVTIER_ASSIGN_OR_RETURN(out.total, NarrowCount(total, config.source() + ": the parameter count"));
  // Every part is at most the total, so each narrows.
  out.embedding = static_cast<int64_t>(p.embedding);
  out.lm_head = static_cast<int64_t>(p.lm_head);
  out.attention = static_cast<int64_t>(p.attention);
  out.linear_attention = static_cast<int64_t>(p.linear_attention);
  out.dense_mlp = static_cast<int64_t>(p.dense_mlp);
  out.experts = static_cast<int64_t>(p.experts);
  out.shared_and_router = static_cast<int64_t>(p.shared_and_router);
  out.norms = static_cast<int64_t>(p.norms);
  out.active_per_token = static_cast<int64_t>(total - unused_experts);
  return out;
}

Result<WeightFormat> ReadWeightFormat(const JsonFields& config, const ModelSpec& spec) {
  WeightFormat format;
  const double model_bits = DtypeBits(spec.dtype);
  format.name = spec.dtype;
  format.linear_bits = format.expert_bits = format.other_bits = model_bits;
  KVTIER_ASSIGN_OR_RETURN(auto quant, config.Object("quantization_config"));
  if (!quant) return format;
  KVTIER_ASSIGN_OR_RETURN(auto method, quant->OptionalString({"quant_method"}));
  if (!method) return quant->FieldError("quant_method", "is missing from quantization_config");
  if (*method == "fp8") {
    // FP8 weights; with weight_block_size [a, b] one fp32 scale per a x b block.
    KVTIER_ASSIGN_OR_RETURN(auto block, quant->OptionalIntArray({"weight_block_size"}, 1));
    double scale_bits = 0;
    if (block && block->size() == 2) scale_bits = 32.0 / static_cast<double>((*block)[0] * (*block)[1]);
    format.linear_bits = format.expert_bits = 8 + scale_bits;
    format.name = block && block->size() == 2
                      ? "fp8 (block " + std::to_string((*block)[0]) + "x" + std::to_string((*block)[1]) + " scales)"
                      : "fp8";
  } else if (*method == "mxfp4") {
    // MXFP4 on the experts: 4-bit values with one 8-bit shared exponent per 32.
    format.expert_bits = 4 + 8.0 / 32;
    format.name = "mxfp4 experts, " + spec.dtype + " elsewhere";
  } else if (*method == "awq" || *method == "gptq" || *method == "compressed-tensors" || *method == "bitsandbytes") {
    KVTIER_ASSIGN_OR_RETURN(auto bits, quant->OptionalInt({"bits", "w_bit", "num_bits"}, 1));
    KVTIER_ASSIGN_OR_RETURN(auto group, quant->OptionalInt({"group_size", "q_group_size"}, 1));
    const double b = static_cast<double>(bits.value_or(4));
    // One fp16 scale and one packed zero point per group.
    const double overhead = group ? (16.0 + b) / static_cast<double>(*group) : 0.0;
    format.linear_bits = format.expert_bits = b + overhead;
    format.name = *method + " " + std::to_string(bits.value_or(4)) + "-bit";
  } else {
    format.name = *method + " (unknown to kvtier: sized as " + spec.dtype + ")";
  }
  return format;
}

}  // namespace kvtier::sizing_internal
