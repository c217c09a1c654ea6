// An inference engine in the replay: requests queue for prefill, are prefilled in chunks
// under a per-step token budget, then decode their output one token per step, on a number of
// engines (data-parallel replicas) that share one waiting queue. A cache hit shortens the
// prefill, so a better cache shortens the queue: the time to first token (TTFT) is the wait in
// the queue, the load of the hit blocks from their tiers, and the prefill of the rest.
//
// Each engine runs steps back to back while it has work, as vLLM's scheduler does:
//   1. every decoding request gets one token;
//   2. prefills in progress continue, oldest first, then waiting requests start (first come,
//      first served), each taking as many of the step's remaining tokens as it needs, while
//      fewer than max_running requests run;
//   3. the step lasts the prefill of its chunks (PrefillCostModel::RecomputeSeconds of each
//      chunk after the context before it), plus the loads of the requests it started, plus,
//      when it decodes, one read of the weights and of the decoding requests' KV from HBM.
// A request's first token comes at the end of the step that finishes its prefill. A full hit
// still prefills its last token (the engine needs that token's logits).
//
// The cache is a callback (EngineCache): asked for a request's hit when its prefill starts,
// told when its prompt's KV exists (stored) and when it finishes (its output KV stored). The
// calls come in time order across engines, so a store behind them sees a clock that never
// goes back. The requests waiting at a call are the engine's known future (Waiting()).
//
// Thread-safety: SimulateEngine is a pure function of its inputs and its callback's answers.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "kvtier/cost_model.h"
#include "kvtier/status.h"

namespace kvtier {

struct EngineOptions {
  uint32_t engines = 1;                 // Default: 1 (replicas sharing one waiting queue)
  uint32_t max_batched_tokens = 8192;   // Default: 8192 tokens per step (decode + prefill)
  uint32_t max_running = 256;           // Default: 256 requests in prefill or decode per engine
  double weight_bytes_per_param = 2.0;  // Default: 2 (bf16); read once per decoding step
  Status Validate() const;
};

struct EngineRequest {
  double arrival_s = 0;  // non-decreasing over the requests
  uint64_t prompt_tokens = 0;
  uint64_t output_tokens = 0;  // tokens generated; the first comes with the prefill
  // A request that must finish first: the turn whose answer this prompt holds. The request
  // then arrives at the later of arrival_s and that one's last token (a user reads an answer
  // before replying), and its wait and TTFT count from there. Default: none.
  std::optional<std::size_t> after;
};

class EngineCache {
 public:
  struct Hit {
    uint64_t tokens = 0;      // the cached prefix, in tokens
    double load_seconds = 0;  // to bring it to the GPU
  };
  virtual ~EngineCache() = default;
  // Request `request` starts its prefill at `now`. The requests in `waiting` have arrived and
  // wait behind it, first come first.
  virtual Hit StartPrefill(std::size_t request, double now, std::span<const std::size_t> waiting) = 0;
  virtual void PrefillDone(std::size_t request, double now) = 0;
  virtual void Finished(std::size_t request, double now) = 0;
};

struct EngineReport {
  std::vector<double> ttft_s;        // per request
  std::vector<double> queue_wait_s;  // per request: arrival to the start of its prefill
  std::vector<double> arrival_s;     // per request: when it arrived (later than the trace's after `after`)
  double ttft_mean_s = 0, ttft_p50_s = 0, ttft_p99_s = 0;
  double queue_wait_mean_s = 0, queue_wait_p99_s = 0;
  double makespan_s = 0;              // first arrival to the last request's last token
  double prompt_tokens_per_s = 0;     // prompt tokens over the makespan
  double waiting_mean = 0;            // requests waiting when a prefill starts (the known future)
  uint64_t waiting_p99 = 0;
  uint64_t steps = 0;
};

// InvalidArgument for bad options, arrivals that go back in time, a request without prompt or
// one `after` itself or a later request.
Result<EngineReport> SimulateEngine(std::span<const EngineRequest> requests, const PrefillCostModel& cost,
                                    uint64_t kv_bytes_per_token, const EngineOptions& options, EngineCache& cache);

}  // namespace kvtier
