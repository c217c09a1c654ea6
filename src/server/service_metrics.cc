#include "server/service_metrics.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <initializer_list>
#include <string_view>
#include <utility>

namespace kvtier::server {
namespace {

constexpr std::array<double, 19> kBounds = {10e-6, 25e-6, 50e-6, 100e-6, 250e-6, 500e-6, 1e-3, 2.5e-3, 5e-3, 10e-3,
                                            25e-3, 50e-3, 100e-3, 250e-3, 500e-3, 1,    2.5,    5,      10};

using Label = std::pair<std::string_view, std::string_view>;

// Prometheus float syntax: the shortest decimal that reads back as the same double.
std::string Number(double value) {
  if (std::isnan(value)) return "NaN";
  if (std::isinf(value)) return value > 0 ? "+Inf" : "-Inf";
  char buf[32];  // the longest shortest form of a double, "-2.2250738585072014e-308", is 24
  return std::string(buf, std::to_chars(buf, buf + sizeof buf, value).ptr);
}
// Integers are written whole: a counter past 2^53 would lose digits as a double.
std::string Number(uint64_t value) { return std::to_string(value); }
std::string Number(int64_t value) { return std::to_string(value); }

// `{name="value",...}`, values escaped as the format requires (backslash, quote, newline);
// empty for no labels.
std::string LabelSet(std::initializer_list<Label> labels) {
  if (labels.size() == 0) return {};
  std::string out = "{";
  for (const auto& [name, value] : labels) {
    if (out.size() > 1) out += ',';
    out.append(name).append("=\"");
    for (const char c : value) {
      if (c == '\\') {
        out += "\\\\";
      } else if (c == '"') {
        out += "\\\"";
      } else if (c == '\n') {
        out += "\\n";
      } else {
        out += c;
      }
    }
    out += '"';
  }
  out += '}';
  return out;
}

// Writes families one at a time: HELP and TYPE, then the family's samples. Names and help
// texts are this file's constants (no backslash or newline, which help would need escaped).
class Exposition {
 public:
  void Family(std::string_view name, std::string_view type, std::string_view help) {
    out_.append("# HELP ").append(name).append(" ").append(help).append("\n");
    out_.append("# TYPE ").append(name).append(" ").append(type).append("\n");
  }
  // `name` is the family's, plus _bucket/_sum/_count in a histogram.
  void Sample(std::string_view name, const std::string& labels, const std::string& value) {
    out_.append(name).append(labels).append(" ").append(value).append("\n");
  }
  // A family with one unlabelled sample.
  template <typename T>
  void Single(std::string_view name, std::string_view type, std::string_view help, T value) {
    Family(name, type, help);
    Sample(name, {}, Number(value));
  }
  std::string Take() { return std::move(out_); }

