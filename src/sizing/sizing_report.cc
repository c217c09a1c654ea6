#include "kvtier/sizing_report.h"

#include <cstdio>
#include <sstream>

#include <nlohmann/json.hpp>

namespace kvtier {
namespace {

nlohmann::json ToJson(const SizingReport& r) {
  const ModelSpec& m = r.model;
  const KvSizing& kv = r.kv;
  nlohmann::json attention = nlohmann::json::object();
  for (const LayerGroupSizing& g : kv.groups) {
    std::string key(LayerMixerName(g.mixer));
    if (g.mixer == LayerMixer::kSlidingAttention && attention.contains(key)) key += "_" + std::to_string(g.window);
    nlohmann::json group = {{"layers", g.layers}};
    if (g.mixer == LayerMixer::kFullAttention || g.mixer == LayerMixer::kSlidingAttention) {
      group["kind"] = AttentionKindName(m.attention.kind);
      group["q_heads"] = m.attention.num_q_heads;
      group["kv_heads"] = m.attention.num_kv_heads;
      group["kv_heads_per_gpu"] = kv.kv_heads_per_gpu;
      group["head_dim"] = m.attention.head_dim_k;
      if (m.attention.kind == AttentionKind::kMla) {
        group["kv_lora_rank"] = m.attention.kv_lora_rank;
        group["qk_rope_head_dim"] = m.attention.qk_rope_head_dim;
      }
      group["kv_bytes_per_token_per_layer"] = g.kv_bytes_per_token_per_layer;
      if (g.mixer == LayerMixer::kSlidingAttention) group["window"] = g.window;
    } else if (g.mixer == LayerMixer::kLinearAttention) {
      group["kind"] = StateKindName(m.linear_state->kind);
      group["state_bytes_per_sequence_per_layer"] = g.state_bytes_per_sequence_per_layer;
    }
    attention[key] = group;
  }
  nlohmann::json out = {
      {"model", m.name},
      {"source", m.source},
      {"model_type", m.model_type},
      {"architecture", m.architecture},
      {"layers", m.num_layers},
      {"layers_per_gpu", kv.layers_per_gpu},
      {"attention_kind", AttentionKindName(m.attention.kind)},
      {"attention", attention},
      {"kv_dtype", kv.kv_dtype.name},
      {"state_dtype", kv.state_dtype.name},
      {"tensor_parallel", kv.parallel.tensor_parallel},
      {"pipeline_parallel", kv.parallel.pipeline_parallel},
      {"pipeline_stage_reported", kv.pipeline_stage},
      {"block_size", kv.block_size},
      {"kv_bytes_per_token", kv.kv_bytes_per_token},
      {"kv_bytes_per_token_per_layer", kv.kv_bytes_per_token_per_layer},
      {"naive_mha_bytes_per_token_per_layer", kv.naive_mha_bytes_per_token_per_layer},
      {"overprovision_ratio", kv.overprovision_ratio},
      {"state_bytes_per_sequence", kv.state_bytes_per_sequence},
      {"kv_bytes_per_block", kv.kv_bytes_per_block},
      {"kv_bytes_per_token_all_gpus", kv.kv_bytes_per_token_all_gpus},
      {"parameters", {{"total", m.parameters.total},
                      {"active_per_token", m.parameters.active_per_token},
                      {"embedding", m.parameters.embedding},
                      {"lm_head", m.parameters.lm_head},
                      {"attention", m.parameters.attention},
                      {"linear_attention", m.parameters.linear_attention},
                      {"dense_mlp", m.parameters.dense_mlp},
                      {"experts", m.parameters.experts},
                      {"shared_and_router", m.parameters.shared_and_router},
                      {"norms", m.parameters.norms}}},
      {"weight_format", m.weights.name},
      {"notes", m.notes},
  };
  if (m.mtp_layers > 0) out["mtp_layers_not_sized"] = m.mtp_layers;
  if (r.gpu) {
    const GpuMemoryPlan& g = *r.gpu;
    out["gpu_mem_gib"] = r.gpu_options->gpu_mem_gib;
    out["gpu_util"] = r.gpu_options->gpu_util;
    out["context"] = r.gpu_options->context;
    out["weight_bytes_per_gpu"] = g.weight_bytes_per_gpu;
    out["activation_reserve_bytes"] = g.activation_reserve_bytes;
    out["kv_budget_bytes"] = g.kv_budget_bytes;
    out["bytes_per_sequence"] = g.bytes_per_sequence;
    out["max_tokens"] = g.max_tokens;
    out["max_batch"] = g.max_batch;
    out["naive_mha_max_batch"] = g.naive_mha_max_batch;
    out["limited_by"] = g.limited_by;
    out["limit_explanation"] = g.explanation;
  }
  if (!r.tiers.empty()) {
    nlohmann::json tiers = nlohmann::json::array();
    for (const TierFit& t : r.tiers) {
      nlohmann::json tier = {{"name", t.name}, {"capacity_bytes", t.capacity_bytes}, {"tokens", t.tokens}};
      if (r.gpu_options) tier["sequences"] = t.sequences;
      tiers.push_back(tier);
    }
    out["tiers"] = tiers;
  }
  return out;
}

std::string WithThousands(uint64_t value) {
  std::string digits = std::to_string(value);
  for (int i = static_cast<int>(digits.size()) - 3; i > 0; i -= 3) digits.insert(static_cast<std::size_t>(i), ",");
  return digits;
}

std::string Fixed(double value, int precision) {
  char buffer[64];
  std::snprintf(buffer, sizeof buffer, "%.*f", precision, value);
  return buffer;
}

std::string HumanBytes(double bytes) {
  static constexpr const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  int unit = 0;
  while (bytes >= 1024 && unit < 5) {
    bytes /= 1024;
    ++unit;
  }
  return Fixed(bytes, unit == 0 ? 0 : 2) + " " + kUnits[unit];
}

std::string LayerSummary(const SizingReport& r) {
  std::string out;
  for (const LayerGroupSizing& g : r.kv.groups) {
    if (!out.empty()) out += " + ";
    out += std::to_string(g.layers) + " ";
    switch (g.mixer) {
      case LayerMixer::kFullAttention: out += std::string(AttentionKindName(r.model.attention.kind)); break;
      case LayerMixer::kSlidingAttention: out += "SWA(" + std::to_string(g.window) + ")"; break;
      case LayerMixer::kLinearAttention: out += std::string(StateKindName(r.model.linear_state->kind)); break;
      case LayerMixer::kNoKv: out += "no-KV"; break;
    }
  }
  return out;
}

}  // namespace

std::string SizingReportJson(const SizingReport& report) { return ToJson(report).dump(2) + "\n"; }

std::string SizingSummaryJson(const std::vector<SizingReport>& reports) {
  nlohmann::json out = nlohmann::json::array();
  for (const SizingReport& r : reports) out.push_back(ToJson(r));
  return out.dump(2) + "\n";
}

std::string SizingReportTable(const SizingReport& r) {
  const ModelSpec& m = r.model;
  const KvSizing& kv = r.kv;
  std::ostringstream out;
  out << "model                " << m.name << " (" << m.model_type << ", " << m.source << ")\n";
  out << "layers               " << m.num_layers << ": " << LayerSummary(r) << "\n";
  out << "attention            " << AttentionKindName(m.attention.kind) << ", " << m.attention.num_q_heads
      << " query heads, " << m.attention.num_kv_heads << " KV heads (" << kv.kv_heads_per_gpu << " per GPU), head_dim "
      << m.attention.head_dim_k << "\n";
  out << "KV dtype, layout     " << kv.kv_dtype.name << ", TP " << kv.parallel.tensor_parallel << ", PP "
      << kv.parallel.pipeline_parallel << " (stage " << kv.pipeline_stage << ", " << kv.layers_per_gpu << " layers)\n";
  out << "KV bytes/token/layer " << WithThousands(kv.kv_bytes_per_token_per_layer) << "  (naive MHA "
      << WithThousands(kv.naive_mha_bytes_per_token_per_layer) << ", over-provision " << Fixed(kv.overprovision_ratio, 2)
      << "x)\n";
  out << "KV bytes/token       " << WithThousands(kv.kv_bytes_per_token) << " per GPU, "
      << WithThousands(kv.kv_bytes_per_token_all_gpus) << " all GPUs\n";
  out << "KV bytes/block       " << WithThousands(kv.kv_bytes_per_block) << " (" << kv.block_size << " tokens, "
      << HumanBytes(static_cast<double>(kv.kv_bytes_per_block)) << ")\n";
  if (kv.state_bytes_per_sequence > 0) {
    out << "state bytes/sequence " << WithThousands(kv.state_bytes_per_sequence) << " ("
        << HumanBytes(static_cast<double>(kv.state_bytes_per_sequence)) << ", " << kv.state_dtype.name << " SSM state)\n";
  }
  out << "parameters           " << Fixed(static_cast<double>(m.parameters.total) / 1e9, 2) << " B ("
      << Fixed(static_cast<double>(m.parameters.active_per_token) / 1e9, 2) << " B active), weights " << m.weights.name << "\n";
  if (r.gpu) {
    const GpuMemoryPlan& g = *r.gpu;
    out << "GPU plan             " << r.gpu_options->gpu_mem_gib << " GiB x " << r.gpu_options->gpu_util << ": weights "
        << HumanBytes(static_cast<double>(g.weight_bytes_per_gpu)) << ", activations "
        << HumanBytes(static_cast<double>(g.activation_reserve_bytes)) << ", KV budget "
        << (g.kv_budget_bytes > 0 ? HumanBytes(static_cast<double>(g.kv_budget_bytes)) : std::string("none")) << "\n";
    out << "max tokens           " << WithThousands(static_cast<uint64_t>(g.max_tokens)) << "\n";
    out << "max batch            " << g.max_batch << " at " << r.gpu_options->context << " tokens (limited by "
        << g.limited_by << ": " << g.explanation << ")\n";
    out << "max batch if MHA     " << g.naive_mha_max_batch << " (every layer sized as MHA)\n";
  }
  for (const TierFit& t : r.tiers) {
    out << "tier " << t.name << std::string(t.name.size() < 16 ? 16 - t.name.size() : 1, ' ')
        << HumanBytes(static_cast<double>(t.capacity_bytes)) << ": " << WithThousands(static_cast<uint64_t>(t.tokens))
        << " tokens";
    if (r.gpu_options) out << ", " << t.sequences << " sequences";
    out << "\n";
  }
  for (const std::string& note : m.notes) out << "note                 " << note << "\n";
  return out.str();
}

std::string SizingSummaryTable(const std::vector<SizingReport>& reports) {
  std::ostringstream out;
  char line[512];
  std::snprintf(line, sizeof line, "%-30s %-5s %-34s %10s %10s %8s %12s %14s\n", "model", "attn", "layers",
                "B/tok/lyr", "naive", "ratio", "KV B/token", "state B/seq");
  out << line;
  for (const SizingReport& r : reports) {
    std::snprintf(line, sizeof line, "%-30s %-5s %-34s %10s %10s %7.2fx %12s %14s\n", r.model.name.c_str(),
                  std::string(AttentionKindName(r.model.attention.kind)).c_str(), LayerSummary(r).c_str(),
                  WithThousands(r.kv.kv_bytes_per_token_per_layer).c_str(),
                  WithThousands(r.kv.naive_mha_bytes_per_token_per_layer).c_str(), r.kv.overprovision_ratio,
                  WithThousands(r.kv.kv_bytes_per_token).c_str(), WithThousands(r.kv.state_bytes_per_sequence).c_str());
    out << line;
  }
  if (!reports.empty()) {
    out << "(" << reports.front().kv.kv_dtype.name << " unless the model says otherwise, TP "
        << reports.front().kv.parallel.tensor_parallel << ", per GPU; naive = 2 x q_heads x head_dim x bytes)\n";
  }
  return out.str();
}

}  // namespace kvtier
