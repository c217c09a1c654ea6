// T3 NVMe tier (see NvmeTierOptions in tiers.h): block slots in large files or block
// devices, read and written in batches through io_uring. Made by NewNvmeTier; this header
// exposes the class for its tests and for callers that want to know how it runs
// (dynamic_cast a Tier* to NvmeTier*).
//
// On disk, per file (all integers little-endian; on disk: do not reorder or renumber):
//   [superblock, 4096 bytes][slab journal, JournalBytes(file)][slots ...]
// Superblock: 0 u64 magic "KVTNVMS1"  8 u32 version (1)  12 u32 file index  16 u32 file count
//   20 u32 zero  24 u64 file bytes  32 u64 slot_bytes option  40 u64 format id (random per
//   format)  48 u64 data offset  56 u64 xxh3-64 of bytes 0..55; zeros to 4096.
// Slab journal: 32-byte records appended as the allocator carves slabs (RegionSlab: offset in
//   the slot area, bytes, slot bytes, then xxh3-64 over the format id and those three); the
//   first record that fails its check ends the journal, so records of an earlier format
//   (another format id) are never replayed. A record is written before any slot of its slab.
//   A slab whose slots are all free goes back to the allocator's free space, and a slab
//   carved later over that space (of any size class) is a later record that replaces every
//   earlier record it overlaps on replay; a slab is emptied only after every slot's header was
//   zeroed, so none of its blocks comes back. A full journal is compacted in place to its
//   surviving records (CompactJournal says why a crash part way is safe).
// Per block, one slot of SizeClassAllocator (size_class_allocator.h) holding
//   [header, 4096 bytes][payload][zeros up to a 4 KiB multiple]
// Slot header:
//   0  u64 magic "KVTNVME2"     8 u32 version (2)      12 u32 header bytes (4096)
//   16 u64 key.hi              24 u64 key.lo          32 u64 payload bytes
//   40 u64 payload xxh3-64     48 u64 generation      56 u64 format id
//   64 u64 xxh3-64 of bytes 0..63; zeros to 4096
// Every read checks the header against the index entry it was issued for and the payload
// against its checksum.
//
// Restart: Open replays each file's journal, reads the header of every slot of every slab
// (in batches through the I/O engine) and keeps, per key, the valid header with the highest
// generation; generations continue from the highest seen. Evict and a replacing Write zero
// the old slot's header before the slot is reused, so an evicted or replaced block cannot
// come back after a restart. A header that cannot be zeroed (a failing device) keeps its
// slot out of use, and every later eviction tries again; Evict reports it (IoError, counted
// as evict_failures), as until then a restart would bring the block back. Recovery retires
// the slots of a block's older versions (left by a crash between a replacing write and the
// zeroing), which would otherwise come back once the newest version is evicted. Writes are O_DIRECT without a cache flush: a block acknowledged
// before the process died (kill -9) is recovered; after a power loss, a block whose write
// the device had not persisted fails its checksum and is never returned. Payload checksums
// are verified on every read, not during recovery (that would read the whole device).
//
// GPUDirect Storage: gds_available() reports whether libcufile.so can be loaded. cuFile
// I/O (DMA between the files and GPU memory, skipping the bounce through host buffers) is
// not implemented yet; the tier always moves bytes through host memory.
//
// Locking: `mutex_` guards the index and the byte/block counts that go with it; the slot
// allocator and the I/O engine lock internally. I/O never runs under `mutex_`: a batch looks
// up (reads) or allocates (writes) its slots, runs all of its I/O together, then takes
// `mutex_` once more to publish (writes) or to decide what a failed check means (reads).
// Lock order: mutex_, then the allocator's mutex (a failed write frees its slot under mutex_);
// stale_mutex_ is never held with mutex_.
// A Write never overwrites a slot the index points to: it fills a new slot and switches the
// entry after the write completed, then frees the old slot. A Read racing with that free
// and a reuse of the slot sees a header that does not match its entry; the entry has then
// changed, so the Read retries against the new entry (a few times, then reports a miss)
// rather than reporting Corruption. Only a mismatch under an unchanged entry is Corruption.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "kvtier/tiers.h"
#include "tier/aligned_buffer_pool.h"
#include "tier/tier_counters.h"
#include "tier/size_class_allocator.h"
#include "tier/nvme_io.h"

namespace kvtier {

class NvmeTier final : public Tier {
 public:
  static constexpr uint64_t kHeaderBytes = 4096;
  static constexpr uint64_t kSuperblockBytes = 4096;

  // Bytes of a file before its slot area: the superblock and a journal large enough for
  // every slab the file can hold (slabs are at least 1 MiB, except at most 256 tail slots).
  static uint64_t MetadataBytes(uint64_t file_bytes);

  // The slabs a journal's records describe: records replay in order, and a record replaces
  // every earlier one it overlaps (a slab carved over the space of slabs released since).
  // The surviving records, in their order in the journal.
  static std::vector<RegionSlab> SurvivingSlabs(std::span<const RegionSlab> journal);

