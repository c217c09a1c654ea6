#include "kvtier/replay.h"

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <limits>
#include <cmath>
#include <unordered_map>

#include "kvtier/gap_analysis.h"
#include "kvtier/optimal_bound.h"
#include "kvtier/store.h"
#include "store/capacity_tier.h"

namespace kvtier {
namespace {

// The requests as the optimum sees them: dense ids, generated blocks as insertions.
struct DenseTrace {
  PrefixTrace trace;
  uint64_t unique_blocks = 0;
  uint64_t max_block_tokens = 1;
};

Result<DenseTrace> ToPrefixTrace(const std::vector<ReplayRequest>& requests, bool cache_output) {
  DenseTrace out;
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
    for (const ReplayBlock& b : r.prompt) {
      add(b);
      out.max_block_tokens = std::max<uint64_t>(out.max_block_tokens, b.tokens);
    }
    std::size_t inserted = 0;
    if (cache_output) {
      for (const ReplayBlock& b : r.output) add(b);
      inserted = r.output.size();
    }
    if (ids.empty()) continue;
    KVTIER_RETURN_IF_ERROR(out.trace.AddRequest(ids, tokens, inserted));
  }
  out.unique_blocks = dense.size();
  return out;
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
                                        uint64_t capacity_blocks, uint64_t block_bytes, const ReplayOptions& options) {
  auto bytes_of = [&](const ReplayBlock& b) { return static_cast<uint32_t>(b.tokens * options.kv_bytes_per_token); };
  double now = 0;
  StoreOptions so;
  so.policy = policy;
  so.synchronous_moves = true;
  so.clock = [&now] { return now; };
  so.recompute_seconds_per_token = options.recompute_seconds_per_token;
  if (options.predictor_horizon_s > 0) so.predictor.horizon_s = options.predictor_horizon_s;
  std::vector<std::unique_ptr<Tier>> tiers;
  if (options.tiers && options.move_bytes) {
    // Every policy starts from empty tiers: persistent ones would otherwise bring back the
    // previous run's blocks.
    TierConfig config = *options.tiers;
    for (TierOptions& t : config.tiers) {
      if (auto* nvme = std::get_if<NvmeTierOptions>(&t)) nvme->recover = false;
      if (auto* pfs = std::get_if<ParallelFsTierOptions>(&t)) {
        std::error_code ec;
        std::filesystem::remove_all(pfs->directory, ec);
      }
    }
    KVTIER_ASSIGN_OR_RETURN(tiers, OpenTiers(config));
  } else if (options.tiers) {
    so.metadata_only = true;
    for (const TierOptions& t : options.tiers->tiers) {
      std::visit(
          [&](const auto& o) {
            tiers.push_back(std::make_unique<CapacityTier>(o.name, TierKindOf(t), o.capacity_bytes));
          },
          t);
    }
  } else {
    // One tier evicting on demand: full means `capacity_blocks` blocks, as in the bounds.
    so.metadata_only = true;
    so.prefetch = false;
    so.high_watermark = 1.0;
    so.low_watermark = 1.0 - 1e-12;
    tiers.push_back(std::make_unique<CapacityTier>("replay", TierKind::kCpuDram, capacity_blocks * block_bytes));
  }
  std::vector<TierCost> costs;
  for (const auto& t : tiers) costs.push_back(DefaultTierCost(t->kind()));
  KVTIER_ASSIGN_OR_RETURN(std::unique_ptr<TieredStore> store, TieredStore::Open(std::move(tiers), so));
  std::vector<double> ttft;
  double no_cache_sum = 0;
  uint64_t projected_tokens = 0;

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
    const LookupResult found = store->Lookup(keys);
    const std::size_t hit = found.prefix_blocks;
    if (options.cost_model) {
      // Load the hit blocks from where they are, recompute the rest after them.
      double seconds = 0;
      uint64_t hit_tokens = 0, prompt_tokens = 0;
      for (std::size_t i = 0; i < r.prompt.size(); ++i) {
        prompt_tokens += r.prompt[i].tokens;
        if (i < hit) {
          seconds += costs[static_cast<std::size_t>(found.tier[i])].LoadSeconds(bytes_of(r.prompt[i]));
          hit_tokens += r.prompt[i].tokens;
        }
      }
      seconds += options.cost_model->RecomputeSeconds(prompt_tokens - hit_tokens, hit_tokens);
      ttft.push_back(seconds);
      no_cache_sum += options.cost_model->RecomputeSeconds(prompt_tokens, 0);
      projected_tokens += prompt_tokens;
    }
    out.accesses += keys.size();
    out.hit_blocks += hit;
    for (std::size_t i = 0; i < r.prompt.size(); ++i) {
      out.tokens += r.prompt[i].tokens;
      if (i < hit) out.hit_tokens += r.prompt[i].tokens;
    }
    // The request holds its prefix while it runs, as an engine does: the moves its reads
    // cause (promotion, prefetch, demotion below) must not drop the blocks it extends.
    Result<StorePin> pin = store->Pin(std::span(keys).first(hit));
    if (!pin.ok()) return pin.status();
    if (hit > 0) {
      outs.clear();
      if (options.move_bytes) {
        buffers.resize(hit);
        for (std::size_t i = 0; i < hit; ++i) {
          buffers[i].resize(bytes_of(r.prompt[i]));
          outs.emplace_back(buffers[i]);
        }
      }
      KVTIER_ASSIGN_OR_RETURN(std::size_t read, store->Get(std::span(keys).first(hit), outs, r.transition));
      (void)read;  // a block can be dropped between the lookup and the read only with several threads
    }
    puts.clear();
    auto add = [&](const ReplayBlock& b) {
      puts.push_back({.key = b.key, .bytes = bytes_of(b), .tokens = b.tokens, .type = b.type,
                      .transition = r.transition});
    };
    for (std::size_t i = hit; i < r.prompt.size(); ++i) add(r.prompt[i]);
    if (options.cache_output) {
      for (const ReplayBlock& b : r.output) add(b);
    }
    if (puts.empty()) continue;
    if (options.move_bytes) {
      payloads.resize(puts.size());
      for (std::size_t i = 0; i < puts.size(); ++i) {
        payloads[i].assign(puts[i].bytes, static_cast<std::byte>(puts[i].key.lo & 0xff));
        puts[i].payload = payloads[i];
      }
    }
    const std::optional<BlockKey> parent = hit > 0 ? std::optional(keys[hit - 1]) : std::nullopt;
    Result<PutResult> put = store->Put(puts, parent);
    // A key stored under another parent is a collision in the trace's hashes, and a request
    // longer than the cache cannot be held whole: either way the rest of the request is not
    // cached, as an engine would do.
    if (!put.ok() && put.status().code() != StatusCode::kAlreadyExists &&
        put.status().code() != StatusCode::kResourceExhausted) {
      return put.status();
    }
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  out.accesses_per_s = seconds > 0 ? static_cast<double>(out.accesses) / seconds : 0;
  for (const StoreTierStats& t : store->GetStats().tiers) out.tier_hits.push_back(t.hits);
  if (!ttft.empty()) {
    double sum = 0;
    for (double v : ttft) sum += v;
    out.ttft_mean_s = sum / static_cast<double>(ttft.size());
    out.ttft_no_cache_mean_s = no_cache_sum / static_cast<double>(ttft.size());
    constexpr double kDollarsPerGpuHour = 2.0;  // the paper's assumption
    auto dollars_per_mtok = [&](double tokens_per_s) { return kDollarsPerGpuHour / 3600 / tokens_per_s * 1e6; };
    out.prefill_tokens_per_s = static_cast<double>(projected_tokens) / sum;
    out.no_cache_prefill_tokens_per_s = static_cast<double>(projected_tokens) / no_cache_sum;
    out.dollars_per_mtok = dollars_per_mtok(out.prefill_tokens_per_s);
    out.no_cache_dollars_per_mtok = dollars_per_mtok(out.no_cache_prefill_tokens_per_s);
    std::sort(ttft.begin(), ttft.end());
    out.ttft_p50_s = ttft[ttft.size() / 2];
    out.ttft_p99_s = ttft[std::min(ttft.size() - 1, ttft.size() * 99 / 100)];
  }
  FinishRates(out);
  return out;
}

}  // namespace

