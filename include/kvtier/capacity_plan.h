// Capacity planning on top of the sizing engine: how many tokens and sequences fit on a
// GPU after weights and activations, and how many tokens each memory tier holds.
//
// Thread-safety: pure functions over values.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "kvtier/model_spec.h"
#include "kvtier/sizing.h"
#include "kvtier/status.h"

namespace kvtier {

struct GpuMemoryOptions {
  double gpu_mem_gib = 0;          // memory of one GPU, GiB. Required (> 0).
  double gpu_util = 0.9;           // Default: 0.9, vLLM's gpu_memory_utilization
  int64_t context = 0;             // tokens per sequence. Required (> 0).
  // Default: estimated from one prefill chunk of max_batched_tokens (see docs/sizing.md).
  std::optional<double> activation_reserve_gib;
  // Default: the checkpoint's format (WeightFormat). Else a dtype name (bf16, fp8, int4).
  std::optional<std::string> weight_dtype;
  int64_t max_batched_tokens = 8192;  // Default: 8192, vLLM's chunked-prefill budget
  int64_t max_num_seqs = 0;           // Default: 0, no cap on the batch

  Status Validate() const;
};

struct GpuMemoryPlan {
  uint64_t usable_bytes = 0;             // gpu_mem x gpu_util
  uint64_t weight_bytes_per_gpu = 0;     // the model's weights / (TP x PP)
  uint64_t activation_reserve_bytes = 0;
  int64_t kv_budget_bytes = 0;           // what is left for KV; negative when weights do not fit
  uint64_t bytes_per_sequence = 0;       // one sequence of `context` tokens on this GPU
  int64_t max_tokens = 0;                // token slots in the KV budget (kv_bytes_per_token each)
  int64_t max_batch = 0;                 // sequences of `context` tokens that fit together
  std::string limited_by;                // "kv_cache", "weights", "context", "max_num_seqs"
  std::string explanation;               // a sentence a person can act on
  // The same budget sized as a framework that treats every layer as MHA would size it
  // (naive_mha_bytes_per_token_per_layer, all layers, no window caps, no state): the
  // comparison behind the paper's batch-size claim.
  uint64_t naive_mha_bytes_per_sequence = 0;
  int64_t naive_mha_max_batch = 0;
};

// Weights of the whole model in bytes, in its checkpoint format or `weight_dtype`.
Result<uint64_t> WeightBytes(const ModelSpec& model, const std::optional<std::string>& weight_dtype);

Result<GpuMemoryPlan> PlanGpuMemory(const ModelSpec& model, const KvSizing& sizing, const GpuMemoryOptions& options);

struct TierCapacity {
  std::string name;
  uint64_t capacity_bytes = 0;
};

// Reads a YAML file of the form
//   tiers:
//     - name: gpu_hbm
//       capacity: 80GiB        # or capacity_bytes: 85899345920
// Units: B, KB, MB, GB, TB (powers of 1000) and KiB, MiB, GiB, TiB (powers of 1024).
Result<std::vector<TierCapacity>> LoadTierCapacities(const std::string& path);
Result<std::vector<TierCapacity>> ParseTierCapacities(const std::string& yaml_text, const std::string& source);

// "80GiB" -> 85899345920.
Result<uint64_t> ParseByteSize(const std::string& text);

struct TierFit {
  std::string name;
  uint64_t capacity_bytes = 0;
  int64_t tokens = 0;     // capacity / kv_bytes_per_token_all_gpus (every rank's share stored)
  int64_t sequences = 0;  // at `context` tokens each, when a context is given (else 0)
};

std::vector<TierFit> FitTiers(const KvSizing& sizing, const std::vector<TierCapacity>& tiers, int64_t context,
                              int64_t max_batched_tokens);

}  // namespace kvtier
