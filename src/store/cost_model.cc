#include "kvtier/cost_model.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <map>

#include <nlohmann/json.hpp>

namespace kvtier {
namespace {

// Sources, each the vendor's datasheet (dense bf16 tensor-core rate; NVIDIA quotes the 2:4
// sparse rate first, twice these):
//  - H100 SXM5 80 GB: 989 TFLOP/s, 3.35 TB/s HBM3 ("NVIDIA H100 Tensor Core GPU" datasheet).
//  - H200 SXM 141 GB: 989 TFLOP/s, 4.8 TB/s HBM3e ("NVIDIA H200 Tensor Core GPU" datasheet).
//  - A100 SXM4 80 GB: 312 TFLOP/s, 2,039 GB/s HBM2e ("NVIDIA A100 Tensor Core GPU" datasheet;
//    the PCIe card has 1,935 GB/s).
//  - B200 (HGX B200): 2.25 PFLOP/s, 8 TB/s HBM3e ("NVIDIA HGX B200" / DGX B200 datasheet).
struct Preset {
  const char* name;
  const char* alias;
  double dense_flops;
  double hbm_bytes_per_s;
};
constexpr Preset kPresets[] = {
    {"h100-sxm", "h100", 989e12, 3.35e12},
    {"h200", "h200-sxm", 989e12, 4.8e12},
    {"a100-80gb", "a100", 312e12, 2.039e12},
    {"b200", "hgx-b200", 2.25e15, 8e12},
};

std::string Canonical(std::string_view name) {
  std::string out;
  for (char c : name) {
    const auto byte = static_cast<unsigned char>(c);
    if (std::isalnum(byte)) out += static_cast<char>(std::tolower(byte));
  }
  return out;
}

bool FinitePositive(double x) { return std::isfinite(x) && x > 0; }

nlohmann::json ModelJson(const PrefillCostModel& model) {
  nlohmann::json sliding = nlohmann::json::array();
  for (const PrefillCostModel::SlidingGroup& group : model.sliding_groups()) {
    sliding.push_back({{"window", group.window}, {"layers", group.layers}});
  }
  return {
      {"model", model.model_name()},
      {"gpu", model.gpu().name},
      {"dense_flops", model.gpu().dense_flops},
      {"mfu", model.gpu().mfu},
      {"tensor_parallel", model.tensor_parallel()},
      {"matmul_params", model.matmul_params()},
      {"flops_per_pair_per_layer", model.flops_per_pair_per_layer()},
      {"full_attention_layers", model.full_attention_layers()},
      {"sliding_attention_layers", sliding},
  };
}

// The paper's T0 latency (~100 ns), also used for a GPU's own HBM.
constexpr double kHbmLatencyS = 100e-9;

}  // namespace

Status GpuSpec::Validate() const {
  if (!FinitePositive(dense_flops)) return Status::InvalidArgument("GPU '" + name + "': dense_flops must be positive");
  if (!(std::isfinite(mfu) && mfu > 0 && mfu <= 1)) {
    return Status::InvalidArgument("GPU '" + name + "': mfu must be in (0, 1], got " + std::to_string(mfu));
  }
  if (!(std::isfinite(hbm_bytes_per_s) && hbm_bytes_per_s >= 0)) {
    return Status::InvalidArgument("GPU '" + name + "': hbm_bytes_per_s must be finite and non-negative");
  }
  return Status::Ok();
}

Result<GpuSpec> GpuPreset(std::string_view name) {
  const std::string wanted = Canonical(name);
  std::string names;
  for (const Preset& preset : kPresets) {
    if (Canonical(preset.name) == wanted || Canonical(preset.alias) == wanted) {
      return GpuSpec{.name = preset.name, .dense_flops = preset.dense_flops, .hbm_bytes_per_s = preset.hbm_bytes_per_s};
    }
    names += (names.empty() ? "" : ", ") + std::string(preset.name);
  }
  return Status::NotFound("GPU '" + std::string(name) + "' has no preset (" + names +
                          "); describe it with dense_flops and hbm_bytes_per_s instead");
}

double AttendedPairs(uint64_t tokens, uint64_t context_before, uint64_t window) {
  const double t = static_cast<double>(tokens);
  const double c = static_cast<double>(context_before);
  if (window == 0) return t * c + t * (t + 1) / 2;
  // The first m new tokens see their whole prefix (c + 1 .. c + m keys); the rest see `window`.
  const uint64_t m = window <= context_before ? 0 : std::min(tokens, window - context_before);
  const double md = static_cast<double>(m);
  return md * c + md * (md + 1) / 2 + (t - md) * static_cast<double>(window);
}

Result<PrefillCostModel> PrefillCostModel::Create(const ModelSpec& model, const GpuSpec& gpu, int64_t tensor_parallel) {
  KVTIER_RETURN_IF_ERROR(gpu.Validate());
  if (tensor_parallel < 1) {
    return Status::InvalidArgument("tensor_parallel must be at least 1, got " + std::to_string(tensor_parallel));
  }
  if (model.layers.empty()) return Status::InvalidArgument("model '" + model.name + "' has no layers");
  const ParameterCount& p = model.parameters;
  const int64_t matmul = p.active_per_token - p.embedding - p.lm_head;
  if (matmul <= 0) {
    return Status::InvalidArgument("model '" + model.name +
                                   "' has no matmul parameters (active_per_token less embedding and lm_head); "
                                   "load it with ParseModelConfig");
  }

  PrefillCostModel out;
  out.model_name_ = model.name;
  out.gpu_ = gpu;
  out.tensor_parallel_ = tensor_parallel;
  out.matmul_params_ = static_cast<double>(matmul);

  const AttentionGeometry& a = model.attention;
  // Absorbed MLA scores a query against the cached (latent + rope key) vector and returns a
  // weighted sum of latents; the up-projections are folded into W_q and W_o, so they are
  // per-token matmuls already counted in matmul_params.
  const int64_t d_qk = a.head_dim_k;
  const int64_t d_v = a.kind == AttentionKind::kMla ? a.kv_lora_rank : a.head_dim_v;
  out.flops_per_pair_ = 2.0 * static_cast<double>(a.num_q_heads) * static_cast<double>(d_qk + d_v);

  std::map<uint64_t, int64_t> windows;
  for (const LayerSpec& layer : model.layers) {
    if (layer.mixer == LayerMixer::kFullAttention) {
      ++out.full_layers_;
    } else if (layer.mixer == LayerMixer::kSlidingAttention) {
      if (layer.window <= 0) {
        return Status::InvalidArgument("model '" + model.name + "': a sliding layer has no window");
      }
      ++windows[static_cast<uint64_t>(layer.window)];
    }
  }
  for (const auto& [window, layers] : windows) out.sliding_.push_back({window, layers});
  return out;
}

double PrefillCostModel::LinearFlops(uint64_t tokens) const {
  return 2.0 * matmul_params_ * static_cast<double>(tokens);
}

double PrefillCostModel::AttentionFlops(uint64_t tokens, uint64_t context_before) const {
  double pairs = static_cast<double>(full_layers_) * AttendedPairs(tokens, context_before, 0);
  for (const SlidingGroup& group : sliding_) {
    pairs += static_cast<double>(group.layers) * AttendedPairs(tokens, context_before, group.window);
  }
  return flops_per_pair_ * pairs;
}

double PrefillCostModel::PrefillFlops(uint64_t tokens, uint64_t context_before) const {
  return LinearFlops(tokens) + AttentionFlops(tokens, context_before);
}

double PrefillCostModel::RecomputeSeconds(uint64_t tokens, uint64_t context_before) const {
  return PrefillFlops(tokens, context_before) / (gpu_.dense_flops * gpu_.mfu * static_cast<double>(tensor_parallel_));
}

std::string PrefillCostModel::ToJson() const { return ModelJson(*this).dump(); }

double TierCost::LoadSeconds(uint64_t bytes) const {
  return latency_s + static_cast<double>(bytes) / bandwidth_bytes_per_s;
}

Status TierCost::Validate() const {
  if (!FinitePositive(bandwidth_bytes_per_s)) return Status::InvalidArgument("tier bandwidth must be positive");
  if (!(std::isfinite(latency_s) && latency_s >= 0)) {
    return Status::InvalidArgument("tier latency must be non-negative");
  }
  return Status::Ok();
}

TierCost DefaultTierCost(TierKind kind) {
  switch (kind) {
    case TierKind::kGpuHbm: return {3.35e12, kHbmLatencyS};
    case TierKind::kCpuDram: return {204e9, 5e-6};
    case TierKind::kCxlMemory: return {64e9, 500e-9};
    case TierKind::kNvme: return {12e9, 10e-6};
    case TierKind::kRemotePool: return {50e9, 100e-6};
    case TierKind::kParallelFs: return {2e9, 1e-3};
  }
  return {2e9, 1e-3};  // unreachable for a valid TierKind; the slowest tier is the safe guess
}

TierCost GpuHbmTierCost(const GpuSpec& gpu) { return {gpu.hbm_bytes_per_s, kHbmLatencyS}; }

Result<TierCost> FitTierCost(std::span<const LoadSample> samples) {
  double n = 0, sx = 0, sy = 0;
  for (const LoadSample& s : samples) {
    if (!(std::isfinite(s.seconds) && s.seconds >= 0)) {
      return Status::InvalidArgument("a load sample's time must be finite and non-negative");
    }
    n += 1;
    sx += static_cast<double>(s.bytes);
    sy += s.seconds;
  }
  if (n < 2) return Status::InvalidArgument("fitting a tier cost needs at least two load samples");
  const double mx = sx / n, my = sy / n;
  double sxx = 0, sxy = 0;
  for (const LoadSample& s : samples) {
    const double dx = static_cast<double>(s.bytes) - mx;
    sxx += dx * dx;
    sxy += dx * (s.seconds - my);
  }
  if (sxx <= 0) return Status::InvalidArgument("fitting a tier cost needs load samples of at least two sizes");
  const double seconds_per_byte = sxy / sxx;
  if (!(seconds_per_byte > 0)) {
    return Status::InvalidArgument("load samples do not get slower with size; measure larger loads");
  }
  return TierCost{.bandwidth_bytes_per_s = 1 / seconds_per_byte,
                  .latency_s = std::max(0.0, my - seconds_per_byte * mx)};
}

LoadDecision DecideLoad(const PrefillCostModel& model, const TierCost& tier, uint64_t bytes, uint64_t tokens,
                        uint64_t context_before) {
  LoadDecision d;
  d.bytes = bytes;
  d.tokens = tokens;
  d.context_before = context_before;
  d.tier = tier;
  d.load_seconds = tier.LoadSeconds(bytes);
  d.recompute_flops = model.PrefillFlops(tokens, context_before);
  d.recompute_seconds = model.RecomputeSeconds(tokens, context_before);
  d.load = d.load_seconds < d.recompute_seconds;
  return d;
}

std::string LoadDecisionJson(const PrefillCostModel& model, const LoadDecision& decision) {
  const nlohmann::json out = {
      {"load", decision.load},
      {"load_seconds", decision.load_seconds},
      {"recompute_seconds", decision.recompute_seconds},
      {"recompute_flops", decision.recompute_flops},
      {"bytes", decision.bytes},
      {"tokens", decision.tokens},
      {"context_before", decision.context_before},
      {"tier", {{"bandwidth_bytes_per_s", decision.tier.bandwidth_bytes_per_s},
                {"latency_s", decision.tier.latency_s}}},
      {"model", ModelJson(model)},
  };
  return out.dump();
}

}  // namespace kvtier
