// Which decoder layers keep what: full attention, sliding-window attention, a recurrent
// state, or nothing. Explicit per-layer lists win (`layer_types`,
// `hybrid_override_pattern`); otherwise the rules of each family's transformers config
// class apply, and the inference is written to `notes`.
#include <string>

#include "sizing/config_internal.h"

namespace kvtier::sizing_internal {
namespace {

bool OneOf(std::string_view value, std::initializer_list<std::string_view> options) {
  for (std::string_view option : options) {
    if (value == option) return true;
  }
  return false;
}

Result<LayerMixer> MixerFromLayerType(const JsonFields& config, std::size_t index, const std::string& type) {
  if (OneOf(type, {"full_attention", "attention", "global_attention", "global"})) return LayerMixer::kFullAttention;
  if (OneOf(type, {"sliding_attention", "sliding_window", "local_attention", "local"})) {
    return LayerMixer::kSlidingAttention;
  }
  if (OneOf(type, {"linear_attention", "mamba", "mamba2", "gated_delta_net", "conv"})) {
    return LayerMixer::kLinearAttention;
  }
  return config.FieldError("layer_types", "element " + std::to_string(index) + " is '" + type +
                                              "'; known: full_attention, sliding_attention, linear_attention, mamba");
}

// transformers' Gemma2/Gemma3/Cohere2 rule: layer i slides unless (i + 1) % pattern == 0.
std::vector<LayerSpec> PeriodicSliding(int64_t layers, int64_t pattern, int64_t window) {
  std::vector<LayerSpec> out(static_cast<std::size_t>(layers));
  for (int64_t i = 0; i < layers; ++i) {
    if ((i + 1) % pattern != 0) out[static_cast<std::size_t>(i)] = {LayerMixer::kSlidingAttention, window};
  }
  return out;
}

}  // namespace

Result<std::optional<LinearStateGeometry>> ReadLinearState(const JsonFields& config, const ModelSpec& spec) {
  LinearStateGeometry state;
  if (config.Has({"linear_num_value_heads"})) {
    // Qwen3-Next / Qwen3.5 Gated DeltaNet.
    state.kind = StateKind::kGatedDeltaNet;
    KVTIER_ASSIGN_OR_RETURN(state.num_k_heads, config.RequireInt({"linear_num_key_heads"}, 1));
    KVTIER_ASSIGN_OR_RETURN(state.num_v_heads, config.RequireInt({"linear_num_value_heads"}, 1));
    KVTIER_ASSIGN_OR_RETURN(state.head_k_dim, config.RequireInt({"linear_key_head_dim"}, 1));
    KVTIER_ASSIGN_OR_RETURN(state.head_v_dim, config.RequireInt({"linear_value_head_dim"}, 1));
    KVTIER_ASSIGN_OR_RETURN(state.conv_kernel, config.RequireInt({"linear_conv_kernel_dim"}, 1));
    return std::optional<LinearStateGeometry>(state);
  }
  const bool mamba2 = config.Has({"mamba_num_heads"}) ||
                      (OneOf(spec.model_type, {"mamba2"}) && config.Has({"num_heads"}));
  if (mamba2) {
    // Mamba2 (mamba2, nemotron_h, falcon_h1, bamba, granitemoehybrid).
    state.kind = StateKind::kMamba2;
    KVTIER_ASSIGN_OR_RETURN(state.num_heads, config.RequireInt({"mamba_num_heads", "num_heads"}, 1));
    KVTIER_ASSIGN_OR_RETURN(state.head_dim, config.RequireInt({"mamba_head_dim", "mamba_d_head", "head_dim"}, 1));
    KVTIER_ASSIGN_OR_RETURN(state.state_size, config.RequireInt({"ssm_state_size", "mamba_d_state", "state_size"}, 1));
    KVTIER_ASSIGN_OR_RETURN(state.n_groups, config.RequireInt({"n_groups", "mamba_n_groups"}, 1));
    KVTIER_ASSIGN_OR_RETURN(state.conv_kernel, config.RequireInt({"conv_kernel", "mamba_d_conv"}, 1));
    state.intermediate_size = state.num_heads * state.head_dim;
    return std::optional<LinearStateGeometry>(state);
  }
  const bool mamba1 = config.Has({"mamba_d_state"}) || OneOf(spec.model_type, {"mamba", "falcon_mamba"});
  if (mamba1) {
    // Mamba1 (mamba, falcon_mamba, jamba).
    state.kind = StateKind::kMamba1;
    KVTIER_ASSIGN_OR_RETURN(state.state_size, config.RequireInt({"mamba_d_state", "state_size"}, 1));
    KVTIER_ASSIGN_OR_RETURN(state.conv_kernel, config.RequireInt({"mamba_d_conv", "conv_kernel"}, 1));
    KVTIER_ASSIGN_OR_RETURN(auto expand, config.OptionalInt({"mamba_expand", "expand"}, 1));
    KVTIER_ASSIGN_OR_RETURN(auto intermediate, config.OptionalInt({"intermediate_size"}, 1));
    state.intermediate_size = OneOf(spec.model_type, {"mamba", "falcon_mamba"}) && intermediate
                                  ? *intermediate
                                  : expand.value_or(2) * spec.hidden_size;
    return std::optional<LinearStateGeometry>(state);
  }
  return std::optional<LinearStateGeometry>();
}

Result<std::vector<LayerSpec>> ReadLayerPattern(const JsonFields& config, const ModelSpec& spec,
                                                std::vector<std::string>& notes) {
  const int64_t layers = spec.num_layers;
  const auto count = static_cast<std::size_t>(layers);
  KVTIER_ASSIGN_OR_RETURN(auto window_field, config.OptionalInt({"sliding_window", "sliding_window_size"}, 1));
  KVTIER_ASSIGN_OR_RETURN(auto use_sliding, config.OptionalBool({"use_sliding_window"}));
  const int64_t window = window_field.value_or(0);

  // 1. An explicit list per layer.
  KVTIER_ASSIGN_OR_RETURN(auto layer_types, config.OptionalStringArray({"layer_types"}));
  if (layer_types) {
    if (layer_types->size() != count) {
      return config.FieldError("layer_types", "has " + std::to_string(layer_types->size()) +
                                                  " entries but num_hidden_layers is " + std::to_string(layers));
    }
    std::vector<LayerSpec> out(count);
    for (std::size_t i = 0; i < count; ++i) {
      KVTIER_ASSIGN_OR_RETURN(out[i].mixer, MixerFromLayerType(config, i, (*layer_types)[i]));
      if (out[i].mixer == LayerMixer::kSlidingAttention) {
        if (window == 0) return config.FieldError("sliding_window", "is missing but layer_types names sliding layers");
        out[i].window = window;
      }
    }
    return out;
  }
  KVTIER_ASSIGN_OR_RETURN(auto hybrid_pattern, config.OptionalString({"hybrid_override_pattern"}));
  if (hybrid_pattern) {
    // Nemotron-H: 'M' Mamba2, '*' attention, '-' MLP, 'E' MoE (the last two keep no KV).
    if (hybrid_pattern->size() != count) {
      return config.FieldError("hybrid_override_pattern", "has " + std::to_string(hybrid_pattern->size()) +
                                                              " characters but num_hidden_layers is " +
                                                              std::to_string(layers));
    }
    std::vector<LayerSpec> out(count);
    for (std::size_t i = 0; i < count; ++i) {
      switch ((*hybrid_pattern)[i]) {
        case 'M': out[i].mixer = LayerMixer::kLinearAttention; break;
        case '*': out[i].mixer = LayerMixer::kFullAttention; break;
        case '-':
        case 'E': out[i].mixer = LayerMixer::kNoKv; break;
        default:
          return config.FieldError("hybrid_override_pattern", std::string("has unknown layer code '") +
                                                                  (*hybrid_pattern)[i] + "' at " + std::to_string(i) +
                                                                  " (known: M, *, -, E)");
      }
    }
    return out;
  }

  // 2. Periodic hybrids.
  KVTIER_ASSIGN_OR_RETURN(auto full_interval, config.OptionalInt({"full_attention_interval"}, 1));
  if (full_interval && spec.linear_state) {
    // Qwen3-Next: layer i attends fully when (i + 1) % interval == 0, else Gated DeltaNet.
    std::vector<LayerSpec> out(count, {LayerMixer::kLinearAttention, 0});
    for (int64_t i = 0; i < layers; ++i) {
      if ((i + 1) % *full_interval == 0) out[static_cast<std::size_t>(i)].mixer = LayerMixer::kFullAttention;
    }
    notes.push_back("layer pattern from full_attention_interval=" + std::to_string(*full_interval));
    return out;
  }
  KVTIER_ASSIGN_OR_RETURN(auto attn_period, config.OptionalInt({"attn_layer_period"}, 1));
  if (attn_period && spec.linear_state) {
    // Jamba: attention where i % period == offset, Mamba elsewhere.
    KVTIER_ASSIGN_OR_RETURN(auto offset, config.OptionalInt({"attn_layer_offset"}, 0));
    std::vector<LayerSpec> out(count, {LayerMixer::kLinearAttention, 0});
    for (int64_t i = 0; i < layers; ++i) {
      if (i % *attn_period == offset.value_or(0)) out[static_cast<std::size_t>(i)].mixer = LayerMixer::kFullAttention;
    }
    return out;
  }
  if (spec.linear_state && OneOf(spec.model_type, {"mamba", "mamba2", "falcon_mamba"})) {
    return std::vector<LayerSpec>(count, {LayerMixer::kLinearAttention, 0});
  }
  if (spec.linear_state) {
    return config.FieldError("layer_types", "is missing: the config has recurrent-state fields but no layer "
                                            "pattern (layer_types, hybrid_override_pattern, "
                                            "full_attention_interval or attn_layer_period)");
  }

  // 3. Sliding windows without a per-layer list.
  if (window == 0 || (use_sliding.has_value() && !*use_sliding)) {
    if (window != 0) notes.push_back("sliding_window set but use_sliding_window is false: all layers attend fully");
    return std::vector<LayerSpec>(count);
  }
  KVTIER_ASSIGN_OR_RETURN(auto pattern, config.OptionalInt({"sliding_window_pattern"}, 1));
  if (!pattern && spec.model_type == "gemma2") pattern = 2;
  if (!pattern && OneOf(spec.model_type, {"gemma3", "gemma3_text"})) pattern = 6;
  if (!pattern && spec.model_type == "cohere2") pattern = 4;
  if (pattern) {
    notes.push_back("sliding window " + std::to_string(window) + " on all layers but every " +
                    std::to_string(*pattern) + "th (transformers' rule for " + spec.model_type + ")");
    return PeriodicSliding(layers, *pattern, window);
  }
  KVTIER_ASSIGN_OR_RETURN(auto max_window_layers, config.OptionalInt({"max_window_layers"}, 0));
  std::vector<LayerSpec> out(count);
  const int64_t first_sliding = use_sliding.value_or(false) ? max_window_layers.value_or(0) : 0;
  for (int64_t i = first_sliding; i < layers; ++i) out[static_cast<std::size_t>(i)] = {LayerMixer::kSlidingAttention, window};
  notes.push_back("sliding window " + std::to_string(window) + " on layers " + std::to_string(first_sliding) +
                  ".." + std::to_string(layers - 1));
  return out;
}

}  // namespace kvtier::sizing_internal
