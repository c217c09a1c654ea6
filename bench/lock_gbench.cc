// Google Benchmark targets for what the store's metadata lock costs: ProfiledRwMutex
// (util/profiled_rw_mutex.h) against the RwMutex it wraps (util/rw_mutex.h) and against
// std::shared_mutex, the lock RwMutex replaced. The difference between the first two is the
// price of `kvtier bench serve`'s lock profile (docs/serve.md, "The metadata lock's own cost"):
//   build/release/bench/kvtier_lock_gbench --benchmark_repetitions=5 --benchmark_report_aggregates_only=true
// The threaded cases share one lock between Google Benchmark's threads; on a machine with
// fewer cores than threads they measure the scheduler as much as the lock.
#include <cstdint>
#include <mutex>
#include <shared_mutex>

#include <benchmark/benchmark.h>

#include "util/profiled_rw_mutex.h"
#include "util/rw_mutex.h"

namespace kvtier {
namespace {

// A dependent chain of multiply-adds (an LCG step each), so the compiler can neither fold nor
// overlap it: about 50 ns on a 2-3 GHz core, the order of an index update under the lock.
// BM_CriticalSectionAlone measures it without a lock, to subtract.
constexpr int kCriticalSectionSteps = 40;

uint64_t CriticalSection(uint64_t state) {
  for (int i = 0; i < kCriticalSectionSteps; ++i) {
    state = state * 6364136223846793005u + 1442695040888963407u;
    benchmark::DoNotOptimize(state);
  }
  return state;
}

// One lock per mutex type, shared by every thread of a threaded case (a function-local static
// is constructed once, thread-safely, by whichever thread gets there first).
template <typename Mutex>
Mutex& BenchmarkLock() {
  static Mutex mu;
  return mu;
}

template <typename Mutex>
void BM_SharedLockUnlock(benchmark::State& state) {
  Mutex& mu = BenchmarkLock<Mutex>();
  for (auto _ : state) {
    mu.lock_shared();
    mu.unlock_shared();
  }
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations()));
}

template <typename Mutex>
void BM_ExclusiveLockUnlock(benchmark::State& state) {
  Mutex& mu = BenchmarkLock<Mutex>();
  for (auto _ : state) {
    mu.lock();
    mu.unlock();
  }
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations()));
}

template <typename Mutex>
void BM_ExclusiveShortSection(benchmark::State& state) {
  Mutex& mu = BenchmarkLock<Mutex>();
  uint64_t value = 1;
  for (auto _ : state) {
    std::lock_guard lock(mu);
    value = CriticalSection(value);
  }
  benchmark::DoNotOptimize(value);
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations()));
}

void BM_CriticalSectionAlone(benchmark::State& state) {
  uint64_t value = 1;
  for (auto _ : state) value = CriticalSection(value);
  benchmark::DoNotOptimize(value);
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations()));
}

// One operation in eight takes the lock exclusively (with the short critical section, as a
// put's index update would); the rest take it shared with nothing inside, so that the case
// times the lock under a mix of modes rather than the readers' work.
template <typename Mutex>
void BM_MixedOneWriterInEight(benchmark::State& state) {
  Mutex& mu = BenchmarkLock<Mutex>();
  uint64_t value = static_cast<uint64_t>(state.thread_index()) + 1;
  uint64_t op = 0;
  for (auto _ : state) {
    if (++op % 8 == 0) {
      std::lock_guard lock(mu);
      value = CriticalSection(value);
    } else {
      std::shared_lock lock(mu);
      benchmark::DoNotOptimize(value);
    }
  }
  benchmark::DoNotOptimize(value);
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations()));
}

// Threaded cases report wall time per operation per thread (UseRealTime): CPU time would hide
// the time a thread spends descheduled while another holds the lock.
#define KVTIER_LOCK_BENCHMARKS(Mutex)                                                    \
  BENCHMARK_TEMPLATE(BM_SharedLockUnlock, Mutex);                                        \
  BENCHMARK_TEMPLATE(BM_ExclusiveLockUnlock, Mutex);                                     \
  BENCHMARK_TEMPLATE(BM_ExclusiveShortSection, Mutex);                                   \
  BENCHMARK_TEMPLATE(BM_SharedLockUnlock, Mutex)->Threads(2)->Threads(4)->UseRealTime(); \
  BENCHMARK_TEMPLATE(BM_MixedOneWriterInEight, Mutex)->Threads(2)->UseRealTime()

KVTIER_LOCK_BENCHMARKS(std::shared_mutex);
KVTIER_LOCK_BENCHMARKS(RwMutex);
KVTIER_LOCK_BENCHMARKS(ProfiledRwMutex);
BENCHMARK(BM_CriticalSectionAlone);

}  // namespace
}  // namespace kvtier

BENCHMARK_MAIN();
