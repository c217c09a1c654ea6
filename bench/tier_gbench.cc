// Google Benchmark targets for the tiers that run in-process, next to their baselines in the
// same binary: memcpy (and the copy-with-checksum every memory tier does) for DRAM and CXL,
// pwrite/pread with O_DIRECT for NVMe. `kvtier bench tiers` is the full comparison (fio,
// Redis, CUDA); these are for profiling one path with Google Benchmark's statistics:
//   build/release/bench/kvtier_tier_gbench --benchmark_filter=Dram --benchmark_repetitions=5
#include <fcntl.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>

#include <benchmark/benchmark.h>

#include "kvtier/block.h"
#include "kvtier/tiers.h"

namespace kvtier {
namespace {

constexpr uint64_t kTierBytes = 256u << 20;

struct Buffer {
  explicit Buffer(std::size_t n) : size(n) {
    void* p = nullptr;
    if (posix_memalign(&p, 4096, n) != 0) std::abort();
    data = static_cast<std::byte*>(p);
    for (std::size_t i = 0; i < n; ++i) data[i] = static_cast<std::byte>(i * 131);
  }
  ~Buffer() { std::free(data); }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  std::byte* data;
  std::size_t size;
};

std::string ScratchDir() {
  const std::string dir = (std::filesystem::temp_directory_path() / ("kvtier-gbench-" + std::to_string(getpid()))).string();
  std::filesystem::create_directories(dir);
  return dir;
}

// Writes (or reads) blocks 0..n-1 of the tier round-robin, n = what fits in kTierBytes / 2.
void RunTier(benchmark::State& state, Tier& tier, bool read) {
  const auto block = static_cast<std::size_t>(state.range(0));
  const uint64_t blocks = std::max<uint64_t>(1, kTierBytes / 2 / block);
  Buffer payload(block), out(block);
  for (uint64_t i = 0; i < blocks; ++i) {
    if (!tier.Write({block, i}, {payload.data, block}).ok()) {
      state.SkipWithError("warm-up write failed");
      return;
    }
  }
  uint64_t i = 0;
  for (auto _ : state) {
    const BlockKey key{block, i++ % blocks};
    if (read) {
      Result<std::size_t> n = tier.Read(key, {out.data, block});
      if (!n.ok()) state.SkipWithError(n.status().ToString().c_str());
    } else if (Status s = tier.Write(key, {payload.data, block}); !s.ok()) {
      state.SkipWithError(s.ToString().c_str());
    }
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * state.range(0));
}

void BM_DramWrite(benchmark::State& state) {
  auto tier = NewDramTier({.capacity_bytes = kTierBytes, .lock_memory = false, .pin_for_gpu = false});
  if (!tier.ok()) return state.SkipWithError(tier.status().ToString().c_str());
  RunTier(state, **tier, /*read=*/false);
}
void BM_DramRead(benchmark::State& state) {
  auto tier = NewDramTier({.capacity_bytes = kTierBytes, .lock_memory = false, .pin_for_gpu = false});
  if (!tier.ok()) return state.SkipWithError(tier.status().ToString().c_str());
  RunTier(state, **tier, /*read=*/true);
}
void BM_CxlOnDevShmRead(benchmark::State& state) {
  const std::string path = "/dev/shm/kvtier-gbench-cxl-" + std::to_string(getpid());
  auto tier = NewCxlTier({.path = path, .capacity_bytes = kTierBytes});
  std::filesystem::remove(path);
  if (!tier.ok()) return state.SkipWithError(tier.status().ToString().c_str());
  RunTier(state, **tier, /*read=*/true);
}
void BM_NvmeFileRead(benchmark::State& state) {
  const std::string dir = ScratchDir();
  {
    auto tier = NewNvmeTier({.files = {dir + "/slots"}, .capacity_bytes = kTierBytes + (64u << 20), .recover = false});
    if (!tier.ok()) return state.SkipWithError(tier.status().ToString().c_str());
    RunTier(state, **tier, /*read=*/true);
  }
  std::filesystem::remove_all(dir);
}

// Baselines.
void BM_Memcpy(benchmark::State& state) {
  const auto block = static_cast<std::size_t>(state.range(0));
  const std::size_t slots = std::max<std::size_t>(1, kTierBytes / 2 / block);
  Buffer region(slots * block), out(block);
  std::size_t i = 0;
  for (auto _ : state) {
    std::memcpy(out.data, region.data + (i++ % slots) * block, block);
    benchmark::DoNotOptimize(out.data);
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * state.range(0));
}
void BM_CopyWithChecksum(benchmark::State& state) {
  const auto block = static_cast<std::size_t>(state.range(0));
  const std::size_t slots = std::max<std::size_t>(1, kTierBytes / 2 / block);
  Buffer region(slots * block), out(block);
  std::size_t i = 0;
  for (auto _ : state) {
    benchmark::DoNotOptimize(CopyWithChecksum({out.data, block}, {region.data + (i++ % slots) * block, block}));
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * state.range(0));
}
void BM_ODirectPread(benchmark::State& state) {
  const auto block = static_cast<std::size_t>(state.range(0));
  const std::string dir = ScratchDir();
  const std::string path = dir + "/baseline";
  int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_DIRECT | O_CLOEXEC, 0600);
  if (fd < 0) fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  const uint64_t blocks = std::max<uint64_t>(1, kTierBytes / 2 / block);
  Buffer buffer(block);
  for (uint64_t b = 0; b < blocks; ++b) {
    if (::pwrite(fd, buffer.data, block, static_cast<off_t>(b * block)) != static_cast<ssize_t>(block)) {
      state.SkipWithError("baseline write failed");
      break;
    }
  }
  uint64_t i = 0;
  for (auto _ : state) {
    if (::pread(fd, buffer.data, block, static_cast<off_t>((i++ % blocks) * block)) != static_cast<ssize_t>(block)) {
      state.SkipWithError("baseline read failed");
    }
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * state.range(0));
  ::close(fd);
  std::filesystem::remove_all(dir);
}

// 64 KiB, 256 KiB, 1 MiB, 4 MiB: the sizes `kvtier bench tiers` reports.
void BlockSizes(benchmark::internal::Benchmark* b) { b->RangeMultiplier(4)->Range(64 << 10, 4 << 20); }
BENCHMARK(BM_DramWrite)->Apply(BlockSizes);
BENCHMARK(BM_DramRead)->Apply(BlockSizes);
BENCHMARK(BM_CxlOnDevShmRead)->Apply(BlockSizes);
BENCHMARK(BM_NvmeFileRead)->Apply(BlockSizes);
BENCHMARK(BM_Memcpy)->Apply(BlockSizes);
BENCHMARK(BM_CopyWithChecksum)->Apply(BlockSizes);
BENCHMARK(BM_ODirectPread)->Apply(BlockSizes);

}  // namespace
}  // namespace kvtier

BENCHMARK_MAIN();
