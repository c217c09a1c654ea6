// Slots at file offsets for the NVMe tier: the DRAM tier's slab scheme (slab_allocator.h)
// applied to the space of one or more files instead of a mapped region.
//
// Each file is carved front to back into slabs on demand; a slab serves one size class (a
// slot size, a multiple of 4 KiB) for its lifetime, and freed slots go back to their class's
// free list. A slab is 2 MiB, or one slot when the class is larger; when no file has room
// for a whole slab, a single slot is carved from a file's tail. New slabs go to the files in
// turn, so a batch of equal-sized blocks spreads over all the files (devices). Nothing is
// mapped or touched: the allocator only hands out offsets.
// Costs: as for the DRAM slabs, a slab never changes class (no rebalancing yet), so a
// workload that switches block sizes can strand free slots in the old class.
//
// Persistence: the carving is the only state a restart cannot re-derive from the slots, so
// a SlabListener (the NVMe tier's slab journal) is told of every slab before any of its slots
// is handed out, and RestoreSlab replays the journal into a fresh allocator.
//
// Thread-safety: Allocate and Free may be called concurrently (one internal mutex).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <vector>

namespace kvtier {

struct FileSlot {
  uint32_t file = 0;    // index into the files the allocator was made with
  uint64_t offset = 0;  // 4 KiB-aligned

  friend bool operator==(const FileSlot&, const FileSlot&) = default;
};

// A run of equal slots carved from one file.
struct FileSlab {
  uint32_t file = 0;
  uint64_t offset = 0;
  uint64_t bytes = 0;       // a multiple of slot_bytes
  uint64_t slot_bytes = 0;
};

class FileSlotAllocator {
 public:
  static constexpr uint64_t kAlignment = 4096;
  static constexpr uint64_t kSlabBytes = uint64_t{2} << 20;

  // `file_bytes[i]`: the usable bytes of file i (rounded down to 4 KiB).
  explicit FileSlotAllocator(std::vector<uint64_t> file_bytes);

  // A slot of `slot_bytes` (a positive multiple of kAlignment), or nullopt when no file has
  // room for one.
  std::optional<FileSlot> Allocate(uint64_t slot_bytes);
  // Returns a slot from Allocate(slot_bytes) with the same size.
  void Free(FileSlot slot, uint64_t slot_bytes);

  // Called with each new slab, under the allocator's lock, before any slot of it is handed
  // out; returning false abandons the slab (Allocate then returns nullopt). Set it before
  // the first Allocate.
  using SlabListener = std::function<bool(const FileSlab&)>;
  void SetSlabListener(SlabListener listener) { listener_ = std::move(listener); }

  // Re-creates a slab carved by an earlier run (slabs in the order they were carved, before
  // any Allocate): its space counts as carved, and each slot for which `occupied` is false
  // goes to the free list of its class. False when the slab does not fit the files or
  // overlaps carved space.
  bool RestoreSlab(const FileSlab& slab, const std::function<bool(FileSlot)>& occupied);

  static uint64_t RoundUp(uint64_t bytes) { return (bytes + kAlignment - 1) / kAlignment * kAlignment; }
  uint64_t total_bytes() const { return total_bytes_; }
  std::size_t files() const { return file_bytes_.size(); }

 private:
  struct SizeClass {
    std::vector<FileSlot> free;
    FileSlot cursor;        // next unused slot of the class's newest slab
    uint64_t slab_end = 0;  // end offset of that slab (cursor.offset == slab_end: none left)
  };

  std::optional<FileSlot> CarveLocked(uint64_t bytes);

  const std::vector<uint64_t> file_bytes_;
  const uint64_t total_bytes_;
  std::mutex mutex_;
  std::vector<uint64_t> carved_;              // GUARDED_BY(mutex_): per file
  std::size_t next_file_ = 0;                 // GUARDED_BY(mutex_)
  std::map<uint64_t, SizeClass> classes_;     // GUARDED_BY(mutex_)
  SlabListener listener_;
};

}  // namespace kvtier
