// Slots in size classes, carved from fixed regions: the one allocator of every tier that
// splits a fixed space into slots (the DRAM and CXL tiers' mapped region, the GPU tier's
// device pool, the NVMe tier's files). It hands out offsets and touches no memory.
//
// Each region is carved into slabs on demand; a slab serves one size class (a slot size, a
// multiple of 4 KiB) and holds max(1, 2 MiB / slot) slots, so a model's equal-sized blocks
// fill whole slabs. Freed slots go back to their slab. A slab whose slots are all free again
// goes back to its region's free space, where it merges with free neighbours and any class
// carves its next slab from: that is the rebalancing between classes, so a workload that
// changes block sizes does not strand the space of the old class. New slabs go to the
// regions in turn (so a batch spreads over all of an NVMe tier's files), each at the lowest
// free offset that fits it; when no free run holds a whole slab, a single slot is carved.
// Written here because the general allocators (malloc, jemalloc) neither hand out offsets
// in a space they do not own nor keep a tier's capacity exact; CacheLib's slab allocator,
// which does, is not packaged for Debian.
// Costs: a slab goes back only when every slot in it is free, so a slab with one live slot
// keeps its class; free space in partly used slabs of other classes is what a failed
// Allocate can leave behind (at most one partly used slab per class whose other slabs are
// full, plus every slot freed in a class and not yet reused).
//
// Persistence: the slab layout is the only state a restart cannot re-derive from the slots,
// so a SlabListener (the NVMe tier's slab journal) is told of every new slab before any of
// its slots is handed out, and RestoreSlab replays the surviving layout into a fresh
// allocator. A released slab is not reported: its space is free, and a later slab over it
// is reported when carved.
//
// Thread-safety: every method may be called concurrently (one internal mutex); the listener
// runs under it.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <utility>
#include <vector>

#include "kvtier/status.h"

namespace kvtier {

struct RegionSlot {
  uint32_t region = 0;  // index into the regions the allocator was made with
  uint64_t offset = 0;  // 4 KiB-aligned

  friend bool operator==(const RegionSlot&, const RegionSlot&) = default;
};

// A run of equal slots in one region.
struct RegionSlab {
  uint32_t region = 0;
  uint64_t offset = 0;
  uint64_t bytes = 0;  // a multiple of slot_bytes
  uint64_t slot_bytes = 0;

  friend bool operator==(const RegionSlab&, const RegionSlab&) = default;
};

class SizeClassAllocator {
 public:
  static constexpr uint64_t kAlignment = 4096;
  static constexpr uint64_t kSlabBytes = uint64_t{2} << 20;

  // `region_bytes[i]`: the usable bytes of region i (rounded down to 4 KiB).
  explicit SizeClassAllocator(std::vector<uint64_t> region_bytes);
  SizeClassAllocator(const SizeClassAllocator&) = delete;
  SizeClassAllocator& operator=(const SizeClassAllocator&) = delete;

  // A slot of `slot_bytes` (a positive multiple of kAlignment). InvalidArgument for another
  // size; ResourceExhausted when no slab of the class has a free slot and no region has a
  // free run that fits one; the listener's status when it refuses the new slab.
  Result<RegionSlot> Allocate(uint64_t slot_bytes);
  // Returns a slot from Allocate(slot_bytes) (or left free by RestoreSlab and since
  // allocated) with the same size.
  void Free(RegionSlot slot, uint64_t slot_bytes);

  // Called with each new slab, under the allocator's lock, before any slot of it is handed
  // out; a status other than Ok abandons the slab and fails the Allocate with it. Set it
  // before the first Allocate.
  using SlabListener = std::function<Status(const RegionSlab&)>;
  void SetSlabListener(SlabListener listener) { listener_ = std::move(listener); }

  // Re-creates a slab carved by an earlier run (before any Allocate): each slot for which
  // `occupied` is false is free, and a slab with no occupied slot goes straight back to the
  // free space. InvalidArgument when the slab is malformed, does not fit its region or
  // overlaps a slab restored before.
  Status RestoreSlab(const RegionSlab& slab, const std::function<bool(RegionSlot)>& occupied);

  static uint64_t RoundUp(uint64_t bytes) { return (bytes + kAlignment - 1) / kAlignment * kAlignment; }
  uint64_t total_bytes() const { return total_bytes_; }
  std::size_t regions() const { return region_bytes_.size(); }
  // Bytes in no slab (for tests and stats).
  uint64_t uncarved_bytes() const;

 private:
  using SlabId = std::pair<uint32_t, uint64_t>;  // region, offset
  struct Slab {
    uint64_t bytes = 0;
    uint64_t slot_bytes = 0;
    uint64_t untouched = 0;              // offset (in the slab) of the first slot never handed out
    std::vector<uint64_t> free_slots;    // offsets (in the region) of freed slots
    uint64_t live = 0;
    bool has_room() const { return !free_slots.empty() || untouched < bytes; }
  };
  struct Region {
    std::map<uint64_t, uint64_t> free_runs;  // offset -> bytes; never two adjacent
    std::map<uint64_t, Slab> slabs;          // by offset
  };

  // A free run of `bytes` taken from some region, the regions tried in turn; nullopt when none fits.
  std::optional<RegionSlot> CarveLocked(uint64_t bytes);
  // Returns [offset, offset + bytes) of `region` to the free runs, merging it with neighbours.
  void GiveBackLocked(uint32_t region, uint64_t offset, uint64_t bytes);
  // Removes [offset, offset + bytes) from the free runs; false when it is not all free.
  bool TakeLocked(uint32_t region, uint64_t offset, uint64_t bytes);
  RegionSlot TakeSlotLocked(SlabId id, Slab& slab);
  Status ExhaustedLocked(uint64_t slot_bytes) const;

  const std::vector<uint64_t> region_bytes_;
  const uint64_t total_bytes_;
  mutable std::mutex mutex_;
  std::vector<Region> regions_;                              // GUARDED_BY(mutex_)
  std::map<uint64_t, std::set<SlabId>> classes_with_room_;   // GUARDED_BY(mutex_): by slot bytes
  std::size_t next_region_ = 0;                              // GUARDED_BY(mutex_)
  // Kept as they change, so that a failed Allocate (routine in a full tier, before the
  // store makes room) does not walk every slab to say how much of them is free.
  uint64_t carved_bytes_ = 0;                                // GUARDED_BY(mutex_): in slabs
  uint64_t live_bytes_ = 0;                                  // GUARDED_BY(mutex_): in slots handed out
  SlabListener listener_;
};

}  // namespace kvtier
