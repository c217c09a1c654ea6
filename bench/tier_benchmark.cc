#include "tier_benchmark.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "kvtier/tier_config.h"
#include "measure.h"

namespace kvtier::bench {
namespace {

using Clock = std::chrono::steady_clock;

double Percentile(std::vector<double> values, double p) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  return values[std::min(values.size() - 1, static_cast<std::size_t>(p * static_cast<double>(values.size())))];
}

// 4 KiB-aligned, so that O_DIRECT accepts it.
struct AlignedBuffer {
  explicit AlignedBuffer(std::size_t n) : size(n) {
    void* p = nullptr;
    if (posix_memalign(&p, 4096, n) != 0) std::abort();
    data = static_cast<std::byte*>(p);
    for (std::size_t i = 0; i < n; ++i) data[i] = static_cast<std::byte>((i * 2654435761u) >> 13);
  }
  ~AlignedBuffer() { std::free(data); }
  std::byte* data;
  std::size_t size;
};

Result<Measure> MeasureTier(Tier& tier, uint64_t block, uint64_t count) {
  AlignedBuffer payload(block), out(block);
  Measure m;
  // Warm-up: the first write of each page of a fresh region faults it in (and zeroes huge
  // pages); the memcpy baseline writes into buffers that are already touched. Measure the
  // steady state, where a tier reuses its slots.
  for (uint64_t i = 0; i < count; ++i) {
    Status s = tier.Write({block, i + 1}, std::span(payload.data, block));
    if (!s.ok()) return s.WithContext(tier.name() + " warm-up write");
  }
  for (uint64_t i = 0; i < count; ++i) (void)tier.Evict({block, i + 1});
  auto start = Clock::now();
  for (uint64_t i = 0; i < count; ++i) {
    const auto t0 = Clock::now();
    Status s = tier.Write({block, i + 1}, std::span(payload.data, block));
    if (!s.ok()) return s.WithContext(tier.name() + " write");
    m.latencies_us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
  }
  m.write_gbps = static_cast<double>(block * count) / 1e9 / std::chrono::duration<double>(Clock::now() - start).count();
  start = Clock::now();
  for (uint64_t i = 0; i < count; ++i) {
    const auto t0 = Clock::now();
    Result<std::size_t> n = tier.Read({block, i + 1}, std::span(out.data, block));
    if (!n.ok()) return n.status().WithContext(tier.name() + " read");
    m.latencies_us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
  }
  m.read_gbps = static_cast<double>(block * count) / 1e9 / std::chrono::duration<double>(Clock::now() - start).count();
  for (uint64_t i = 0; i < count; ++i) (void)tier.Evict({block, i + 1});
  return m;
}

Measure MeasureMemcpy(uint64_t block, uint64_t count) {
  AlignedBuffer payload(block), out(block);
  std::vector<std::unique_ptr<AlignedBuffer>> slots;
  for (uint64_t i = 0; i < count; ++i) slots.push_back(std::make_unique<AlignedBuffer>(block));
  Measure m;
  auto start = Clock::now();
  for (auto& slot : slots) std::memcpy(slot->data, payload.data, block);
  m.write_gbps = static_cast<double>(block * count) / 1e9 / std::chrono::duration<double>(Clock::now() - start).count();
  start = Clock::now();
  for (auto& slot : slots) std::memcpy(out.data, slot->data, block);
  m.read_gbps = static_cast<double>(block * count) / 1e9 / std::chrono::duration<double>(Clock::now() - start).count();
  return m;
}

// One file written and read in sequence: with O_DIRECT (where the filesystem allows) as the
// NVMe tier does, or through the page cache as the parallel-filesystem tier does.
Result<Measure> MeasureFile(const std::string& path, uint64_t block, uint64_t count, bool direct) {
  int fd = direct ? open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_DIRECT | O_CLOEXEC, 0600) : -1;
  if (fd < 0) fd = open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return Status::IoError(path + ": " + std::strerror(errno));
  AlignedBuffer payload(block), out(block);
  Measure m;
  auto start = Clock::now();
  for (uint64_t i = 0; i < count; ++i) {
    if (pwrite(fd, payload.data, block, static_cast<off_t>(i * block)) != static_cast<ssize_t>(block)) {
      close(fd);
      return Status::IoError(path + ": baseline write failed");
    }
  }
  fdatasync(fd);
  m.write_gbps = static_cast<double>(block * count) / 1e9 / std::chrono::duration<double>(Clock::now() - start).count();
  start = Clock::now();
  for (uint64_t i = 0; i < count; ++i) {
    if (pread(fd, out.data, block, static_cast<off_t>(i * block)) != static_cast<ssize_t>(block)) {
      close(fd);
      return Status::IoError(path + ": baseline read failed");
    }
  }
  m.read_gbps = static_cast<double>(block * count) / 1e9 / std::chrono::duration<double>(Clock::now() - start).count();
  close(fd);
  std::filesystem::remove(path);
  return m;
}

