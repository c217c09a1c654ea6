#include "kvtier/replay.h"

#include <chrono>
#include <cmath>
#include <unordered_map>

#include "kvtier/optimal_bound.h"
#include "kvtier/store.h"
#include "store/capacity_tier.h"

namespace kvtier {
namespace {

// The requests as the optimum sees them: dense ids, generated blocks as insertions.
Result<PrefixTrace> ToPrefixTrace(const std::vector<ReplayRequest>& requests, bool cache_output) {
  PrefixTrace trace;
  std::unordered_map<BlockKey, uint64_t, BlockKeyHash> dense;
  std::vector<uint64_t> ids;
  std::vector<uint32_t> tokens;
  for (const ReplayRequest& r : requests) {
    ids.clear();
    tokens.clear();
    auto add = [&](const ReplayBlock& b) {
      ids.push_back(dense.try_emplace(b.key, dense.size()).first->second);
      tokens.push_back(b.tokens);
    };
    for (const ReplayBlock& b : r.prompt) add(b);
    std::size_t inserted = 0;
    if (cache_output) {
      for (const ReplayBlock& b : r.output) add(b);
      inserted = r.output.size();
    }
    if (ids.empty()) continue;
    KVTIER_RETURN_IF_ERROR(trace.AddRequest(ids, tokens, inserted));
  }
  return trace;
}

ReplayPolicyResult FromHitStats(const std::string& name, const HitStats& h) {
  return {.policy = name,
          .accesses = h.accesses,
          .hit_blocks = h.hits,
          .tokens = h.tokens,
          .hit_tokens = h.hit_tokens,
          .block_hit_rate = h.block_hit_rate,
          .token_hit_rate = h.token_hit_rate};
}

void FinishRates(ReplayPolicyResult& r) {
  r.block_hit_rate = r.accesses == 0 ? 0 : static_cast<double>(r.hit_blocks) / static_cast<double>(r.accesses);
  r.token_hit_rate = r.tokens == 0 ? 0 : static_cast<double>(r.hit_tokens) / static_cast<double>(r.tokens);
}

Result<ReplayPolicyResult> ReplayPolicy(const std::vector<ReplayRequest>& requests, PolicyKind policy,
                                        uint64_t capacity_blocks, const ReplayOptions& options) {
  double now = 0;
  StoreOptions so;
  so.policy = policy;
  so.synchronous_moves = true;
  so.clock = [&now] { return now; };
  so.recompute_seconds_per_token = options.recompute_seconds_per_token;
  if (options.predictor_horizon_s > 0) so.predictor.horizon_s = options.predictor_horizon_s;
  std::vector<std::unique_ptr<Tier>> tiers;
  if (options.data_tiers) {
    KVTIER_ASSIGN_OR_RETURN(tiers, OpenTiers(*options.data_tiers));
  } else {
    // One tier evicting on demand: full means `capacity_blocks` blocks, as in the bounds.
    so.metadata_only = true;
    so.prefetch = false;
    so.high_watermark = 1.0;
    so.low_watermark = 1.0 - 1e-12;
    tiers.push_back(std::make_unique<CapacityTier>("replay", TierKind::kCpuDram, capacity_blocks * options.block_bytes));
  }
  KVTIER_ASSIGN_OR_RETURN(std::unique_ptr<TieredStore> store, TieredStore::Open(std::move(tiers), so));

  ReplayPolicyResult out{.policy = std::string(PolicyKindName(policy))};
  std::vector<BlockKey> keys;
  std::vector<BlockPut> puts;
  std::vector<std::vector<std::byte>> payloads;  // data mode: the blocks' bytes
  std::vector<std::vector<std::byte>> buffers;
  std::vector<std::span<std::byte>> outs;
  const auto start = std::chrono::steady_clock::now();
  for (const ReplayRequest& r : requests) {
    now = std::max(now, r.arrival_s);
    keys.clear();
    for (const ReplayBlock& b : r.prompt) keys.push_back(b.key);
    const std::size_t hit = store->Lookup(keys).prefix_blocks;
    out.accesses += keys.size();
    out.hit_blocks += hit;
    for (std::size_t i = 0; i < r.prompt.size(); ++i) {
      out.tokens += r.prompt[i].tokens;
      if (i < hit) out.hit_tokens += r.prompt[i].tokens;
    }
    if (hit > 0) {
      outs.clear();
      if (options.data_tiers) {
        buffers.resize(hit);
        for (std::size_t i = 0; i < hit; ++i) {
          buffers[i].resize(options.block_bytes);
          outs.emplace_back(buffers[i]);
        }
      }
      KVTIER_ASSIGN_OR_RETURN(std::size_t read, store->Get(std::span(keys).first(hit), outs, r.transition));
      (void)read;  // a block can be dropped between the lookup and the read only with several threads
    }
    puts.clear();
    auto add = [&](const ReplayBlock& b) {
      puts.push_back({.key = b.key, .bytes = options.block_bytes, .tokens = b.tokens, .type = b.type,
                      .transition = r.transition});
    };
    for (std::size_t i = hit; i < r.prompt.size(); ++i) add(r.prompt[i]);
    if (options.cache_output) {
      for (const ReplayBlock& b : r.output) add(b);
    }
    if (puts.empty()) continue;
    if (options.data_tiers) {
      payloads.resize(puts.size());
      for (std::size_t i = 0; i < puts.size(); ++i) {
        payloads[i].assign(options.block_bytes, static_cast<std::byte>(puts[i].key.lo & 0xff));
        puts[i].payload = payloads[i];
      }
    }
    const std::optional<BlockKey> parent = hit > 0 ? std::optional(keys[hit - 1]) : std::nullopt;
    Result<PutResult> put = store->Put(puts, parent);
    // A key stored under another parent is a collision in the trace's hashes; the request's
    // remaining blocks are then not cached, as an engine would do.
    if (!put.ok() && put.status().code() != StatusCode::kAlreadyExists) return put.status();
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  out.accesses_per_s = seconds > 0 ? static_cast<double>(out.accesses) / seconds : 0;
  for (const StoreTierStats& t : store->GetStats().tiers) out.tier_hits.push_back(t.hits);
  FinishRates(out);
  return out;
}

}  // namespace

Status ReplayOptions::Validate() const {
  if (policies.empty()) return Status::InvalidArgument("replay: no policies");
  if (capacity_blocks == 0 && !(capacity_fraction > 0 && capacity_fraction <= 1)) {
    return Status::InvalidArgument("replay: capacity_fraction must be in (0, 1] when capacity_blocks is 0");
  }
  if (block_bytes == 0) return Status::InvalidArgument("replay: block_bytes must be > 0");
  if (!(recompute_seconds_per_token >= 0)) return Status::InvalidArgument("replay: recompute_seconds_per_token must be >= 0");
  return Status::Ok();
}

Result<ReplayReport> Replay(const std::vector<ReplayRequest>& requests, const ReplayOptions& options) {
  KVTIER_RETURN_IF_ERROR(options.Validate());
  KVTIER_ASSIGN_OR_RETURN(const PrefixTrace trace, ToPrefixTrace(requests, options.cache_output));
  // The unique blocks come with the bounds; the capacity may depend on them.
  KVTIER_ASSIGN_OR_RETURN(OptimalBound probe, ComputeOptimalBound(trace, 0));
  ReplayReport report;
  report.requests = requests.size();
  report.unique_blocks = probe.unique_blocks;
  report.accesses = probe.ceiling.accesses;
  report.capacity_blocks = options.capacity_blocks > 0
                               ? options.capacity_blocks
                               : std::max<uint64_t>(1, static_cast<uint64_t>(std::llround(
                                                           options.capacity_fraction * static_cast<double>(report.unique_blocks))));
  for (PolicyKind policy : options.policies) {
    KVTIER_ASSIGN_OR_RETURN(ReplayPolicyResult r, ReplayPolicy(requests, policy, report.capacity_blocks, options));
    report.results.push_back(std::move(r));
  }
  KVTIER_ASSIGN_OR_RETURN(OptimalBound bound, ComputeOptimalBound(trace, report.capacity_blocks));
  report.results.push_back(FromHitStats("opt", bound.optimal));
  report.results.push_back(FromHitStats("ceiling", bound.ceiling));
  return report;
}

}  // namespace kvtier
