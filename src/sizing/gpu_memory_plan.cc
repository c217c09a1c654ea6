#include <cmath>
#include <sstream>

#include "kvtier/capacity_plan.h"
#include "sizing/config_internal.h"
#include "util/checked_math.h"

namespace kvtier {
namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

std::string Gib(double bytes) {
  std::ostringstream out;
  out.precision(1);
  out << std::fixed << bytes / kGiB << " GiB";
  return out.str();
}

// Peak activations of one prefill chunk of `tokens` on one GPU: the residual stream and
// its norms (4 x hidden), the QKV projection, the gated MLP's up/gate outputs (3 x width,
// the widest of dense and active expert widths), all in the model dtype, plus fp32 logits
// for one sampled token of each of up to 256 sequences. An estimate; vLLM measures it by
// profiling, and --activation-gib overrides it.
uint64_t EstimateActivationBytes(const ModelSpec& model, int64_t tp, int64_t tokens) {
  const AttentionGeometry& a = model.attention;
  const double bytes = sizing_internal::DtypeBits(model.dtype) / 8;
  const double qkv = static_cast<double>(a.num_q_heads * a.head_dim_k + 2 * a.num_kv_heads * a.head_dim_k) /
                     static_cast<double>(tp);
  const double width = static_cast<double>(std::max<int64_t>(model.intermediate_size, model.hidden_size)) /
                       static_cast<double>(tp);
  const double per_token = 4.0 * static_cast<double>(model.hidden_size) + qkv + 3.0 * width;
  const double logits = 256.0 * static_cast<double>(model.vocab_size) / static_cast<double>(tp) * 4.0;
  return static_cast<uint64_t>(static_cast<double>(tokens) * per_token * bytes + logits);
}

}  // namespace

Status GpuMemoryOptions::Validate() const {
  if (!(gpu_mem_gib > 0) || !std::isfinite(gpu_mem_gib)) return Status::InvalidArgument("--gpu-mem-gib must be a positive number of GiB");
  if (!(gpu_util > 0 && gpu_util <= 1)) return Status::InvalidArgument("--gpu-util must be in (0, 1], got " + std::to_string(gpu_util));
  if (context < 1) return Status::InvalidArgument("--context must be a positive number of tokens, got " + std::to_string(context));
  if (activation_reserve_gib && (!(*activation_reserve_gib >= 0) || !std::isfinite(*activation_reserve_gib))) {
    return Status::InvalidArgument("--activation-gib must be >= 0");
  }
  if (max_batched_tokens < 1) return Status::InvalidArgument("--max-batched-tokens must be >= 1");
  if (max_num_seqs < 0) return Status::InvalidArgument("--max-num-seqs must be >= 0");
  return Status::Ok();
}

Result<uint64_t> WeightBytes(const ModelSpec& model, const std::optional<std::string>& weight_dtype) {
  const ParameterCount& p = model.parameters;
  double linear_bits = model.weights.linear_bits, expert_bits = model.weights.expert_bits, other_bits = model.weights.other_bits;
  if (weight_dtype) {
    KVTIER_ASSIGN_OR_RETURN(KvDtype dtype, ParseKvDtype(*weight_dtype, model.dtype));
    // Scales per 128-element group for the integer formats, as weight quantizers store them.
    const double bits = static_cast<double>(dtype.bits) + (dtype.scale_bytes > 0 ? dtype.scale_bytes * 8.0 / 128 : 0.0);
    linear_bits = expert_bits = other_bits = bits;
  }
  const double linear = static_cast<double>(p.attention + p.linear_attention + p.dense_mlp + p.shared_and_router);
  const double other = static_cast<double>(p.embedding + p.lm_head + p.norms);
  const double bits = linear * linear_bits + static_cast<double>(p.experts) * expert_bits + other * other_bits;
  return static_cast<uint64_t>(std::ceil(bits / 8));
}

Result<GpuMemoryPlan> PlanGpuMemory(const ModelSpec& model, const KvSizing& sizing, const GpuMemoryOptions& options) {
  KVTIER_RETURN_IF_ERROR(options.Validate());
  GpuMemoryPlan plan;
  const int64_t tp = sizing.parallel.tensor_parallel;
  const auto gpus = static_cast<uint64_t>(tp * sizing.parallel.pipeline_parallel);
  plan.usable_bytes = static_cast<uint64_t>(options.gpu_mem_gib * options.gpu_util * kGiB);
  KVTIER_ASSIGN_OR_RETURN(uint64_t weights, WeightBytes(model, options.weight_dtype));
  plan.weight_bytes_per_gpu = (weights + gpus - 1) / gpus;
  plan.activation_reserve_bytes =
      options.activation_reserve_gib ? static_cast<uint64_t>(*options.activation_reserve_gib * kGiB)
                                     : EstimateActivationBytes(model, tp, options.max_batched_tokens);
  plan.kv_budget_bytes = static_cast<int64_t>(plan.usable_bytes) - static_cast<int64_t>(plan.weight_bytes_per_gpu) -
                         static_cast<int64_t>(plan.activation_reserve_bytes);
  plan.bytes_per_sequence = sizing.BytesPerSequence(options.context, options.max_batched_tokens);
  const auto block = static_cast<uint64_t>(sizing.block_size);
  const uint64_t padded_context = (static_cast<uint64_t>(options.context) + block - 1) / block * block;
  plan.naive_mha_bytes_per_sequence =
      SaturatingMul(SaturatingMul(padded_context, sizing.naive_mha_bytes_per_token_per_layer),
                    static_cast<uint64_t>(sizing.layers_per_gpu));

  if (plan.kv_budget_bytes <= 0) {
    plan.limited_by = "weights";
    plan.explanation = "weights (" + Gib(static_cast<double>(plan.weight_bytes_per_gpu)) + " per GPU) and activations (" +
                       Gib(static_cast<double>(plan.activation_reserve_bytes)) + ") leave no room for KV in " +
                       Gib(static_cast<double>(plan.usable_bytes)) + "; add GPUs (--tp/--pp) or quantize the weights";
    return plan;
  }
  const auto budget = static_cast<uint64_t>(plan.kv_budget_bytes);
  plan.max_tokens = sizing.kv_bytes_per_token > 0 ? static_cast<int64_t>(budget / sizing.kv_bytes_per_token) : 0;
  plan.max_batch = plan.bytes_per_sequence > 0 ? static_cast<int64_t>(budget / plan.bytes_per_sequence) : 0;
  plan.naive_mha_max_batch =
      plan.naive_mha_bytes_per_sequence > 0 ? static_cast<int64_t>(budget / plan.naive_mha_bytes_per_sequence) : 0;
  plan.limited_by = "kv_cache";
  plan.explanation = Gib(static_cast<double>(budget)) + " of KV budget / " +
                     std::to_string(plan.bytes_per_sequence) + " bytes per sequence of " + std::to_string(options.context) +
                     " tokens";
  if (plan.max_batch == 0) {
    plan.limited_by = "context";
    plan.explanation = "one sequence of " + std::to_string(options.context) + " tokens needs " +
                       Gib(static_cast<double>(plan.bytes_per_sequence)) + " but the KV budget is " + Gib(static_cast<double>(budget)) +
                       "; shorten the context, add GPUs or quantize the KV cache";
  } else if (options.max_num_seqs > 0 && plan.max_batch > options.max_num_seqs) {
    plan.max_batch = options.max_num_seqs;
    plan.limited_by = "max_num_seqs";
    plan.explanation = "the KV budget would hold more, but --max-num-seqs caps the batch";
  }
  return plan;
}

}  // namespace kvtier
