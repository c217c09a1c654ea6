// ComputeTraceStats (trace.h).
#include <algorithm>
#include <unordered_set>

#include "kvtier/trace.h"

namespace kvtier {

TraceStats ComputeTraceStats(const Trace& trace, uint32_t block_tokens) {
  TraceStats stats;
  std::unordered_set<std::string> sessions;
  double first = 0;
  double last = 0;
  for (const TraceRequest& r : trace.requests) {
    sessions.insert(r.session);
    stats.prompt_tokens += r.prompt_tokens;
    stats.output_tokens += r.output_tokens;
    stats.max_prompt_tokens = std::max<uint64_t>(stats.max_prompt_tokens, r.prompt_tokens);
    if (stats.requests == 0 || r.arrival_s < first) first = r.arrival_s;
    last = std::max(last, r.arrival_s);
    ++stats.requests;
    stats.requests_with_tokens += r.tokens.empty() ? 0u : 1u;
    stats.requests_with_block_hashes += r.block_hashes.empty() ? 0u : 1u;
  }
  stats.sessions = sessions.size();
  stats.duration_s = stats.requests == 0 ? 0 : last - first;

  if (stats.requests_with_tokens > 0 && block_tokens > 0) {
    // Token traces: chained block keys, as the store computes them.
    BlockHasherOptions options;
    options.block_size = block_tokens;
    auto hasher = BlockHasher::Create(options);
    if (!hasher.ok()) return stats;
    std::unordered_set<BlockKey, BlockKeyHash> unique;
    for (const TraceRequest& r : trace.requests) {
      for (const BlockKey& key : hasher->ChainKeys(r.tokens)) {
        unique.insert(key);
        ++stats.blocks;
      }
    }
    stats.block_tokens = block_tokens;
    stats.unique_blocks = unique.size();
  } else if (stats.requests_with_block_hashes > 0) {
    // Hash traces: the trace's own block ids (Mooncake's already chain the prefix).
    std::unordered_set<uint64_t> unique;
    for (const TraceRequest& r : trace.requests) {
      if (r.block_hashes.empty()) continue;
      stats.block_tokens = r.block_tokens;
      unique.insert(r.block_hashes.begin(), r.block_hashes.end());
      stats.blocks += r.block_hashes.size();
    }
    stats.unique_blocks = unique.size();
  }
  return stats;
}

}  // namespace kvtier
