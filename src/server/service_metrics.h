// The service's own metrics (requests, latency, connections) and the Prometheus rendering of
// everything `kvtier serve` exports: these, the store's StoreStats and the reuse predictor's
// posteriors and calibration. docs/metrics.md lists the families.
//
// The daemon records into a ServiceMetrics from its connection threads; the metrics endpoint
// (metrics_http.h) renders a snapshot per scrape. Counters only grow; a scrape reads each
// atomic once, so values taken together may be a few requests apart, never torn.
//
// Thread-safety: LatencyHistogram and ServiceMetrics may be used from any number of threads;
// recording is lock-free (relaxed atomics: the values are statistics and order nothing).
// RenderPrometheus is a pure function of its arguments' snapshots.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "kvtier/protocol.h"
#include "kvtier/reuse_predictor.h"
#include "kvtier/store.h"

namespace kvtier::server {

// Prometheus-style latency buckets in seconds (`le` semantics: an observation falls in the
// first bucket whose bound is >= it; above the last bound only +Inf counts it).
class LatencyHistogram {
 public:
  // 10 us to 10 s in 1-2.5-5 steps (19 bounds): a DRAM lookup and a remote-pool get alike.
  static const std::vector<double>& BucketBounds();

  // Negative and NaN durations (a clock stepping back) count as 0.
  void Observe(double seconds);

  struct Snapshot {
    // Observations <= BucketBounds()[i]; one more entry at the end for +Inf, equal to count.
    std::vector<uint64_t> cumulative;
    uint64_t count = 0;
    double sum_seconds = 0;
  };
  // count is the sum of the buckets read, so it always equals the +Inf bucket even while
  // other threads observe.
  Snapshot Read() const;

 private:
  static constexpr std::size_t kBuckets = 20;  // BucketBounds().size() + the +Inf bucket
  std::array<std::atomic<uint64_t>, kBuckets> buckets_{};  // per bucket, not cumulative
  std::atomic<double> sum_seconds_{0};
};

class ServiceMetrics {
 public:
  // The request types, Hello..Stats, in wire order: the values of the op label.
  static constexpr std::size_t kOps = 10;
  static std::array<protocol::MessageType, kOps> RequestTypes();

  // One served request: op is its type (a request MessageType of protocol.h, Hello..Stats;
  // any other value is not a request and is not counted), ok=false when it got an Error
  // reply; blocks and payload_bytes are what it carried or returned.
  void RecordRequest(protocol::MessageType op, double seconds, bool ok, uint64_t blocks, uint64_t payload_bytes);
  void ConnectionOpened();
  void ConnectionClosed();    // of an opened connection
  void ConnectionRejected();  // refused before it was opened: over the connection limit or failed auth
  void FrameRejected();       // a malformed frame that closed its connection
  void TlsHandshakeFailed();  // a TCP connection closed before its TLS handshake finished
  // Put blocks refused because their bytes did not match the client's end-to-end checksum.
  void PutChecksumMismatches(uint64_t blocks);
  void InFlightAdd(int64_t delta);  // requests being served now: +1 when one starts, -1 when it ends
  void EventLoopsRunning(int64_t delta);  // +1 when a loop thread starts, -1 when it ends
  // CPU time an event loop thread used (its own thread clock): a loop is a serial section,
  // since lookups are answered on it, so its busy time bounds how far one loop goes.
  void EventLoopCpu(uint64_t nanoseconds);
  // The worker pool now (task_pool.h): its threads, those waiting on tier I/O, and the spare
  // threads it started so far. Set by the server every event-loop tick.
  void WorkerPool(int64_t threads, int64_t blocked, uint64_t spares_started);
  // Request bytes the event loops hold (request_budget.h): + when a frame's buffer is
  // allocated, - when its request has been served.
  void RequestBytesHeld(int64_t delta);
  // A connection stopped reading because its loop's request budget was spent.
  void ReadPausedForBudget();

  struct OpSnapshot {
    protocol::MessageType op = protocol::MessageType::kHello;
    LatencyHistogram::Snapshot latency;
    uint64_t ok = 0, errors = 0;
    uint64_t blocks = 0, payload_bytes = 0;
  };
  struct Snapshot {
    std::array<OpSnapshot, kOps> ops;  // in RequestTypes() order
    int64_t connections_open = 0;
    uint64_t connections_total = 0, connections_rejected = 0, frames_rejected = 0, tls_handshakes_failed = 0;
    uint64_t put_checksum_mismatches = 0;
    int64_t in_flight = 0;
    int64_t event_loops = 0;
    uint64_t event_loop_cpu_ns = 0;
    int64_t workers = 0, workers_blocked = 0;
    uint64_t worker_spares_started = 0;
    int64_t request_bytes_held = 0;
    uint64_t reads_paused = 0;
  };
  Snapshot Read() const;

 private:
  struct Op {
    LatencyHistogram latency;
    std::atomic<uint64_t> ok{0}, errors{0}, blocks{0}, payload_bytes{0};
  };

  std::array<Op, kOps> ops_;
  std::atomic<int64_t> connections_open_{0};
  std::atomic<uint64_t> connections_total_{0}, connections_rejected_{0}, frames_rejected_{0}, tls_handshakes_failed_{0};
  std::atomic<uint64_t> put_checksum_mismatches_{0};
  std::atomic<int64_t> in_flight_{0};
  std::atomic<int64_t> event_loops_{0};
  std::atomic<uint64_t> event_loop_cpu_ns_{0};
  std::atomic<int64_t> workers_{0}, workers_blocked_{0};
  std::atomic<uint64_t> worker_spares_started_{0};
  std::atomic<int64_t> request_bytes_held_{0};
  std::atomic<uint64_t> reads_paused_{0};
};

// The Prometheus text exposition format 0.0.4 of the service metrics, the store's stats and
// the predictor (its Snapshot() and Calibration()): HELP and TYPE for every family, each
// family's samples together, label values escaped.
std::string RenderPrometheus(const ServiceMetrics& service, const StoreStats& store, const ReusePredictor& predictor);

}  // namespace kvtier::server
