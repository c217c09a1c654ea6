#include <algorithm>
#include <cctype>

#include "kvtier/sizing.h"

namespace kvtier {

uint64_t KvDtype::VectorBytes(int64_t elements) const {
  const auto n = static_cast<uint64_t>(elements);
  uint64_t bytes = (n * static_cast<uint64_t>(bits) + 7) / 8;
  if (scale_bytes > 0) {
    const uint64_t groups = group_size > 0 ? (n + static_cast<uint64_t>(group_size) - 1) / static_cast<uint64_t>(group_size) : 1;
    bytes += groups * static_cast<uint64_t>(scale_bytes);
  }
  return bytes;
}

Result<KvDtype> ParseKvDtype(std::string_view name, std::string_view model_dtype, int64_t group_size) {
  std::string lower(name);
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  if (lower == "auto") lower = std::string(model_dtype);
  if (group_size < 0) return Status::InvalidArgument("KV quantization group size must be positive, got " + std::to_string(group_size));
  if (lower == "bf16" || lower == "bfloat16") return KvDtype{"bf16", 16, 0, 0};
  if (lower == "fp16" || lower == "float16" || lower == "half") return KvDtype{"fp16", 16, 0, 0};
  if (lower == "fp32" || lower == "float32" || lower == "float") return KvDtype{"fp32", 32, 0, 0};
  // Per-tensor (per-layer) scales: a constant, not per token.
  if (lower == "fp8" || lower == "fp8_e4m3" || lower == "fp8_e5m2") return KvDtype{"fp8", 8, 0, 0};
  if (lower == "int8" || lower == "int8_per_token_head") return KvDtype{"int8", 8, 0, 4};
  if (lower == "int4") return KvDtype{"int4", 4, group_size > 0 ? group_size : 32, 2};
  if (lower == "nvfp4") return KvDtype{"nvfp4", 4, group_size > 0 ? group_size : 16, 1};
  return Status::InvalidArgument("unknown KV dtype '" + std::string(name) +
                                 "' (expected auto, bf16, fp16, fp32, fp8, int8, int4 or nvfp4)");
}

}  // namespace kvtier
