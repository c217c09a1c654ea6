#include "server/service_metrics.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <map>
#include <regex>
#include <sstream>
#include <thread>

#include <gtest/gtest.h>

#include "kvtier/tiers.h"

namespace kvtier::server {
namespace {

using Labels = std::map<std::string, std::string>;

struct ParsedSample {
  std::string name;
  Labels labels;
  double value = 0;
};

// What the strict checker read: samples keyed by name and labels, and every rule broken.
struct Parsed {
  std::map<std::pair<std::string, Labels>, double> samples;
  std::map<std::string, std::string> types;  // family -> type
  std::vector<std::string> errors;

  double Value(const std::string& name, const Labels& labels = {}) const {
    const auto it = samples.find({name, labels});
    EXPECT_NE(it, samples.end()) << "no sample " << name;
    return it == samples.end() ? std::nan("") : it->second;
  }
};

bool ParseValue(const std::string& text, double& value) {
  if (text == "+Inf" || text == "-Inf" || text == "NaN") {
    value = text == "NaN" ? std::nan("") : (text[0] == '+' ? INFINITY : -INFINITY);
    return true;
  }
  char* end = nullptr;
  value = std::strtod(text.c_str(), &end);
  return !text.empty() && end == text.c_str() + text.size();
}

// `a="x",b="y\"z"` into labels, undoing the format's escapes; false when malformed.
bool ParseLabels(const std::string& text, Labels& labels) {
  static const std::regex kName("[a-z_][a-z0-9_]*");  // snake_case
  std::size_t i = 0;
  while (i < text.size()) {
    const std::size_t eq = text.find('=', i);
    if (eq == std::string::npos || eq + 1 >= text.size() || text[eq + 1] != '"') return false;
    const std::string name = text.substr(i, eq - i);
    if (!std::regex_match(name, kName) || labels.contains(name)) return false;
    std::string value;
    std::size_t j = eq + 2;
    for (; j < text.size() && text[j] != '"'; ++j) {
      if (text[j] == '\n') return false;
      if (text[j] != '\\') {
        value += text[j];
        continue;
      }
      if (++j == text.size()) return false;
      if (text[j] == 'n') {
        value += '\n';
      } else if (text[j] == '\\' || text[j] == '"') {
        value += text[j];
      } else {
        return false;
      }
    }
    if (j == text.size()) return false;  // unterminated
    labels[name] = value;
    i = j + 1;
    if (i < text.size() && text[i++] != ',') return false;
  }
  return true;
}

// Reads text format 0.0.4 strictly: every sample is `name{labels} value` and belongs to the
// family whose HELP and TYPE came just before it; no family twice, no sample twice; counters
// end in _total and are >= 0; histogram buckets are cumulative up to le="+Inf" == _count.
Parsed Check(const std::string& text) {
  static const std::regex kSample(R"(([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})? (\S+))");
  static const std::regex kHelp(R"(# HELP ([a-zA-Z_:][a-zA-Z0-9_:]*) \S.*)");
  static const std::regex kType(R"(# TYPE ([a-zA-Z_:][a-zA-Z0-9_:]*) (counter|gauge|histogram))");
  Parsed out;
  auto error = [&](std::size_t line, const std::string& what) {
    out.errors.push_back("line " + std::to_string(line) + ": " + what);
  };
  if (text.empty() || text.back() != '\n') out.errors.push_back("the text does not end with a newline");

  std::istringstream in(text);
  std::string line, family, pending_help;
  std::size_t n = 0;
  while (std::getline(in, line)) {
    ++n;
    std::smatch m;
    if (std::regex_match(line, m, kHelp)) {
      if (!pending_help.empty()) error(n, "HELP without TYPE for " + pending_help);
      pending_help = m[1].str();
      if (out.types.contains(pending_help)) error(n, "family repeated: " + pending_help);
      continue;
    }
    if (std::regex_match(line, m, kType)) {
      if (m[1] != pending_help) error(n, "TYPE not right after its HELP: " + m[1].str());
      family = m[1].str();
      out.types[family] = m[2].str();
      pending_help.clear();
      if (m[2] == "counter" && !family.ends_with("_total")) error(n, "counter not named _total: " + family);
      continue;
    }
    if (!std::regex_match(line, m, kSample)) {
      error(n, "not a sample: " + line);
      continue;
    }
    ParsedSample s{.name = m[1].str()};
    if (m[2].matched && !ParseLabels(m[3].str(), s.labels)) error(n, "bad labels: " + line);
    if (!ParseValue(m[4].str(), s.value)) error(n, "bad value: " + line);
    const std::string type = out.types.contains(family) ? out.types[family] : "";
    const bool belongs = type == "histogram" ? (s.name == family + "_bucket" || s.name == family + "_sum" ||
                                                s.name == family + "_count")
                                             : s.name == family;
    if (!pending_help.empty() || !belongs) error(n, "sample outside its family's block: " + line);
    if (type == "counter" && !(s.value >= 0)) error(n, "negative counter: " + line);
    if (!out.samples.emplace(std::pair(s.name, s.labels), s.value).second) error(n, "sample repeated: " + line);
  }

  // Histograms: per label set (without le), buckets in order of le, cumulative, +Inf == _count.
  for (const auto& [name, type] : out.types) {
    if (type != "histogram") continue;
    std::map<Labels, std::map<double, double>> buckets;
    for (const auto& [key, value] : out.samples) {
      if (key.first != name + "_bucket") continue;
      Labels series = key.second;
      double le = 0;
      if (!series.contains("le") || !ParseValue(series["le"], le)) {
        out.errors.push_back(name + ": bucket without a numeric le");
        continue;
      }
      series.erase("le");
      buckets[series][le] = value;
    }
    for (const auto& [series, by_le] : buckets) {
      double previous = 0;
      for (const auto& [le, count] : by_le) {
        if (count < previous) out.errors.push_back(name + ": buckets not cumulative at le=" + std::to_string(le));
        previous = count;
      }
      const auto count = out.samples.find({name + "_count", series});
      if (by_le.empty() || !std::isinf(by_le.rbegin()->first)) out.errors.push_back(name + ": no le=\"+Inf\" bucket");
      if (count == out.samples.end() || count->second != previous) out.errors.push_back(name + ": +Inf != _count");
      if (!out.samples.contains({name + "_sum", series})) out.errors.push_back(name + ": no _sum");
    }
  }
  return out;
}

std::shared_ptr<ReusePredictor> NewPredictor() {
  Result<std::shared_ptr<ReusePredictor>> p = ReusePredictor::Create({});
  EXPECT_TRUE(p.ok()) << p.status().ToString();
  return *p;
}

TEST(MetricsChecker, CatchesMalformedExpositions) {
  const std::string good = "# HELP a_total A.\n# TYPE a_total counter\na_total{x=\"1\"} 2\n";
  EXPECT_TRUE(Check(good).errors.empty());
  EXPECT_FALSE(Check("a_total 1\n").errors.empty());                                     // no HELP/TYPE
  EXPECT_FALSE(Check(good + good).errors.empty());                                       // family repeated
  EXPECT_FALSE(Check("# HELP a A.\n# TYPE a counter\na 1\n").errors.empty());            // counter not _total
  EXPECT_FALSE(Check("# HELP a A.\n# TYPE a gauge\na{B=\"x\"} 1\n").errors.empty());     // label not snake_case
  EXPECT_FALSE(Check("# HELP a A.\n# TYPE a gauge\na{b=\"x} 1\n").errors.empty());       // unterminated
  EXPECT_FALSE(Check("# HELP a A.\n# TYPE a gauge\na 1 2\n").errors.empty());            // not a sample
  EXPECT_FALSE(Check("# HELP h H.\n# TYPE h histogram\nh_bucket{le=\"1\"} 2\nh_bucket{le=\"+Inf\"} 1\n"
                     "h_sum 1\nh_count 1\n")
                   .errors.empty());  // not cumulative
  EXPECT_FALSE(Check("# HELP h H.\n# TYPE h histogram\nh_bucket{le=\"+Inf\"} 2\nh_sum 1\nh_count 1\n").errors.empty());
}

TEST(LatencyHistogram, BucketsAreLeInclusiveAndCumulative) {
  const std::vector<double>& bounds = LatencyHistogram::BucketBounds();
  ASSERT_EQ(bounds.size(), 19u);
  EXPECT_DOUBLE_EQ(bounds.front(), 10e-6);
  EXPECT_DOUBLE_EQ(bounds.back(), 10);
  EXPECT_TRUE(std::is_sorted(bounds.begin(), bounds.end()));

  LatencyHistogram h;
  h.Observe(10e-6);         // exactly the first bound: in it
  h.Observe(0.0011);        // in le=0.0025
  h.Observe(20);            // above every bound: +Inf only
  h.Observe(-1);            // a clock stepping back counts as 0
  h.Observe(std::nan(""));  // likewise
  const LatencyHistogram::Snapshot s = h.Read();
  ASSERT_EQ(s.cumulative.size(), bounds.size() + 1);
  EXPECT_EQ(s.count, 5u);
  EXPECT_EQ(s.cumulative[0], 3u);
  const auto at = [&](double bound) {
    return s.cumulative[static_cast<std::size_t>(std::find(bounds.begin(), bounds.end(), bound) - bounds.begin())];
  };
  EXPECT_EQ(at(1e-3), 3u);
  EXPECT_EQ(at(2.5e-3), 4u);
  EXPECT_EQ(at(10), 4u);
  EXPECT_EQ(s.cumulative.back(), 5u);
  EXPECT_NEAR(s.sum_seconds, 20.00111, 1e-9);
}

TEST(LatencyHistogram, ConcurrentObservationsAreAllCounted) {
  LatencyHistogram h;
  constexpr int kThreads = 8;
  constexpr int kEach = 20000;
  std::atomic<bool> done{false};
  // A reader during the writes: every snapshot is cumulative with +Inf == count.
  std::thread reader([&] {
    while (!done.load()) {
      const LatencyHistogram::Snapshot s = h.Read();
      EXPECT_TRUE(std::is_sorted(s.cumulative.begin(), s.cumulative.end()));
      EXPECT_EQ(s.cumulative.back(), s.count);
    }
  });
  std::vector<std::thread> writers;
  for (int t = 0; t < kThreads; ++t) {
    writers.emplace_back([&h, t] {
      for (int i = 0; i < kEach; ++i) h.Observe(t % 2 == 0 ? 1e-3 : 1.0);
    });
  }
  for (std::thread& w : writers) w.join();
  done.store(true);
  reader.join();
  const LatencyHistogram::Snapshot s = h.Read();
  EXPECT_EQ(s.count, uint64_t{kThreads} * kEach);
  EXPECT_EQ(s.cumulative[6], uint64_t{kThreads / 2} * kEach);  // le=0.001
  EXPECT_NEAR(s.sum_seconds, (kThreads / 2) * kEach * (1e-3 + 1.0), 1e-3);
}

TEST(ServiceMetrics, CountsPerOpAndIgnoresNonRequests) {
  ServiceMetrics m;
  m.RecordRequest(protocol::MessageType::kLookup, 0.0003, true, 3, 0);
  m.RecordRequest(protocol::MessageType::kLookup, 0.0004, true, 2, 0);
  m.RecordRequest(protocol::MessageType::kPut, 0.002, false, 4, 4096);
  m.RecordRequest(protocol::MessageType::kError, 1, true, 1, 1);                      // not a request
  m.RecordRequest(static_cast<protocol::MessageType>(99), 1, true, 1, 1);             // not a type
  const ServiceMetrics::Snapshot s = m.Read();
  ASSERT_EQ(s.ops.size(), 10u);
  EXPECT_EQ(s.ops.front().op, protocol::MessageType::kHello);
  EXPECT_EQ(s.ops.back().op, protocol::MessageType::kStats);
  const ServiceMetrics::OpSnapshot& lookup = s.ops[1];
  EXPECT_EQ(lookup.op, protocol::MessageType::kLookup);
  EXPECT_EQ(lookup.ok, 2u);
  EXPECT_EQ(lookup.errors, 0u);
  EXPECT_EQ(lookup.blocks, 5u);
  EXPECT_EQ(lookup.latency.count, 2u);
  const ServiceMetrics::OpSnapshot& put = s.ops[2];
  EXPECT_EQ(put.errors, 1u);
  EXPECT_EQ(put.payload_bytes, 4096u);
  uint64_t total = 0;
  for (const ServiceMetrics::OpSnapshot& op : s.ops) total += op.ok + op.errors;
  EXPECT_EQ(total, 3u);
}

TEST(ServiceMetrics, ConnectionsAndInFlight) {
  ServiceMetrics m;
  m.ConnectionOpened();
  m.ConnectionOpened();
  m.ConnectionClosed();
  m.ConnectionRejected();
  m.FrameRejected();
  m.PutChecksumMismatches(2);
  m.InFlightAdd(3);
  m.InFlightAdd(-1);
  m.EventLoopsRunning(2);
  m.EventLoopsRunning(-1);
  m.EventLoopCpu(1'000);
  m.EventLoopCpu(500);
  m.WorkerPool(10, 3, 7);
  m.RequestBytesHeld(4096);
  m.RequestBytesHeld(-1024);
  m.ReadPausedForBudget();
  const ServiceMetrics::Snapshot s = m.Read();
  EXPECT_EQ(s.connections_open, 1);
  EXPECT_EQ(s.connections_total, 2u);
  EXPECT_EQ(s.connections_rejected, 1u);
  EXPECT_EQ(s.frames_rejected, 1u);
  EXPECT_EQ(s.put_checksum_mismatches, 2u);
  EXPECT_EQ(s.in_flight, 2);
  EXPECT_EQ(s.event_loops, 1);
  EXPECT_EQ(s.event_loop_cpu_ns, 1'500u);
  EXPECT_EQ(s.workers, 10);
  EXPECT_EQ(s.workers_blocked, 3);
  EXPECT_EQ(s.worker_spares_started, 7u);
  EXPECT_EQ(s.request_bytes_held, 3072);
  EXPECT_EQ(s.reads_paused, 1u);
}

TEST(MetricsRender, EveryFamilyIsWellFormed) {
  ServiceMetrics service;
  service.RecordRequest(protocol::MessageType::kGet, 0.01, true, 8, 1 << 20);
  service.EventLoopsRunning(2);
  service.EventLoopCpu(1'500'000'000);
  service.WorkerPool(12, 4, 5);
  service.RequestBytesHeld(1 << 20);
  service.ReadPausedForBudget();
  StoreStats store;
  store.tiers.push_back({.name = "hbm",
                         .kind = TierKind::kGpuHbm,
                         .capacity_bytes = 1 << 30,
                         .shard_locks = {LockProfile{}}});
  store.tiers.push_back({.name = "nvme0",
                         .kind = TierKind::kNvme,
                         .shard_locks = {{.exclusive_acquisitions = 3, .exclusive_hold_seconds = 0.25},
                                         {.exclusive_acquisitions = 5, .exclusive_hold_seconds = 0.5}},
                         .lock = {.exclusive_acquisitions = 8, .exclusive_hold_seconds = 0.75}});
  const std::shared_ptr<ReusePredictor> predictor = NewPredictor();
  const std::string text = RenderPrometheus(service, store, *predictor);
  const Parsed e = Check(text);
  for (const std::string& err : e.errors) ADD_FAILURE() << err;

  // The families of docs/metrics.md, each once (the checker refuses repeats).
  for (const char* family :
       {"kvtier_tier_capacity_bytes", "kvtier_tier_used_bytes", "kvtier_tier_blocks", "kvtier_tier_hits_total",
        "kvtier_tier_promotions_total", "kvtier_tier_demotions_total", "kvtier_tier_drops_total",
        "kvtier_tier_refused_total", "kvtier_tier_evict_failures_total", "kvtier_tier_promotions_declined_total",
        "kvtier_tier_promotions_used_total", "kvtier_tier_promotions_wasted_total", "kvtier_tier_promotion_rate",
        "kvtier_tier_lock_hold_seconds_total", "kvtier_tier_lock_acquisitions_total",
        "kvtier_index_lock_hold_seconds_total", "kvtier_index_lock_acquisitions_total",
        "kvtier_lookups_total", "kvtier_lookup_blocks_total", "kvtier_gets_total",
        "kvtier_get_blocks_total", "kvtier_get_misses_total", "kvtier_puts_total", "kvtier_put_blocks_total",
        "kvtier_corrupt_blocks_total", "kvtier_vanished_copies_total", "kvtier_eviction_failures_total",
        "kvtier_pending_evictions", "kvtier_shared_found_blocks_total", "kvtier_shared_publish_failures_total",
        "kvtier_prefetch_issued_blocks_total", "kvtier_prefetch_used_blocks_total",
        "kvtier_prefetch_wasted_blocks_total", "kvtier_prefetch_wasted_bytes_total", "kvtier_prefetch_window_blocks",
        "kvtier_recompute_preferred_total", "kvtier_head_splits_total", "kvtier_head_split_reads_total",
        "kvtier_head_importance_assumed", "kvtier_mover_queue_depth", "kvtier_pinned_blocks", "kvtier_index_blocks",
        "kvtier_recovered_blocks", "kvtier_recovery_dropped_blocks", "kvtier_journal_records",
        "kvtier_journal_compactions_total", "kvtier_journal_compaction_failures_total",
        "kvtier_metadata_lock_hold_seconds_total", "kvtier_metadata_lock_acquisitions_total",
        "kvtier_metadata_lock_waits_total", "kvtier_metadata_lock_wait_seconds_total", "kvtier_predictor_reuse_alpha", "kvtier_predictor_reuse_beta", "kvtier_predictor_reuse_probability",
        "kvtier_predictor_observations_total", "kvtier_predictor_predictions_total", "kvtier_predictor_brier_score",
        "kvtier_predictor_brier_score_overall", "kvtier_predictor_reliability_predictions_total",
        "kvtier_predictor_reliability_mean_predicted", "kvtier_predictor_reliability_observed_frequency",
        "kvtier_request_duration_seconds", "kvtier_requests_total", "kvtier_request_blocks_total",
        "kvtier_request_payload_bytes_total", "kvtier_connections_open", "kvtier_connections_total",
        "kvtier_connections_rejected_total", "kvtier_frames_rejected_total", "kvtier_tls_handshakes_failed_total",
        "kvtier_checksum_mismatches_total", "kvtier_requests_in_flight", "kvtier_event_loops",
        "kvtier_event_loop_cpu_seconds_total", "kvtier_workers", "kvtier_workers_blocked",
        "kvtier_worker_spares_started_total", "kvtier_request_bytes_held", "kvtier_reads_paused_total"}) {
    EXPECT_TRUE(e.types.contains(family)) << family;
  }
  EXPECT_EQ(e.types.size(), 79u) << "a family was added: list it here and in docs/metrics.md";
  EXPECT_EQ(e.Value("kvtier_checksum_mismatches_total", {{"direction", "put"}}), 0);
  EXPECT_EQ(e.Value("kvtier_event_loops", {}), 2);
  EXPECT_EQ(e.Value("kvtier_event_loop_cpu_seconds_total", {}), 1.5);
  EXPECT_EQ(e.Value("kvtier_workers", {}), 12);
  EXPECT_EQ(e.Value("kvtier_workers_blocked", {}), 4);
  EXPECT_EQ(e.Value("kvtier_worker_spares_started_total", {}), 5);
  EXPECT_EQ(e.Value("kvtier_request_bytes_held", {}), 1 << 20);
  EXPECT_EQ(e.Value("kvtier_reads_paused_total", {}), 1);

  EXPECT_EQ(e.Value("kvtier_tier_capacity_bytes", {{"tier", "hbm"}, {"kind", "gpu_hbm"}}), 1 << 30);
  EXPECT_EQ(e.Value("kvtier_tier_blocks", {{"tier", "nvme0"}, {"kind", "nvme"}}), 0);
  EXPECT_EQ(e.Value("kvtier_tier_promotion_rate", {{"tier", "nvme0"}, {"kind", "nvme"}}), 1) << "no gate";
  // One sample per shard of a tier's policy.
  EXPECT_EQ(e.Value("kvtier_tier_lock_hold_seconds_total", {{"tier", "nvme0"}, {"kind", "nvme"}, {"shard", "0"}}), 0.25);
  EXPECT_EQ(e.Value("kvtier_tier_lock_hold_seconds_total", {{"tier", "nvme0"}, {"kind", "nvme"}, {"shard", "1"}}), 0.5);
  EXPECT_EQ(e.Value("kvtier_tier_lock_acquisitions_total", {{"tier", "nvme0"}, {"kind", "nvme"}, {"shard", "1"}}), 5);
  EXPECT_EQ(e.Value("kvtier_tier_lock_acquisitions_total", {{"tier", "hbm"}, {"kind", "gpu_hbm"}, {"shard", "0"}}), 0);
  // Every op is exported from the start, so rate() over a first request works.
  EXPECT_EQ(e.Value("kvtier_requests_total", {{"op", "hello"}, {"result", "ok"}}), 0);
  EXPECT_EQ(e.Value("kvtier_requests_total", {{"op", "get"}, {"result", "ok"}}), 1);
  EXPECT_EQ(e.Value("kvtier_request_duration_seconds_bucket", {{"op", "get"}, {"le", "0.005"}}), 0);
  EXPECT_EQ(e.Value("kvtier_request_duration_seconds_bucket", {{"op", "get"}, {"le", "0.01"}}), 1);
  EXPECT_EQ(e.Value("kvtier_request_duration_seconds_bucket", {{"op", "get"}, {"le", "1e-05"}}), 0);
  EXPECT_EQ(e.Value("kvtier_request_duration_seconds_sum", {{"op", "get"}}), 0.01);
  EXPECT_EQ(e.Value("kvtier_request_payload_bytes_total", {{"op", "get"}}), 1 << 20);
  EXPECT_EQ(e.Value("kvtier_request_blocks_total", {{"op", "get"}}), 8);
  // The predictor's prior before any observation: Beta(1, 1).
  const Labels pair = {{"block_type", "system_prompt"}, {"transition", "agent_handoff"}};
  EXPECT_EQ(e.Value("kvtier_predictor_reuse_probability", pair), 0.5);
  EXPECT_EQ(e.Value("kvtier_predictor_reliability_predictions_total", {{"bin", "0.9-1.0"}}), 0);
}

TEST(MetricsRender, EscapesLabelValues) {
  StoreStats store;
  store.tiers.push_back({.name = "a\"b\\c\nd", .kind = TierKind::kCpuDram, .blocks = 7});
  const std::string text = RenderPrometheus(ServiceMetrics(), store, *NewPredictor());
  EXPECT_NE(text.find(R"(kvtier_tier_blocks{tier="a\"b\\c\nd",kind="cpu_dram"} 7)"), std::string::npos);
  const Parsed e = Check(text);
  for (const std::string& err : e.errors) ADD_FAILURE() << err;
  EXPECT_EQ(e.Value("kvtier_tier_blocks", {{"tier", "a\"b\\c\nd"}, {"kind", "cpu_dram"}}), 7);
}

TEST(MetricsRender, PredictorCalibration) {
  const std::shared_ptr<ReusePredictor> predictor = NewPredictor();
  predictor->RecordOutcome(BlockType::kToolContext, TransitionType::kToolSwitch, 0.8, true, 0);
  predictor->RecordOutcome(BlockType::kToolContext, TransitionType::kToolSwitch, 0.85, false, 1);
  const Parsed e = Check(RenderPrometheus(ServiceMetrics(), StoreStats(), *predictor));
  for (const std::string& err : e.errors) ADD_FAILURE() << err;
  const Labels pair = {{"block_type", "tool_context"}, {"transition", "tool_switch"}};
  EXPECT_EQ(e.Value("kvtier_predictor_reuse_alpha", pair), 2);
  EXPECT_EQ(e.Value("kvtier_predictor_reuse_beta", pair), 2);
  EXPECT_EQ(e.Value("kvtier_predictor_observations_total", pair), 2);
  EXPECT_EQ(e.Value("kvtier_predictor_predictions_total", pair), 2);
  const double brier = (0.2 * 0.2 + 0.85 * 0.85) / 2;
  EXPECT_NEAR(e.Value("kvtier_predictor_brier_score", pair), brier, 1e-12);
  EXPECT_NEAR(e.Value("kvtier_predictor_brier_score_overall"), brier, 1e-12);
  EXPECT_EQ(e.Value("kvtier_predictor_reliability_predictions_total", {{"bin", "0.8-0.9"}}), 2);
  EXPECT_NEAR(e.Value("kvtier_predictor_reliability_mean_predicted", {{"bin", "0.8-0.9"}}), 0.825, 1e-12);
  EXPECT_EQ(e.Value("kvtier_predictor_reliability_observed_frequency", {{"bin", "0.8-0.9"}}), 0.5);
  EXPECT_EQ(e.Value("kvtier_predictor_reliability_predictions_total", {{"bin", "0.0-0.1"}}), 0);
}

// The store's counters as a real TieredStore keeps them.
TEST(MetricsRender, StoreCountersFromATieredStore) {
  constexpr uint32_t kBlockBytes = 64 << 10;
  Result<std::unique_ptr<Tier>> dram = NewDramTier(
      {.name = "dram", .capacity_bytes = 4u << 20, .lock_memory = false, .huge_pages = false, .pin_for_gpu = false});
  ASSERT_TRUE(dram.ok()) << dram.status().ToString();
  std::vector<std::unique_ptr<Tier>> tiers;
  tiers.push_back(std::move(*dram));
  Result<std::unique_ptr<TieredStore>> opened = TieredStore::Open(std::move(tiers), {.synchronous_moves = true});
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  TieredStore& store = **opened;

  std::vector<BlockKey> keys;
  for (uint64_t i = 0; i < 6; ++i) keys.push_back({7, i + 1});
  const std::vector<std::byte> payload(kBlockBytes, std::byte{0x5a});
  std::vector<BlockPut> puts;
  for (std::size_t i = 0; i < 4; ++i) puts.push_back({.key = keys[i], .payload = payload, .tokens = 16});
  ASSERT_TRUE(store.Put(puts).ok());
  EXPECT_EQ(store.Lookup(keys).prefix_blocks, 4u);     // 4 hits, 2 misses
  EXPECT_EQ(store.Lookup({keys.data(), 2}).prefix_blocks, 2u);  // 2 hits
  std::vector<std::vector<std::byte>> buffers(keys.size(), std::vector<std::byte>(kBlockBytes));
  std::vector<std::span<std::byte>> outs(buffers.begin(), buffers.end());
  Result<std::size_t> read = store.Get(keys, outs);  // stops after 4: a get miss
  ASSERT_TRUE(read.ok()) << read.status().ToString();
  EXPECT_EQ(*read, 4u);

  const StoreStats stats = store.GetStats();
  const Parsed e = Check(RenderPrometheus(ServiceMetrics(), stats, store.predictor()));
  for (const std::string& err : e.errors) ADD_FAILURE() << err;
  const Labels tier = {{"tier", "dram"}, {"kind", "cpu_dram"}};
  EXPECT_EQ(e.Value("kvtier_puts_total"), 1);
  EXPECT_EQ(e.Value("kvtier_put_blocks_total"), 4);
  EXPECT_EQ(e.Value("kvtier_lookups_total"), 2);
  EXPECT_EQ(e.Value("kvtier_lookup_blocks_total", {{"result", "hit"}}), 6);
  EXPECT_EQ(e.Value("kvtier_lookup_blocks_total", {{"result", "miss"}}), 2);
  EXPECT_EQ(e.Value("kvtier_gets_total"), 1);
  EXPECT_EQ(e.Value("kvtier_get_blocks_total"), 4);
  EXPECT_EQ(e.Value("kvtier_get_misses_total"), 1);
  EXPECT_EQ(e.Value("kvtier_tier_blocks", tier), 4);
  EXPECT_EQ(e.Value("kvtier_tier_used_bytes", tier), 4.0 * kBlockBytes);
  EXPECT_EQ(e.Value("kvtier_tier_hits_total", tier), 4);
  EXPECT_EQ(e.Value("kvtier_tier_capacity_bytes", tier), static_cast<double>(stats.tiers[0].capacity_bytes));
  EXPECT_GE(stats.tiers[0].capacity_bytes, 4u << 20);
  EXPECT_EQ(e.Value("kvtier_index_blocks"), 4);
  EXPECT_EQ(e.Value("kvtier_pinned_blocks"), 0);
  EXPECT_EQ(e.Value("kvtier_mover_queue_depth"), 0);
  EXPECT_EQ(e.Value("kvtier_head_importance_assumed"), 0);
  EXPECT_EQ(e.Value("kvtier_prefetch_window_blocks"), stats.prefetch_window);
}

}  // namespace
}  // namespace kvtier::server
