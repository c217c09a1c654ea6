// The T0 GPU HBM tier (gpu_hbm_tier.h has the layout, the copy pipeline and the locking).
#include "tier/gpu_hbm_tier.h"

#include "kvtier/tiers.h"

#ifdef KVTIER_HAVE_CUDA
// For XXH3_state_t by value (libxxhash's documented way): the checksum is computed chunk by
// chunk as the bytes pass through the staging buffers.
#define XXH_STATIC_LINKING_ONLY
#include <cuda_runtime_api.h>
#include <xxhash.h>

#include <algorithm>
#include <array>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <shared_mutex>
#include <unordered_map>
#include <vector>

#include "tier/size_class_allocator.h"
#include "tier/tier_counters.h"
#include "tier/writer_checksum.h"
#endif

namespace kvtier {

Status GpuHbmTierOptions::Validate() const {
  const std::string who = "GPU HBM tier '" + name + "'";
  if (device < 0) {
    return Status::InvalidArgument(who + ": device must be a CUDA device index >= 0, got " + std::to_string(device));
  }
  if (capacity_bytes == 0) return Status::InvalidArgument(who + ": capacity_bytes must be > 0");
  if (streams < 1 || streams > 16) {
    return Status::InvalidArgument(who + ": streams must be 1 to 16, got " + std::to_string(streams));
  }
  // Halves of at least 32 KiB, so that a chunk's DMA outlasts the event wait that ends it,
  // and at most 1 GiB per stream: pinned memory is taken from what the OS can page out.
  if (staging_bytes < (64u << 10) || staging_bytes > (uint64_t{1} << 30)) {
    return Status::InvalidArgument(who + ": staging_bytes must be 64 KiB to 1 GiB, got " +
                                   std::to_string(staging_bytes));
  }
  return Status::Ok();
}

#ifdef KVTIER_HAVE_CUDA

namespace {

constexpr std::size_t kShards = 16;
constexpr std::size_t kHashPiece = 32 * 1024;  // hashed right after it is copied, while in cache

std::string CudaMessage(const char* call, cudaError_t error) {
  return std::string(call) + " failed: " + cudaGetErrorString(error);
}

// Copies `n` bytes and folds the copy into `state`: the streaming form of CopyWithChecksum,
// so the checksum equals PayloadChecksum of the whole block.
void HashingCopy(XXH3_state_t& state, std::byte* dst, const std::byte* src, std::size_t n) {
  for (std::size_t offset = 0; offset < n; offset += kHashPiece) {
    const std::size_t piece = std::min(kHashPiece, n - offset);
    std::memcpy(dst + offset, src + offset, piece);
    (void)XXH3_64bits_update(&state, dst + offset, piece);
  }
}

// Makes `device` current on this thread for a scope and gives the caller's back after: the
// runtime's current device is per thread, and an engine calling in may be using another.
class DeviceScope {
 public:
  explicit DeviceScope(int device) {
    if (cudaGetDevice(&previous_) != cudaSuccess) previous_ = -1;
    if (previous_ != device) error_ = cudaSetDevice(device);
    restore_ = previous_ >= 0 && previous_ != device && error_ == cudaSuccess;
  }
  ~DeviceScope() {
    if (restore_) (void)cudaSetDevice(previous_);
  }
  DeviceScope(const DeviceScope&) = delete;
  DeviceScope& operator=(const DeviceScope&) = delete;

  cudaError_t error() const { return error_; }

 private:
  int previous_ = -1;
  cudaError_t error_ = cudaSuccess;
  bool restore_ = false;
};

// The device memory of the tier. Shared by every slot carved from it, so that it outlives
// the tier while a DeviceSpan still points into it.
class DevicePool {
 public:
  DevicePool(int device, std::byte* base, uint64_t bytes) : device_(device), base_(base), slots_({bytes}) {}
  ~DevicePool() {
    // Nothing to report to: a failure here (the runtime already unloaded at exit) leaves
    // the memory to the driver, which frees it with the context.
    const DeviceScope scope(device_);
    if (scope.error() == cudaSuccess) (void)cudaFree(base_);
  }
  DevicePool(const DevicePool&) = delete;
  DevicePool& operator=(const DevicePool&) = delete;

