#include "replay_benchmark.h"

#include <chrono>
#include <cmath>
#include <list>
#include <random>
#include <unordered_map>

#include <nlohmann/json.hpp>

#include "kvtier/replay.h"

namespace kvtier::bench {
namespace {

std::vector<ReplayRequest> SyntheticTrace(const ReplayBenchmarkOptions& o) {
  std::mt19937_64 rng(o.seed);
  // Zipf-like session popularity: weight 1 / (rank + 1).
  std::vector<double> weights(static_cast<std::size_t>(o.sessions));
  for (std::size_t i = 0; i < weights.size(); ++i) weights[i] = 1.0 / static_cast<double>(i + 1);
  std::discrete_distribution<std::size_t> pick_session(weights.begin(), weights.end());
  std::uniform_int_distribution<int> new_blocks(1, 6);
  std::vector<std::vector<ReplayBlock>> history(static_cast<std::size_t>(o.sessions));
  uint64_t next_key = 1;
  std::vector<ReplayRequest> trace;
  trace.reserve(static_cast<std::size_t>(o.requests));
  for (int64_t i = 0; i < o.requests; ++i) {
    const std::size_t s = pick_session(rng);
    std::vector<ReplayBlock>& h = history[s];
    if (h.empty() || h.size() > 256) {  // a new conversation: the prompt's 8 blocks
      h.clear();
      const uint64_t prompt = s % static_cast<std::size_t>(o.prompts);
      for (uint64_t k = 0; k < 8; ++k) {
        h.push_back({.key = {prompt + 1, k + 1}, .tokens = 16, .type = BlockType::kSystemPrompt});
      }
    }
    for (int k = new_blocks(rng); k > 0; --k) h.push_back({.key = {0, next_key++}, .tokens = 16});
    trace.push_back({.arrival_s = static_cast<double>(i) * 0.01, .prompt = h});
  }
  return trace;
}

// The baseline: prefix-rule LRU with a hash map and a list, evicting the least recently used
// block (not leaf-first: it only measures the cost of the bookkeeping).
double BaselineAccessesPerSecond(const std::vector<ReplayRequest>& trace, uint64_t capacity, uint64_t* hits) {
  std::list<BlockKey> order;
  std::unordered_map<BlockKey, std::list<BlockKey>::iterator, BlockKeyHash> where;
  uint64_t accesses = 0;
  *hits = 0;
  const auto start = std::chrono::steady_clock::now();
  for (const ReplayRequest& r : trace) {
    bool prefix = true;
    for (const ReplayBlock& b : r.prompt) {
      ++accesses;
      auto it = where.find(b.key);
      if (it != where.end()) {
        if (prefix) ++*hits;
        order.splice(order.begin(), order, it->second);
        continue;
      }
      prefix = false;
      if (where.size() >= capacity) {
        where.erase(order.back());
        order.pop_back();
      }
      order.push_front(b.key);
      where[b.key] = order.begin();
    }
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return static_cast<double>(accesses) / seconds;
}

}  // namespace

Status ReplayBenchmarkOptions::Validate() const {
  if (requests < 1 || requests > 100'000'000) return Status::InvalidArgument("--requests must be 1 to 100,000,000");
  if (sessions < 1 || sessions > 10'000'000) return Status::InvalidArgument("--sessions must be 1 to 10,000,000");
  if (prompts < 1 || prompts > sessions) return Status::InvalidArgument("--prompts must be 1 to --sessions");
  if (!(capacity_fraction > 0 && capacity_fraction <= 1)) return Status::InvalidArgument("--capacity-frac must be in (0, 1]");
  return Status::Ok();
}

Result<std::string> RunReplayBenchmark(const ReplayBenchmarkOptions& options) {
  KVTIER_RETURN_IF_ERROR(options.Validate());
  const std::vector<ReplayRequest> trace = SyntheticTrace(options);
  ReplayOptions replay;
  replay.capacity_fraction = options.capacity_fraction;
  KVTIER_ASSIGN_OR_RETURN(ReplayReport report, Replay(trace, replay));
  uint64_t baseline_hits = 0;
  const double baseline = BaselineAccessesPerSecond(trace, report.capacity_blocks, &baseline_hits);
  nlohmann::json policies = nlohmann::json::array();
  for (const ReplayPolicyResult& r : report.results) {
    if (r.accesses_per_s == 0) continue;  // the bounds are not replays
    policies.push_back({{"policy", r.policy},
                        {"accesses_per_s", r.accesses_per_s},
                        {"vs_baseline", r.accesses_per_s / baseline},
                        {"block_hit_rate", r.block_hit_rate}});
  }
  const nlohmann::json out = {{"requests", report.requests},
                              {"accesses", report.accesses},
                              {"unique_blocks", report.unique_blocks},
                              {"capacity_blocks", report.capacity_blocks},
                              {"baseline", "hash map + list LRU, no store"},
                              {"baseline_accesses_per_s", baseline},
                              {"baseline_block_hit_rate", static_cast<double>(baseline_hits) / static_cast<double>(report.accesses)},
                              {"policies", policies}};
  return out.dump(2) + "\n";
}

}  // namespace kvtier::bench
