// Google Benchmark targets for what a tier's eviction policy costs per block, alone and split
// into shards (src/policy/sharded_policy.h): a full tier of 65,536 blocks in steady state, each
// iteration a hit on a resident block and a miss that evicts the victim and admits a new block,
// as the store drives a policy. The one-shard ShardedPolicy against the policy alone is the
// price of the wrapper (its lock and clock); eight shards against one, the price of asking
// every shard for its victim (docs/serve.md, "Every tier's policy in shards"):
//   build/release/bench/kvtier_policy_gbench --benchmark_repetitions=5 --benchmark_report_aggregates_only=true
#include <cstdint>
#include <memory>
#include <vector>

#include <benchmark/benchmark.h>

#include "kvtier/eviction_policy.h"
#include "kvtier/reuse_predictor.h"
#include "policy/sharded_policy.h"

namespace kvtier {
namespace {

constexpr uint64_t kResident = 65536;

BlockKey KeyOf(uint64_t n) { return {n * 0x9E3779B97F4A7C15ull, n ^ 0xD1B54A32D192ED03ull}; }

ResidentBlock BlockOf(uint64_t n) {
  return {.key = KeyOf(n),
          .bytes = 1u << 20,
          .tokens = 16,
          .type = static_cast<BlockType>(n % 4),
          .transition = static_cast<TransitionType>((n / 4) % 4),
          .recompute_seconds = 0.01};
}

// shards 0: the policy alone (NewEvictionPolicy with one shard); otherwise a ShardedPolicy.
std::unique_ptr<EvictionPolicy> MakePolicy(PolicyKind kind, int shards) {
  auto predictor = ReusePredictor::Create({}).value();
  PolicyOptions options{.capacity_blocks = kResident};
  if (shards == 0) return NewEvictionPolicy(kind, options, predictor).value();
  options.shards = static_cast<uint32_t>(shards);
  return ShardedPolicy::Create(kind, options, predictor).value();
}

void BM_HitAndMiss(benchmark::State& state) {
  const auto kind = static_cast<PolicyKind>(state.range(0));
  const std::unique_ptr<EvictionPolicy> policy = MakePolicy(kind, static_cast<int>(state.range(1)));
  double now = 0;
  uint64_t next = 0;
  std::vector<uint64_t> resident;  // slot i holds block resident[i]
  std::vector<uint32_t> slot_of;   // block n sits (or sat) in slot slot_of[n]
  for (; next < kResident; ++next) {
    policy->Admit(BlockOf(next), now += 1e-3);
    resident.push_back(next);
    slot_of.push_back(static_cast<uint32_t>(next));
  }
  uint64_t rng = 42;
  for (auto _ : state) {
    rng = rng * 6364136223846793005u + 1442695040888963407u;
    policy->Touch(KeyOf(resident[(rng >> 33) % kResident]), TransitionType::kReasoningStep, now += 1e-3);
    const std::optional<BlockKey> victim = policy->Victim();
    if (!victim) {
      state.SkipWithError("no victim in a full tier");
      break;
    }
    policy->Remove(*victim, now);
    // The victim's slot takes the new block (a key's low word is its number, masked).
    const uint32_t slot = slot_of[victim->lo ^ 0xD1B54A32D192ED03ull];
    resident[slot] = next;
    slot_of.push_back(slot);
    policy->Admit(BlockOf(next), now += 1e-3);
    ++next;
  }
  state.SetItemsProcessed(state.iterations());
}

void PolicyArgs(benchmark::internal::Benchmark* b) {
  for (PolicyKind kind : {PolicyKind::kLru, PolicyKind::kBayes, PolicyKind::kPredictive, PolicyKind::kS3Fifo}) {
    for (int shards : {0, 1, 8}) b->Args({static_cast<int64_t>(kind), shards});
  }
  b->ArgNames({"kind", "shards"});
}
BENCHMARK(BM_HitAndMiss)->Apply(PolicyArgs);

}  // namespace
}  // namespace kvtier

BENCHMARK_MAIN();
