// T1 host DRAM and T2 CXL memory (see tiers.h): slots of a slab region, indexed in memory.
//
// Locking: keys are spread over shards, each a reader-writer lock over a map from key to
// its slot. Read copies the payload out under its shard's shared lock. Write fills a fresh
// slot with no lock held, then swaps it in under the shard's exclusive lock and frees the
// old slot there, so no reader can be copying a slot that is being reused: a Read sees the
// old block or the new one, never a torn mix. A Read whose checksum fails drops the block
// under the exclusive lock afterwards, only if the entry still has the generation it read.
// Lock order: a shard lock, then the size-class allocator's mutex (Free under a shard lock);
// Allocate takes no shard lock. The background prefault (region_prefaulter.h) takes no lock
// and needs none: it changes no byte of the region, so puts and reads run beside it.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <functional>
#include <shared_mutex>
#include <span>
#include <unordered_map>

#include "kvtier/tiers.h"
#include "tier/dram_tier.h"
#include "tier/memory_region.h"
#include "tier/region_prefaulter.h"
#include "tier/size_class_allocator.h"
#include "tier/tier_counters.h"
#include "tier/writer_checksum.h"

namespace kvtier {
namespace {

class MemoryTier final : public Tier {
 public:
  MemoryTier(TierKind kind, std::string name, int shards, std::unique_ptr<MemoryRegion> region, bool prefault)
      : kind_(kind),
        name_(std::move(name)),
        region_(std::move(region)),
        slots_({region_->bytes()}),
        shards_(static_cast<std::size_t>(shards)) {
    // mlock has faulted every page in already: a second pass would only cost a thread.
    if (prefault && !region_->memory_locked()) {
      prefaulter_ = std::make_unique<RegionPrefaulter>(region_->data(), region_->bytes());
    }
  }

  TierKind kind() const override { return kind_; }
  const std::string& name() const override { return name_; }

  using Tier::Write;
  Status Write(const WriteOp& op) override {
    const BlockKey& key = op.key;
    const std::span<const std::byte> payload = op.payload;
    if (payload.empty()) return Fail(Status::InvalidArgument(name() + ": cannot store an empty payload"));
    Result<RegionSlot> allocated = slots_.Allocate(SizeClassAllocator::RoundUp(payload.size()));
    if (!allocated.ok()) {
      return Fail(allocated.status().WithContext(name() + ": no room for a " + std::to_string(payload.size()) +
                                                 "-byte block"));
    }
    std::byte* const slot = region_->data() + allocated->offset;
    const uint64_t checksum = CopyWithChecksum(std::span(slot, payload.size()), payload);
    if (Status matched = CheckWriterChecksum(name(), key, op.checksum, checksum); !matched.ok()) {
      FreeSlot(slot, payload.size());
      return Fail(std::move(matched));
    }
    const Entry entry{slot, payload.size(), checksum, next_generation_.fetch_add(1, std::memory_order_relaxed)};
    Shard& shard = ShardFor(key);
    {
      std::unique_lock lock(shard.mutex);
      auto [it, inserted] = shard.blocks.try_emplace(key, entry);
      if (!inserted) {
        used_bytes_ -= it->second.size;
        FreeSlot(it->second.slot, it->second.size);
        it->second = entry;
      } else {
        blocks_.fetch_add(1, std::memory_order_relaxed);
      }
      used_bytes_ += entry.size;
    }
    counters_.writes.fetch_add(1, std::memory_order_relaxed);
    counters_.write_bytes.fetch_add(payload.size(), std::memory_order_relaxed);
    return Status::Ok();
  }