  std::byte* base() const { return base_; }
  uint64_t bytes() const { return slots_.total_bytes(); }
  SizeClassAllocator& slots() { return slots_; }

 private:
  const int device_;
  std::byte* const base_;
  SizeClassAllocator slots_;
};

// One slot of the pool, returned to the allocator when the last reference goes.
class DeviceSlot {
 public:
  DeviceSlot(std::shared_ptr<DevicePool> pool, uint64_t offset, uint64_t bytes)
      : pool_(std::move(pool)), offset_(offset), bytes_(bytes) {}
  ~DeviceSlot() { pool_->slots().Free({0, offset_}, bytes_); }
  DeviceSlot(const DeviceSlot&) = delete;
  DeviceSlot& operator=(const DeviceSlot&) = delete;

  std::byte* data() const { return pool_->base() + offset_; }

 private:
  const std::shared_ptr<DevicePool> pool_;
  const uint64_t offset_;
  const uint64_t bytes_;
};

// A stream with a pinned staging buffer in two halves, each with an event that completes
// when the DMA through it is done. Used by one transfer at a time (LanePool hands it out).
class Lane {
 public:
  explicit Lane(int device) : device_(device) {}
  ~Lane() {
    const DeviceScope scope(device_);  // streams, events and pinned memory belong to it
    if (stream_ != nullptr) (void)cudaStreamSynchronize(stream_);
    for (cudaEvent_t event : done_) {
      if (event != nullptr) (void)cudaEventDestroy(event);
    }
    if (stream_ != nullptr) (void)cudaStreamDestroy(stream_);
    if (staging_ != nullptr) (void)cudaFreeHost(staging_);
  }
  Lane(const Lane&) = delete;
  Lane& operator=(const Lane&) = delete;

  Status Init(uint64_t staging_bytes) {
    // Non-blocking: no implicit synchronization with the legacy default stream, which the
    // engine's own work may be using.
    cudaError_t error = cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking);
    if (error != cudaSuccess) return Status::Unavailable(CudaMessage("cudaStreamCreateWithFlags", error));
    for (cudaEvent_t& event : done_) {
      error = cudaEventCreateWithFlags(&event, cudaEventDisableTiming);
      if (error != cudaSuccess) return Status::Unavailable(CudaMessage("cudaEventCreateWithFlags", error));
    }
    void* staging = nullptr;
    error = cudaHostAlloc(&staging, staging_bytes, cudaHostAllocDefault);
    if (error != cudaSuccess) {
      return Status::ResourceExhausted(CudaMessage("cudaHostAlloc", error) + " for " + std::to_string(staging_bytes) +
                                       " pinned staging bytes; lower staging_bytes or streams");
    }
    staging_ = static_cast<std::byte*>(staging);
    half_bytes_ = staging_bytes / 2;
    return Status::Ok();
  }

  cudaStream_t stream() const { return stream_; }
  std::size_t half_bytes() const { return half_bytes_; }
  std::byte* half(int h) const { return staging_ + static_cast<std::size_t>(h) * half_bytes_; }
  cudaEvent_t event(int h) const { return done_[static_cast<std::size_t>(h)]; }

  // Per-transfer state, reset by the transfer when it finishes.
  struct InFlight {
    bool busy = false;
    std::size_t offset = 0;  // of the chunk in the block
    std::size_t bytes = 0;
  };
  std::array<InFlight, 2> in_flight;
  int next = 0;  // the half to fill next; when busy, it holds the oldest chunk in flight

 private:
  const int device_;
  cudaStream_t stream_ = nullptr;
  std::array<cudaEvent_t, 2> done_{};
  std::byte* staging_ = nullptr;
  std::size_t half_bytes_ = 0;
};

// The lanes of one direction. A batch takes one lane (waiting for it) and then whatever
// other lanes are free, so a lone caller uses every stream and many callers share them.
class LanePool {
 public:
  Status Init(int device, int lanes, uint64_t staging_bytes) {
    for (int i = 0; i < lanes; ++i) {
      lanes_.push_back(std::make_unique<Lane>(device));
      KVTIER_RETURN_IF_ERROR(lanes_.back()->Init(staging_bytes));
      free_.push_back(lanes_.back().get());
    }
    return Status::Ok();
  }

