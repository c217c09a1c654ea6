#include "kvtier/replay.h"

#include <chrono>
#include <cmath>
#include <unordered_set>

#include "kvtier/store.h"
#include "store/capacity_tier.h"

namespace kvtier {
namespace {

uint64_t UniqueBlocks(const std::vector<ReplayRequest>& requests, bool cache_output) {
  std::unordered_set<BlockKey, BlockKeyHash> seen;
  for (const ReplayRequest& r : requests) {
    for (const ReplayBlock& b : r.prompt) seen.insert(b.key);
    if (cache_output) {
      for (const ReplayBlock& b : r.output) seen.insert(b.key);
    }
  }
  return seen.size();
}

// The infinite cache: every block stored once is there forever; hits by the prefix rule.
ReplayPolicyResult Ceiling(const std::vector<ReplayRequest>& requests, bool cache_output) {
  ReplayPolicyResult out{.policy = "ceiling"};
  std::unordered_set<BlockKey, BlockKeyHash> cached;
  for (const ReplayRequest& r : requests) {
    bool prefix = true;
    for (const ReplayBlock& b : r.prompt) {
      ++out.accesses;
      out.tokens += b.tokens;
      prefix = prefix && cached.contains(b.key);
      if (prefix) {
        ++out.hit_blocks;
        out.hit_tokens += b.tokens;
      }
    }
    for (const ReplayBlock& b : r.prompt) cached.insert(b.key);
    if (cache_output) {
      for (const ReplayBlock& b : r.output) cached.insert(b.key);
    }
  }
  return out;
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
  ReplayReport report;
  report.requests = requests.size();
  report.unique_blocks = UniqueBlocks(requests, options.cache_output);
  report.capacity_blocks = options.capacity_blocks > 0
                               ? options.capacity_blocks
                               : std::max<uint64_t>(1, static_cast<uint64_t>(std::llround(
                                                           options.capacity_fraction * static_cast<double>(report.unique_blocks))));
  for (PolicyKind policy : options.policies) {
    KVTIER_ASSIGN_OR_RETURN(ReplayPolicyResult r, ReplayPolicy(requests, policy, report.capacity_blocks, options));
    report.results.push_back(std::move(r));
  }
  ReplayPolicyResult ceiling = Ceiling(requests, options.cache_output);
  FinishRates(ceiling);
  report.accesses = ceiling.accesses;
  report.results.push_back(std::move(ceiling));
  return report;
}

}  // namespace kvtier