  using Tier::Read;
  Result<std::size_t> Read(const ReadOp& op) override {
    const BlockKey& key = op.key;
    const std::span<std::byte> out = op.out;
    Shard& shard = ShardFor(key);
    uint64_t failed_generation = 0;
    {
      std::shared_lock lock(shard.mutex);
      auto it = shard.blocks.find(key);
      if (it == shard.blocks.end()) {
        counters_.read_misses.fetch_add(1, std::memory_order_relaxed);
        return Status::NotFound(name() + ": block " + key.ToHex() + " is not here");
      }
      const Entry& entry = it->second;
      if (out.size() < entry.size) {
        return Status::InvalidArgument(name() + ": a buffer of " + std::to_string(out.size()) + " bytes cannot hold block " +
                                       key.ToHex() + " of " + std::to_string(entry.size));
      }
      const std::span<std::byte> copied = out.first(entry.size);
      if (CopyWithChecksum(copied, std::span<const std::byte>(entry.slot, entry.size)) == entry.checksum) {
        counters_.reads.fetch_add(1, std::memory_order_relaxed);
        counters_.read_bytes.fetch_add(entry.size, std::memory_order_relaxed);
        if (op.checksum != nullptr) *op.checksum = entry.checksum;
        return entry.size;
      }
      // The stored bytes changed under us (a memory fault or a stray write): hand back none.
      std::fill(copied.begin(), copied.end(), std::byte{0});
      failed_generation = entry.generation;
    }
    counters_.checksum_failures.fetch_add(1, std::memory_order_relaxed);
    if (failed_read_hook_) failed_read_hook_();
    // The shard lock was let go: a Write may have replaced the block meanwhile, and only the
    // copy that failed may go.
    {
      std::unique_lock lock(shard.mutex);
      auto it = shard.blocks.find(key);
      if (it != shard.blocks.end() && it->second.generation == failed_generation) EraseLocked(shard, it);
    }
    return Status::Corruption(name() + ": block " + key.ToHex() + " failed its checksum and was dropped");
  }

  std::optional<std::size_t> Size(const BlockKey& key) const override {
    const Shard& shard = ShardFor(key);
    std::shared_lock lock(shard.mutex);
    auto it = shard.blocks.find(key);
    if (it == shard.blocks.end()) return std::nullopt;
    return it->second.size;
  }

  Status Evict(const BlockKey& key) override {
    Shard& shard = ShardFor(key);
    std::unique_lock lock(shard.mutex);
    auto it = shard.blocks.find(key);
    if (it == shard.blocks.end()) return Status::NotFound(name() + ": block " + key.ToHex() + " is not here");
    EraseLocked(shard, it);
    counters_.evictions.fetch_add(1, std::memory_order_relaxed);
    return Status::Ok();
  }

  TierStats GetStats() const override {
    TierStats s;
    s.capacity_bytes = region_->bytes();
    s.used_bytes = used_bytes_.load(std::memory_order_relaxed);
    s.blocks = blocks_.load(std::memory_order_relaxed);
    counters_.Fill(s);
    return s;
  }

  bool CorruptForTesting(const BlockKey& key) {
    Shard& shard = ShardFor(key);
    std::unique_lock lock(shard.mutex);
    auto it = shard.blocks.find(key);
    if (it == shard.blocks.end()) return false;
    it->second.slot[it->second.size / 2] ^= std::byte{0x40};
    return true;
  }

  void SetFailedReadHookForTesting(std::function<void()> hook) { failed_read_hook_ = std::move(hook); }
  bool WaitForPrefaultForTesting(std::chrono::milliseconds timeout) {
    return prefaulter_ == nullptr || prefaulter_->WaitFor(timeout);
  }
  bool prefaulting() const { return prefaulter_ != nullptr; }
  std::span<const std::byte> region() const { return {region_->data(), region_->bytes()}; }

 private:
  struct Entry {
    std::byte* slot;
    std::size_t size;
    uint64_t checksum;
    uint64_t generation;  // unique per Write: tells a block from the one that replaced it
  };
  struct Shard {
    mutable std::shared_mutex mutex;
    std::unordered_map<BlockKey, Entry, BlockKeyHash> blocks;  // GUARDED_BY(mutex)
  };

  // Requires the shard's exclusive lock.
  void EraseLocked(Shard& shard, std::unordered_map<BlockKey, Entry, BlockKeyHash>::iterator it) {
    used_bytes_ -= it->second.size;
    FreeSlot(it->second.slot, it->second.size);
    shard.blocks.erase(it);
    blocks_.fetch_sub(1, std::memory_order_relaxed);
  }
  void FreeSlot(std::byte* slot, std::size_t size) {
    slots_.Free({0, static_cast<uint64_t>(slot - region_->data())}, SizeClassAllocator::RoundUp(size));
  }
  Shard& ShardFor(const BlockKey& key) { return shards_[BlockKeyHash{}(key) % shards_.size()]; }
  const Shard& ShardFor(const BlockKey& key) const { return shards_[BlockKeyHash{}(key) % shards_.size()]; }
  Status Fail(Status status) {
    counters_.write_failures.fetch_add(1, std::memory_order_relaxed);
    return status;
  }