 private:
  std::string out_;
};

// The store's metadata lock: its exclusive hold time per operation is the part of the daemon's
// work that more cores cannot spread (docs/serve.md, "Scaling").
void RenderMetadataLock(const LockProfile& lock, Exposition& e) {
  e.Single("kvtier_metadata_lock_hold_seconds_total", "counter",
           "Time the store's metadata lock was held exclusively (serial work).", lock.exclusive_hold_seconds);
  e.Single("kvtier_metadata_lock_acquisitions_total", "counter", "Exclusive acquisitions of the store's metadata lock.",
           lock.exclusive_acquisitions);
  e.Family("kvtier_metadata_lock_waits_total", "counter",
           "Acquisitions of the store's metadata lock that found it taken, by mode.");
  e.Sample("kvtier_metadata_lock_waits_total", LabelSet({{"mode", "exclusive"}}), Number(lock.exclusive_waits));
  e.Sample("kvtier_metadata_lock_waits_total", LabelSet({{"mode", "shared"}}), Number(lock.shared_waits));
  e.Family("kvtier_metadata_lock_wait_seconds_total", "counter",
           "Time spent waiting for the store's metadata lock, by mode.");
  e.Sample("kvtier_metadata_lock_wait_seconds_total", LabelSet({{"mode", "exclusive"}}),
           Number(lock.exclusive_wait_seconds));
  e.Sample("kvtier_metadata_lock_wait_seconds_total", LabelSet({{"mode", "shared"}}), Number(lock.shared_wait_seconds));
}

void RenderStore(const StoreStats& s, Exposition& e) {
  struct TierFamily {
    std::string_view name, type, help;
    uint64_t StoreTierStats::*field;
  };
  static constexpr TierFamily kTierFamilies[] = {
      {"kvtier_tier_capacity_bytes", "gauge", "Bytes a tier may hold (0: unbounded).", &StoreTierStats::capacity_bytes},
      {"kvtier_tier_used_bytes", "gauge", "Payload bytes a tier holds.", &StoreTierStats::used_bytes},
      {"kvtier_tier_blocks", "gauge", "Blocks a tier holds.", &StoreTierStats::blocks},
      {"kvtier_tier_hits_total", "counter", "Blocks a Get read from this tier.", &StoreTierStats::hits},
      {"kvtier_tier_promotions_total", "counter", "Blocks copied into this tier from below.",
       &StoreTierStats::promotions},
      {"kvtier_tier_demotions_total", "counter", "Blocks moved from this tier to a lower one.",
       &StoreTierStats::demotions},
      {"kvtier_tier_drops_total", "counter", "Blocks dropped from the store while in this tier.",
       &StoreTierStats::drops},
      {"kvtier_tier_refused_total", "counter", "Admissions to this tier its policy refused.", &StoreTierStats::refused},
      {"kvtier_tier_evict_failures_total", "counter",
       "Evictions the tier failed to complete (e.g. an NVMe slot header not zeroed).", &StoreTierStats::evict_failures},
      {"kvtier_tier_promotions_declined_total", "counter",
       "Blocks read from this networked tier that its promotion gate left here.", &StoreTierStats::promotions_declined},
      {"kvtier_tier_promotions_used_total", "counter",
       "Blocks promoted from this networked tier that were read from above before they left.",
       &StoreTierStats::promotions_used},
      {"kvtier_tier_promotions_wasted_total", "counter",
       "Blocks promoted from this networked tier that left the tier above unread.", &StoreTierStats::promotions_wasted},
  };
  const auto tier_labels = [](const StoreTierStats& t) {
    return LabelSet({{"tier", t.name}, {"kind", TierKindName(t.kind)}});
  };
  for (const TierFamily& f : kTierFamilies) {
    e.Family(f.name, f.type, f.help);
    for (const StoreTierStats& t : s.tiers) e.Sample(f.name, tier_labels(t), Number(t.*f.field));
  }
  e.Family("kvtier_tier_promotion_rate", "gauge",
           "Share of the blocks read from this tier that are promoted now (1 without a promotion gate).");
  for (const StoreTierStats& t : s.tiers) e.Sample("kvtier_tier_promotion_rate", tier_labels(t), Number(t.promotion_rate));
  // Each tier's policy locks, one per shard, beside the metadata lock: a shard's hold time is
  // serial work (docs/serve.md, "Scaling"); the busiest shard's bounds the tier.
  const auto shard_labels = [](const StoreTierStats& t, std::size_t shard) {
    return LabelSet({{"tier", t.name}, {"kind", TierKindName(t.kind)}, {"shard", std::to_string(shard)}});
  };
  e.Family("kvtier_tier_lock_hold_seconds_total", "counter",
           "Time a shard of the tier's eviction policy was locked (serial work per shard).");
  for (const StoreTierStats& t : s.tiers) {
    for (std::size_t i = 0; i < t.shard_locks.size(); ++i) {
      e.Sample("kvtier_tier_lock_hold_seconds_total", shard_labels(t, i), Number(t.shard_locks[i].exclusive_hold_seconds));
    }
  }
  e.Family("kvtier_tier_lock_acquisitions_total", "counter", "Acquisitions of a shard of the tier's eviction policy.");
  for (const StoreTierStats& t : s.tiers) {
    for (std::size_t i = 0; i < t.shard_locks.size(); ++i) {
      e.Sample("kvtier_tier_lock_acquisitions_total", shard_labels(t, i), Number(t.shard_locks[i].exclusive_acquisitions));
    }
  }

  e.Single("kvtier_lookups_total", "counter", "Lookup calls.", s.lookups);
  e.Family("kvtier_lookup_blocks_total", "counter", "Keys looked up: hit when in the stored prefix, miss otherwise.");
  e.Sample("kvtier_lookup_blocks_total", LabelSet({{"result", "hit"}}), Number(s.lookup_hit_blocks));
  // GetStats reads both under one lock, so hits never exceed keys; StoreStats is a plain value
  // though, and a counter must not wrap to 2^64 if one ever did.
  const uint64_t misses = s.lookup_blocks - std::min(s.lookup_hit_blocks, s.lookup_blocks);
  e.Sample("kvtier_lookup_blocks_total", LabelSet({{"result", "miss"}}), Number(misses));
  e.Single("kvtier_gets_total", "counter", "Get calls.", s.gets);
  e.Single("kvtier_get_blocks_total", "counter", "Blocks Get read.", s.get_blocks);
  e.Single("kvtier_get_misses_total", "counter", "Get calls that stopped before their last key (not stored).",
           s.get_misses);
  e.Single("kvtier_puts_total", "counter", "Put calls.", s.puts);
  e.Single("kvtier_put_blocks_total", "counter", "Blocks Put stored.", s.put_blocks);
  e.Single("kvtier_corrupt_blocks_total", "counter", "Block reads a tier refused for a failed checksum.",
           s.corrupt_blocks);
  e.Single("kvtier_vanished_copies_total", "counter",
           "Block copies a tier no longer held when read (a TTL, a restart, another process); forgotten.",
           s.vanished_copies);
  e.Single("kvtier_eviction_failures_total", "counter", "Evictions a tier refused (each is retried).",
           s.eviction_failures);
  e.Single("kvtier_pending_evictions", "gauge", "Evictions waiting for their tier to come back.",
           s.pending_evictions);
  e.Single("kvtier_shared_found_blocks_total", "counter",
           "Blocks found in the shared tier by their cards (put by other nodes) and indexed.", s.shared_found_blocks);
  e.Single("kvtier_shared_publish_failures_total", "counter",
           "Writes of a block or its card to the shared tier that failed (the block stayed local).",
           s.shared_publish_failures);
  e.Single("kvtier_prefetch_issued_blocks_total", "counter", "Blocks prefetched into the fastest tier.",
           s.prefetch_issued);
  e.Single("kvtier_prefetch_used_blocks_total", "counter", "Prefetched blocks a Get then read.", s.prefetch_used);
  e.Single("kvtier_prefetch_wasted_blocks_total", "counter", "Prefetched blocks that left the tier unread.",
           s.prefetch_wasted);
  e.Single("kvtier_prefetch_wasted_bytes_total", "counter", "Bytes of the prefetched blocks that left unread.",
           s.prefetch_wasted_bytes);
  e.Single("kvtier_prefetch_window_blocks", "gauge", "Blocks after a promoted one that a Get prefetches now.",
           static_cast<int64_t>(s.prefetch_window));
  e.Single("kvtier_recompute_preferred_total", "counter",
           "Lookups whose loadable prefix the cost model cut short (recomputing was faster).", s.recompute_preferred);
  e.Single("kvtier_head_splits_total", "counter", "Blocks whose least important heads were demoted alone.",
           s.head_splits);
  e.Single("kvtier_head_split_reads_total", "counter", "Reads that gathered a block from two tiers.",
           s.head_split_reads);
  e.Single("kvtier_head_importance_assumed", "gauge",
           "1 when the head importance behind the splits is a prior, not engine reports.",
           uint64_t{s.head_importance_assumed ? 1u : 0u});
  e.Single("kvtier_mover_queue_depth", "gauge", "Block moves queued for the mover threads.", s.queued_moves);
  e.Single("kvtier_pinned_blocks", "gauge", "Blocks pinned now.", s.pinned_blocks);
  e.Single("kvtier_index_blocks", "gauge", "Blocks in the prefix index.", s.index_blocks);
  e.Single("kvtier_recovered_blocks", "gauge", "Blocks recovered from the persist tier when the store opened.",
           s.recovered_blocks);
  e.Single("kvtier_recovery_dropped_blocks", "gauge",
           "Journaled blocks dropped when the store opened (missing, corrupt, or under a dropped parent).",
           s.recovery_dropped_blocks);
  e.Single("kvtier_journal_records", "gauge", "Records in the block journal now.", s.journal_records);
  e.Single("kvtier_journal_compactions_total", "counter", "Journal compactions while the store ran.",
           s.journal_compactions);
  e.Single("kvtier_journal_compaction_failures_total", "counter",
           "Journal compactions that failed (e.g. a full disk); the journal went on as it was.",
           s.journal_compaction_failures);
  RenderMetadataLock(s.metadata_lock, e);
  // The prefix index's locks, one per shard: the busiest shard's hold bounds inserts.
  const auto index_shard = [](std::size_t shard) { return LabelSet({{"shard", std::to_string(shard)}}); };
  e.Family("kvtier_index_lock_hold_seconds_total", "counter",
           "Time a shard of the prefix index was held exclusively (inserts and evictions: serial work per shard).");
  for (std::size_t i = 0; i < s.index_shard_locks.size(); ++i) {
    e.Sample("kvtier_index_lock_hold_seconds_total", index_shard(i), Number(s.index_shard_locks[i].exclusive_hold_seconds));
  }
  e.Family("kvtier_index_lock_acquisitions_total", "counter", "Exclusive acquisitions of a shard of the prefix index.");
  for (std::size_t i = 0; i < s.index_shard_locks.size(); ++i) {
    e.Sample("kvtier_index_lock_acquisitions_total", index_shard(i), Number(s.index_shard_locks[i].exclusive_acquisitions));
  }
}

// "0.3-0.4": bin i of CalibrationReport's ten.
std::string BinLabel(int i) {
  const auto tenth = [](int v) { return std::to_string(v / 10) + "." + std::to_string(v % 10); };
  return tenth(i) + "-" + tenth(i + 1);
}

void RenderPredictor(const ReusePredictor& predictor, Exposition& e) {
  const std::array<ReusePosterior, kReusePairCount> posteriors = predictor.Snapshot();
  const CalibrationReport calibration = predictor.Calibration();
  // Snapshot()'s rows are in ReusePairIndex order, as are the calibration arrays.
  const auto pair_labels = [&](std::size_t i) {
    return LabelSet({{"block_type", BlockTypeName(posteriors[i].type)},
                     {"transition", TransitionTypeName(posteriors[i].transition)}});
  };
  const auto per_pair = [&](std::string_view name, std::string_view type, std::string_view help, auto value) {
    e.Family(name, type, help);
    for (std::size_t i = 0; i < posteriors.size(); ++i) e.Sample(name, pair_labels(i), Number(value(i)));
  };
  per_pair("kvtier_predictor_reuse_alpha", "gauge", "Alpha of the pair's Beta posterior over reuse within the horizon.",
           [&](std::size_t i) { return posteriors[i].alpha; });
  per_pair("kvtier_predictor_reuse_beta", "gauge", "Beta of the pair's Beta posterior over reuse within the horizon.",
           [&](std::size_t i) { return posteriors[i].beta; });
  per_pair("kvtier_predictor_reuse_probability", "gauge", "P_reuse of the pair: its posterior mean.",
           [&](std::size_t i) { return posteriors[i].mean; });
  per_pair("kvtier_predictor_observations_total", "counter", "Reuse outcomes the pair has seen (before forgetting).",
           [&](std::size_t i) { return posteriors[i].observations; });
  per_pair("kvtier_predictor_predictions_total", "counter", "Predictions of the pair paired with their outcome.",
           [&](std::size_t i) { return calibration.count[i]; });
  per_pair("kvtier_predictor_brier_score", "gauge", "Mean squared error of the pair's predictions (0 before any).",
           [&](std::size_t i) { return calibration.brier[i]; });
  e.Single("kvtier_predictor_brier_score_overall", "gauge", "Mean squared error of all predictions (0 before any).",
           calibration.brier_overall);

  const auto per_bin = [&](std::string_view name, std::string_view type, std::string_view help, auto value) {
    e.Family(name, type, help);
    for (int i = 0; i < CalibrationReport::kBins; ++i) {
      const std::string bin = BinLabel(i);
      e.Sample(name, LabelSet({{"bin", bin}}), Number(value(calibration.bins[static_cast<std::size_t>(i)])));
    }
  };
  per_bin("kvtier_predictor_reliability_predictions_total", "counter",
          "Predictions whose probability fell in the bin (reliability diagram).",
          [](const ReliabilityBin& b) { return b.count; });
  per_bin("kvtier_predictor_reliability_mean_predicted", "gauge", "Average predicted probability in the bin.",
          [](const ReliabilityBin& b) { return b.mean_predicted; });
  per_bin("kvtier_predictor_reliability_observed_frequency", "gauge",
          "Share of the bin's predictions that were reused (ideally near its mean prediction).",
          [](const ReliabilityBin& b) { return b.observed_frequency; });
}

void RenderService(const ServiceMetrics::Snapshot& s, Exposition& e) {
  const auto op_labels = [](const ServiceMetrics::OpSnapshot& op) {
    return LabelSet({{"op", protocol::MessageTypeName(op.op)}});
  };
  constexpr std::string_view kDuration = "kvtier_request_duration_seconds";
  e.Family(kDuration, "histogram", "Time to serve a request, from its frame read to its reply written.");
  const std::vector<double>& bounds = LatencyHistogram::BucketBounds();
  for (const ServiceMetrics::OpSnapshot& op : s.ops) {
    const std::string_view name = protocol::MessageTypeName(op.op);
    for (std::size_t i = 0; i < op.latency.cumulative.size(); ++i) {
      const std::string le = i < bounds.size() ? Number(bounds[i]) : "+Inf";
      e.Sample("kvtier_request_duration_seconds_bucket", LabelSet({{"op", name}, {"le", le}}),
               Number(op.latency.cumulative[i]));
    }
    e.Sample("kvtier_request_duration_seconds_sum", op_labels(op), Number(op.latency.sum_seconds));
    e.Sample("kvtier_request_duration_seconds_count", op_labels(op), Number(op.latency.count));
  }

  e.Family("kvtier_requests_total", "counter", "Requests served: ok, or error when the reply was an Error.");
  for (const ServiceMetrics::OpSnapshot& op : s.ops) {
    const std::string_view name = protocol::MessageTypeName(op.op);
    e.Sample("kvtier_requests_total", LabelSet({{"op", name}, {"result", "ok"}}), Number(op.ok));
    e.Sample("kvtier_requests_total", LabelSet({{"op", name}, {"result", "error"}}), Number(op.errors));
  }
  e.Family("kvtier_request_blocks_total", "counter", "Blocks the requests carried or returned.");
  for (const ServiceMetrics::OpSnapshot& op : s.ops) {
    e.Sample("kvtier_request_blocks_total", op_labels(op), Number(op.blocks));
  }
  e.Family("kvtier_request_payload_bytes_total", "counter", "Block payload bytes the requests carried or returned.");
  for (const ServiceMetrics::OpSnapshot& op : s.ops) {
    e.Sample("kvtier_request_payload_bytes_total", op_labels(op), Number(op.payload_bytes));
  }

  e.Single("kvtier_connections_open", "gauge", "Client connections open now.", s.connections_open);
  e.Single("kvtier_connections_total", "counter", "Client connections accepted.", s.connections_total);
  e.Single("kvtier_connections_rejected_total", "counter",
           "Client connections refused: over the connection limit or failed authentication.", s.connections_rejected);
  e.Single("kvtier_frames_rejected_total", "counter", "Malformed frames (each closed its connection).",
           s.frames_rejected);
  e.Single("kvtier_tls_handshakes_failed_total", "counter",
           "TCP connections closed before their TLS handshake finished (plain-text clients, untrusted or silent peers).",
           s.tls_handshakes_failed);
  // Labelled by direction so that a reading side can join the family; the daemon sees only
  // puts (a Get's checksum is checked by the client, which counts its own mismatches).
  e.Family("kvtier_checksum_mismatches_total", "counter",
           "Blocks whose bytes did not match their end-to-end checksum (put: refused, nothing stored).");
  e.Sample("kvtier_checksum_mismatches_total", LabelSet({{"direction", "put"}}), Number(s.put_checksum_mismatches));
  e.Single("kvtier_requests_in_flight", "gauge", "Requests being served now.", s.in_flight);
  e.Single("kvtier_event_loops", "gauge", "Event loop threads running now.", s.event_loops);
  e.Single("kvtier_event_loop_cpu_seconds_total", "counter",
           "CPU time the event loop threads used, all loops together (updated every 25 ms tick).",
           static_cast<double>(s.event_loop_cpu_ns) * 1e-9);
  e.Single("kvtier_workers", "gauge", "Worker threads alive now, the spares included (limits.workers, max_workers).",
           s.workers);
  e.Single("kvtier_workers_blocked", "gauge", "Worker threads waiting on tier I/O now (a disk, a remote pool, an fsync).",
           s.workers_blocked);
  e.Single("kvtier_worker_spares_started_total", "counter",
           "Spare worker threads started because the workers were waiting on I/O while requests queued.",
           s.worker_spares_started);
  e.Single("kvtier_request_bytes_held", "gauge",
           "Bytes of request frames the event loops hold: being received, queued or being served (limits.max_request_memory).",
           s.request_bytes_held);
  e.Single("kvtier_reads_paused_total", "counter",
           "Times a connection stopped reading because its event loop held limits.max_request_memory of requests.",
           s.reads_paused);
}

}  // namespace

const std::vector<double>& LatencyHistogram::BucketBounds() {
  static const std::vector<double> bounds(kBounds.begin(), kBounds.end());
  return bounds;
}

void LatencyHistogram::Observe(double seconds) {
  static_assert(kBounds.size() + 1 == kBuckets);
  if (!(seconds > 0)) seconds = 0;  // also NaN
  const auto bucket =
      static_cast<std::size_t>(std::lower_bound(kBounds.begin(), kBounds.end(), seconds) - kBounds.begin());
  buckets_[bucket].fetch_add(1, std::memory_order_relaxed);
  sum_seconds_.fetch_add(seconds, std::memory_order_relaxed);
}

LatencyHistogram::Snapshot LatencyHistogram::Read() const {
  Snapshot s;
  s.cumulative.reserve(kBuckets);
  for (const std::atomic<uint64_t>& b : buckets_) {
    s.count += b.load(std::memory_order_relaxed);
    s.cumulative.push_back(s.count);
  }
  s.sum_seconds = sum_seconds_.load(std::memory_order_relaxed);
  return s;
}

std::array<protocol::MessageType, ServiceMetrics::kOps> ServiceMetrics::RequestTypes() {
  std::array<protocol::MessageType, kOps> types{};
  for (std::size_t i = 0; i < kOps; ++i) {
    types[i] = static_cast<protocol::MessageType>(static_cast<uint16_t>(protocol::MessageType::kHello) + i);
  }
  return types;
}

void ServiceMetrics::RecordRequest(protocol::MessageType op, double seconds, bool ok, uint64_t blocks,
                                   uint64_t payload_bytes) {
  // kError wraps around to a huge index: it is no request either.
  const std::size_t index = static_cast<std::size_t>(op) - static_cast<std::size_t>(protocol::MessageType::kHello);
  if (index >= kOps) return;
  Op& o = ops_[index];
  o.latency.Observe(seconds);
  (ok ? o.ok : o.errors).fetch_add(1, std::memory_order_relaxed);
  o.blocks.fetch_add(blocks, std::memory_order_relaxed);
  o.payload_bytes.fetch_add(payload_bytes, std::memory_order_relaxed);
}

void ServiceMetrics::ConnectionOpened() {
  connections_open_.fetch_add(1, std::memory_order_relaxed);
  connections_total_.fetch_add(1, std::memory_order_relaxed);
}
void ServiceMetrics::ConnectionClosed() { connections_open_.fetch_sub(1, std::memory_order_relaxed); }
void ServiceMetrics::ConnectionRejected() { connections_rejected_.fetch_add(1, std::memory_order_relaxed); }
void ServiceMetrics::FrameRejected() { frames_rejected_.fetch_add(1, std::memory_order_relaxed); }
void ServiceMetrics::TlsHandshakeFailed() { tls_handshakes_failed_.fetch_add(1, std::memory_order_relaxed); }
void ServiceMetrics::PutChecksumMismatches(uint64_t blocks) {
  put_checksum_mismatches_.fetch_add(blocks, std::memory_order_relaxed);
}
void ServiceMetrics::InFlightAdd(int64_t delta) { in_flight_.fetch_add(delta, std::memory_order_relaxed); }
void ServiceMetrics::EventLoopsRunning(int64_t delta) { event_loops_.fetch_add(delta, std::memory_order_relaxed); }
void ServiceMetrics::EventLoopCpu(uint64_t nanoseconds) {
  event_loop_cpu_ns_.fetch_add(nanoseconds, std::memory_order_relaxed);
}
void ServiceMetrics::WorkerPool(int64_t threads, int64_t blocked, uint64_t spares_started) {
  workers_.store(threads, std::memory_order_relaxed);
  workers_blocked_.store(blocked, std::memory_order_relaxed);
  worker_spares_started_.store(spares_started, std::memory_order_relaxed);
}

void ServiceMetrics::RequestBytesHeld(int64_t delta) { request_bytes_held_.fetch_add(delta, std::memory_order_relaxed); }
void ServiceMetrics::ReadPausedForBudget() { reads_paused_.fetch_add(1, std::memory_order_relaxed); }

ServiceMetrics::Snapshot ServiceMetrics::Read() const {
  Snapshot s;
  const std::array<protocol::MessageType, kOps> types = RequestTypes();
  for (std::size_t i = 0; i < kOps; ++i) {
    const Op& o = ops_[i];
    s.ops[i] = {.op = types[i],
                .latency = o.latency.Read(),
                .ok = o.ok.load(std::memory_order_relaxed),
                .errors = o.errors.load(std::memory_order_relaxed),
                .blocks = o.blocks.load(std::memory_order_relaxed),
                .payload_bytes = o.payload_bytes.load(std::memory_order_relaxed)};
  }
  s.connections_open = connections_open_.load(std::memory_order_relaxed);
  s.connections_total = connections_total_.load(std::memory_order_relaxed);
  s.connections_rejected = connections_rejected_.load(std::memory_order_relaxed);
  s.frames_rejected = frames_rejected_.load(std::memory_order_relaxed);
  s.tls_handshakes_failed = tls_handshakes_failed_.load(std::memory_order_relaxed);
  s.put_checksum_mismatches = put_checksum_mismatches_.load(std::memory_order_relaxed);
  s.in_flight = in_flight_.load(std::memory_order_relaxed);
  s.event_loops = event_loops_.load(std::memory_order_relaxed);
  s.event_loop_cpu_ns = event_loop_cpu_ns_.load(std::memory_order_relaxed);
  s.workers = workers_.load(std::memory_order_relaxed);
  s.workers_blocked = workers_blocked_.load(std::memory_order_relaxed);
  s.worker_spares_started = worker_spares_started_.load(std::memory_order_relaxed);
  s.request_bytes_held = request_bytes_held_.load(std::memory_order_relaxed);
  s.reads_paused = reads_paused_.load(std::memory_order_relaxed);
  return s;
}

std::string RenderPrometheus(const ServiceMetrics& service, const StoreStats& store, const ReusePredictor& predictor) {
  Exposition e;
  RenderService(service.Read(), e);
  RenderStore(store, e);
  RenderPredictor(predictor, e);
  return e.Take();
}

}  // namespace kvtier::server
