#include "kvtier/engine_model.h"

#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "kvtier/model_catalog.h"

namespace kvtier {
namespace {

PrefillCostModel Cost() {
  Result<ModelSpec> model = LoadCatalogModel("llama-3-8b");
  EXPECT_TRUE(model.ok()) << model.status().ToString();
  Result<GpuSpec> gpu = GpuPreset("h100-sxm");
  EXPECT_TRUE(gpu.ok());
  Result<PrefillCostModel> cost = PrefillCostModel::Create(*model, *gpu);
  EXPECT_TRUE(cost.ok()) << cost.status().ToString();
  return *cost;
}

// Answers every request with a fixed hit and records the calls with their times.
class RecordingCache : public EngineCache {
 public:
  explicit RecordingCache(uint64_t hit_tokens = 0, double load_seconds = 0)
      : hit_tokens_(hit_tokens), load_seconds_(load_seconds) {}

  Hit StartPrefill(std::size_t request, double now, std::span<const std::size_t> waiting) override {
    Record("start", request, now);
    waiting_at_start.emplace_back(waiting.begin(), waiting.end());
    return {.tokens = hit_tokens_, .load_seconds = load_seconds_};
  }
  void PrefillDone(std::size_t request, double now) override { Record("prefilled", request, now); }
  void Finished(std::size_t request, double now) override { Record("finished", request, now); }

  std::vector<std::string> calls;
  std::vector<double> times;
  std::vector<std::vector<std::size_t>> waiting_at_start;