  // Up to `want` (>= 1) lanes; waits only for the first one.
  std::vector<Lane*> Acquire(std::size_t want) {
    std::unique_lock lock(mutex_);
    available_.wait(lock, [&] { return !free_.empty(); });
    std::vector<Lane*> out;
    while (!free_.empty() && out.size() < want) {
      out.push_back(free_.back());
      free_.pop_back();
    }
    return out;
  }
  void Release(const std::vector<Lane*>& lanes) {
    {
      std::lock_guard lock(mutex_);
      free_.insert(free_.end(), lanes.begin(), lanes.end());
    }
    available_.notify_all();
  }

 private:
  std::vector<std::unique_ptr<Lane>> lanes_;
  std::mutex mutex_;
  std::condition_variable available_;
  std::vector<Lane*> free_;  // GUARDED_BY(mutex_)
};

enum class Direction { kToDevice, kToHost };

// One block's copy through a lane.
struct Transfer {
  std::byte* device = nullptr;     // the slot
  const std::byte* src = nullptr;  // kToDevice: the caller's payload
  std::byte* dst = nullptr;        // kToHost: the caller's buffer
  std::size_t size = 0;
  std::size_t issued = 0;  // bytes whose DMA has been queued
  XXH3_state_t hash;
  Status status;
};

class GpuHbmTier final : public Tier {
 public:
  GpuHbmTier(const GpuHbmTierOptions& options, std::shared_ptr<DevicePool> pool)
      : name_(options.name), device_(options.device), pool_(std::move(pool)), shards_(kShards) {}

  Status Init(const GpuHbmTierOptions& options) {
    KVTIER_RETURN_IF_ERROR(to_device_.Init(device_, options.streams, options.staging_bytes));
    return to_host_.Init(device_, options.streams, options.staging_bytes);
  }

  TierKind kind() const override { return TierKind::kGpuHbm; }
  const std::string& name() const override { return name_; }

  using Tier::Write;
  Status Write(const WriteOp& op) override { return std::move(WriteBatch({&op, 1})[0]); }

  using Tier::Read;
  Result<std::size_t> Read(const ReadOp& op) override { return std::move(ReadBatch({&op, 1})[0]); }

  std::vector<Status> WriteBatch(std::span<const WriteOp> ops) override {
    std::vector<Status> results(ops.size());
    std::vector<std::shared_ptr<DeviceSlot>> slots(ops.size());
    std::vector<Transfer> transfers(ops.size());
    std::vector<Transfer*> queued;
    for (std::size_t i = 0; i < ops.size(); ++i) {
      const WriteOp& op = ops[i];
      if (op.payload.empty()) {
        results[i] = Status::InvalidArgument(name_ + ": cannot store an empty payload");
        continue;
      }
      Result<std::shared_ptr<DeviceSlot>> slot = AllocateSlot(op.payload.size());
      if (!slot.ok()) {
        results[i] = slot.status().WithContext(name_ + ": no room for a " + std::to_string(op.payload.size()) +
                                               "-byte block");
        continue;
      }
      slots[i] = std::move(*slot);
      transfers[i].device = slots[i]->data();
      transfers[i].src = op.payload.data();
      transfers[i].size = op.payload.size();
      queued.push_back(&transfers[i]);
    }
    RunTransfers(Direction::kToDevice, queued);
    // Commit in the order of `ops`, so a batch that writes one key twice keeps the later one.
    for (std::size_t i = 0; i < ops.size(); ++i) {
      if (slots[i] != nullptr && !transfers[i].status.ok()) results[i] = transfers[i].status;
      const uint64_t checksum = results[i].ok() ? XXH3_64bits_digest(&transfers[i].hash) : 0;
      if (results[i].ok()) results[i] = CheckWriterChecksum(name_, ops[i].key, ops[i].checksum, checksum);
      if (!results[i].ok()) {
        counters_.write_failures.fetch_add(1, std::memory_order_relaxed);
        continue;
      }
      Commit(ops[i].key, Entry{std::move(slots[i]), ops[i].payload.size(), checksum});
      counters_.writes.fetch_add(1, std::memory_order_relaxed);
      counters_.write_bytes.fetch_add(ops[i].payload.size(), std::memory_order_relaxed);
    }
    return results;
  }