  const TierKind kind_;
  const std::string name_;
  const std::unique_ptr<MemoryRegion> region_;
  SizeClassAllocator slots_;
  std::vector<Shard> shards_;
  std::atomic<uint64_t> used_bytes_{0}, blocks_{0}, next_generation_{1};
  TierCounters counters_;
  std::function<void()> failed_read_hook_;  // test seam: set while no Read runs
  // Last, so that it is destroyed first: its thread stops before the region is unmapped.
  std::unique_ptr<RegionPrefaulter> prefaulter_;
};

}  // namespace

Status DramTierOptions::Validate() const {
  if (capacity_bytes == 0) return Status::InvalidArgument("DRAM tier '" + name + "': capacity_bytes must be > 0");
  if (shards < 1 || shards > 4096) return Status::InvalidArgument("DRAM tier '" + name + "': shards must be 1 to 4096");
  return Status::Ok();
}

bool CorruptDramBlockForTesting(Tier* tier, const BlockKey& key) {
  auto* dram = dynamic_cast<MemoryTier*>(tier);
  return dram != nullptr && dram->CorruptForTesting(key);
}

void SetDramFailedReadHookForTesting(Tier* tier, std::function<void()> hook) {
  if (auto* dram = dynamic_cast<MemoryTier*>(tier)) dram->SetFailedReadHookForTesting(std::move(hook));
}

bool WaitForMemoryTierPrefaultForTesting(Tier* tier, std::chrono::milliseconds timeout) {
  auto* memory = dynamic_cast<MemoryTier*>(tier);
  return memory == nullptr || memory->WaitForPrefaultForTesting(timeout);
}

bool MemoryTierPrefaultsForTesting(const Tier* tier) {
  const auto* memory = dynamic_cast<const MemoryTier*>(tier);
  return memory != nullptr && memory->prefaulting();
}

std::span<const std::byte> MemoryTierRegionForTesting(const Tier* tier) {
  const auto* memory = dynamic_cast<const MemoryTier*>(tier);
  return memory != nullptr ? memory->region() : std::span<const std::byte>();
}

Result<std::unique_ptr<Tier>> NewDramTier(const DramTierOptions& options) {
  KVTIER_RETURN_IF_ERROR(options.Validate());
  KVTIER_ASSIGN_OR_RETURN(std::unique_ptr<MemoryRegion> region,
                          MemoryRegion::Create({.capacity_bytes = options.capacity_bytes,
                                                .numa_node = options.numa_node,
                                                .lock_memory = options.lock_memory,
                                                .huge_pages = options.huge_pages,
                                                .pin_for_gpu = options.pin_for_gpu}));
  return std::unique_ptr<Tier>(
      std::make_unique<MemoryTier>(TierKind::kCpuDram, options.name, options.shards, std::move(region), options.prefault));
}

Status CxlTierOptions::Validate() const {
  if (path.empty()) return Status::InvalidArgument("CXL tier '" + name + "': path (a DAX device or a file) is required");
  if (capacity_bytes == 0) return Status::InvalidArgument("CXL tier '" + name + "': capacity_bytes must be > 0");
  if (shards < 1 || shards > 4096) return Status::InvalidArgument("CXL tier '" + name + "': shards must be 1 to 4096");
  return Status::Ok();
}

Result<std::unique_ptr<Tier>> NewCxlTier(const CxlTierOptions& options) {
  KVTIER_RETURN_IF_ERROR(options.Validate());
  KVTIER_ASSIGN_OR_RETURN(std::unique_ptr<MemoryRegion> region,
                          MemoryRegion::Create({.capacity_bytes = options.capacity_bytes,
                                                .numa_node = options.numa_node,
                                                .lock_memory = false,
                                                .huge_pages = false,
                                                .backing_file = options.path}));
  return std::unique_ptr<Tier>(
      std::make_unique<MemoryTier>(TierKind::kCxlMemory, options.name, options.shards, std::move(region), options.prefault));
}

}  // namespace kvtier
