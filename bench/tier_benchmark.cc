#include "tier_benchmark.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>

#include <nlohmann/json.hpp>

#include "gpu_baseline.h"
#include "kvtier/tier_config.h"
#include "measure.h"
#include "port/cuda_device.h"
#include "redis_baseline.h"
#include "testing/redis_server.h"

namespace kvtier::bench {
namespace {

using Clock = std::chrono::steady_clock;

double Percentile(std::vector<double> values, double p) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  return values[std::min(values.size() - 1, static_cast<std::size_t>(p * static_cast<double>(values.size())))];
}

double Gbps(uint64_t bytes, Clock::time_point start) {
  return static_cast<double>(bytes) / 1e9 / std::chrono::duration<double>(Clock::now() - start).count();
}

double MicrosSince(Clock::time_point start) {
  return std::chrono::duration<double, std::micro>(Clock::now() - start).count();
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
  AlignedBuffer(const AlignedBuffer&) = delete;
  AlignedBuffer& operator=(const AlignedBuffer&) = delete;
  std::byte* data;
  std::size_t size;
};

BlockKey BenchKey(uint64_t block, uint64_t i) { return {block, i + 1}; }

Status FirstError(const std::vector<Status>& statuses) {
  for (const Status& s : statuses) {
    if (!s.ok()) return s;
  }
  return Status::Ok();
}

// `count` blocks in batches of `depth`: every block is written, then every block read back.
Result<Measure> MeasureTier(Tier& tier, uint64_t block, uint64_t count, int depth) {
  const auto batch = static_cast<uint64_t>(depth);
  AlignedBuffer payload(block);
  std::vector<std::unique_ptr<AlignedBuffer>> outs;
  for (uint64_t i = 0; i < batch; ++i) outs.push_back(std::make_unique<AlignedBuffer>(block));
  auto write_all = [&](std::vector<double>* latencies) -> Status {
    std::vector<Tier::WriteOp> ops;
    for (uint64_t first = 0; first < count; first += batch) {
      ops.clear();
      for (uint64_t i = first; i < std::min(count, first + batch); ++i) {
        ops.push_back({BenchKey(block, i), std::span<const std::byte>(payload.data, block)});
      }
      const auto t0 = Clock::now();
      KVTIER_RETURN_IF_ERROR(FirstError(tier.WriteBatch(ops)));
      if (latencies != nullptr) latencies->push_back(MicrosSince(t0));
    }
    return Status::Ok();
  };
  // Warm-up: the first write of each page of a fresh region faults it in (and zeroes huge
  // pages), and the first of each slab journals it; the baselines write into space already
  // touched. Measure the steady state, where a tier reuses its slots.
  KVTIER_RETURN_IF_ERROR(write_all(nullptr).WithContext(tier.name() + " warm-up write"));
  for (uint64_t i = 0; i < count; ++i) (void)tier.Evict(BenchKey(block, i));

  Measure m;
  auto start = Clock::now();
  KVTIER_RETURN_IF_ERROR(write_all(&m.latencies_us).WithContext(tier.name() + " write"));
  m.write_gbps = Gbps(block * count, start);

  std::vector<Tier::ReadOp> ops;
  start = Clock::now();
  for (uint64_t first = 0; first < count; first += batch) {
    ops.clear();
    for (uint64_t i = first; i < std::min(count, first + batch); ++i) {
      ops.push_back({BenchKey(block, i), std::span<std::byte>(outs[i - first]->data, block)});
    }
    const auto t0 = Clock::now();
    for (const Result<std::size_t>& n : tier.ReadBatch(ops)) {
      if (!n.ok()) return n.status().WithContext(tier.name() + " read");
    }
    m.latencies_us.push_back(MicrosSince(t0));
  }
  m.read_gbps = Gbps(block * count, start);
  for (uint64_t i = 0; i < count; ++i) (void)tier.Evict(BenchKey(block, i));
  return m;
}

// The memory tiers' baseline, with MeasureTier's buffers: writes copy one payload into
// `count` slots that were written before; reads copy each slot into one of `depth` output
// buffers in turn, as a batch of `depth` blocks does (with one buffer for all of them, a
// 1 MiB destination would stay in cache and flatter the baseline at depth 16).
Measure MeasureMemcpy(uint64_t block, uint64_t count, int depth) {
  AlignedBuffer payload(block);
  std::vector<std::unique_ptr<AlignedBuffer>> slots, outs;
  for (uint64_t i = 0; i < count; ++i) slots.push_back(std::make_unique<AlignedBuffer>(block));
  for (int i = 0; i < depth; ++i) outs.push_back(std::make_unique<AlignedBuffer>(block));
  Measure m;
  auto start = Clock::now();
  for (auto& slot : slots) std::memcpy(slot->data, payload.data, block);
  m.write_gbps = Gbps(block * count, start);
  start = Clock::now();
  for (uint64_t i = 0; i < count; ++i) std::memcpy(outs[i % outs.size()]->data, slots[i]->data, block);
  m.read_gbps = Gbps(block * count, start);
  return m;
}

// One file written and read in sequence, one block at a time, with O_DIRECT where the
// filesystem allows (the NVMe baseline where fio is missing).
Result<Measure> MeasureODirectLoop(const std::string& path, uint64_t block, uint64_t count) {
  int fd = open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_DIRECT | O_CLOEXEC, 0600);
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
  m.write_gbps = Gbps(block * count, start);
  start = Clock::now();
  for (uint64_t i = 0; i < count; ++i) {
    if (pread(fd, out.data, block, static_cast<off_t>(i * block)) != static_cast<ssize_t>(block)) {
      close(fd);
      return Status::IoError(path + ": baseline read failed");
    }
  }
  m.read_gbps = Gbps(block * count, start);
  close(fd);
  std::filesystem::remove(path);
  return m;
}