  std::vector<Result<std::size_t>> ReadBatch(std::span<const ReadOp> ops) override {
    std::vector<Status> errors(ops.size());
    std::vector<Entry> entries(ops.size());
    std::vector<Transfer> transfers(ops.size());
    std::vector<Transfer*> queued;
    for (std::size_t i = 0; i < ops.size(); ++i) {
      const ReadOp& op = ops[i];
      std::optional<Entry> entry = Find(op.key);
      if (!entry) {
        counters_.read_misses.fetch_add(1, std::memory_order_relaxed);
        errors[i] = Status::NotFound(name_ + ": block " + op.key.ToHex() + " is not here");
        continue;
      }
      if (op.out.size() < entry->size) {
        errors[i] = Status::InvalidArgument(name_ + ": a buffer of " + std::to_string(op.out.size()) +
                                            " bytes cannot hold block " + op.key.ToHex() + " of " +
                                            std::to_string(entry->size));
        continue;
      }
      entries[i] = std::move(*entry);
      transfers[i].device = entries[i].slot->data();
      transfers[i].dst = op.out.data();
      transfers[i].size = entries[i].size;
      queued.push_back(&transfers[i]);
    }
    RunTransfers(Direction::kToHost, queued);
    std::vector<Result<std::size_t>> results;
    results.reserve(ops.size());
    for (std::size_t i = 0; i < ops.size(); ++i) {
      if (entries[i].slot == nullptr) {
        results.emplace_back(std::move(errors[i]));
      } else if (!transfers[i].status.ok()) {
        results.emplace_back(transfers[i].status);
      } else if (XXH3_64bits_digest(&transfers[i].hash) != entries[i].checksum) {
        // The device bytes changed (an HBM fault or a stray kernel write): never return them,
        // not even in the caller's buffer.
        std::memset(ops[i].out.data(), 0, entries[i].size);
        counters_.checksum_failures.fetch_add(1, std::memory_order_relaxed);
        DropIfStill(ops[i].key, entries[i].slot.get());
        results.emplace_back(Status::Corruption(name_ + ": block " + ops[i].key.ToHex() +
                                                " failed its checksum and was dropped"));
      } else {
        counters_.reads.fetch_add(1, std::memory_order_relaxed);
        counters_.read_bytes.fetch_add(entries[i].size, std::memory_order_relaxed);
        if (ops[i].checksum != nullptr) *ops[i].checksum = entries[i].checksum;
        results.emplace_back(entries[i].size);
      }
    }
    return results;
  }

  std::optional<std::size_t> Size(const BlockKey& key) const override {
    std::optional<Entry> entry = Find(key);
    if (!entry) return std::nullopt;
    return entry->size;
  }

  Status Evict(const BlockKey& key) override {
    std::shared_ptr<DeviceSlot> released;  // freed after the shard lock is dropped
    {
      Shard& shard = ShardFor(key);
      std::unique_lock lock(shard.mutex);
      auto it = shard.blocks.find(key);
      if (it == shard.blocks.end()) return Status::NotFound(name_ + ": block " + key.ToHex() + " is not here");
      used_bytes_.fetch_sub(it->second.size, std::memory_order_relaxed);
      released = std::move(it->second.slot);
      shard.blocks.erase(it);
    }
    blocks_.fetch_sub(1, std::memory_order_relaxed);
    counters_.evictions.fetch_add(1, std::memory_order_relaxed);
    return Status::Ok();
  }

