// Reading a Hugging Face config.json into a ModelSpec. The per-field rules follow what
// transformers' config classes and vLLM's ModelConfig do with the same keys; each rule
// names the models that need it.
#include <algorithm>
#include <cctype>
#include <filesystem>

#include "sizing/config_internal.h"

namespace kvtier {


std::string_view LayerMixerName(LayerMixer mixer) {
  switch (mixer) {
    case LayerMixer::kFullAttention: return "full_attention";
    case LayerMixer::kSlidingAttention: return "sliding_attention";
    case LayerMixer::kLinearAttention: return "linear_attention";
    case LayerMixer::kNoKv: return "no_kv";
  }
  return "unknown";
}

std::string_view AttentionKindName(AttentionKind kind) {
  switch (kind) {
    case AttentionKind::kMha: return "MHA";
    case AttentionKind::kGqa: return "GQA";
    case AttentionKind::kMqa: return "MQA";
    case AttentionKind::kMla: return "MLA";
  }
  return "unknown";
}

std::string_view StateKindName(StateKind kind) {
  switch (kind) {
    case StateKind::kGatedDeltaNet: return "gated_delta_net";
    case StateKind::kMamba1: return "mamba";
    case StateKind::kMamba2: return "mamba2";
  }
  return "unknown";
}

int64_t ModelSpec::CountLayers(LayerMixer mixer) const {
  return static_cast<int64_t>(std::count_if(layers.begin(), layers.end(),
                                            [mixer](const LayerSpec& l) { return l.mixer == mixer; }));
}

namespace {

// Multimodal wrappers keep the language model's fields in a nested object.
constexpr std::string_view kNestedTextConfigs[] = {"text_config", "llm_config", "language_config"};

Result<std::string> NormalizeDtype(const JsonFields& config, std::string_view name, std::string value) {
  std::string lower = value;
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  if (lower.rfind("torch.", 0) == 0) lower = lower.substr(6);
  if (lower == "bfloat16" || lower == "bf16") return std::string("bfloat16");
  if (lower == "float16" || lower == "fp16" || lower == "half") return std::string("float16");
  if (lower == "float32" || lower == "fp32" || lower == "float") return std::string("float32");
  return config.FieldError(name, "names an unknown dtype '" + value +
                                     "' (expected bfloat16, float16 or float32)");
}

Result<AttentionGeometry> ReadAttention(const JsonFields& config, const ModelSpec& spec,
                                        std::vector<std::string>& notes) {
  AttentionGeometry attention;
  KVTIER_ASSIGN_OR_RETURN(attention.num_q_heads,
                          config.RequireInt({"num_attention_heads", "n_head", "num_heads", "n_heads"}, 1));

  KVTIER_ASSIGN_OR_RETURN(auto kv_lora_rank, config.OptionalInt({"kv_lora_rank"}, 1));
  if (kv_lora_rank) {
    // MLA (DeepSeek-V2/V3, Kimi-K2): one latent of kv_lora_rank plus a shared RoPE key of
    // qk_rope_head_dim per token and layer, no K/V split, no per-head copies.
    attention.kind = AttentionKind::kMla;
    attention.kv_lora_rank = *kv_lora_rank;
    KVTIER_ASSIGN_OR_RETURN(attention.qk_rope_head_dim, config.RequireInt({"qk_rope_head_dim"}, 0));
    attention.num_kv_heads = 1;
    attention.head_dim_k = attention.kv_lora_rank + attention.qk_rope_head_dim;
    attention.head_dim_v = 0;
    KVTIER_ASSIGN_OR_RETURN(auto v_head_dim, config.OptionalInt({"v_head_dim", "qk_nope_head_dim"}, 1));
    if (!v_head_dim) return config.FieldError("v_head_dim", "is missing; MLA configs need it (or qk_nope_head_dim)");
    attention.naive_head_dim = *v_head_dim;
    return attention;
  }

  KVTIER_ASSIGN_OR_RETURN(auto kv_heads,
                          config.OptionalInt({"num_key_value_heads", "n_head_kv", "num_kv_heads",
                                              "n_kv_heads", "multi_query_group_num"}, 1));
  KVTIER_ASSIGN_OR_RETURN(auto multi_query, config.OptionalBool({"multi_query"}));
  if (kv_heads) {
    attention.num_kv_heads = *kv_heads;
  } else if (multi_query.value_or(false)) {
    attention.num_kv_heads = 1;  // Falcon's RW format, GPT-BigCode
  } else {
    attention.num_kv_heads = attention.num_q_heads;
    notes.push_back("num_key_value_heads absent: MHA, one KV head per query head");
  }
  if (attention.num_kv_heads > attention.num_q_heads ||
      attention.num_q_heads % attention.num_kv_heads != 0) {
    return config.FieldError("num_key_value_heads",
                             "(" + std::to_string(attention.num_kv_heads) +
                                 ") must divide num_attention_heads (" +
                                 std::to_string(attention.num_q_heads) + ")");
  }

  KVTIER_ASSIGN_OR_RETURN(auto head_dim, config.OptionalInt({"head_dim", "kv_channels"}, 1));
  if (!head_dim) {
    if (spec.hidden_size % attention.num_q_heads != 0) {
      return config.FieldError("head_dim", "is absent and hidden_size (" + std::to_string(spec.hidden_size) +
                                               ") is not a multiple of num_attention_heads (" +
                                               std::to_string(attention.num_q_heads) + ")");
    }
    head_dim = spec.hidden_size / attention.num_q_heads;
    notes.push_back("head_dim absent or null: hidden_size / num_attention_heads = " +
                    std::to_string(*head_dim));
  }
  attention.head_dim_k = attention.head_dim_v = attention.naive_head_dim = *head_dim;
  if (attention.num_kv_heads == attention.num_q_heads) {
    attention.kind = AttentionKind::kMha;
  } else if (attention.num_kv_heads == 1) {
    attention.kind = AttentionKind::kMqa;
  } else {
    attention.kind = AttentionKind::kGqa;
  }
  return attention;
}

}  // namespace

Result<ModelSpec> ParseModelConfig(std::string_view json_text, std::string_view source, std::string name) {
  KVTIER_ASSIGN_OR_RETURN(nlohmann::json document, ParseLenientJson(json_text, source));
  if (!document.is_object()) {
    return Status::InvalidArgument(std::string(source) + ": a config.json must hold a JSON object, got " +
                                   document.type_name());
  }
  JsonFields top(document, std::string(source));
  ModelSpec spec;
  spec.source = std::string(source);
  spec.name = name.empty() ? std::filesystem::path(std::string(source)).stem().string() : std::move(name);

  KVTIER_ASSIGN_OR_RETURN(auto architectures, top.OptionalStringArray({"architectures"}));
  if (architectures && !architectures->empty()) spec.architecture = architectures->front();

  // The language model's fields, possibly nested in a multimodal wrapper.
  JsonFields config = top;
  if (!top.Has({"num_hidden_layers", "n_layer", "num_layers", "n_layers"})) {
    for (std::string_view nested : kNestedTextConfigs) {
      KVTIER_ASSIGN_OR_RETURN(auto inner, top.Object(nested));
      if (inner) {
        config = *inner;
        spec.notes.push_back("language model fields read from '" + std::string(nested) + "'");
        break;
      }
    }
  }

  KVTIER_ASSIGN_OR_RETURN(auto model_type, config.OptionalString({"model_type"}));
  if (!model_type) {
    KVTIER_ASSIGN_OR_RETURN(model_type, top.OptionalString({"model_type"}));
  }
  if (!model_type || model_type->empty()) {
    return top.FieldError("model_type", "is missing; every Hugging Face config.json names its architecture there");
  }
  spec.model_type = *model_type;

  KVTIER_ASSIGN_OR_RETURN(spec.num_layers,
                          config.RequireInt({"num_hidden_layers", "n_layer", "num_layers", "n_layers"}, 1));
  KVTIER_ASSIGN_OR_RETURN(spec.hidden_size, config.RequireInt({"hidden_size", "n_embd", "d_model", "dim"}, 1));
  KVTIER_ASSIGN_OR_RETURN(spec.vocab_size, config.RequireInt({"vocab_size", "padded_vocab_size"}, 1));
  KVTIER_ASSIGN_OR_RETURN(auto max_positions,
                          config.OptionalInt({"max_position_embeddings", "n_positions", "seq_length",
                                              "max_sequence_length"}, 1, int64_t{1} << 40));
  spec.max_position_embeddings = max_positions.value_or(0);
  KVTIER_ASSIGN_OR_RETURN(auto intermediate, config.OptionalInt({"intermediate_size", "ffn_hidden_size",
                                                                 "n_inner"}, 0));
  spec.intermediate_size = intermediate.value_or(0);
  KVTIER_ASSIGN_OR_RETURN(auto mtp_layers, config.OptionalInt({"num_nextn_predict_layers"}, 0));
  spec.mtp_layers = mtp_layers.value_or(0);

  KVTIER_ASSIGN_OR_RETURN(auto dtype, config.OptionalString({"torch_dtype", "dtype"}));
  if (!dtype) {
    KVTIER_ASSIGN_OR_RETURN(dtype, top.OptionalString({"torch_dtype", "dtype"}));
  }
  if (dtype) {
    KVTIER_ASSIGN_OR_RETURN(spec.dtype, NormalizeDtype(config, "torch_dtype", *dtype));
  } else {
    spec.dtype = "bfloat16";
    spec.notes.push_back("torch_dtype absent: assuming bfloat16 weights and KV");
  }
  KVTIER_ASSIGN_OR_RETURN(auto ssm_dtype, config.OptionalString({"mamba_ssm_dtype"}));
  if (ssm_dtype) {
    KVTIER_ASSIGN_OR_RETURN(std::string normalized, NormalizeDtype(config, "mamba_ssm_dtype", *ssm_dtype));
    spec.state_dtype = normalized;
  }

  KVTIER_ASSIGN_OR_RETURN(spec.attention, ReadAttention(config, spec, spec.notes));
  KVTIER_ASSIGN_OR_RETURN(spec.linear_state, sizing_internal::ReadLinearState(config, spec));
  KVTIER_ASSIGN_OR_RETURN(spec.layers, sizing_internal::ReadLayerPattern(config, spec, spec.notes));
  if (spec.linear_state && spec.CountLayers(LayerMixer::kLinearAttention) == 0) {
    spec.linear_state.reset();
  }
  if (!spec.linear_state && spec.CountLayers(LayerMixer::kLinearAttention) > 0) {
    return config.FieldError("layer_types", "names linear-attention layers, but the config has no state "
                                            "geometry kvtier knows (Gated DeltaNet, Mamba or Mamba2 fields)");
  }
  KVTIER_ASSIGN_OR_RETURN(spec.parameters, sizing_internal::CountParameters(config, spec));
  KVTIER_ASSIGN_OR_RETURN(spec.weights, sizing_internal::ReadWeightFormat(config, spec));
  return spec;
}

Result<ModelSpec> LoadModelConfig(const std::string& path) {
  KVTIER_ASSIGN_OR_RETURN(std::string text, ReadTextFile(path));
  return ParseModelConfig(text, path);
}

}  // namespace kvtier
