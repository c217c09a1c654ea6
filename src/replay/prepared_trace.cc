#include "replay/prepared_trace.h"

#include <algorithm>
#include <limits>
#include <string>
#include <utility>

namespace kvtier::replay_internal {
namespace {

constexpr uint32_t kRoot = std::numeric_limits<uint32_t>::max();



Status CheckShape(const PrefixTrace& trace) {
  if (trace.tokens.size() != trace.blocks.size()) {
    return Status::InvalidArgument("prefix trace: " + std::to_string(trace.blocks.size()) + " blocks but " +
                                   std::to_string(trace.tokens.size()) + " token counts");
  }
  uint64_t begin = 0;
  for (uint64_t end : trace.request_end) {
    if (end < begin || end > trace.blocks.size()) {
      return Status::InvalidArgument("prefix trace: request_end must ascend within the " +
                                     std::to_string(trace.blocks.size()) + " blocks");
    }
    begin = end;
  }
  if (begin != trace.blocks.size()) {
    return Status::InvalidArgument("prefix trace: the last request must end at the last block");
  }
  if (!trace.counted.empty() && trace.counted.size() != trace.blocks.size()) {
    return Status::InvalidArgument("prefix trace: `counted` must be empty or one flag per block");
  }
  return Status::Ok();
}

}  // namespace

Result<Prepared> Prepare(const PrefixTrace& trace) {
  KVTIER_RETURN_IF_ERROR(CheckShape(trace));
  const std::size_t n = trace.blocks.size();
  if (n >= kRoot - 1) return Status::InvalidArgument("prefix trace: 4 billion blocks or more; split the trace");
  Prepared out;
  out.never = n;
  out.dense.resize(n);
  out.request_start.assign(n, false);
  // Dense indices by sorting (id, position): O(N log N) whatever the ids look like, where an
  // identity-hashed std::unordered_map slows to a crawl on structured ids.
  std::vector<std::pair<uint64_t, uint32_t>> by_id(n);
  for (std::size_t i = 0; i < n; ++i) by_id[i] = {trace.blocks[i], static_cast<uint32_t>(i)};
  std::sort(by_id.begin(), by_id.end());
  uint32_t unique = 0;
  for (std::size_t i = 0; i < n; ++i) {
    if (i > 0 && by_id[i].first != by_id[i - 1].first) ++unique;
    out.dense[by_id[i].second] = unique;
  }
  out.unique_blocks = n == 0 ? 0 : uint64_t{unique} + 1;
  by_id = {};

  // The exactness argument needs each block's parent accessed right before it, always the
  // same one.
  constexpr uint32_t kUnset = kRoot - 1;
  std::vector<uint32_t> parent(out.unique_blocks, kUnset);
  uint64_t begin = 0;
  for (std::size_t r = 0; r < trace.request_end.size(); ++r) {
    const uint64_t end = trace.request_end[r];
    if (begin < end) out.request_start[begin] = true;
    for (uint64_t i = begin; i < end; ++i) {
      const uint32_t expected = i == begin ? kRoot : out.dense[i - 1];
      uint32_t& seen = parent[out.dense[i]];
      if (seen == kUnset) {
        seen = expected;
      } else if (seen != expected) {
        return Status::InvalidArgument("prefix trace: block id " + std::to_string(trace.blocks[i]) +
                                       " appears under two different parents (request " + std::to_string(r) +
                                       "); ids must identify whole prefixes");
      }
    }
    begin = end;
  }

  // Next uses are lookups only: an insertion is a chance to (re)admit a block for free, not
  // a use worth keeping it for.
  out.next_use.resize(n);
  std::vector<uint64_t> upcoming(parent.size(), out.never);
  for (std::size_t i = n; i-- > 0;) {
    out.next_use[i] = upcoming[out.dense[i]];
    if (trace.counted.empty() || trace.counted[i]) upcoming[out.dense[i]] = i;
  }
  return out;
}

HitStats FinishHitStats(HitStats stats) {
  if (stats.accesses > 0) stats.block_hit_rate = static_cast<double>(stats.hits) / static_cast<double>(stats.accesses);
  if (stats.tokens > 0) {
    stats.token_hit_rate = static_cast<double>(stats.hit_tokens) / static_cast<double>(stats.tokens);
  }
  return stats;
}

}  // namespace kvtier::replay_internal
