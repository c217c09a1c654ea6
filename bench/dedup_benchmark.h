// `kvtier bench dedup`: how much a deduplicated checkpoint saves on a multi-tenant workload.
//
// Tenants are isolated by a cache salt, so equal prompts of two tenants have different
// keys; their KV bytes are nonetheless equal (attention does not see the salt). The
// content-addressed payload store keeps such payloads once. The workload: `tenants` tenants
// each send `requests_per_tenant` requests; a request starts with one of `system_prompts`
// shared system prompts (`prompt_blocks` blocks) and continues with its own `user_blocks`.
// Payload sizes are the model's real KV bytes per block per GPU (the sizing engine); payload
// bytes are a deterministic function of the unsalted prefix, as real KV is of its tokens.
#pragma once

#include <cstdint>
#include <string>

#include "kvtier/status.h"

namespace kvtier::bench {

struct DedupBenchmarkOptions {
  std::string model = "llama-3-70b";  // Default: llama-3-70b (catalog name)
  int64_t tensor_parallel = 8;        // Default: 8; payloads are one GPU's share
  int64_t tenants = 4;                // Default: 4
  int64_t system_prompts = 4;         // Default: 4
  int64_t requests_per_tenant = 8;    // Default: 8
  int64_t prompt_blocks = 16;         // Default: 16 blocks (256 tokens)
  int64_t user_blocks = 8;            // Default: 8 blocks (128 tokens)
  std::string directory;              // Default: "" (a temporary directory, removed after)
  uint64_t seed = 1;                  // Default: 1

  Status Validate() const;
};

Result<std::string> RunDedupBenchmark(const DedupBenchmarkOptions& options);

}  // namespace kvtier::bench