  TierStats GetStats() const override {
    TierStats s;
    s.capacity_bytes = pool_->bytes();
    s.used_bytes = used_bytes_.load(std::memory_order_relaxed);
    s.blocks = blocks_.load(std::memory_order_relaxed);
    counters_.Fill(s);
    return s;
  }

  Result<DeviceSpan> Locate(const BlockKey& key) const {
    std::optional<Entry> entry = Find(key);
    if (!entry) return Status::NotFound(name_ + ": block " + key.ToHex() + " is not here");
    DeviceSpan span{.data = entry->slot->data(), .size = entry->size, .device = device_, .checksum = entry->checksum};
    span.hold = std::move(entry->slot);
    return span;
  }

  bool CorruptForTesting(const BlockKey& key) {
    std::optional<Entry> entry = Find(key);
    const DeviceScope scope(device_);
    if (!entry || scope.error() != cudaSuccess) return false;
    // Synchronous copies of one byte: the block's own write finished before it was indexed.
    std::byte* at = entry->slot->data() + entry->size / 2;
    std::byte value{};
    if (cudaMemcpy(&value, at, 1, cudaMemcpyDeviceToHost) != cudaSuccess) return false;
    value ^= std::byte{0x40};
    return cudaMemcpy(at, &value, 1, cudaMemcpyHostToDevice) == cudaSuccess;
  }

 private:
  struct Entry {
    std::shared_ptr<DeviceSlot> slot;
    std::size_t size = 0;
    uint64_t checksum = 0;
  };
  struct Shard {
    mutable std::shared_mutex mutex;
    std::unordered_map<BlockKey, Entry, BlockKeyHash> blocks;  // GUARDED_BY(mutex)
  };

  Shard& ShardFor(const BlockKey& key) { return shards_[BlockKeyHash{}(key) % shards_.size()]; }
  const Shard& ShardFor(const BlockKey& key) const { return shards_[BlockKeyHash{}(key) % shards_.size()]; }

  // A copy of the entry: holding its slot keeps the bytes from reuse while they are copied.
  std::optional<Entry> Find(const BlockKey& key) const {
    const Shard& shard = ShardFor(key);
    std::shared_lock lock(shard.mutex);
    auto it = shard.blocks.find(key);
    if (it == shard.blocks.end()) return std::nullopt;
    return it->second;
  }

  Result<std::shared_ptr<DeviceSlot>> AllocateSlot(std::size_t size) {
    const uint64_t bytes = SizeClassAllocator::RoundUp(size);
    KVTIER_ASSIGN_OR_RETURN(RegionSlot slot, pool_->slots().Allocate(bytes));
    return std::make_shared<DeviceSlot>(pool_, slot.offset, bytes);
  }

  void Commit(const BlockKey& key, Entry entry) {
    const std::size_t size = entry.size;
    Entry replaced;  // its slot is freed after the shard lock is dropped
    {
      Shard& shard = ShardFor(key);
      std::unique_lock lock(shard.mutex);
      auto [it, inserted] = shard.blocks.try_emplace(key);
      if (inserted) {
        blocks_.fetch_add(1, std::memory_order_relaxed);
      } else {
        used_bytes_.fetch_sub(it->second.size, std::memory_order_relaxed);
        replaced = std::move(it->second);
      }
      it->second = std::move(entry);
      used_bytes_.fetch_add(size, std::memory_order_relaxed);
    }
  }

  // Drops a corrupt block, unless a Write has replaced it since it was read.
  void DropIfStill(const BlockKey& key, const DeviceSlot* slot) {
    std::shared_ptr<DeviceSlot> released;
    {
      Shard& shard = ShardFor(key);
      std::unique_lock lock(shard.mutex);
      auto it = shard.blocks.find(key);
      if (it == shard.blocks.end() || it->second.slot.get() != slot) return;
      used_bytes_.fetch_sub(it->second.size, std::memory_order_relaxed);
      released = std::move(it->second.slot);
      shard.blocks.erase(it);
    }
    blocks_.fetch_sub(1, std::memory_order_relaxed);
  }

