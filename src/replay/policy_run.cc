#include "replay/policy_run.h"

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <unordered_map>

#include "kvtier/head_importance.h"
#include "store/capacity_tier.h"
#include "util/quantile.h"

namespace kvtier::replay_internal {
namespace {

// The tiers of a run: every policy starts from empty ones.
Result<std::vector<std::unique_ptr<Tier>>> OpenRunTiers(const ReplayOptions& options, uint64_t capacity_blocks,
                                                        uint64_t block_bytes, StoreOptions& so) {
  std::vector<std::unique_ptr<Tier>> tiers;
  if (options.tiers && options.move_bytes) {
    // Persistent tiers would otherwise bring back the previous run's blocks.
    TierConfig config = *options.tiers;
    for (TierOptions& t : config.tiers) {
      if (auto* nvme = std::get_if<NvmeTierOptions>(&t)) nvme->recover = false;
      if (auto* pfs = std::get_if<ParallelFsTierOptions>(&t)) {
        std::error_code ec;
        std::filesystem::remove_all(pfs->directory, ec);
      }
    }
    return OpenTiers(config);
  }
  so.metadata_only = true;
  if (options.tiers) {
    for (const TierOptions& t : options.tiers->tiers) {
      std::visit(
          [&](const auto& o) {
            tiers.push_back(std::make_unique<CapacityTier>(o.name, TierKindOf(t), o.capacity_bytes));
          },
          t);
    }
    return tiers;
  }
  // One tier evicting on demand: full means `capacity_blocks` blocks, as in the bounds.
  so.prefetch = false;
  so.high_watermark = 1.0;
  so.low_watermark = 1.0 - 1e-12;
  tiers.push_back(std::make_unique<CapacityTier>("replay", TierKind::kCpuDram, capacity_blocks * block_bytes));
  return tiers;
}

}  // namespace

PolicyRun::PolicyRun(const std::vector<ReplayRequest>& requests, PolicyKind policy, const ReplayOptions& options)
    : requests_(requests), policy_(policy), options_(options), hit_blocks_(requests.size(), 0) {
  out_.policy = std::string(PolicyKindName(policy));
}

Result<std::unique_ptr<PolicyRun>> PolicyRun::Open(const std::vector<ReplayRequest>& requests, PolicyKind policy,
                                                   uint64_t capacity_blocks, uint64_t block_bytes,
                                                   const ReplayOptions& options, const StoreTweaks& tweaks,
                                                   const ReplayIds* ids) {
  std::unique_ptr<PolicyRun> run(new PolicyRun(requests, policy, options));
  if (ids != nullptr && run->ModelFits(*ids, tweaks)) {
    KVTIER_RETURN_IF_ERROR(run->OpenModel(*ids, capacity_blocks, block_bytes));
  } else {
    KVTIER_RETURN_IF_ERROR(run->OpenStore(capacity_blocks, block_bytes, tweaks));
  }
  return run;
}

bool PolicyRun::ModelFits(const ReplayIds& ids, const StoreTweaks& tweaks) const {
  if (options_.through_store || options_.tiers || options_.move_bytes || tweaks.head_layout) return false;
  // The model names blocks to the policy by dense ids (PrefixCacheModel::PolicyKey), which a
  // sharded policy would split into other shards than the blocks' keys: other victims.
  if (options_.policy_shards > 1) return false;
  // The store refuses a Put of a block of 0 bytes as an error, which the model does not copy.
  return std::ranges::none_of(ids.blocks, [&](const ReplayBlock* b) { return BytesOf(*b) == 0; });
}

Status PolicyRun::OpenModel(const ReplayIds& ids, uint64_t capacity_blocks, uint64_t block_bytes) {
  // As TieredStore::Open sets up the policy of its one tier, a CapacityTier of kind cpu_dram.
  const TierCost cost = DefaultTierCost(TierKind::kCpuDram);
  StoreOptions so;
  PolicyOptions po = so.policy_options;
  po.tier_bandwidth_bytes_per_s = cost.bandwidth_bytes_per_s;
  po.tier_latency_s = cost.latency_s;
  po.bayes_learn = true;
  if (options_.predictor_horizon_s > 0) so.predictor.horizon_s = options_.predictor_horizon_s;
  KVTIER_ASSIGN_OR_RETURN(std::shared_ptr<ReusePredictor> predictor, ReusePredictor::Create(so.predictor));
  KVTIER_ASSIGN_OR_RETURN(std::unique_ptr<EvictionPolicy> policy, NewEvictionPolicy(policy_, po, predictor));
  costs_.push_back(cost);
  ids_ = &ids;
  model_ = std::make_unique<PrefixCacheModel>(std::move(policy), ids.keys.size(), capacity_blocks * block_bytes);
  return Status::Ok();
}

Status PolicyRun::OpenStore(uint64_t capacity_blocks, uint64_t block_bytes, const StoreTweaks& tweaks) {
  StoreOptions so;
  so.prefetch = tweaks.prefetch;
  if (tweaks.head_layout) {
    const KvBlockLayout& layout = *tweaks.head_layout;
    KVTIER_ASSIGN_OR_RETURN(std::unique_ptr<HeadImportance> importance,
                            HeadImportance::Create(layout.layers, layout.kv_heads));
    so.head_layout = layout;
    so.head_importance = std::move(importance);
    head_demotion_fraction_ = so.head_demotion_fraction;
  }
  so.policy = policy_;
  so.synchronous_moves = true;
  so.clock = [this] { return now_; };
  so.recompute_seconds_per_token = options_.recompute_seconds_per_token;
  so.policy_options.shards = options_.policy_shards;
  if (options_.predictor_horizon_s > 0) so.predictor.horizon_s = options_.predictor_horizon_s;
  KVTIER_ASSIGN_OR_RETURN(std::vector<std::unique_ptr<Tier>> tiers, OpenRunTiers(options_, capacity_blocks, block_bytes, so));
  for (const auto& t : tiers) costs_.push_back(DefaultTierCost(t->kind()));
  KVTIER_ASSIGN_OR_RETURN(store_, TieredStore::Open(std::move(tiers), so));
  return Status::Ok();
}

Result<PolicyRun::Started> PolicyRun::Start(std::size_t request) {
  const ReplayRequest& r = requests_[request];
  keys_.clear();
  for (const ReplayBlock& b : r.prompt) keys_.push_back(b.key);
  const LookupResult found = store_->Lookup(keys_);
  const std::size_t hit = found.prefix_blocks;
  Started started = CountStart(request, hit, found.tier);
  // The request holds its prefix while it runs, as an engine does: the moves its reads
  // cause (promotion, prefetch, demotion below) must not drop the blocks it extends.
  KVTIER_ASSIGN_OR_RETURN(StorePin pin, store_->Pin(std::span(keys_).first(hit)));
  pins_.insert_or_assign(request, std::move(pin));
  if (hit > 0) {
    outs_.clear();
    if (options_.move_bytes) {
      buffers_.resize(hit);
      for (std::size_t i = 0; i < hit; ++i) {
        buffers_[i].resize(BytesOf(r.prompt[i]));
        outs_.emplace_back(buffers_[i]);
      }
    }
    const uint64_t split_reads = head_demotion_fraction_ > 0 ? store_->GetStats().head_split_reads : 0;
    // A block can be dropped between the lookup and the read only with several threads.
    KVTIER_ASSIGN_OR_RETURN(std::size_t read, store_->Get(std::span(keys_).first(hit), outs_, r.transition));
    (void)read;
    if (head_demotion_fraction_ > 0) {
      started.load_seconds += SplitLoadSeconds(store_->GetStats().head_split_reads - split_reads, found.tier[0],
                                               BytesOf(r.prompt[0]));
    }
  }
  return started;
}

PolicyRun::Started PolicyRun::CountStart(std::size_t request, std::size_t hit, std::span<const int> tiers) {
  const ReplayRequest& r = requests_[request];
  hit_blocks_[request] = hit;
  Started started{.hit_blocks = hit};
  for (std::size_t i = 0; i < r.prompt.size(); ++i) {
    started.prompt_tokens += r.prompt[i].tokens;
    if (i < hit) {
      const std::size_t tier = tiers.empty() ? 0 : static_cast<std::size_t>(tiers[i]);
      started.hit_tokens += r.prompt[i].tokens;
      started.load_seconds += costs_[tier].LoadSeconds(BytesOf(r.prompt[i]));
    }
  }
  out_.accesses += r.prompt.size();
  out_.hit_blocks += hit;
  out_.tokens += started.prompt_tokens;
  out_.hit_tokens += started.hit_tokens;
  return started;
}

PolicyRun::Started PolicyRun::StartOnModel(std::size_t request) {
  const ReplayRequest& r = requests_[request];
  const std::span<const uint32_t> prompt = ids_->From(request, 0).first(r.prompt.size());
  const std::size_t hit = model_->Lookup(prompt);
  model_->Read(prompt.first(hit), r.transition, now_);
  return CountStart(request, hit, {});
}

void PolicyRun::StoreOnModel(std::size_t request, std::size_t hit, bool with_output) {
  const ReplayRequest& r = requests_[request];
  // One Put of the prompt's rest and the output, as StoreRest makes.
  const std::size_t end = with_output && options_.cache_output ? r.prompt.size() + r.output.size() : r.prompt.size();
  PutOnModel(request, hit, end);
  model_->Release(ids_->From(request, 0).first(hit));
}

void PolicyRun::StoreOutputOnModel(std::size_t request) {
  const ReplayRequest& r = requests_[request];
  if (!options_.cache_output || r.output.empty() || r.prompt.empty()) return;
  PutOnModel(request, r.prompt.size(), r.prompt.size() + r.output.size());
}

void PolicyRun::PutOnModel(std::size_t request, std::size_t from, std::size_t end) {
  const std::size_t begin = ids_->starts[request];
  const std::span<const uint32_t> chain = std::span(ids_->ids).subspan(begin + from, end - from);
  const std::span<const ReplayBlock* const> blocks = std::span(ids_->blocks).subspan(begin + from, end - from);
  const uint32_t parent = from > 0 ? ids_->ids[begin + from - 1] : PrefixCacheModel::kNoParent;
  const ModelBlockFacts facts{.kv_bytes_per_token = options_.kv_bytes_per_token,
                              .recompute_seconds_per_token = options_.recompute_seconds_per_token,
                              .transition = requests_[request].transition};
  model_->Put(chain, blocks, parent, facts, now_);
}

EngineCache::Hit PolicyRun::StartPrefillOnModel(std::size_t request, std::span<const std::size_t> waiting) {
  auto prompt = [&](std::size_t q) { return ids_->From(q, 0).first(requests_[q].prompt.size()); };
  for (std::size_t q : waiting) {
    if (!model_expectations_.contains(q)) model_expectations_.emplace(q, model_->Expect(prompt(q)));
  }
  const Started started = StartOnModel(request);
  // From here its hit is pinned; the rest it will compute.
  if (auto it = model_expectations_.find(request); it != model_expectations_.end()) {
    model_->Unexpect(prompt(request), it->second);
    model_expectations_.erase(it);
  }
  return {.tokens = started.hit_tokens, .load_seconds = started.load_seconds};
}

double PolicyRun::SplitLoadSeconds(uint64_t gathered, int tier, uint32_t block_bytes) const {
  const std::size_t here = static_cast<std::size_t>(tier);
  const std::size_t below = std::min(here + 1, costs_.size() - 1);
  const double lower_bytes = head_demotion_fraction_ * block_bytes;
  // Replace the lower part's bandwidth share at `tier` by a load of it from below.
  const double extra = costs_[below].LoadSeconds(static_cast<uint64_t>(lower_bytes)) -
                       lower_bytes / costs_[here].bandwidth_bytes_per_s;
  return static_cast<double>(gathered) * std::max(0.0, extra);
}

Status PolicyRun::Store(std::size_t request, std::span<const ReplayBlock> prompt_tail,
                        std::span<const ReplayBlock> output, const std::optional<BlockKey>& parent) {
  const ReplayRequest& r = requests_[request];
  puts_.clear();
  auto add = [&](const ReplayBlock& b) {
    puts_.push_back({.key = b.key, .bytes = BytesOf(b), .tokens = b.tokens, .type = b.type, .transition = r.transition});
  };
  for (const ReplayBlock& b : prompt_tail) add(b);
  for (const ReplayBlock& b : output) add(b);
  if (puts_.empty()) return Status::Ok();
  if (options_.move_bytes) {
    payloads_.resize(puts_.size());
    for (std::size_t i = 0; i < puts_.size(); ++i) {
      payloads_[i].assign(puts_[i].bytes, static_cast<std::byte>(puts_[i].key.lo & 0xff));
      puts_[i].payload = payloads_[i];
    }
  }
  Result<PutResult> put = store_->Put(puts_, parent);
  // A key stored under another parent is a collision in the trace's hashes, and a request
  // longer than the cache cannot be held whole: either way the rest of the request is not
  // cached, as an engine would do.
  if (!put.ok() && put.status().code() != StatusCode::kAlreadyExists &&
      put.status().code() != StatusCode::kResourceExhausted) {
    return put.status();
  }
  return Status::Ok();
}

Status PolicyRun::StoreRest(std::size_t request, std::size_t from, bool with_output) {
  const ReplayRequest& r = requests_[request];
  const std::optional<BlockKey> parent = from > 0 ? std::optional(r.prompt[from - 1].key) : std::nullopt;
  const std::span<const ReplayBlock> output =
      with_output && options_.cache_output ? std::span<const ReplayBlock>(r.output) : std::span<const ReplayBlock>();
  return Store(request, std::span(r.prompt).subspan(from), output, parent);
}

Status PolicyRun::StoreOutput(std::size_t request) {
  const ReplayRequest& r = requests_[request];
  if (!options_.cache_output || r.output.empty() || r.prompt.empty()) return Status::Ok();
  const Status stored = Store(request, {}, r.output, r.prompt.back().key);
  // NotFound: the prompt's last block left while the request decoded (or was never stored),
  // so the output cannot be chained to it, as in an engine.
  return stored.code() == StatusCode::kNotFound ? Status::Ok() : stored;
}

Result<ReplayPolicyResult> PolicyRun::ServeInstantly() {
  std::vector<double> ttft;
  double no_cache_sum = 0;
  uint64_t projected_tokens = 0;
  const auto start = std::chrono::steady_clock::now();
  for (std::size_t q = 0; q < requests_.size(); ++q) {
    const ReplayRequest& r = requests_[q];
    now_ = std::max(now_, r.arrival_s);
    KVTIER_ASSIGN_OR_RETURN(const Started started, model_ ? Result<Started>(StartOnModel(q)) : Start(q));
    if (options_.cost_model) {
      // Load the hit blocks from where they are, recompute the rest after them.
      ttft.push_back(started.load_seconds + options_.cost_model->RecomputeSeconds(
                                                started.prompt_tokens - started.hit_tokens, started.hit_tokens));
      no_cache_sum += options_.cost_model->RecomputeSeconds(started.prompt_tokens, 0);
      projected_tokens += started.prompt_tokens;
    }
    if (model_) {
      StoreOnModel(q, started.hit_blocks, /*with_output=*/true);
      continue;
    }
    const Status stored = StoreRest(q, started.hit_blocks, /*with_output=*/true);
    pins_.erase(q);
    KVTIER_RETURN_IF_ERROR(stored);
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (!ttft.empty()) {
    double sum = 0;
    for (double v : ttft) sum += v;
    out_.ttft_mean_s = sum / static_cast<double>(ttft.size());
    out_.ttft_no_cache_mean_s = no_cache_sum / static_cast<double>(ttft.size());
    constexpr double kDollarsPerGpuHour = 2.0;  // the paper's assumption
    auto dollars_per_mtok = [&](double tokens_per_s) { return kDollarsPerGpuHour / 3600 / tokens_per_s * 1e6; };
    out_.prefill_tokens_per_s = static_cast<double>(projected_tokens) / sum;
    out_.no_cache_prefill_tokens_per_s = static_cast<double>(projected_tokens) / no_cache_sum;
    out_.dollars_per_mtok = dollars_per_mtok(out_.prefill_tokens_per_s);
    out_.no_cache_dollars_per_mtok = dollars_per_mtok(out_.no_cache_prefill_tokens_per_s);
    out_.ttft_p50_s = Quantile(ttft, 0.5);
    out_.ttft_p99_s = Quantile(ttft, 0.99);
  }
  FinishResult(seconds);
  return out_;
}

Result<ReplayPolicyResult> PolicyRun::ServeThroughEngine(const EngineOptions& engine) {
  // ReplayOptions::Validate has checked that there is a cost model.
  std::vector<EngineRequest> requests;
  requests.reserve(requests_.size());
  // A prompt that holds an earlier request's answer is the next turn of its conversation: it
  // cannot be sent before that answer is out, whatever the trace's (synthetic) arrival says.
  std::unordered_map<BlockKey, std::size_t, BlockKeyHash> answered_by;
  for (std::size_t q = 0; q < requests_.size(); ++q) {
    const ReplayRequest& r = requests_[q];
    EngineRequest e{.arrival_s = r.arrival_s};
    for (const ReplayBlock& b : r.prompt) {
      e.prompt_tokens += b.tokens;
      if (auto it = answered_by.find(b.key); it != answered_by.end()) e.after = std::max(e.after.value_or(0), it->second);
    }
    for (const ReplayBlock& b : r.output) {
      e.output_tokens += b.tokens;
      answered_by.insert_or_assign(b.key, q);
    }
    e.prompt_tokens = std::max<uint64_t>(1, e.prompt_tokens);
    requests.push_back(e);
  }
  const auto start = std::chrono::steady_clock::now();
  KVTIER_ASSIGN_OR_RETURN(EngineReport report, SimulateEngine(requests, *options_.cost_model,
                                                              options_.kv_bytes_per_token, engine, *this));
  KVTIER_RETURN_IF_ERROR(error_);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  report.ttft_s.clear();  // the summary is what a report carries
  report.queue_wait_s.clear();
  report.arrival_s.clear();
  out_.engine = std::move(report);
  FinishResult(seconds);
  return out_;
}

EngineCache::Hit PolicyRun::StartPrefill(std::size_t request, double now, std::span<const std::size_t> waiting) {
  if (!error_.ok()) return {};
  now_ = std::max(now_, now);
  if (model_) return StartPrefillOnModel(request, waiting);
  ExpectQueued(waiting);
  Result<Started> started = Start(request);
  // From here its hit is pinned; the rest it will compute.
  expectations_.erase(request);
  if (!started.ok()) {
    error_ = started.status();
    return {};
  }
  return {.tokens = started->hit_tokens, .load_seconds = started->load_seconds};
}

void PolicyRun::ExpectQueued(std::span<const std::size_t> waiting) {
  for (std::size_t q : waiting) {
    if (expectations_.contains(q)) continue;
    keys_.clear();
    for (const ReplayBlock& b : requests_[q].prompt) keys_.push_back(b.key);
    expectations_.emplace(q, store_->Expect(keys_));
  }
}

void PolicyRun::PrefillDone(std::size_t request, double now) {
  if (!error_.ok()) return;
  now_ = std::max(now_, now);
  if (model_) return StoreOnModel(request, hit_blocks_[request], /*with_output=*/false);
  const Status stored = StoreRest(request, hit_blocks_[request], /*with_output=*/false);
  pins_.erase(request);
  if (!stored.ok()) error_ = stored;
}

void PolicyRun::Finished(std::size_t request, double now) {
  if (!error_.ok()) return;
  now_ = std::max(now_, now);
  if (model_) return StoreOutputOnModel(request);
  const Status stored = StoreOutput(request);
  if (!stored.ok()) error_ = stored;
}

void PolicyRun::FinishResult(double seconds) {
  out_.accesses_per_s = seconds > 0 ? static_cast<double>(out_.accesses) / seconds : 0;
  if (model_) {
    out_.tier_hits.push_back(out_.hit_blocks);  // every hit is a read from its one tier
  } else {
    for (const StoreTierStats& t : store_->GetStats().tiers) out_.tier_hits.push_back(t.hits);
  }
  out_.block_hit_rate = out_.accesses == 0 ? 0 : static_cast<double>(out_.hit_blocks) / static_cast<double>(out_.accesses);
  out_.token_hit_rate = out_.tokens == 0 ? 0 : static_cast<double>(out_.hit_tokens) / static_cast<double>(out_.tokens);
}

}  // namespace kvtier::replay_internal