// One file per block in one directory, created, written and closed, then opened, read and
// closed: the parallel-FS tier's work without its header, checksum, temporary file and rename.
Result<Measure> MeasureFilePerBlock(const std::string& dir, uint64_t block, uint64_t count) {
  std::filesystem::create_directories(dir);
  AlignedBuffer payload(block), out(block);
  auto path = [&](uint64_t i) { return dir + "/" + std::to_string(i) + ".blk"; };
  Measure m;
  auto start = Clock::now();
  for (uint64_t i = 0; i < count; ++i) {
    const int fd = open(path(i).c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    const bool ok = fd >= 0 && write(fd, payload.data, block) == static_cast<ssize_t>(block);
    if (fd >= 0) close(fd);
    if (!ok) return Status::IoError(path(i) + ": baseline write failed: " + std::strerror(errno));
  }
  m.write_gbps = Gbps(block * count, start);
  start = Clock::now();
  for (uint64_t i = 0; i < count; ++i) {
    const int fd = open(path(i).c_str(), O_RDONLY | O_CLOEXEC);
    const bool ok = fd >= 0 && read(fd, out.data, block) == static_cast<ssize_t>(block);
    if (fd >= 0) close(fd);
    if (!ok) return Status::IoError(path(i) + ": baseline read failed: " + std::strerror(errno));
  }
  m.read_gbps = Gbps(block * count, start);
  std::filesystem::remove_all(dir);
  return m;
}

// fio's bandwidth for one sequential pass (`rw` is write or read), or an error when fio is
// missing or refuses (no O_DIRECT, no io_uring).
Result<double> FioGbps(const std::string& path, const std::string& rw, uint64_t block, uint64_t count, int depth) {
  if (path.find('\'') != std::string::npos) return Status::InvalidArgument("fio baseline: unusual path " + path);
  const std::string command = "fio --name=kvtier-baseline --filename='" + path + "' --rw=" + rw +
                              " --bs=" + std::to_string(block) + " --size=" + std::to_string(block * count) +
                              " --direct=1 --ioengine=io_uring --iodepth=" + std::to_string(depth) +
                              " --output-format=json 2>/dev/null";
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return Status::Unavailable("cannot run fio");
  std::string output;
  char chunk[4096];
  while (std::size_t n = fread(chunk, 1, sizeof chunk, pipe)) output.append(chunk, n);
  const int rc = pclose(pipe);
  if (rc != 0) return Status::Unavailable("fio failed or is not installed (exit status " + std::to_string(rc) + ")");
  const nlohmann::json report = nlohmann::json::parse(output, nullptr, /*allow_exceptions=*/false);
  if (report.is_discarded() || !report.contains("jobs") || report["jobs"].empty()) {
    return Status::Unavailable("fio printed no JSON report");
  }
  const double bytes_per_s = report["jobs"][0][rw].value("bw_bytes", 0.0);
  if (bytes_per_s <= 0) return Status::Unavailable("fio reported no bandwidth");
  return bytes_per_s / 1e9;
}

struct Baseline {
  std::string name;
  Measure measure;
};

constexpr int kRounds = 3;

// The best bandwidth of each direction over the passes; latencies of every pass.
void KeepBest(Measure& best, Measure pass) {
  best.write_gbps = std::max(best.write_gbps, pass.write_gbps);
  best.read_gbps = std::max(best.read_gbps, pass.read_gbps);
  best.latencies_us.insert(best.latencies_us.end(), pass.latencies_us.begin(), pass.latencies_us.end());
}

Result<Baseline> MeasureNvmeBaseline(const std::string& dir, uint64_t block, uint64_t count, int depth) {
  const std::string path = dir + "/fio-baseline.bin";
  Result<double> write = FioGbps(path, "write", block, count, depth);
  Result<double> read = write.ok() ? FioGbps(path, "read", block, count, depth) : write.status();
  std::filesystem::remove(path);
  if (write.ok() && read.ok()) {
    return Baseline{"fio, O_DIRECT, io_uring, iodepth " + std::to_string(depth), {*write, *read, {}}};
  }
  KVTIER_ASSIGN_OR_RETURN(Measure loop, MeasureODirectLoop(path, block, count));
  return Baseline{"pwrite/pread loop, O_DIRECT, queue depth 1 (" + read.status().message() + ")", loop};
}

Result<Baseline> MeasureBaseline(const TierOptions& options, TierKind kind,
                                 uint64_t block, uint64_t count, int depth) {
  switch (kind) {
    case TierKind::kCpuDram:
    case TierKind::kCxlMemory:
      return Baseline{"memcpy", MeasureMemcpy(block, count, depth)};
    case TierKind::kNvme: {
      const auto& nvme = std::get<NvmeTierOptions>(options);
      return MeasureNvmeBaseline(std::filesystem::path(nvme.files.front()).parent_path().string(), block, count, depth);
    }
    case TierKind::kParallelFs: {
      const auto& pfs = std::get<ParallelFsTierOptions>(options);
      KVTIER_ASSIGN_OR_RETURN(Measure m, MeasureFilePerBlock(pfs.directory + "-baseline", block, count));
      return Baseline{"one file per block: create, write, close; open, read, close", m};
    }
    case TierKind::kRemotePool: {
      const auto& remote = std::get<RemoteTierOptions>(options);
      const int connections = remote.connections_per_node * static_cast<int>(remote.endpoints.size());
      KVTIER_ASSIGN_OR_RETURN(Measure m, MeasureRedisBaseline(remote.endpoints, remote.topology == RemoteTopology::kCluster,
                                                              block, count, connections));
      return Baseline{"pipelined hiredis SET/GET, " + std::to_string(connections) + " connections", m};
    }
    case TierKind::kGpuHbm: {
      KVTIER_ASSIGN_OR_RETURN(Measure m,
                              MeasureCudaMemcpyBaseline(std::get<GpuHbmTierOptions>(options).device, block, count));
      return Baseline{"cudaMemcpy, pinned host memory", m};
    }
  }
  return Status::Internal("no baseline for this tier kind");
}

// The default tiers. `redis` is started here when redis-server is on PATH and kept running
// until the benchmark ends.
TierConfig DefaultBenchConfig(const std::string& dir, uint64_t bytes, std::unique_ptr<testing::RedisServers>* redis) {
  TierConfig config;
  config.data_dir = dir;
  const uint64_t capacity = bytes + (64u << 20);
  Result<std::vector<port::GpuDevice>> gpus = port::ListGpus();
  if (gpus.ok() && !gpus->empty()) {
    config.tiers.push_back(GpuHbmTierOptions{.capacity_bytes = capacity});
  } else {
    std::fprintf(stderr, "bench tiers: no gpu_hbm tier (%s)\n",
                 gpus.ok() ? "no CUDA device" : gpus.status().message().c_str());
  }
  config.tiers.push_back(DramTierOptions{.capacity_bytes = capacity, .lock_memory = false});
  config.tiers.push_back(CxlTierOptions{.path = "/dev/shm/kvtier-bench-cxl", .capacity_bytes = capacity});
  NvmeTierOptions nvme;
  nvme.files = {dir + "/nvme/slab.0"};
  nvme.capacity_bytes = 2 * capacity;  // each slot adds a 4 KiB header: twice the bytes of 4 KiB blocks
  nvme.recover = false;
  config.tiers.push_back(nvme);
  if (testing::RedisServers::Available()) {
    Result<std::unique_ptr<testing::RedisServers>> cluster = testing::RedisServers::StartCluster(3);
    if (cluster.ok()) {
      *redis = std::move(*cluster);
      config.tiers.push_back(RemoteTierOptions{.endpoints = (*redis)->endpoints()});
    } else {
      std::fprintf(stderr, "bench tiers: no remote_pool tier (%s)\n", cluster.status().message().c_str());
    }
  } else {
    std::fprintf(stderr, "bench tiers: no remote_pool tier (redis-server is not on PATH)\n");
  }
  config.tiers.push_back(ParallelFsTierOptions{.directory = dir + "/pfs", .fsync = FsyncPolicy::kNever});
  return config;
}

}  // namespace