  // Moves every transfer through the lanes of `direction`, each lane advancing its
  // transfer by one chunk in turn so the CPU work of one overlaps the DMA of the others.
  // Each transfer's status says how it went.
  void RunTransfers(Direction direction, const std::vector<Transfer*>& transfers) {
    if (transfers.empty()) return;
    for (Transfer* t : transfers) (void)XXH3_64bits_reset(&t->hash);
    const DeviceScope scope(device_);
    if (scope.error() != cudaSuccess) {
      const Status error = Status::Unavailable(name_ + ": " + CudaMessage("cudaSetDevice", scope.error()));
      for (Transfer* t : transfers) t->status = error;
      return;
    }
    LanePool& pool = direction == Direction::kToDevice ? to_device_ : to_host_;
    const std::vector<Lane*> lanes = pool.Acquire(transfers.size());
    std::vector<Transfer*> current(lanes.size(), nullptr);
    std::size_t next = 0, active = 0;
    do {
      active = 0;
      for (std::size_t l = 0; l < lanes.size(); ++l) {
        if (current[l] != nullptr && (current[l]->issued == current[l]->size || !current[l]->status.ok())) {
          Finish(direction, *lanes[l], *current[l]);
          current[l] = nullptr;
        }
        if (current[l] == nullptr && next < transfers.size()) current[l] = transfers[next++];
        if (current[l] == nullptr) continue;
        Step(direction, *lanes[l], *current[l]);
        ++active;
      }
    } while (active > 0);
    pool.Release(lanes);
  }

  // Queues the next chunk of `t` on the lane, first waiting for (and, reading, draining)
  // the half it reuses.
  void Step(Direction direction, Lane& lane, Transfer& t) {
    const int h = lane.next;
    if (lane.in_flight[static_cast<std::size_t>(h)].busy && !Retire(direction, lane, t, h)) return;
    const std::size_t n = std::min(lane.half_bytes(), t.size - t.issued);
    cudaError_t error = cudaSuccess;
    if (direction == Direction::kToDevice) {
      HashingCopy(t.hash, lane.half(h), t.src + t.issued, n);
      error = cudaMemcpyAsync(t.device + t.issued, lane.half(h), n, cudaMemcpyHostToDevice, lane.stream());
    } else {
      error = cudaMemcpyAsync(lane.half(h), t.device + t.issued, n, cudaMemcpyDeviceToHost, lane.stream());
    }
    if (error == cudaSuccess) error = cudaEventRecord(lane.event(h), lane.stream());
    if (error != cudaSuccess) {
      t.status = Status::IoError(name_ + ": " + CudaMessage("queueing a copy", error));
      return;
    }
    lane.in_flight[static_cast<std::size_t>(h)] = {.busy = true, .offset = t.issued, .bytes = n};
    t.issued += n;
    lane.next = 1 - h;
  }

  // Waits for the chunk in half `h`; reading, copies it out and hashes it. False on error.
  bool Retire(Direction direction, Lane& lane, Transfer& t, int h) {
    Lane::InFlight& chunk = lane.in_flight[static_cast<std::size_t>(h)];
    chunk.busy = false;
    if (const cudaError_t error = cudaEventSynchronize(lane.event(h)); error != cudaSuccess) {
      t.status = Status::IoError(name_ + ": " + CudaMessage("cudaEventSynchronize", error));
      return false;
    }
    if (direction == Direction::kToHost) HashingCopy(t.hash, t.dst + chunk.offset, lane.half(h), chunk.bytes);
    return true;
  }

  // Completes `t`: drains the chunks still in flight, oldest first, and leaves the lane
  // idle for the next transfer even when `t` failed.
  void Finish(Direction direction, Lane& lane, Transfer& t) {
    for (int i = 0; i < 2; ++i) {
      const int h = lane.next;
      if (lane.in_flight[static_cast<std::size_t>(h)].busy && t.status.ok()) (void)Retire(direction, lane, t, h);
      lane.in_flight[static_cast<std::size_t>(h)].busy = false;
      lane.next = 1 - h;
    }
    // Covers every copy of the lane, including those of a failed transfer whose halves were
    // not retired: the staging buffer must be idle before the next transfer fills it.
    if (const cudaError_t error = cudaStreamSynchronize(lane.stream()); error != cudaSuccess && t.status.ok()) {
      t.status = Status::IoError(name_ + ": " + CudaMessage("cudaStreamSynchronize", error));
    }
    lane.next = 0;
  }