  static Result<std::unique_ptr<NvmeTier>> Open(const NvmeTierOptions& options);
  ~NvmeTier() override;
  NvmeTier(const NvmeTier&) = delete;
  NvmeTier& operator=(const NvmeTier&) = delete;

  TierKind kind() const override { return TierKind::kNvme; }
  const std::string& name() const override { return options_.name; }
  using Tier::Write;
  Status Write(const WriteOp& op) override;
  using Tier::Read;
  Result<std::size_t> Read(const ReadOp& op) override;
  std::optional<std::size_t> Size(const BlockKey& key) const override;
  Status Evict(const BlockKey& key) override;
  TierStats GetStats() const override;
  Result<std::vector<BlockKey>> ListKeys() const override;
  std::vector<Status> WriteBatch(std::span<const WriteOp> ops) override;
  std::vector<Result<std::size_t>> ReadBatch(std::span<const ReadOp> ops) override;

  // True when every file was opened with O_DIRECT (false: some filesystem refused it, as
  // tmpfs does, and the files go through the page cache).
  bool direct_io() const { return direct_io_; }
  // "io_uring", or "pread" when disabled or refused (io_fallback_reason() says why).
  std::string_view io_engine() const { return io_->name(); }
  const std::string& io_fallback_reason() const { return io_fallback_reason_; }
  // Whether libcufile.so (GPUDirect Storage) can be loaded here. Not used for I/O yet.
  static bool gds_available();
  // Blocks found by the recovery when the tier opened (0 when it formatted its files).
  uint64_t recovered_blocks() const { return recovered_blocks_; }

  // Test seams.
  struct Location {
    std::string path;
    uint64_t offset = 0;  // of the header; the payload follows kHeaderBytes later
    uint64_t slot_bytes = 0;
  };
  std::optional<Location> LocationForTesting(const BlockKey& key) const;
  // Swaps the I/O engine (to inject faults); returns the old one. Not while I/O runs.
  std::unique_ptr<BlockIo> ReplaceIoForTesting(std::unique_ptr<BlockIo> io);

 private:
  struct Entry {
    RegionSlot slot;
    uint64_t slot_bytes = 0;
    uint64_t size = 0;  // payload bytes
    uint64_t checksum = 0;
    uint64_t generation = 0;
  };

  NvmeTier(NvmeTierOptions options, std::vector<int> fds, bool direct_io, uint64_t file_bytes);
  uint64_t SlotBytesFor(uint64_t payload_bytes) const;
  // Removes the entry from the index; the caller retires its slot once mutex_ is released.
  Entry EraseLocked(std::unordered_map<BlockKey, Entry, BlockKeyHash>::iterator it);
  // Formats the files (new format id, empty journals) or rebuilds the index from them.
  Status FormatOrRecover();
  Status Format();
  Status Recover(uint64_t format_id);
  // Appends `slab` to its file's journal (the allocator's SlabListener), compacting the
  // journal first when it is full.
  Status JournalSlab(const RegionSlab& slab);
  Status CompactJournal(uint32_t file);
  Status WriteJournalPage(uint32_t file, uint64_t page);
  uint64_t JournalCapacity() const;  // records per file
  // Zeroes the headers of slots about to be freed, then frees them. A slot whose header
  // cannot be zeroed is kept out of use (in stale_) and tried again by every later call;
  // IoError (counted as an evict failure) names the first of `entries` that failed.
  Status RetireSlots(std::span<const Entry> entries);
  Status WriteFailed(Status status) {
    counters_.write_failures.fetch_add(1, std::memory_order_relaxed);
    return status;
  }

  const NvmeTierOptions options_;
  const std::vector<int> fds_;  // owned; closed after io_ is gone
  const bool direct_io_;
  const uint64_t file_bytes_;
  const uint64_t data_offset_;  // of the slot area in each file
  uint64_t format_id_ = 0;      // set by FormatOrRecover
  uint64_t recovered_blocks_ = 0;
  std::vector<std::vector<RegionSlab>> journals_;  // per file; written under the allocator's lock
  SizeClassAllocator slots_;  // one region per file
  std::unique_ptr<BlockIo> io_;
  std::string io_fallback_reason_;
  AlignedBufferPool io_buffers_{64u << 20};  // staging for slot I/O: reused, never faulted in again
  std::atomic<uint64_t> next_generation_{1};

  mutable std::mutex mutex_;
  std::unordered_map<BlockKey, Entry, BlockKeyHash> index_;  // GUARDED_BY(mutex_)
  uint64_t used_bytes_ = 0;                                  // GUARDED_BY(mutex_)

  std::mutex stale_mutex_;     // never held with mutex_
  std::vector<Entry> stale_;  // GUARDED_BY(stale_mutex_): freed slots whose header may still name a block

  TierCounters counters_;
};

}  // namespace kvtier
