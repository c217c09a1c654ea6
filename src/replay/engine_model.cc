#include "kvtier/engine_model.h"

#include <algorithm>
#include <limits>
#include <queue>
#include <string>

#include "util/quantile.h"

namespace kvtier {
namespace {

constexpr double kNever = std::numeric_limits<double>::infinity();

struct Running {
  std::size_t request = 0;
  uint64_t context = 0;       // tokens whose KV exists
  uint64_t prefill_left = 0;  // prompt tokens still to prefill
  uint64_t decode_left = 0;   // output tokens still to generate after the first
  bool decoding = false;      // decoded in the current step
  bool done = false;
};

struct Engine {
  double free_at = 0;
  std::vector<Running> running;  // in start order
};

// A cache callback due at a time: the calls of all engines are delivered in time order.
struct Completion {
  double at = 0;
  uint64_t sequence = 0;  // ties in the order they were made
  bool finished = false;  // else: prefill done
  std::size_t request = 0;
  bool operator>(const Completion& o) const { return at != o.at ? at > o.at : sequence > o.sequence; }
};

class Simulation {
 public:
  Simulation(std::span<const EngineRequest> requests, const PrefillCostModel& cost, uint64_t kv_bytes_per_token,
             const EngineOptions& options, EngineCache& cache)
      : requests_(requests), cost_(cost), options_(options), cache_(cache), engines_(options.engines) {
    const double hbm = cost.gpu().hbm_bytes_per_s * static_cast<double>(cost.tensor_parallel());
    weights_seconds_ = cost.matmul_params() * options.weight_bytes_per_param / hbm;
    kv_seconds_per_token_ = static_cast<double>(kv_bytes_per_token) / hbm;
    report_.ttft_s.assign(requests.size(), 0);
    report_.queue_wait_s.assign(requests.size(), 0);
    report_.arrival_s.assign(requests.size(), 0);
    dependents_.resize(requests.size());
    for (std::size_t i = 0; i < requests.size(); ++i) {
      if (requests[i].after) {
        dependents_[*requests[i].after].push_back(i);
      } else {
        Arrive(i, requests[i].arrival_s);
      }
    }
  }

  EngineReport Run() {
    while (finished_ < requests_.size()) {
      Engine& engine = *std::min_element(engines_.begin(), engines_.end(),
                                         [](const Engine& a, const Engine& b) { return a.free_at < b.free_at; });
      const double now = engine.free_at;
      while (!arrivals_.empty() && arrivals_.top().first <= now) {
        waiting_.push_back(arrivals_.top().second);
        arrivals_.pop();
      }
      if (engine.running.empty() && head_ == waiting_.size()) {
        engine.free_at = arrivals_.empty() ? kNever : std::max(now, arrivals_.top().first);
        continue;
      }
      Deliver(now);
      Step(engine, now);
    }
    Deliver(kNever);
    return Finish();
  }

 private:
  void Deliver(double upto) {
    while (!completions_.empty() && completions_.top().at <= upto) {
      const Completion c = completions_.top();
      completions_.pop();
      if (c.finished) {
        cache_.Finished(c.request, c.at);
      } else {
        cache_.PrefillDone(c.request, c.at);
      }
    }
  }

  // The request arrives at `at`; an engine idle for want of work wakes for it.
  void Arrive(std::size_t request, double at) {
    report_.arrival_s[request] = at;
    arrivals_.push({at, request});
    for (Engine& e : engines_) {
      if (e.running.empty()) e.free_at = std::min(e.free_at, at);
    }
  }

  void Due(double at, bool finished, std::size_t request) {
    completions_.push({.at = at, .sequence = sequence_++, .finished = finished, .request = request});
  }

  void Step(Engine& engine, double now) {
    uint64_t budget = options_.max_batched_tokens;
    uint64_t decoding = 0, decode_context = 0;
    for (Running& r : engine.running) {
      r.decoding = r.prefill_left == 0;
      if (r.decoding) {
        ++decoding;
        decode_context += r.context;
      }
    }
    budget -= std::min<uint64_t>(budget, decoding);
    double seconds = decoding > 0 ? weights_seconds_ + static_cast<double>(decode_context) * kv_seconds_per_token_ : 0;
    std::vector<std::pair<std::size_t, uint64_t>> chunks;  // (index in running, tokens)
    auto chunk = [&](std::size_t index) {
      Running& r = engine.running[index];
      const uint64_t tokens = std::min(r.prefill_left, budget);
      if (tokens == 0) return;
      seconds += cost_.RecomputeSeconds(tokens, r.context);
      budget -= tokens;
      chunks.push_back({index, tokens});
    };
    for (std::size_t i = 0; i < engine.running.size() && budget > 0; ++i) {
      if (!engine.running[i].decoding) chunk(i);
    }
    while (budget > 0 && head_ < waiting_.size() && engine.running.size() < options_.max_running) {
      const std::size_t q = waiting_[head_++];
      const std::span<const std::size_t> behind(waiting_.data() + head_, waiting_.size() - head_);
      waiting_seen_.push_back(behind.size());
      report_.queue_wait_s[q] = now - report_.arrival_s[q];
      const EngineCache::Hit hit = cache_.StartPrefill(q, now, behind);
      const uint64_t prompt = requests_[q].prompt_tokens;
      const uint64_t cached = std::min(hit.tokens, prompt - 1);  // the last token is always computed
      seconds += hit.load_seconds;
      const uint64_t output = requests_[q].output_tokens;
      engine.running.push_back({.request = q, .context = cached, .prefill_left = prompt - cached,
                                .decode_left = output > 0 ? output - 1 : 0});
      chunk(engine.running.size() - 1);
    }
    const double end = now + seconds;
    ++report_.steps;
    for (Running& r : engine.running) {
      if (!r.decoding) continue;
      ++r.context;
      if (--r.decode_left == 0) Done(r, end);
    }
    for (const auto& [index, tokens] : chunks) {
      Running& r = engine.running[index];
      r.context += tokens;
      r.prefill_left -= tokens;
      if (r.prefill_left > 0) continue;
      report_.ttft_s[r.request] = end - report_.arrival_s[r.request];
      Due(end, false, r.request);
      if (r.decode_left == 0) Done(r, end);
    }
    std::erase_if(engine.running, [](const Running& r) { return r.done; });
    engine.free_at = end;
    last_end_ = std::max(last_end_, end);
  }