  const std::string name_;
  const int device_;
  const std::shared_ptr<DevicePool> pool_;
  std::vector<Shard> shards_;
  LanePool to_device_, to_host_;
  std::atomic<uint64_t> used_bytes_{0}, blocks_{0};
  TierCounters counters_;
};

GpuHbmTier* AsGpuTier(Tier* tier) { return dynamic_cast<GpuHbmTier*>(tier); }

}  // namespace

Result<std::unique_ptr<Tier>> NewGpuHbmTier(const GpuHbmTierOptions& options) {
  KVTIER_RETURN_IF_ERROR(options.Validate());
  const std::string who = "GPU HBM tier '" + options.name + "'";
  int count = 0;
  // The statically linked runtime loads the driver here; without one (or without a GPU)
  // this fails cleanly with an error string.
  if (const cudaError_t error = cudaGetDeviceCount(&count); error != cudaSuccess) {
    return Status::Unavailable(who + ": no usable CUDA device: " + cudaGetErrorString(error));
  }
  if (options.device >= count) {
    return Status::InvalidArgument(who + ": device " + std::to_string(options.device) + " does not exist (" +
                                   std::to_string(count) + " CUDA device(s) visible; check CUDA_VISIBLE_DEVICES)");
  }
  const DeviceScope scope(options.device);  // for the pool, the streams and the staging buffers
  if (scope.error() != cudaSuccess) {
    return Status::Unavailable(who + ": " + CudaMessage("cudaSetDevice", scope.error()));
  }
  const uint64_t bytes = SizeClassAllocator::RoundUp(options.capacity_bytes);
  void* base = nullptr;
  if (const cudaError_t error = cudaMalloc(&base, bytes); error != cudaSuccess) {
    const std::string message =
        who + ": " + CudaMessage("cudaMalloc", error) + " for " + std::to_string(bytes) + " bytes";
    if (error == cudaErrorMemoryAllocation) return Status::ResourceExhausted(message + "; lower capacity_bytes");
    return Status::Unavailable(message);
  }
  auto pool = std::make_shared<DevicePool>(options.device, static_cast<std::byte*>(base), bytes);
  auto tier = std::make_unique<GpuHbmTier>(options, std::move(pool));
  if (Status status = tier->Init(options); !status.ok()) return status.WithContext(who);
  return std::unique_ptr<Tier>(std::move(tier));
}

Result<DeviceSpan> DeviceLocation(Tier* tier, const BlockKey& key) {
  GpuHbmTier* gpu = AsGpuTier(tier);
  if (gpu == nullptr) return Status::InvalidArgument("DeviceLocation: the tier is not a GPU HBM tier");
  return gpu->Locate(key);
}

bool CorruptGpuBlockForTesting(Tier* tier, const BlockKey& key) {
  GpuHbmTier* gpu = AsGpuTier(tier);
  return gpu != nullptr && gpu->CorruptForTesting(key);
}

#else  // !KVTIER_HAVE_CUDA

Result<std::unique_ptr<Tier>> NewGpuHbmTier(const GpuHbmTierOptions& options) {
  KVTIER_RETURN_IF_ERROR(options.Validate());
  return Status::Unsupported("GPU HBM tier '" + options.name + "': kvtier was built without CUDA " +
                             "(configure with -DKVTIER_WITH_CUDA=ON and a CUDA toolkit)");
}

Result<DeviceSpan> DeviceLocation(Tier*, const BlockKey&) {
  return Status::Unsupported("DeviceLocation: kvtier was built without CUDA");
}

bool CorruptGpuBlockForTesting(Tier*, const BlockKey&) { return false; }

#endif  // KVTIER_HAVE_CUDA

}  // namespace kvtier
