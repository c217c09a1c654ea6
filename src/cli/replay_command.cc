// `kvtier replay`: a trace through the store's policies, next to the offline optimum and the
// ceiling (replay.h, optimal_bound.h). Prints a table like the paper's, or JSON.
#include <cstdio>
#include <limits>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "kvtier/model_catalog.h"
#include "kvtier/replay.h"
#include "kvtier/sizing.h"
#include "kvtier/tier_config.h"
#include "kvtier/tokenizer.h"
#include "kvtier/trace.h"
#include "replay/ablation.h"
#include "replay/trace_blocks.h"

namespace kvtier::cli {
namespace {

// ReplayOptions' policies, as --policies spells them.
std::string DefaultPolicies() {
  std::string out;
  for (PolicyKind kind : ReplayOptions{}.policies) out += (out.empty() ? "" : ",") + std::string(PolicyKindName(kind));
  return out;
}

struct ReplayCommandOptions {
  std::string trace;
  std::string format;
  uint64_t capacity_blocks = 0;
  double capacity_fraction = 0.05;
  std::string policies = DefaultPolicies();
  uint32_t block_tokens = 16;
  std::string tokenizer;
  std::size_t max_requests = 0;
  uint64_t seed = 1;
  bool no_output = false;
  bool json = false;
  std::vector<double> sweep;
  std::string svg;
  std::string tier_config;
  bool move_bytes = false;
  std::string model = "llama-3-8b";
  std::string gpu = "h100-sxm";
  uint32_t engines = 0;  // 0: no engine model (each request served as it arrives)
  uint32_t max_batched_tokens = 8192;
  uint32_t max_running = 256;
  std::string analyze;  // "gap": the gap analysis instead of the policies
  std::vector<uint64_t> lookahead = {8, 32, 128, 512};
  bool ablation = false;     // the full system and each part removed (ablation.h)
  bool tier_ladder = false;  // the full system on 1, 2, ... of its tiers
  std::string dump_accesses;  // write the access sequence here (libCacheSim's oracleGeneral)
  bool through_store = false;  // ReplayOptions::through_store
  uint32_t policy_shards = 1;  // ReplayOptions::policy_shards
};

Result<std::vector<PolicyKind>> ParsePolicies(const std::string& list) {
  std::vector<PolicyKind> out;
  std::stringstream in(list);
  std::string name;
  while (std::getline(in, name, ',')) {
    if (name.empty()) continue;
    KVTIER_ASSIGN_OR_RETURN(PolicyKind kind, ParsePolicyKind(name));
    out.push_back(kind);
  }
  if (out.empty()) return Status::InvalidArgument("--policies names no policy");
  return out;
}

nlohmann::json ResultJson(const ReplayPolicyResult& r) {
  nlohmann::json out = {{"policy", r.policy},         {"block_hit_rate", r.block_hit_rate},
                        {"token_hit_rate", r.token_hit_rate}, {"hit_blocks", r.hit_blocks},
                        {"accesses", r.accesses},     {"accesses_per_s", r.accesses_per_s}};
  if (!r.tier_hits.empty()) out["tier_hits"] = r.tier_hits;
  if (r.engine) {
    const EngineReport& e = *r.engine;
    out["engine"] = {{"ttft_mean_s", e.ttft_mean_s},       {"ttft_p50_s", e.ttft_p50_s},
                     {"ttft_p99_s", e.ttft_p99_s},         {"queue_wait_mean_s", e.queue_wait_mean_s},
                     {"queue_wait_p99_s", e.queue_wait_p99_s}, {"makespan_s", e.makespan_s},
                     {"prompt_tokens_per_s", e.prompt_tokens_per_s}, {"waiting_mean", e.waiting_mean},
                     {"waiting_p99", e.waiting_p99},       {"steps", e.steps}};
  }
  if (r.ttft_mean_s > 0) {
    out["ttft_mean_s"] = r.ttft_mean_s;
    out["ttft_p50_s"] = r.ttft_p50_s;
    out["ttft_p99_s"] = r.ttft_p99_s;
    out["ttft_no_cache_mean_s"] = r.ttft_no_cache_mean_s;
    out["prefill_tokens_per_s"] = r.prefill_tokens_per_s;
    out["no_cache_prefill_tokens_per_s"] = r.no_cache_prefill_tokens_per_s;
    out["dollars_per_mtok"] = r.dollars_per_mtok;
    out["no_cache_dollars_per_mtok"] = r.no_cache_dollars_per_mtok;
  }
  return out;
}

Result<nlohmann::json> RunOnce(const std::vector<ReplayRequest>& requests, const ReplayOptions& options) {
  KVTIER_ASSIGN_OR_RETURN(ReplayReport report, Replay(requests, options));
  nlohmann::json results = nlohmann::json::array();
  for (const ReplayPolicyResult& r : report.results) results.push_back(ResultJson(r));
  return nlohmann::json{{"requests", report.requests},
                        {"block_bytes", report.block_bytes},
                        {"accesses", report.accesses},
                        {"unique_blocks", report.unique_blocks},
                        {"capacity_blocks", report.capacity_blocks},
                        {"results", results}};
}

// The first line of a run's table: its capacity and the trace's size.
std::string CapacityLine(const nlohmann::json& run) {
  char line[256];
  std::snprintf(line, sizeof line, "capacity %llu blocks of %llu unique; %llu accesses in %llu requests\n",
                static_cast<unsigned long long>(run["capacity_blocks"].get<uint64_t>()),
                static_cast<unsigned long long>(run["unique_blocks"].get<uint64_t>()),
                static_cast<unsigned long long>(run["accesses"].get<uint64_t>()),
                static_cast<unsigned long long>(run["requests"].get<uint64_t>()));
  return line;
}

std::string Table(const nlohmann::json& run) {
  std::string out = CapacityLine(run);
  char line[256];
  out += "policy      block hit  token hit  accesses/s  TTFT mean (no cache)  hits per tier\n";
  for (const nlohmann::json& r : run["results"]) {
    const double speed = r["accesses_per_s"].get<double>();
    std::string ttft = "-", tiers = "-";
    if (r.contains("ttft_mean_s")) {
      char buf[64];
      std::snprintf(buf, sizeof buf, "%.3f s (%.3f s)", r["ttft_mean_s"].get<double>(),
                    r["ttft_no_cache_mean_s"].get<double>());
      ttft = buf;
    }
    if (r.contains("tier_hits") && r["tier_hits"].size() > 1) {
      tiers.clear();
      for (const auto& h : r["tier_hits"]) tiers += (tiers.empty() ? "" : "/") + std::to_string(h.get<uint64_t>());
    }
    std::snprintf(line, sizeof line, "%-10s  %8.2f%%  %8.2f%%  %10s  %-20s  %s\n", r["policy"].get<std::string>().c_str(),
                  100 * r["block_hit_rate"].get<double>(), 100 * r["token_hit_rate"].get<double>(),
                  speed > 0 ? std::to_string(static_cast<uint64_t>(speed)).c_str() : "-", ttft.c_str(), tiers.c_str());
    out += line;
    if (r.contains("engine")) {
      const nlohmann::json& e = r["engine"];
      std::snprintf(line, sizeof line, "          engine: TTFT p50 %.3f s, p99 %.3f s; queue wait mean %.3f s; %.1f waiting\n",
                    e["ttft_p50_s"].get<double>(), e["ttft_p99_s"].get<double>(), e["queue_wait_mean_s"].get<double>(),
                    e["waiting_mean"].get<double>());
      out += line;
    }
  }
  return out;
}

// Hit rate against capacity, one line per policy (and opt, ceiling).
std::string SweepSvg(const std::vector<nlohmann::json>& runs, const std::string& title) {
  constexpr double kWidth = 720, kHeight = 440, kLeft = 60, kRight = 140, kTop = 40, kBottom = 50;
  const double plot_w = kWidth - kLeft - kRight, plot_h = kHeight - kTop - kBottom;
  const char* colors[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#000000", "#7f7f7f"};
  double max_cap = 1;
  for (const auto& run : runs) max_cap = std::max(max_cap, run["capacity_fraction"].get<double>());
  std::ostringstream svg;
  svg << "<svg xmlns='http://www.w3.org/2000/svg' width='" << kWidth << "' height='" << kHeight
      << "' font-family='sans-serif' font-size='12'>\n<rect width='100%' height='100%' fill='white'/>\n"
      << "<text x='" << kLeft << "' y='20' font-size='14'>" << title << "</text>\n";
  for (int i = 0; i <= 10; ++i) {
    const double y = kTop + plot_h * (1 - i / 10.0);
    svg << "<line x1='" << kLeft << "' x2='" << kLeft + plot_w << "' y1='" << y << "' y2='" << y
        << "' stroke='#ddd'/><text x='" << kLeft - 8 << "' y='" << y + 4 << "' text-anchor='end'>" << i * 10
        << "%</text>\n";
  }
  for (const auto& run : runs) {
    const double f = run["capacity_fraction"].get<double>();
    const double x = kLeft + plot_w * f / max_cap;
    svg << "<text x='" << x << "' y='" << kTop + plot_h + 18 << "' text-anchor='middle'>" << f * 100 << "%</text>\n";
  }
  svg << "<text x='" << kLeft + plot_w / 2 << "' y='" << kHeight - 10
      << "' text-anchor='middle'>capacity (share of unique blocks)</text>\n";
  const std::size_t series = runs.front()["results"].size();
  for (std::size_t s = 0; s < series; ++s) {
    svg << "<polyline fill='none' stroke-width='2' stroke='" << colors[s % 7] << "' points='";
    for (const auto& run : runs) {
      const double x = kLeft + plot_w * run["capacity_fraction"].get<double>() / max_cap;
      const double y = kTop + plot_h * (1 - run["results"][s]["block_hit_rate"].get<double>());
      svg << x << ',' << y << ' ';
    }
    const std::string name = runs.front()["results"][s]["policy"].get<std::string>();
    svg << "'/>\n<text x='" << kLeft + plot_w + 10 << "' y='" << kTop + 16 * static_cast<double>(s + 1) << "' fill='"
        << colors[s % 7] << "'>" << name << "</text>\n";
  }
  svg << "</svg>\n";
  return svg.str();
}

nlohmann::json HitJson(const HitStats& h) {
  return {{"block_hit_rate", h.block_hit_rate}, {"token_hit_rate", h.token_hit_rate}, {"hit_blocks", h.hits}};
}

Result<nlohmann::json> RunGapOnce(const std::vector<ReplayRequest>& requests, const ReplayOptions& options,
                                  const GapAnalysisOptions& gap_options) {
  KVTIER_ASSIGN_OR_RETURN(ReplayGapReport report, AnalyzeReplayGap(requests, options, gap_options));
  nlohmann::json oracles = nlohmann::json::array();
  for (const GapOracle& o : report.gap.oracles) {
    nlohmann::json j = HitJson(o.hits);
    j["oracle"] = o.name;
    j["gap_closed"] = o.gap_closed;
    oracles.push_back(std::move(j));
  }
  return nlohmann::json{{"requests", report.requests},
                        {"accesses", report.gap.opt.accesses},
                        {"unique_blocks", report.unique_blocks},
                        {"capacity_blocks", report.capacity_blocks},
                        {"store_lru", ResultJson(report.store_lru)},
                        {"lru", HitJson(report.gap.lru)},
                        {"opt", HitJson(report.gap.opt)},
                        {"oracles", oracles}};
}

std::string GapTable(const nlohmann::json& run) {
  std::string out = CapacityLine(run);
  char line[256];
  const double lru = run["lru"]["block_hit_rate"].get<double>(), opt = run["opt"]["block_hit_rate"].get<double>();
  std::snprintf(line, sizeof line, "store's lru %.2f%%, modelled lru %.2f%%, opt %.2f%%: a gap of %.2f points\n",
                100 * run["store_lru"]["block_hit_rate"].get<double>(), 100 * lru, 100 * opt, 100 * (opt - lru));
  out += line;
  out += "oracle              block hit  gap closed\n";
  for (const nlohmann::json& o : run["oracles"]) {
    std::snprintf(line, sizeof line, "%-18s  %8.2f%%  %9.1f%%\n", o["oracle"].get<std::string>().c_str(),
                  100 * o["block_hit_rate"].get<double>(), 100 * o["gap_closed"].get<double>());
    out += line;
  }
  return out;
}

// TTFT and throughput of a run: the engine model's when there is one, else the projection's.
struct Served {
  double p50 = 0, p99 = 0, tokens_per_s = 0;
};

Served ServedOf(const ReplayPolicyResult& r) {
  if (r.engine) return {r.engine->ttft_p50_s, r.engine->ttft_p99_s, r.engine->prompt_tokens_per_s};
  return {r.ttft_p50_s, r.ttft_p99_s, r.prefill_tokens_per_s};
}

nlohmann::json AblationJson(const AblationReport& report) {
  nlohmann::json rows = nlohmann::json::array();
  for (const AblationRow& row : report.rows) {
    const Served s = ServedOf(row.result);
    nlohmann::json j = ResultJson(row.result);
    j["run"] = row.name;
    j["tiers"] = row.tiers;
    j["capacity_blocks"] = row.capacity_blocks;
    j["served"] = {{"ttft_p50_s", s.p50}, {"ttft_p99_s", s.p99}, {"prompt_tokens_per_s", s.tokens_per_s}};
    rows.push_back(std::move(j));
  }
  return {{"requests", report.requests},
          {"unique_blocks", report.unique_blocks},
          {"block_bytes", report.block_bytes},
          {"runs", rows},
          {"not_ablated", report.not_ablated}};
}

std::string AblationTable(const nlohmann::json& run) {
  char line[320];
  std::snprintf(line, sizeof line, "%llu requests, %llu unique blocks of %llu bytes; full system: ",
                static_cast<unsigned long long>(run["requests"].get<uint64_t>()),
                static_cast<unsigned long long>(run["unique_blocks"].get<uint64_t>()),
                static_cast<unsigned long long>(run["block_bytes"].get<uint64_t>()));
  std::string out = line;
  std::string tiers;
  for (const auto& t : run["runs"].front()["tiers"]) tiers += (tiers.empty() ? "" : ", ") + t.get<std::string>();
  out += tiers + "\n";
  out += "run              policy      blocks  block hit  token hit  TTFT P50  TTFT P99  prompt tok/s  hits per tier\n";
  for (const nlohmann::json& r : run["runs"]) {
    std::string hits;
    for (const auto& h : r.value("tier_hits", nlohmann::json::array())) hits += (hits.empty() ? "" : "/") + std::to_string(h.get<uint64_t>());
    const nlohmann::json& s = r["served"];
    std::snprintf(line, sizeof line, "%-15s  %-10s  %6llu  %8.2f%%  %8.2f%%  %7.3f s  %7.3f s  %12.0f  %s\n",
                  r["run"].get<std::string>().c_str(), r["policy"].get<std::string>().c_str(),
                  static_cast<unsigned long long>(r["capacity_blocks"].get<uint64_t>()),
                  100 * r["block_hit_rate"].get<double>(), 100 * r["token_hit_rate"].get<double>(),
                  s["ttft_p50_s"].get<double>(), s["ttft_p99_s"].get<double>(), s["prompt_tokens_per_s"].get<double>(),
                  hits.c_str());
    out += line;
  }
  for (const auto& why : run["not_ablated"]) out += "not measured: " + why.get<std::string>() + "\n";
  return out;
}

// --ablation or --tier-ladder: the full system's policy is the one --policies names, when it
// names one, else predictive; its tiers --tier-config's, else the paper's ladder.
int RunAblationCommand(const ReplayCommandOptions& o, const std::vector<ReplayRequest>& requests,
                       const ReplayOptions& replay, const ModelSpec& model, const nlohmann::json& about) {
  auto fail = [](const Status& s) {
    std::fprintf(stderr, "kvtier replay: %s\n", s.ToString().c_str());
    return kExitError;
  };
  if (o.ablation && o.tier_ladder) return fail(Status::InvalidArgument("--ablation and --tier-ladder are two runs: pick one"));
  if (!o.analyze.empty() || !o.sweep.empty() || o.move_bytes) {
    return fail(Status::InvalidArgument("--ablation and --tier-ladder run in metadata mode at one capacity: not with "
                                        "--analyze, --sweep or --move-bytes"));
  }
  AblationOptions options{.replay = replay, .tiers = replay.tiers, .model = model};
  options.replay.tiers.reset();
  if (replay.policies.size() == 1) options.policy = replay.policies.front();
  Result<AblationReport> report = o.ablation ? RunAblation(requests, options) : RunTierLadder(requests, options);
  if (!report.ok()) return fail(report.status());
  nlohmann::json run = AblationJson(*report);
  run["about"] = about;
  run["about"]["tiers"] = o.tier_config.empty() ? "the paper's ladder, T0 = --capacity-blocks/--capacity-frac" : o.tier_config;
  run["about"]["full_policy"] = PolicyKindName(options.policy);
  std::fputs(o.json ? (run.dump(2) + "\n").c_str() : AblationTable(run).c_str(), stdout);
  return 0;
}

int Run(const ReplayCommandOptions& o) {
  auto fail = [](const Status& s) {
    std::fprintf(stderr, "kvtier replay: %s\n", s.ToString().c_str());
    return kExitError;
  };
  Result<TraceFormat> format = ParseTraceFormat(o.format);
  if (!format.ok()) return fail(format.status());
  std::unique_ptr<Tokenizer> tokenizer;
  TraceReadOptions read;
  read.max_requests = o.max_requests;
  read.seed = o.seed;
  read.include_output = !o.no_output;
  if (!o.tokenizer.empty()) {
    Result<std::unique_ptr<Tokenizer>> loaded = LoadHfTokenizer(o.tokenizer);
    if (!loaded.ok()) return fail(loaded.status());
    tokenizer = std::move(*loaded);
    read.tokenizer = tokenizer.get();
  }
  Result<Trace> trace = ReadTrace(o.trace, *format, read);
  if (!trace.ok()) return fail(trace.status());
  Result<std::vector<ReplayRequest>> requests = TraceToReplayRequests(*trace, {.block_tokens = o.block_tokens});
  if (!requests.ok()) return fail(requests.status());
  Result<std::vector<PolicyKind>> policies = ParsePolicies(o.policies);
  if (!policies.ok()) return fail(policies.status());
  if (!o.dump_accesses.empty()) {
    Result<std::vector<ReplayAccess>> accesses = ReplayAccesses(*requests);
    if (!accesses.ok()) return fail(accesses.status());
    if (Status written = WriteOracleGeneralTrace(*accesses, o.dump_accesses); !written.ok()) return fail(written);
  }

  ReplayOptions options;
  options.policies = *policies;
  // The served model sets a block's size (its KV bytes) and, on the GPU, the TTFT projection.
  Result<ModelSpec> model = LoadCatalogModel(o.model);
  if (!model.ok()) return fail(model.status());
  Result<KvSizing> sizing = ComputeKvSizing(*model, {.block_size = o.block_tokens});
  if (!sizing.ok()) return fail(sizing.status());
  Result<GpuSpec> gpu = GpuPreset(o.gpu);
  if (!gpu.ok()) return fail(gpu.status());
  Result<PrefillCostModel> cost = PrefillCostModel::Create(*model, *gpu);
  if (!cost.ok()) return fail(cost.status());
  options.cost_model = *cost;
  options.recompute_seconds_per_token = cost->RecomputeSeconds(o.block_tokens, 0) / o.block_tokens;
  if (sizing->kv_bytes_per_token > (1u << 30)) return fail(Status::InvalidArgument(o.model + ": over 1 GiB of KV per token"));
  options.kv_bytes_per_token = static_cast<uint32_t>(sizing->kv_bytes_per_token);
  if (o.tier_config == "default") {
    options.tiers = DefaultTierConfig("kvtier-data");
  } else if (!o.tier_config.empty()) {
    Result<TierConfig> tiers = LoadTierConfig(o.tier_config);
    if (!tiers.ok()) return fail(tiers.status());
    options.tiers = *tiers;
  }
  if (o.engines > 0) {
    options.engine = EngineOptions{
        .engines = o.engines, .max_batched_tokens = o.max_batched_tokens, .max_running = o.max_running};
  }
  options.move_bytes = o.move_bytes;
  if (o.move_bytes && !options.tiers) return fail(Status::InvalidArgument("--move-bytes needs --tier-config"));
  options.capacity_blocks = o.capacity_blocks;
  options.capacity_fraction = o.capacity_fraction;
  options.cache_output = !o.no_output;
  options.through_store = o.through_store;
  options.policy_shards = o.policy_shards;
  const nlohmann::json about = {{"trace", o.trace},
                                {"format", o.format},
                                {"tokenizer", trace->metadata.tokenizer},
                                {"arrivals", trace->metadata.arrivals},
                                {"block_tokens", o.block_tokens},
                                {"model", o.model},
                                {"gpu", o.gpu},
                                {"kv_bytes_per_token", options.kv_bytes_per_token},
                                {"tiers", o.tier_config.empty() ? "one tier of --capacity-blocks/--capacity-frac" : o.tier_config},
                                {"mode", o.move_bytes ? "data" : "metadata"},
                                {"cache_output", options.cache_output},
                                {"through_store", options.through_store},
                                {"policy_shards", options.policy_shards}};
  if (o.ablation || o.tier_ladder) return RunAblationCommand(o, *requests, options, *model, about);
  if (!o.analyze.empty() && o.analyze != "gap") {
    return fail(Status::InvalidArgument("--analyze: unknown analysis '" + o.analyze + "' (known: gap)"));
  }
  const bool gap = o.analyze == "gap";
  if (gap && !o.svg.empty()) return fail(Status::InvalidArgument("--svg plots the policies' hit rates, not --analyze gap"));
  const GapAnalysisOptions gap_options{.lookahead_requests = o.lookahead};
  auto run_once = [&]() { return gap ? RunGapOnce(*requests, options, gap_options) : RunOnce(*requests, options); };
  auto table = [&](const nlohmann::json& run) { return gap ? GapTable(run) : Table(run); };
  if (o.sweep.empty()) {
    Result<nlohmann::json> run = run_once();
    if (!run.ok()) return fail(run.status());
    (*run)["about"] = about;
    std::fputs(o.json ? (run->dump(2) + "\n").c_str() : table(*run).c_str(), stdout);
    return 0;
  }
  std::vector<nlohmann::json> runs;
  for (std::size_t i = 0; i < o.sweep.size(); ++i) {
    options.capacity_blocks = 0;
    options.capacity_fraction = o.sweep[i];
    std::fprintf(stderr, "\rkvtier replay: capacity %zu of %zu (%.1f%%)", i + 1, o.sweep.size(), 100 * o.sweep[i]);
    Result<nlohmann::json> run = run_once();
    if (!run.ok()) return fail(run.status());
    (*run)["capacity_fraction"] = o.sweep[i];
    runs.push_back(std::move(*run));
  }
  std::fprintf(stderr, "\n");
  const nlohmann::json all = {{"about", about}, {"sweep", runs}};
  if (!o.svg.empty()) {
    std::ofstream svg(o.svg);
    svg << SweepSvg(runs, "block hit rate: " + o.trace);
    if (!svg) return fail(Status::IoError(o.svg + ": cannot write the plot"));
    std::fprintf(stderr, "kvtier replay: plot written to %s\n", o.svg.c_str());
  }
  if (o.json) {
    std::fputs((all.dump(2) + "\n").c_str(), stdout);
  } else {
    for (const nlohmann::json& run : runs) std::fputs((table(run) + "\n").c_str(), stdout);
  }
  return 0;
}

}  // namespace

void AddReplayCommand(CLI::App& app, int& exit_code) {
  auto o = std::make_shared<ReplayCommandOptions>();
  CLI::App* cmd = app.add_subcommand("replay", "Replay a trace through the policies, with the optimum and the ceiling");
  cmd->add_option("--trace", o->trace, "Trace file or directory")->required();
  cmd->add_option("--format", o->format, "canonical, mooncake, sharegpt, lmsys, taubench, sweagent, toolbench")->required();
  cmd->add_option("--capacity-blocks", o->capacity_blocks, "Cache capacity in blocks (overrides --capacity-frac)");
  cmd->add_option("--capacity-frac", o->capacity_fraction, "Capacity as a share of the unique blocks")->capture_default_str();
  cmd->add_option("--policies", o->policies, "Comma-separated policies")->capture_default_str();
  cmd->add_option("--block-tokens", o->block_tokens, "Tokens per block for token traces")->capture_default_str();
  cmd->add_option("--tokenizer", o->tokenizer, "A Hugging Face tokenizer.json (default: the approximate tokenizer)");
  cmd->add_option("--max-requests", o->max_requests, "Read at most this many requests");
  cmd->add_option("--seed", o->seed, "Seed of the arrival process")->capture_default_str();
  cmd->add_flag("--no-output-cache", o->no_output, "Do not cache generated blocks");
  cmd->add_option("--sweep", o->sweep, "Capacities (shares of unique blocks) to sweep, e.g. 0.01 0.05 0.2");
  cmd->add_option("--svg", o->svg, "With --sweep: write the hit-rate plot here");
  cmd->add_option("--tier-config", o->tier_config, "Tiers (YAML, or \"default\": 4 GiB DRAM + 16 GiB NVMe); sizes only unless --move-bytes");
  cmd->add_flag("--move-bytes", o->move_bytes, "Data mode: real bytes through the --tier-config tiers");
  cmd->add_option("--model", o->model, "Catalog model: block size in bytes, prefill cost")->capture_default_str();
  cmd->add_option("--gpu", o->gpu, "GPU preset for the TTFT projection (h100-sxm, h200, a100, b200)")->capture_default_str();
  cmd->add_option("--engines", o->engines,
                  "Engine model (docs/replay.md): requests queue on this many engines of --gpu; 0: served on arrival")
      ->capture_default_str();
  cmd->add_option("--max-batched-tokens", o->max_batched_tokens, "Engine model: tokens per step")->capture_default_str();
  cmd->add_option("--max-running", o->max_running, "Engine model: requests running per engine")->capture_default_str();
  cmd->add_option("--analyze", o->analyze,
                  "\"gap\": how much of OPT - LRU each piece of future knowledge is worth (oracle runs)");
  cmd->add_option("--lookahead", o->lookahead, "With --analyze gap: the lookahead windows, in requests")
      ->capture_default_str();
  cmd->add_flag("--ablation", o->ablation,
                "The full system, then without prediction, multi-tier, head-granular eviction, prefetch (docs/replay.md)");
  cmd->add_flag("--tier-ladder", o->tier_ladder,
                "The full system on its first tier only, then + each lower tier (the paper's ladder by default)");
  cmd->add_option("--dump-accesses", o->dump_accesses,
                  "Also write the block-access sequence here, in libCacheSim's oracleGeneral format (replay.h)");
  cmd->add_flag("--through-store", o->through_store,
                "Run the default setting through TieredStore, not its faster model (same hits; to check or time it)");
  cmd->add_option("--policy-shards", o->policy_shards,
                  "Split each policy by key into this many shards (a power of two, 1-64), as a sharded tier runs it "
                  "(docs/policies.md); 1: one policy, exact")
      ->capture_default_str();
  cmd->add_flag("--json", o->json, "Print JSON");
  cmd->callback([o, &exit_code] { exit_code = Run(*o); });
}

}  // namespace kvtier::cli