  void Done(Running& r, double end) {
    r.done = true;
    ++finished_;
    Due(end, true, r.request);
    for (std::size_t next : dependents_[r.request]) Arrive(next, std::max(end, requests_[next].arrival_s));
  }

  EngineReport Finish() {
    EngineReport& out = report_;
    double ttft_sum = 0, wait_sum = 0;
    uint64_t prompt_tokens = 0;
    for (std::size_t i = 0; i < requests_.size(); ++i) {
      ttft_sum += out.ttft_s[i];
      wait_sum += out.queue_wait_s[i];
      prompt_tokens += requests_[i].prompt_tokens;
    }
    const double n = static_cast<double>(std::max<std::size_t>(1, requests_.size()));
    out.ttft_mean_s = ttft_sum / n;
    out.ttft_p50_s = Quantile(out.ttft_s, 0.5);
    out.ttft_p99_s = Quantile(out.ttft_s, 0.99);
    out.queue_wait_mean_s = wait_sum / n;
    out.queue_wait_p99_s = Quantile(out.queue_wait_s, 0.99);
    if (!requests_.empty()) out.makespan_s = last_end_ - requests_.front().arrival_s;
    if (out.makespan_s > 0) out.prompt_tokens_per_s = static_cast<double>(prompt_tokens) / out.makespan_s;
    double seen = 0;
    for (uint64_t w : waiting_seen_) seen += static_cast<double>(w);
    out.waiting_mean = waiting_seen_.empty() ? 0 : seen / static_cast<double>(waiting_seen_.size());
    out.waiting_p99 = Quantile(waiting_seen_, 0.99);
    return std::move(out);
  }

  std::span<const EngineRequest> requests_;
  const PrefillCostModel& cost_;
  const EngineOptions& options_;
  EngineCache& cache_;
  std::vector<Engine> engines_;
  double weights_seconds_ = 0, kv_seconds_per_token_ = 0;
  std::vector<std::size_t> waiting_;  // arrived requests in arrival order; those from head_ on wait
  std::size_t head_ = 0;
  // Requests not arrived yet, soonest first (ties: the earlier request); a request `after`
  // another joins when that one finishes.
  std::priority_queue<std::pair<double, std::size_t>, std::vector<std::pair<double, std::size_t>>, std::greater<>>
      arrivals_;
  std::vector<std::vector<std::size_t>> dependents_;
  std::size_t finished_ = 0;
  uint64_t sequence_ = 0;
  double last_end_ = 0;
  std::priority_queue<Completion, std::vector<Completion>, std::greater<>> completions_;
  std::vector<uint64_t> waiting_seen_;
  EngineReport report_;
};

}  // namespace

Status EngineOptions::Validate() const {
  if (engines == 0) return Status::InvalidArgument("engine model: engines must be at least 1");
  if (max_batched_tokens == 0) return Status::InvalidArgument("engine model: max_batched_tokens must be at least 1");
  if (max_running == 0) return Status::InvalidArgument("engine model: max_running must be at least 1");
  if (!(weight_bytes_per_param > 0)) return Status::InvalidArgument("engine model: weight_bytes_per_param must be > 0");
  return Status::Ok();
}

Result<EngineReport> SimulateEngine(std::span<const EngineRequest> requests, const PrefillCostModel& cost,
                                    uint64_t kv_bytes_per_token, const EngineOptions& options, EngineCache& cache) {
  KVTIER_RETURN_IF_ERROR(options.Validate());
  for (std::size_t i = 0; i < requests.size(); ++i) {
    if (requests[i].prompt_tokens == 0) {
      return Status::InvalidArgument("engine model: request " + std::to_string(i) + " has no prompt tokens");
    }
    if (i > 0 && requests[i].arrival_s < requests[i - 1].arrival_s) {
      return Status::InvalidArgument("engine model: request " + std::to_string(i) + " arrives before the one before it");
    }
    if (requests[i].after && *requests[i].after >= i) {
      return Status::InvalidArgument("engine model: request " + std::to_string(i) +
                                     " waits for a request that is not before it");
    }
  }
  return Simulation(requests, cost, kv_bytes_per_token, options, cache).Run();
}

}  // namespace kvtier