Status TierBenchmarkOptions::Validate() const {
  if (block_bytes.empty()) return Status::InvalidArgument("no block sizes");
  for (uint64_t b : block_bytes) {
    if (b < 4096 || b % 4096 != 0 || b > (uint64_t{256} << 20)) return Status::InvalidArgument("block sizes must be 4 KiB multiples up to 256 MiB");
  }
  if (bytes_per_size < *std::max_element(block_bytes.begin(), block_bytes.end())) {
    return Status::InvalidArgument("--bytes-per-size must hold at least one block of each size");
  }
  if (queue_depths.empty()) return Status::InvalidArgument("no queue depths");
  for (int depth : queue_depths) {
    if (depth < 1 || depth > 1024) return Status::InvalidArgument("queue depths must be 1 to 1024, got " + std::to_string(depth));
  }
  for (const std::string& kind : only_kinds) {
    bool known = false;
    for (int k = 0; k <= 5; ++k) known = known || kind == TierKindName(static_cast<TierKind>(k));
    if (!known) return Status::InvalidArgument("--kinds: unknown tier kind '" + kind + "'");
  }
  return Status::Ok();
}

Result<std::string> RunTierBenchmark(const TierBenchmarkOptions& options) {
  KVTIER_RETURN_IF_ERROR(options.Validate());
  TierConfig config;
  std::unique_ptr<testing::RedisServers> redis;  // outlives the tiers that use it
  if (options.config_path.empty()) {
    config = DefaultBenchConfig(options.scratch_dir, options.bytes_per_size, &redis);
  } else {
    KVTIER_ASSIGN_OR_RETURN(config, LoadTierConfig(options.config_path));
  }
  nlohmann::json rows = nlohmann::json::array();
  for (const TierOptions& tier_options : config.tiers) {
    const TierKind kind = TierKindOf(tier_options);
    if (!options.only_kinds.empty() &&
        std::find(options.only_kinds.begin(), options.only_kinds.end(), TierKindName(kind)) == options.only_kinds.end()) {
      continue;
    }
    for (uint64_t block : options.block_bytes) {
      for (int depth : options.queue_depths) {
        const uint64_t count = std::max<uint64_t>(1, options.bytes_per_size / block);
        Measure m;
        Baseline base;
        // The tier and its baseline take turns, kRounds times, and each keeps its best pass:
        // one pass of each, run once, gave ratios from 0.1x to 1.7x on a busy machine.
        for (int round = 0; round < kRounds; ++round) {
          // A fresh tier per pass, so that every pass starts from the same empty region and
          // the baseline runs with no tier holding memory.
          KVTIER_ASSIGN_OR_RETURN(std::vector<std::unique_ptr<Tier>> tiers, OpenTiers({config.data_dir, {tier_options}}));
          KVTIER_ASSIGN_OR_RETURN(Measure pass, MeasureTier(*tiers.front(), block, count, depth));
          tiers.clear();
          KVTIER_ASSIGN_OR_RETURN(Baseline base_pass, MeasureBaseline(tier_options, kind, block, count, depth));
          KeepBest(m, std::move(pass));
          base.name = base_pass.name;
          KeepBest(base.measure, std::move(base_pass.measure));
        }
        rows.push_back({{"tier", std::visit([](const auto& o) { return o.name; }, tier_options)},
                        {"kind", TierKindName(kind)},
                        {"block_bytes", block},
                        {"queue_depth", depth},
                        {"blocks", count},
                        {"write_gbps", m.write_gbps},
                        {"read_gbps", m.read_gbps},
                        {"p50_us", Percentile(m.latencies_us, 0.50)},
                        {"p99_us", Percentile(m.latencies_us, 0.99)},
                        {"baseline", base.name},
                        {"baseline_write_gbps", base.measure.write_gbps},
                        {"baseline_read_gbps", base.measure.read_gbps},
                        {"write_vs_baseline", m.write_gbps / base.measure.write_gbps},
                        {"read_vs_baseline", m.read_gbps / base.measure.read_gbps}});
      }
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