Status ReplayOptions::Validate() const {
  if (policies.empty()) return Status::InvalidArgument("replay: no policies");
  if (capacity_blocks == 0 && !(capacity_fraction > 0 && capacity_fraction <= 1)) {
    return Status::InvalidArgument("replay: capacity_fraction must be in (0, 1] when capacity_blocks is 0");
  }
  if (kv_bytes_per_token == 0) return Status::InvalidArgument("replay: kv_bytes_per_token must be > 0");
  if (!(recompute_seconds_per_token >= 0)) return Status::InvalidArgument("replay: recompute_seconds_per_token must be >= 0");
  return Status::Ok();
}

namespace {

// The trace, its block size and the capacity the options give, as Replay and AnalyzeReplayGap
// both need them.
struct Setup {
  DenseTrace dense;
  uint64_t block_bytes = 0;
  uint64_t capacity_blocks = 0;
};

Result<Setup> PrepareReplay(const std::vector<ReplayRequest>& requests, const ReplayOptions& options) {
  KVTIER_RETURN_IF_ERROR(options.Validate());
  Setup setup;
  KVTIER_ASSIGN_OR_RETURN(setup.dense, ToPrefixTrace(requests, options.cache_output));
  const uint64_t block_tokens = setup.dense.max_block_tokens;
  setup.block_bytes = block_tokens * options.kv_bytes_per_token;
  if (setup.block_bytes > std::numeric_limits<uint32_t>::max()) {
    return Status::InvalidArgument("replay: a block of " + std::to_string(block_tokens) + " tokens holds 4 GiB or more");
  }
  const uint64_t unique = setup.dense.unique_blocks;
  setup.capacity_blocks = options.capacity_blocks > 0
                              ? options.capacity_blocks
                              : std::max<uint64_t>(1, static_cast<uint64_t>(std::llround(
                                                          options.capacity_fraction * static_cast<double>(unique))));
  if (options.tiers) {
    // The tiers' capacities decide; the bounds use their total in blocks (unbounded: all).
    uint64_t bytes = 0;
    bool unbounded = false;
    for (const TierOptions& t : options.tiers->tiers) {
      const uint64_t capacity = std::visit([](const auto& o) { return o.capacity_bytes; }, t);
      unbounded = unbounded || capacity == 0;
      bytes += capacity;
    }
    setup.capacity_blocks = unbounded ? unique : std::max<uint64_t>(1, bytes / setup.block_bytes);
  }
  return setup;
}

}  // namespace

