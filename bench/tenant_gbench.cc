// Google Benchmark target for the tenant key mapping (server/tenant_namespace.h), which every
// key of every request goes through: the two mappings over a 64-block lookup's keys, and one
// key alone (a Put's parent).
//   build/release/bench/kvtier_tenant_gbench --benchmark_repetitions=5 --benchmark_report_aggregates_only=true
#include <cstdint>
#include <vector>

#include <benchmark/benchmark.h>

#include "server/tenant_namespace.h"

namespace kvtier::server {
namespace {

void MapChain(benchmark::State& state, TenantKeyMapping mapping) {
  TenantNamespace tenant("tenant", mapping);
  std::vector<BlockKey> keys(static_cast<std::size_t>(state.range(0)));
  uint64_t seed = 1;
  for (BlockKey& k : keys) k = {seed *= 0x9E3779B97F4A7C15ull, seed ^ 0x5851F42D4C957F2Dull};
  for (auto _ : state) {
    std::vector<BlockKey> mapped = tenant.Map(keys);
    benchmark::DoNotOptimize(mapped.data());
    ++keys[0].lo;  // not the same request twice
  }
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations()) * state.range(0));
}

void BM_AesMmo(benchmark::State& state) { MapChain(state, TenantKeyMapping::kAesMmo); }
void BM_Sha256(benchmark::State& state) { MapChain(state, TenantKeyMapping::kSha256); }
BENCHMARK(BM_AesMmo)->Arg(1)->Arg(64);
BENCHMARK(BM_Sha256)->Arg(1)->Arg(64);

}  // namespace
}  // namespace kvtier::server

BENCHMARK_MAIN();