 private:
  void Record(const char* what, std::size_t request, double now) {
    calls.push_back(std::string(what) + " " + std::to_string(request));
    times.push_back(now);
  }
  uint64_t hit_tokens_;
  double load_seconds_;
};

EngineReport Simulate(const std::vector<EngineRequest>& requests, const EngineOptions& options, EngineCache& cache) {
  Result<EngineReport> report = SimulateEngine(requests, Cost(), 131072, options, cache);
  EXPECT_TRUE(report.ok()) << report.status().ToString();
  return std::move(report).value();
}

TEST(EngineModel, ALoneRequestWaitsForNothing) {
  RecordingCache cache;
  const EngineReport r = Simulate({{.arrival_s = 2, .prompt_tokens = 1000, .output_tokens = 3}}, {}, cache);
  EXPECT_NEAR(r.ttft_s[0], Cost().RecomputeSeconds(1000, 0), 1e-12);  // arrival 2 s: (2 + x) - 2
  EXPECT_DOUBLE_EQ(r.queue_wait_s[0], 0);
  EXPECT_EQ(r.steps, 3u);  // the prefill (with the first token), then two decode steps
  EXPECT_EQ(cache.calls, (std::vector<std::string>{"start 0", "prefilled 0", "finished 0"}));
  EXPECT_DOUBLE_EQ(cache.times[0], 2);
  EXPECT_NEAR(cache.times[1], 2 + r.ttft_s[0], 1e-12);
  EXPECT_GT(cache.times[2], cache.times[1]);
}

TEST(EngineModel, AFullHitLoadsAndPrefillsItsLastToken) {
  RecordingCache cache(/*hit_tokens=*/1000, /*load_seconds=*/0.002);
  const EngineReport r = Simulate({{.arrival_s = 0, .prompt_tokens = 1000, .output_tokens = 1}}, {}, cache);
  EXPECT_DOUBLE_EQ(r.ttft_s[0], 0.002 + Cost().RecomputeSeconds(1, 999));
}

TEST(EngineModel, RequestsQueueBehindABusyEngineAndNotBehindTwo) {
  const std::vector<EngineRequest> two = {{.arrival_s = 0, .prompt_tokens = 4000, .output_tokens = 1},
                                          {.arrival_s = 0, .prompt_tokens = 4000, .output_tokens = 1}};
  RecordingCache one_engine;
  const EngineReport queued = Simulate(two, {.max_batched_tokens = 4000}, one_engine);
  EXPECT_DOUBLE_EQ(queued.queue_wait_s[1], queued.ttft_s[0]);
  EXPECT_EQ(one_engine.waiting_at_start[0], (std::vector<std::size_t>{1}));  // the engine's known future
  EXPECT_TRUE(one_engine.waiting_at_start[1].empty());
  RecordingCache two_engines;
  const EngineReport parallel = Simulate(two, {.engines = 2, .max_batched_tokens = 4000}, two_engines);
  EXPECT_DOUBLE_EQ(parallel.queue_wait_s[1], 0);
  EXPECT_LT(parallel.ttft_p99_s, queued.ttft_p99_s);
}

TEST(EngineModel, HitsShortenTheQueue) {
  std::vector<EngineRequest> burst;
  for (int i = 0; i < 50; ++i) burst.push_back({.arrival_s = 0.01 * i, .prompt_tokens = 8000, .output_tokens = 20});
  RecordingCache misses, hits(6000, 0.001);
  const EngineReport cold = Simulate(burst, {}, misses);
  const EngineReport warm = Simulate(burst, {}, hits);
  EXPECT_LT(warm.queue_wait_mean_s, cold.queue_wait_mean_s);
  EXPECT_LT(warm.ttft_p99_s, cold.ttft_p99_s);
  EXPECT_GT(cold.waiting_mean, 0);
}

TEST(EngineModel, CallsComeInTimeOrderAcrossEngines) {
  std::vector<EngineRequest> requests;
  for (int i = 0; i < 40; ++i) {
    requests.push_back({.arrival_s = 0.003 * i, .prompt_tokens = 500 + 300 * static_cast<uint64_t>(i % 7),
                        .output_tokens = static_cast<uint64_t>(i % 5)});
  }
  RecordingCache cache;
  const EngineReport r = Simulate(requests, {.engines = 3, .max_batched_tokens = 2048, .max_running = 4}, cache);
  ASSERT_EQ(cache.calls.size(), 3 * requests.size());
  for (std::size_t i = 1; i < cache.times.size(); ++i) EXPECT_LE(cache.times[i - 1], cache.times[i]) << i;
  for (double t : r.ttft_s) EXPECT_GT(t, 0);
}

TEST(EngineModel, ANextTurnArrivesOnlyAfterTheAnswerItHolds) {
  // Turn 2 says it arrives at 0.001 s, but holds turn 1's 200-token answer: it arrives when
  // that answer is out, and its wait counts from there.
  const std::vector<EngineRequest> turns = {{.arrival_s = 0, .prompt_tokens = 1000, .output_tokens = 200},
                                            {.arrival_s = 0.001, .prompt_tokens = 1300, .output_tokens = 5, .after = 0}};
  RecordingCache cache;
  const EngineReport r = Simulate(turns, {.engines = 2}, cache);
  EXPECT_EQ(cache.calls[0], "start 0");
  EXPECT_EQ(cache.calls[1], "prefilled 0");
  EXPECT_EQ(cache.calls[2], "finished 0");
  EXPECT_EQ(cache.calls[3], "start 1");
  EXPECT_DOUBLE_EQ(r.arrival_s[1], cache.times[2]);
  EXPECT_DOUBLE_EQ(r.queue_wait_s[1], 0);
  const std::vector<EngineRequest> self = {{.arrival_s = 0, .prompt_tokens = 5, .after = 0}};
  EXPECT_EQ(SimulateEngine(self, Cost(), 1, {}, cache).status().code(), StatusCode::kInvalidArgument);
}

TEST(EngineModel, BadInputIsAClearError) {
  RecordingCache cache;
  const PrefillCostModel cost = Cost();
  const std::vector<EngineRequest> empty_prompt = {{.arrival_s = 0, .prompt_tokens = 0}};
  EXPECT_EQ(SimulateEngine(empty_prompt, cost, 1, {}, cache).status().code(), StatusCode::kInvalidArgument);
  const std::vector<EngineRequest> backwards = {{.arrival_s = 1, .prompt_tokens = 5}, {.arrival_s = 0, .prompt_tokens = 5}};
  EXPECT_EQ(SimulateEngine(backwards, cost, 1, {}, cache).status().code(), StatusCode::kInvalidArgument);
  const std::vector<EngineRequest> ok = {{.arrival_s = 0, .prompt_tokens = 5}};
  EXPECT_EQ(SimulateEngine(ok, cost, 1, {.engines = 0}, cache).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(SimulateEngine(ok, cost, 1, {.max_batched_tokens = 0}, cache).status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace kvtier