TierConfig DefaultBenchConfig(const std::string& dir, uint64_t bytes) {
  TierConfig config;
  config.data_dir = dir;
  const uint64_t capacity = bytes + (64u << 20);
  config.tiers.push_back(DramTierOptions{.capacity_bytes = capacity, .lock_memory = false});
  config.tiers.push_back(CxlTierOptions{.path = "/dev/shm/kvtier-bench-cxl", .capacity_bytes = capacity});
  NvmeTierOptions nvme;
  nvme.files = {dir + "/nvme/slab.0"};
  nvme.capacity_bytes = capacity;
  config.tiers.push_back(nvme);
  config.tiers.push_back(ParallelFsTierOptions{.directory = dir + "/pfs", .fsync = FsyncPolicy::kNever});
  return config;
}

}  // namespace

Status TierBenchmarkOptions::Validate() const {
  if (block_bytes.empty()) return Status::InvalidArgument("no block sizes");
  for (uint64_t b : block_bytes) {
    if (b < 4096 || b % 4096 != 0 || b > (uint64_t{256} << 20)) return Status::InvalidArgument("block sizes must be 4 KiB multiples up to 256 MiB");
  }
  if (bytes_per_size < block_bytes.back()) return Status::InvalidArgument("--bytes-per-size must hold at least one block");
  return Status::Ok();
}

Result<std::string> RunTierBenchmark(const TierBenchmarkOptions& options) {
  KVTIER_RETURN_IF_ERROR(options.Validate());
  TierConfig config;
  if (options.config_path.empty()) {
    config = DefaultBenchConfig(options.scratch_dir, options.bytes_per_size);
  } else {
    KVTIER_ASSIGN_OR_RETURN(config, LoadTierConfig(options.config_path));
  }
  nlohmann::json rows = nlohmann::json::array();
  for (std::size_t t = 0; t < config.tiers.size(); ++t) {
    for (uint64_t block : options.block_bytes) {
      // A fresh tier per block size: slabs keep the size class they were first carved for
      // (slab_allocator.h), so one tier cycling through sizes would strand its space.
      KVTIER_ASSIGN_OR_RETURN(std::vector<std::unique_ptr<Tier>> tiers, OpenTiers({config.data_dir, {config.tiers[t]}}));
      Tier& tier = *tiers.front();
      const bool memory = tier.kind() == TierKind::kCpuDram || tier.kind() == TierKind::kCxlMemory;
      const uint64_t count = std::max<uint64_t>(1, options.bytes_per_size / block);
      KVTIER_ASSIGN_OR_RETURN(Measure m, MeasureTier(tier, block, count));
      Measure base;
      if (memory) {
        base = MeasureMemcpy(block, count);
      } else {
        KVTIER_ASSIGN_OR_RETURN(base, MeasureFile(config.data_dir + "/baseline.bin", block, count,
                                                  /*direct=*/tier.kind() == TierKind::kNvme));
      }
      rows.push_back({{"tier", tier.name()},
                      {"kind", TierKindName(tier.kind())},
                      {"block_bytes", block},
                      {"blocks", count},
                      {"write_gbps", m.write_gbps},
                      {"read_gbps", m.read_gbps},
                      {"p50_us", Percentile(m.latencies_us, 0.50)},
                      {"p99_us", Percentile(m.latencies_us, 0.99)},
                      {"baseline", memory ? "memcpy"
                                   : tier.kind() == TierKind::kNvme ? "pwrite/pread, O_DIRECT, one file"
                                                                    : "pwrite/pread, page cache, one file"},
                      {"baseline_write_gbps", base.write_gbps},
                      {"baseline_read_gbps", base.read_gbps},
                      {"write_vs_baseline", m.write_gbps / base.write_gbps},
                      {"read_vs_baseline", m.read_gbps / base.read_gbps}});
    }
  }
  if (options.config_path.empty()) {
    std::error_code ec;
    std::filesystem::remove_all(options.scratch_dir, ec);
    std::filesystem::remove("/dev/shm/kvtier-bench-cxl", ec);
  }
  return rows.dump(2) + "\n";
}

}  // namespace kvtier::bench
