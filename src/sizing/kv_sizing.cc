#include <algorithm>

#include "kvtier/sizing.h"
#include "util/checked_math.h"

namespace kvtier {
namespace {

uint64_t CeilDiv(uint64_t a, uint64_t b) { return (a + b - 1) / b; }

Status CheckDivides(int64_t divisor, int64_t value, std::string_view what, std::string_view model) {
  if (value % divisor != 0) {
    return Status::InvalidArgument(std::string(model) + ": tensor parallel size " + std::to_string(divisor) +
                                   " does not divide " + std::string(what) + " (" + std::to_string(value) +
                                   "); choose a TP size that divides it");
  }
  return Status::Ok();
}

// KV heads one rank holds: a share of them, or one replica when TP exceeds them (vLLM's
// ModelConfig.get_num_kv_heads). MLA's single latent is replicated on every rank.
Result<int64_t> KvHeadsPerGpu(const ModelSpec& model, int64_t tp) {
  const AttentionGeometry& a = model.attention;
  if (a.kind == AttentionKind::kMla) return int64_t{1};
  KVTIER_RETURN_IF_ERROR(CheckDivides(tp, a.num_q_heads, "num_attention_heads", model.name));
  if (a.num_kv_heads >= tp) {
    KVTIER_RETURN_IF_ERROR(CheckDivides(tp, a.num_kv_heads, "num_key_value_heads", model.name));
    return a.num_kv_heads / tp;
  }
  if (tp % a.num_kv_heads != 0) {
    return Status::InvalidArgument(model.name + ": tensor parallel size " + std::to_string(tp) +
                                   " is not a multiple of num_key_value_heads (" + std::to_string(a.num_kv_heads) +
                                   "), so KV heads cannot be replicated evenly");
  }
  return int64_t{1};
}

// One rank's recurrent state of one layer: vLLM's MambaStateShapeCalculator shapes, the
// conv window in `conv` and the temporal state in `ssm`.
Result<uint64_t> StateBytesPerLayer(const ModelSpec& model, int64_t tp, const KvDtype& conv, const KvDtype& ssm) {
  const LinearStateGeometry& s = *model.linear_state;
  const int64_t width = s.conv_kernel - 1;
  Int128 conv_dim = 0;
  Int128 ssm_elements = 0;
  switch (s.kind) {
    case StateKind::kGatedDeltaNet:
      conv_dim = 2 * Int128{s.num_k_heads} * s.head_k_dim + Int128{s.num_v_heads} * s.head_v_dim;
      KVTIER_RETURN_IF_ERROR(CheckDivides(tp, s.num_v_heads, "linear_num_value_heads", model.name));
      ssm_elements = Int128{s.num_v_heads / tp} * s.head_k_dim * s.head_v_dim;
      break;
    case StateKind::kMamba2: {
      // Groups are replicated so that each rank holds the groups of its heads.
      const int64_t groups = s.n_groups % tp == 0 ? s.n_groups : s.n_groups + tp - s.n_groups;
      conv_dim = s.intermediate_size + 2 * Int128{groups} * s.state_size;
      KVTIER_RETURN_IF_ERROR(CheckDivides(tp, s.num_heads, "mamba_num_heads", model.name));
      ssm_elements = Int128{s.num_heads / tp} * s.head_dim * s.state_size;
      break;
    }
    case StateKind::kMamba1:
      conv_dim = s.intermediate_size;
      KVTIER_RETURN_IF_ERROR(CheckDivides(tp, s.intermediate_size, "the Mamba inner size", model.name));
      ssm_elements = Int128{s.intermediate_size / tp} * s.state_size;
      break;
  }
  if (conv_dim % tp != 0) {
    return Status::InvalidArgument(model.name + ": tensor parallel size " + std::to_string(tp) +
                                   " does not divide the state's convolution channels");
  }
  KVTIER_ASSIGN_OR_RETURN(int64_t conv_elements, NarrowCount(conv_dim / tp * width, model.name + ": the conv state"));
  KVTIER_ASSIGN_OR_RETURN(int64_t ssm_count, NarrowCount(ssm_elements, model.name + ": the SSM state"));
  return conv.VectorBytes(conv_elements) + ssm.VectorBytes(ssm_count);
}

}  // namespace

Status SizingOptions::Validate() const {
  if (parallel.tensor_parallel < 1) return Status::InvalidArgument("tensor parallel size must be >= 1, got " + std::to_string(parallel.tensor_parallel));
  if (parallel.pipeline_parallel < 1) return Status::InvalidArgument("pipeline parallel size must be >= 1, got " + std::to_string(parallel.pipeline_parallel));
  if (block_size < 1 || block_size > (int64_t{1} << 20)) {
    return Status::InvalidArgument("block size must be 1 to 1048576 tokens, got " + std::to_string(block_size));
  }
  if (parallel.tensor_parallel > 65536 || parallel.pipeline_parallel > 65536) {
    return Status::InvalidArgument("parallel sizes above 65536 GPUs are not supported");
  }
  if (kv_quant_group < 0) return Status::InvalidArgument("KV quantization group must be >= 0, got " + std::to_string(kv_quant_group));
  return Status::Ok();
}

std::vector<std::pair<int64_t, int64_t>> PipelineStages(int64_t num_layers, int64_t stages) {
  std::vector<int64_t> sizes(static_cast<std::size_t>(stages), num_layers / stages);
  const int64_t remainder = num_layers % stages;
  for (int64_t i = 2; i < remainder + 2; ++i) sizes[static_cast<std::size_t>(stages - i)] += 1;
  std::vector<std::pair<int64_t, int64_t>> out;
  int64_t first = 0;
  for (int64_t size : sizes) {
    out.emplace_back(first, first + size);
    first += size;
  }
  return out;
}

Result<KvSizing> ComputeKvSizing(const ModelSpec& model, const SizingOptions& options) {
  KVTIER_RETURN_IF_ERROR(options.Validate());
  const int64_t tp = options.parallel.tensor_parallel;
  const int64_t pp = options.parallel.pipeline_parallel;
  if (pp > model.num_layers) {
    return Status::InvalidArgument(model.name + ": pipeline parallel size " + std::to_string(pp) +
                                   " exceeds its " + std::to_string(model.num_layers) + " layers");
  }
  KvSizing sizing;
  sizing.parallel = options.parallel;
  sizing.block_size = options.block_size;
  KVTIER_ASSIGN_OR_RETURN(sizing.kv_dtype, ParseKvDtype(options.kv_dtype, model.dtype, options.kv_quant_group));
  KVTIER_ASSIGN_OR_RETURN(sizing.state_dtype,
                          ParseKvDtype(options.state_dtype == "auto" && model.state_dtype ? *model.state_dtype
                                                                                           : options.state_dtype,
                                       model.dtype));
  KVTIER_ASSIGN_OR_RETURN(sizing.kv_heads_per_gpu, KvHeadsPerGpu(model, tp));

  const AttentionGeometry& a = model.attention;
  const KvDtype& dtype = sizing.kv_dtype;
  const uint64_t attention_bytes =
      a.kind == AttentionKind::kMla
          ? dtype.VectorBytes(a.head_dim_k)
          : static_cast<uint64_t>(sizing.kv_heads_per_gpu) * (dtype.VectorBytes(a.head_dim_k) + dtype.VectorBytes(a.head_dim_v));
  uint64_t state_bytes = 0;
  if (model.linear_state) {
    KVTIER_ASSIGN_OR_RETURN(KvDtype conv_dtype, ParseKvDtype("auto", model.dtype));
    KVTIER_ASSIGN_OR_RETURN(state_bytes, StateBytesPerLayer(model, tp, conv_dtype, sizing.state_dtype));
  }
  auto layer_kv = [&](const LayerSpec& layer) -> uint64_t {
    return layer.mixer == LayerMixer::kFullAttention || layer.mixer == LayerMixer::kSlidingAttention ? attention_bytes : 0;
  };

  // Report the stage that holds the most KV per token (then the most state).
  const auto stages = PipelineStages(model.num_layers, pp);
  Int128 all_gpus = 0;
  std::pair<Int128, Int128> worst{0, 0};
  for (std::size_t s = 0; s < stages.size(); ++s) {
    Int128 kv = 0, state = 0;
    for (int64_t i = stages[s].first; i < stages[s].second; ++i) {
      const LayerSpec& layer = model.layers[static_cast<std::size_t>(i)];
      kv += layer_kv(layer);
      if (layer.mixer == LayerMixer::kLinearAttention) state += state_bytes;
    }
    all_gpus += kv * tp;
    if (s == 0 || std::make_pair(kv, state) > worst) {
      worst = {kv, state};
      sizing.pipeline_stage = static_cast<int64_t>(s);
    }
  }
  const auto [first, last] = stages[static_cast<std::size_t>(sizing.pipeline_stage)];
  sizing.layers_per_gpu = last - first;
  KVTIER_ASSIGN_OR_RETURN(int64_t per_block, NarrowCount(worst.first * options.block_size, model.name + ": KV bytes per block"));
  KVTIER_ASSIGN_OR_RETURN(int64_t state_total, NarrowCount(worst.second, model.name + ": state bytes per sequence"));
  KVTIER_ASSIGN_OR_RETURN(int64_t all, NarrowCount(all_gpus, model.name + ": KV bytes per token on all GPUs"));
  sizing.kv_bytes_per_token = static_cast<uint64_t>(worst.first);
  sizing.kv_bytes_per_block = static_cast<uint64_t>(per_block);
  sizing.state_bytes_per_sequence = static_cast<uint64_t>(state_total);
  sizing.kv_bytes_per_token_all_gpus = static_cast<uint64_t>(all);

  for (LayerMixer mixer : {LayerMixer::kFullAttention, LayerMixer::kSlidingAttention, LayerMixer::kLinearAttention,
                           LayerMixer::kNoKv}) {
    // Sliding layers with different windows form one group each.
    std::vector<LayerGroupSizing> groups;
    for (int64_t i = first; i < last; ++i) {
      const LayerSpec& layer = model.layers[static_cast<std::size_t>(i)];
      if (layer.mixer != mixer) continue;
      auto it = std::find_if(groups.begin(), groups.end(), [&](const LayerGroupSizing& g) { return g.window == layer.window; });
      if (it == groups.end()) {
        groups.push_back({mixer, 0, layer.window, layer_kv(layer),
                          mixer == LayerMixer::kLinearAttention ? state_bytes : 0});
        it = groups.end() - 1;
      }
      ++it->layers;
    }
    sizing.groups.insert(sizing.groups.end(), groups.begin(), groups.end());
  }

  const bool has_attention = model.CountLayers(LayerMixer::kFullAttention) + model.CountLayers(LayerMixer::kSlidingAttention) > 0;
  sizing.kv_bytes_per_token_per_layer = has_attention ? attention_bytes : 0;
  sizing.naive_mha_bytes_per_token_per_layer =
      2 * static_cast<uint64_t>(a.num_q_heads / tp) * dtype.VectorBytes(a.naive_head_dim);
  if (sizing.kv_bytes_per_token > 0) {
    sizing.overprovision_ratio = static_cast<double>(sizing.naive_mha_bytes_per_token_per_layer) *
                                 static_cast<double>(sizing.layers_per_gpu) /
                                 static_cast<double>(sizing.kv_bytes_per_token);
  }
  return sizing;
}

uint64_t KvSizing::BytesPerSequence(int64_t context, int64_t max_batched_tokens) const {
  const auto tokens = static_cast<uint64_t>(std::max<int64_t>(context, 0));
  const auto block = static_cast<uint64_t>(block_size);
  const uint64_t full_blocks = CeilDiv(tokens, block);
  uint64_t bytes = 0;
  for (const LayerGroupSizing& g : groups) {
    const auto layers = static_cast<uint64_t>(g.layers);
    switch (g.mixer) {
      case LayerMixer::kFullAttention:
        bytes = SaturatingAdd(bytes, SaturatingMul(SaturatingMul(layers, full_blocks * block), g.kv_bytes_per_token_per_layer));
        break;
      case LayerMixer::kSlidingAttention: {
        const uint64_t kept = std::min(static_cast<uint64_t>(g.window - 1) + static_cast<uint64_t>(max_batched_tokens), tokens);
        const uint64_t blocks = std::min(CeilDiv(kept, block) + 1, full_blocks);
        bytes = SaturatingAdd(bytes, SaturatingMul(SaturatingMul(layers, blocks * block), g.kv_bytes_per_token_per_layer));
        break;
      }
      case LayerMixer::kLinearAttention:
        bytes = SaturatingAdd(bytes, SaturatingMul(layers, g.state_bytes_per_sequence_per_layer));
        break;
      case LayerMixer::kNoKv:
        break;
    }
  }
  return bytes;
}

}  // namespace kvtier