Result<ReplayReport> Replay(const std::vector<ReplayRequest>& requests, const ReplayOptions& options) {
  KVTIER_ASSIGN_OR_RETURN(const Setup setup, PrepareReplay(requests, options));
  ReplayReport report;
  report.requests = requests.size();
  report.block_bytes = setup.block_bytes;
  report.unique_blocks = setup.dense.unique_blocks;
  report.capacity_blocks = setup.capacity_blocks;
  for (PolicyKind policy : options.policies) {
    KVTIER_ASSIGN_OR_RETURN(ReplayPolicyResult r, ReplayPolicy(requests, policy, report.capacity_blocks, report.block_bytes, options));
    report.results.push_back(std::move(r));
  }
  KVTIER_ASSIGN_OR_RETURN(OptimalBound bound, ComputeOptimalBound(setup.dense.trace, report.capacity_blocks));
  report.accesses = bound.ceiling.accesses;
  report.results.push_back(FromHitStats("opt", bound.optimal));
  report.results.push_back(FromHitStats("ceiling", bound.ceiling));
  return report;
}

Result<ReplayGapReport> AnalyzeReplayGap(const std::vector<ReplayRequest>& requests, const ReplayOptions& options,
                                         const GapAnalysisOptions& gap_options) {
  KVTIER_ASSIGN_OR_RETURN(const Setup setup, PrepareReplay(requests, options));
  ReplayGapReport report;
  report.requests = requests.size();
  report.unique_blocks = setup.dense.unique_blocks;
  report.capacity_blocks = setup.capacity_blocks;
  KVTIER_ASSIGN_OR_RETURN(report.store_lru,
                          ReplayPolicy(requests, PolicyKind::kLru, setup.capacity_blocks, setup.block_bytes, options));
  const uint64_t capacities[] = {setup.capacity_blocks};
  KVTIER_ASSIGN_OR_RETURN(std::vector<GapAnalysis> gap, AnalyzeGap(setup.dense.trace, capacities, gap_options));
  report.gap = std::move(gap.front());
  return report;
}

}  // namespace kvtier
