// The NVMe tier (nvme_tier.h has the on-disk format and the locking).
#include "tier/nvme_tier.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <linux/fs.h>
#include <sys/file.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <chrono>
#include <map>
#include <random>
#include <unordered_set>
#include <utility>
#include <cstdlib>
#include <cstring>
#include <system_error>
#include <thread>

#include "tier/writer_checksum.h"
#include "util/little_endian.h"
#include "util/task_pool.h"

namespace kvtier {
namespace {

// On disk: do not change (nvme_tier.h has the layout).
constexpr uint64_t kMagic = 0x32454D564E54564Bull;       // "KVTNVME2" as little-endian bytes
constexpr uint32_t kVersion = 2;
constexpr std::size_t kHeaderChecked = 64;               // bytes covered by the header checksum
constexpr uint64_t kSuperMagic = 0x31534D564E54564Bull;  // "KVTNVMS1"
constexpr uint32_t kSuperVersion = 1;
constexpr std::size_t kSuperChecked = 56;
constexpr uint64_t kJournalRecordBytes = 32;
constexpr uint64_t kRecordsPerPage = SizeClassAllocator::kAlignment / kJournalRecordBytes;
constexpr std::size_t kRecoveryBatch = 256;              // slot headers read per I/O batch
constexpr unsigned kRings = 4;               // concurrent batches in flight before one waits
constexpr int kReadAttempts = 3;             // reads that race with a slot's reuse retry

using little_endian::GetU32;
using little_endian::GetU64;
using little_endian::PutU32;
using little_endian::PutU64;

struct Header {
  BlockKey key;
  uint64_t size = 0;
  uint64_t checksum = 0;
  uint64_t generation = 0;
  uint64_t format_id = 0;
};

struct Superblock {
  uint32_t file_index = 0;
  uint32_t file_count = 0;
  uint64_t file_bytes = 0;
  uint64_t slot_bytes = 0;
  uint64_t format_id = 0;
  uint64_t data_offset = 0;

  friend bool operator==(const Superblock&, const Superblock&) = default;
};

// Writes the header into the first kHeaderBytes of `slot` (zeroing the rest of them).
void EncodeHeader(const Header& h, std::byte* slot) {
  std::memset(slot, 0, NvmeTier::kHeaderBytes);
  PutU64(slot + 0, kMagic);
  PutU32(slot + 8, kVersion);
  PutU32(slot + 12, static_cast<uint32_t>(NvmeTier::kHeaderBytes));
  PutU64(slot + 16, h.key.hi);
  PutU64(slot + 24, h.key.lo);
  PutU64(slot + 32, h.size);
  PutU64(slot + 40, h.checksum);
  PutU64(slot + 48, h.generation);
  PutU64(slot + 56, h.format_id);
  PutU64(slot + kHeaderChecked, PayloadChecksum({slot, kHeaderChecked}));
}

std::optional<Header> DecodeHeader(const std::byte* slot) {
  if (GetU64(slot) != kMagic || GetU32(slot + 8) != kVersion || GetU32(slot + 12) != NvmeTier::kHeaderBytes ||
      GetU64(slot + kHeaderChecked) != PayloadChecksum({slot, kHeaderChecked})) {
    return std::nullopt;
  }
  return Header{.key = {GetU64(slot + 16), GetU64(slot + 24)},
                .size = GetU64(slot + 32),
                .checksum = GetU64(slot + 40),
                .generation = GetU64(slot + 48),
                .format_id = GetU64(slot + 56)};
}

void EncodeSuperblock(const Superblock& sb, std::byte* page) {
  std::memset(page, 0, NvmeTier::kSuperblockBytes);
  PutU64(page + 0, kSuperMagic);
  PutU32(page + 8, kSuperVersion);
  PutU32(page + 12, sb.file_index);
  PutU32(page + 16, sb.file_count);
  PutU64(page + 24, sb.file_bytes);
  PutU64(page + 32, sb.slot_bytes);
  PutU64(page + 40, sb.format_id);
  PutU64(page + 48, sb.data_offset);
  PutU64(page + kSuperChecked, PayloadChecksum({page, kSuperChecked}));
}

// nullopt when the page holds no superblock of this version (a new file, or another format).
std::optional<Superblock> DecodeSuperblock(const std::byte* page) {
  if (GetU64(page) != kSuperMagic || GetU32(page + 8) != kSuperVersion ||
      GetU64(page + kSuperChecked) != PayloadChecksum({page, kSuperChecked})) {
    return std::nullopt;
  }
  return Superblock{.file_index = GetU32(page + 12),
                    .file_count = GetU32(page + 16),
                    .file_bytes = GetU64(page + 24),
                    .slot_bytes = GetU64(page + 32),
                    .format_id = GetU64(page + 40),
                    .data_offset = GetU64(page + 48)};
}

// The check of a journal record ties it to its format: records of an earlier format fail it.
uint64_t RecordCheck(uint64_t format_id, const RegionSlab& slab) {
  const uint64_t words[4] = {format_id, slab.offset, slab.bytes, slab.slot_bytes};
  return PayloadChecksum(std::as_bytes(std::span(words)));
}

void EncodeRecord(uint64_t format_id, const RegionSlab& slab, std::byte* at) {
  PutU64(at + 0, slab.offset);
  PutU64(at + 8, slab.bytes);
  PutU64(at + 16, slab.slot_bytes);
  PutU64(at + 24, RecordCheck(format_id, slab));
}

std::optional<RegionSlab> DecodeRecord(uint64_t format_id, uint32_t file, const std::byte* at) {
  const RegionSlab slab{.region = file, .offset = GetU64(at), .bytes = GetU64(at + 8), .slot_bytes = GetU64(at + 16)};
  if (GetU64(at + 24) != RecordCheck(format_id, slab)) return std::nullopt;
  return slab;
}

uint64_t NewFormatId() {
  std::random_device entropy;
  const uint64_t random = (uint64_t{entropy()} << 32) ^ entropy();
  return random ^ static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
}

std::string Errno(int error) { return std::generic_category().message(error); }

// Takes the file's exclusive lock, waiting up to 15 seconds: a process killed with files
// registered in an io_uring releases them (and so their locks) only when the kernel tears the
// ring down, after the process is gone, and a restart right after a crash must not fail for
// that. Two seconds were not always enough on a loaded machine (kvtier bench chaos: 4 of 211
// restarts failed); a second daemon on the same files still fails, only later.
bool LockExclusive(int fd) {
  for (int attempt = 0; attempt < 1500; ++attempt) {
    if (flock(fd, LOCK_EX | LOCK_NB) == 0) return true;
    if (errno != EWOULDBLOCK) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}

// Closes descriptors unless released (Open's error paths).
struct FdGuard {
  std::vector<int> fds;
  ~FdGuard() {
    for (int fd : fds) ::close(fd);
  }
  std::vector<int> Release() { return std::exchange(fds, {}); }
};

}  // namespace

Status NvmeTierOptions::Validate() const {
  const std::string who = "NVMe tier '" + name + "'";
  if (files.empty()) return Status::InvalidArgument(who + ": files must name at least one file or block device");
  for (std::size_t i = 0; i < files.size(); ++i) {
    if (files[i].empty()) return Status::InvalidArgument(who + ": files[" + std::to_string(i) + "] is empty");
    for (std::size_t j = 0; j < i; ++j) {
      if (files[j] == files[i]) return Status::InvalidArgument(who + ": file '" + files[i] + "' is listed twice");
    }
  }
  if (capacity_bytes == 0) return Status::InvalidArgument(who + ": capacity_bytes must be > 0");
  const uint64_t per_file = capacity_bytes / files.size();
  if (per_file < NvmeTier::MetadataBytes(per_file) + 2 * SizeClassAllocator::kAlignment) {
    return Status::InvalidArgument(who + ": capacity_bytes " + std::to_string(capacity_bytes) +
                                   " leaves too little per file for its superblock, slab journal and one block");
  }
  if (slot_bytes != 0 && (slot_bytes % SizeClassAllocator::kAlignment != 0 || slot_bytes < 2 * NvmeTier::kHeaderBytes)) {
    return Status::InvalidArgument(who + ": slot_bytes must be 0 (size classes) or a multiple of 4096 of at least 8192, got " +
                                   std::to_string(slot_bytes));
  }
  if (queue_depth < 1 || queue_depth > 4096) {
    return Status::InvalidArgument(who + ": queue_depth must be 1 to 4096, got " + std::to_string(queue_depth));
  }
  return Status::Ok();
}

Result<std::unique_ptr<Tier>> NewNvmeTier(const NvmeTierOptions& options) {
  KVTIER_ASSIGN_OR_RETURN(std::unique_ptr<NvmeTier> tier, NvmeTier::Open(options));
  return std::unique_ptr<Tier>(std::move(tier));
}

bool NvmeTier::gds_available() {
  static const bool available = [] {
    for (const char* library : {"libcufile.so", "libcufile.so.1", "libcufile.so.0"}) {
      if (void* handle = dlopen(library, RTLD_LAZY | RTLD_LOCAL)) {
        dlclose(handle);
        return true;
      }
    }
    return false;
  }();
  return available;
}

Result<std::unique_ptr<NvmeTier>> NvmeTier::Open(const NvmeTierOptions& options) {
  KVTIER_RETURN_IF_ERROR(options.Validate());
  const std::string who = "NVMe tier '" + options.name + "'";
  const uint64_t file_bytes = options.capacity_bytes / options.files.size() / SizeClassAllocator::kAlignment *
                              SizeClassAllocator::kAlignment;
  FdGuard guard;
  bool direct = true;
  for (const std::string& path : options.files) {
    int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_DIRECT, 0600);
    if (fd < 0 && errno == EINVAL) {  // the filesystem has no O_DIRECT (tmpfs before 6.6, some overlays)
      fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
      direct = false;
    }
    if (fd < 0) {
      const int error = errno;
      return Status::IoError(who + ": cannot open '" + path + "' for reading and writing: " + Errno(error));
    }
    guard.fds.push_back(fd);
    if (!LockExclusive(fd)) {
      return Status::FailedPrecondition(who + ": '" + path + "' is in use by another NVMe tier (flock: " + Errno(errno) + ")");
    }
    struct stat st {};
    if (fstat(fd, &st) != 0) return Status::IoError(who + ": cannot stat '" + path + "': " + Errno(errno));
    if (S_ISBLK(st.st_mode)) {
      uint64_t device_bytes = 0;
      if (ioctl(fd, BLKGETSIZE64, &device_bytes) != 0) {
        return Status::IoError(who + ": cannot size block device '" + path + "': " + Errno(errno));
      }
      if (device_bytes < file_bytes) {
        return Status::InvalidArgument(who + ": block device '" + path + "' holds " + std::to_string(device_bytes) +
                                       " bytes, less than its share of capacity_bytes (" + std::to_string(file_bytes) + ")");
      }
    } else if (S_ISREG(st.st_mode)) {
      // Reserve the space now, so that writes later do not fail for lack of it.
      if (fallocate(fd, 0, 0, static_cast<off_t>(file_bytes)) != 0) {
        const int error = errno;
        if (error == ENOSPC || error == EDQUOT) {
          return Status::ResourceExhausted(who + ": cannot reserve " + std::to_string(file_bytes) + " bytes in '" + path +
                                           "': " + Errno(error) + "; lower capacity_bytes or free space");
        }
        if (error != EOPNOTSUPP && error != ENOSYS) {
          return Status::IoError(who + ": fallocate of '" + path + "' failed: " + Errno(error));
        }
        if (st.st_size < static_cast<off_t>(file_bytes) && ftruncate(fd, static_cast<off_t>(file_bytes)) != 0) {
          return Status::IoError(who + ": cannot size '" + path + "' to " + std::to_string(file_bytes) + " bytes: " +
                                 Errno(errno));
        }
      }
    } else {
      return Status::InvalidArgument(who + ": '" + path + "' is neither a regular file nor a block device");
    }
  }
  std::vector<int> fds = guard.Release();
  auto tier = std::unique_ptr<NvmeTier>(new NvmeTier(options, fds, direct, file_bytes));
  if (options.use_io_uring) {
    Result<std::unique_ptr<BlockIo>> uring =
        NewUringBlockIo(fds, static_cast<unsigned>(options.queue_depth), kRings);
    if (uring.ok()) {
      tier->io_ = std::move(*uring);
    } else {
      tier->io_fallback_reason_ = uring.status().message();
    }
  } else {
    tier->io_fallback_reason_ = "use_io_uring is false";
  }
  if (tier->io_ == nullptr) tier->io_ = NewPosixBlockIo(fds);
  KVTIER_RETURN_IF_ERROR(tier->FormatOrRecover());
  NvmeTier* self = tier.get();
  tier->slots_.SetSlabListener([self](const RegionSlab& slab) {
    return self->JournalSlab(slab).WithContext("NVMe tier '" + self->name() + "'");
  });
  return tier;
}

std::vector<RegionSlab> NvmeTier::SurvivingSlabs(std::span<const RegionSlab> journal) {
  std::map<uint64_t, std::size_t> by_offset;  // offset -> index in the journal
  for (std::size_t r = 0; r < journal.size(); ++r) {
    const RegionSlab& slab = journal[r];
    auto it = by_offset.upper_bound(slab.offset);
    if (it != by_offset.begin()) {
      const RegionSlab& before = journal[std::prev(it)->second];
      if (before.offset + before.bytes > slab.offset) --it;
    }
    while (it != by_offset.end() && it->first < slab.offset + slab.bytes) it = by_offset.erase(it);
    by_offset.emplace(slab.offset, r);
  }
  std::vector<std::size_t> kept;
  kept.reserve(by_offset.size());
  for (const auto& [offset, r] : by_offset) kept.push_back(r);
  std::sort(kept.begin(), kept.end());
  std::vector<RegionSlab> surviving;
  surviving.reserve(kept.size());
  for (std::size_t r : kept) surviving.push_back(journal[r]);
  return surviving;
}

uint64_t NvmeTier::MetadataBytes(uint64_t file_bytes) {
  const uint64_t records = file_bytes / (uint64_t{1} << 20) + 257;
  return kSuperblockBytes + SizeClassAllocator::RoundUp(records * kJournalRecordBytes);
}

Status NvmeTier::FormatOrRecover() {
  const std::string who = "NVMe tier '" + name() + "'";
  const std::size_t n = fds_.size();
  AlignedBufferPool::Buffer pages = io_buffers_.Acquire(n * kSuperblockBytes);
  if (pages == nullptr) return Status::ResourceExhausted(who + ": cannot allocate superblock buffers");
  std::vector<IoRequest> requests(n);
  for (std::size_t f = 0; f < n; ++f) {
    requests[f] = {.file = static_cast<uint32_t>(f), .write = false, .buffer = pages.get() + f * kSuperblockBytes,
                   .length = kSuperblockBytes, .offset = 0};
  }
  io_->Run(requests);
  std::vector<std::optional<Superblock>> found(n);
  std::size_t formatted = 0;
  for (std::size_t f = 0; f < n; ++f) {
    if (requests[f].error != 0) {
      return Status::IoError(who + ": cannot read the superblock of '" + options_.files[f] + "': " + Errno(requests[f].error));
    }
    found[f] = DecodeSuperblock(pages.get() + f * kSuperblockBytes);
    if (found[f]) ++formatted;
  }
  if (!options_.recover || formatted == 0) return Format();
  const uint64_t format_id = found[0] ? found[0]->format_id : 0;
  for (std::size_t f = 0; f < n; ++f) {
    const Superblock expected{.file_index = static_cast<uint32_t>(f),
                              .file_count = static_cast<uint32_t>(n),
                              .file_bytes = file_bytes_,
                              .slot_bytes = options_.slot_bytes,
                              .format_id = format_id,
                              .data_offset = data_offset_};
    if (!found[f] || !(*found[f] == expected)) {
      std::string held = "no kvtier NVMe superblock";
      if (found[f]) {
        held = "file " + std::to_string(found[f]->file_index) + " of " + std::to_string(found[f]->file_count) + ", " +
               std::to_string(found[f]->file_bytes) + " bytes, slot_bytes " + std::to_string(found[f]->slot_bytes) +
               (found[f]->format_id == format_id ? "" : ", another format");
      }
      return Status::FailedPrecondition(
          who + ": '" + options_.files[f] + "' holds " + held + ", but this configuration makes it file " +
          std::to_string(f) + " of " + std::to_string(n) + ", " + std::to_string(file_bytes_) + " bytes, slot_bytes " +
          std::to_string(options_.slot_bytes) +
          "; restore the earlier files and capacity, or set recover: false to discard the blocks they hold");
    }
  }
  return Recover(format_id);
}

Status NvmeTier::Format() {
  format_id_ = NewFormatId();
  const std::size_t n = fds_.size();
  AlignedBufferPool::Buffer pages = io_buffers_.Acquire(n * kSuperblockBytes);
  if (pages == nullptr) return Status::ResourceExhausted("NVMe tier '" + name() + "': cannot allocate superblock buffers");
  std::vector<IoRequest> requests(n);
  for (std::size_t f = 0; f < n; ++f) {
    EncodeSuperblock({.file_index = static_cast<uint32_t>(f),
                      .file_count = static_cast<uint32_t>(n),
                      .file_bytes = file_bytes_,
                      .slot_bytes = options_.slot_bytes,
                      .format_id = format_id_,
                      .data_offset = data_offset_},
                     pages.get() + f * kSuperblockBytes);
    requests[f] = {.file = static_cast<uint32_t>(f), .write = true, .buffer = pages.get() + f * kSuperblockBytes,
                   .length = kSuperblockBytes, .offset = 0};
  }
  io_->Run(requests);
  for (std::size_t f = 0; f < n; ++f) {
    if (requests[f].error != 0) {
      return Status::IoError("NVMe tier '" + name() + "': cannot write the superblock of '" + options_.files[f] +
                             "': " + Errno(requests[f].error));
    }
  }
  return Status::Ok();
}

Status NvmeTier::Recover(uint64_t format_id) {
  const std::string who = "NVMe tier '" + name() + "'";
  format_id_ = format_id;
  const uint64_t journal_bytes = data_offset_ - kSuperblockBytes;
  AlignedBufferPool::Buffer journal = io_buffers_.Acquire(journal_bytes);
  if (journal == nullptr) return Status::ResourceExhausted(who + ": cannot allocate the journal buffer");
  // 1. The slabs of each file.
  std::vector<RegionSlab> slabs;
  for (std::size_t f = 0; f < fds_.size(); ++f) {
    IoRequest request{.file = static_cast<uint32_t>(f), .write = false, .buffer = journal.get(),
                      .length = journal_bytes, .offset = kSuperblockBytes};
    io_->Run({&request, 1});
    if (request.error != 0) {
      return Status::IoError(who + ": cannot read the slab journal of '" + options_.files[f] + "': " + Errno(request.error));
    }
    for (uint64_t r = 0; r < journal_bytes / kJournalRecordBytes; ++r) {
      std::optional<RegionSlab> slab = DecodeRecord(format_id, static_cast<uint32_t>(f), journal.get() + r * kJournalRecordBytes);
      if (!slab) break;
      journals_[f].push_back(*slab);
    }
    const std::vector<RegionSlab> surviving = SurvivingSlabs(journals_[f]);
    slabs.insert(slabs.end(), surviving.begin(), surviving.end());
  }
  // 2. Every slot's header; per key, the valid one with the highest generation wins.
  struct Found {
    RegionSlot slot;
    uint64_t slot_bytes;
    Header header;
  };
  std::unordered_map<BlockKey, Found, BlockKeyHash> winners;
  std::vector<Found> losers;
  std::vector<std::pair<RegionSlot, uint64_t>> slots;
  for (const RegionSlab& slab : slabs) {
    if (slab.slot_bytes == 0 || slab.bytes % slab.slot_bytes != 0) continue;  // RestoreSlab refuses it below
    for (uint64_t at = slab.offset; at < slab.offset + slab.bytes; at += slab.slot_bytes) {
      slots.push_back({{slab.region, at}, slab.slot_bytes});
    }
  }
  AlignedBufferPool::Buffer headers = io_buffers_.Acquire(kRecoveryBatch * kHeaderBytes);
  if (headers == nullptr) return Status::ResourceExhausted(who + ": cannot allocate the recovery buffer");
  uint64_t max_generation = 0;
  for (std::size_t begin = 0; begin < slots.size(); begin += kRecoveryBatch) {
    const std::size_t count = std::min(kRecoveryBatch, slots.size() - begin);
    std::vector<IoRequest> requests(count);
    for (std::size_t k = 0; k < count; ++k) {
      const RegionSlot& slot = slots[begin + k].first;
      requests[k] = {.file = slot.region, .write = false, .buffer = headers.get() + k * kHeaderBytes,
                     .length = kHeaderBytes, .offset = data_offset_ + slot.offset};
    }
    io_->Run(requests);
    for (std::size_t k = 0; k < count; ++k) {
      const auto& [slot, slot_bytes] = slots[begin + k];
      if (requests[k].error != 0) {
        return Status::IoError(who + ": cannot read a slot header of '" + options_.files[slot.region] + "' at offset " +
                               std::to_string(data_offset_ + slot.offset) + ": " + Errno(requests[k].error));
      }
      std::optional<Header> header = DecodeHeader(headers.get() + k * kHeaderBytes);
      // A slot at least as large as its block: files written with other size classes (exact
      // 4 KiB ones before) recover too.
      if (!header || header->format_id != format_id || header->size == 0 ||
          SizeClassAllocator::RoundUp(kHeaderBytes + header->size) > slot_bytes) {
        continue;  // a free slot, a torn header, or one from an earlier format
      }
      max_generation = std::max(max_generation, header->generation);
      Found found{slot, slot_bytes, *header};
      auto [it, inserted] = winners.try_emplace(header->key, found);
      if (!inserted && it->second.header.generation < header->generation) std::swap(it->second, found);
      if (!inserted) losers.push_back(found);
    }
  }
  // 3. The allocator and the index. An older version of a block (a crash came between the
  // write that replaced it and the zeroing of its header) would come back once the newer one
  // is evicted: its slot is retired below, not freed.
  std::unordered_set<uint64_t> occupied;  // file << 48 | offset
  auto slot_id = [](RegionSlot slot) { return uint64_t{slot.region} << 48 | slot.offset; };
  for (const auto& [key, found] : winners) occupied.insert(slot_id(found.slot));
  for (const Found& loser : losers) occupied.insert(slot_id(loser.slot));
  for (const RegionSlab& slab : slabs) {
    if (Status restored = slots_.RestoreSlab(slab, [&](RegionSlot slot) { return occupied.contains(slot_id(slot)); });
        !restored.ok()) {
      return Status::Corruption(who + ": the slab journal of '" + options_.files[slab.region] + "' is damaged (" +
                                restored.message() + "); set recover: false to discard its blocks");
    }
  }
  {
    std::lock_guard lock(mutex_);
    for (const auto& [key, found] : winners) {
      index_.emplace(key, Entry{.slot = found.slot,
                                .slot_bytes = found.slot_bytes,
                                .size = found.header.size,
                                .checksum = found.header.checksum,
                                .generation = found.header.generation});
      used_bytes_ += found.header.size;
    }
  }
  recovered_blocks_ = winners.size();
  next_generation_.store(max_generation + 1, std::memory_order_relaxed);
  std::vector<Entry> superseded;
  for (const Found& loser : losers) superseded.push_back({.slot = loser.slot, .slot_bytes = loser.slot_bytes});
  (void)RetireSlots(superseded);  // one that cannot be zeroed now stays out of use, retried later
  return Status::Ok();
}

uint64_t NvmeTier::JournalCapacity() const { return (data_offset_ - kSuperblockBytes) / kJournalRecordBytes; }

// Appends a record. Replay stops at the first record that fails its check, so before a record
// fills its page the next page is zeroed: a replay never runs on into records that a
// compaction left behind further on.
Status NvmeTier::JournalSlab(const RegionSlab& slab) {
  std::vector<RegionSlab>& journal = journals_[slab.region];
  if (journal.size() == JournalCapacity()) KVTIER_RETURN_IF_ERROR(CompactJournal(slab.region));
  if (journal.size() == JournalCapacity()) {
    return Status::ResourceExhausted("the slab journal of '" + options_.files[slab.region] + "' is full (" +
                                     std::to_string(journal.size()) + " slabs); evict blocks first");
  }
  const uint64_t page = journal.size() / kRecordsPerPage;
  if ((journal.size() + 1) % kRecordsPerPage == 0 && (page + 1) * kRecordsPerPage < JournalCapacity()) {
    KVTIER_RETURN_IF_ERROR(WriteJournalPage(slab.region, page + 1));
  }
  journal.push_back(slab);
  Status written = WriteJournalPage(slab.region, page);
  if (!written.ok()) journal.pop_back();
  return written;
}

// Rewrites the journal as its surviving records (in their order), a page at a time from the
// front. A crash after k records leaves the first k survivors, then the old log from record
// k on, which replays to the same slabs: a survivor among the old log's first k records is
// among the first k survivors; an old record in the tail that did not survive is replaced by
// a later one in the tail, and a survivor it overlaps comes after it in the tail too
// (NvmeTier.AJournalCompactedPartWayReplaysToTheSameSlabs checks every page).
Status NvmeTier::CompactJournal(uint32_t file) {
  std::vector<RegionSlab> surviving = SurvivingSlabs(journals_[file]);
  if (surviving.size() == journals_[file].size()) return Status::Ok();  // nothing to drop: the journal stays full
  std::vector<RegionSlab> old = std::exchange(journals_[file], std::move(surviving));
  const uint64_t pages = (journals_[file].size() + kRecordsPerPage - 1) / kRecordsPerPage;
  for (uint64_t page = 0; page < pages; ++page) {
    if (Status written = WriteJournalPage(file, page); !written.ok()) {
      journals_[file] = std::move(old);  // the disk holds new pages before the old tail: it replays as `old`
      return written;
    }
  }
  if (journals_[file].size() % kRecordsPerPage == 0 && journals_[file].size() < JournalCapacity()) {
    // Ends the replay at the compacted records; should it fail, the old tail after them still replays the same.
    (void)WriteJournalPage(file, pages);
  }
  return Status::Ok();
}

// Writes page `page` of `file`'s journal from the records in memory, zeros after the last.
Status NvmeTier::WriteJournalPage(uint32_t file, uint64_t page) {
  const std::vector<RegionSlab>& journal = journals_[file];
  AlignedBufferPool::Buffer buffer = io_buffers_.Acquire(SizeClassAllocator::kAlignment);
  if (buffer == nullptr) return Status::ResourceExhausted("cannot allocate a journal buffer");
  std::memset(buffer.get(), 0, SizeClassAllocator::kAlignment);
  for (uint64_t r = page * kRecordsPerPage; r < std::min<uint64_t>(journal.size(), (page + 1) * kRecordsPerPage); ++r) {
    EncodeRecord(format_id_, journal[r], buffer.get() + (r - page * kRecordsPerPage) * kJournalRecordBytes);
  }
  IoRequest request{.file = file, .write = true, .buffer = buffer.get(), .length = SizeClassAllocator::kAlignment,
                    .offset = kSuperblockBytes + page * SizeClassAllocator::kAlignment};
  io_->Run({&request, 1});
  if (request.error != 0) {
    return Status::IoError("cannot write the slab journal of '" + options_.files[file] + "': " + Errno(request.error));
  }
  return Status::Ok();
}

Status NvmeTier::RetireSlots(std::span<const Entry> entries) {
  std::vector<Entry> retiring(entries.begin(), entries.end());
  {
    std::lock_guard lock(stale_mutex_);
    retiring.insert(retiring.end(), stale_.begin(), stale_.end());  // earlier failures: try again
    stale_.clear();
  }
  if (retiring.empty()) return Status::Ok();
  // One zero page serves every request: they only read it.
  AlignedBufferPool::Buffer zeros = io_buffers_.Acquire(kHeaderBytes);
  std::vector<IoRequest> requests;
  for (const Entry& e : retiring) {
    requests.push_back({.file = e.slot.region, .write = true, .buffer = zeros.get(), .length = kHeaderBytes,
                        .offset = data_offset_ + e.slot.offset, .error = ENOMEM});
  }
  if (zeros != nullptr) {
    std::memset(zeros.get(), 0, kHeaderBytes);
    io_->Run(requests);
  }
  // A header that could not be zeroed still names its block, which a restart would bring
  // back: its slot stays out of the free list, and every later retirement tries it again.
  Status status;
  std::vector<Entry> still_stale;
  for (std::size_t k = 0; k < retiring.size(); ++k) {
    const Entry& e = retiring[k];
    if (requests[k].error == 0) {
      slots_.Free(e.slot, e.slot_bytes);
      continue;
    }
    still_stale.push_back(e);
    if (k >= entries.size()) continue;  // counted when it first failed
    counters_.evict_failures.fetch_add(1, std::memory_order_relaxed);
    if (status.ok()) {
      status = Status::IoError("cannot zero the header of its slot in '" + options_.files[e.slot.region] + "' at offset " +
                               std::to_string(data_offset_ + e.slot.offset) + " (" + Errno(requests[k].error) +
                               "); a restart could bring it back until a later eviction zeroes the header");
    }
  }
  std::lock_guard lock(stale_mutex_);
  stale_.insert(stale_.end(), still_stale.begin(), still_stale.end());
  return status;
}

NvmeTier::NvmeTier(NvmeTierOptions options, std::vector<int> fds, bool direct_io, uint64_t file_bytes)
    : options_(std::move(options)),
      fds_(std::move(fds)),
      direct_io_(direct_io),
      file_bytes_(file_bytes),
      data_offset_(MetadataBytes(file_bytes)),
      journals_(fds_.size()),
      slots_(std::vector<uint64_t>(fds_.size(), file_bytes - data_offset_)) {}

NvmeTier::~NvmeTier() {
  io_.reset();
  for (int fd : fds_) ::close(fd);
}

uint64_t NvmeTier::SlotBytesFor(uint64_t payload_bytes) const {
  const uint64_t needed = SizeClassAllocator::RoundUp(kHeaderBytes + payload_bytes);
  if (options_.slot_bytes != 0) return needed <= options_.slot_bytes ? options_.slot_bytes : 0;
  // Size classes an eighth of an octave apart above 64 KiB (at most 12.5% of a slot unused):
  // exact 4 KiB classes would leave a workload with varied block sizes hundreds of classes,
  // each holding partly used slabs that no other class can take.
  if (needed <= (uint64_t{64} << 10)) return needed;
  const uint64_t step = std::bit_floor(needed) / 8;
  return (needed + step - 1) / step * step;
}

NvmeTier::Entry NvmeTier::EraseLocked(std::unordered_map<BlockKey, Entry, BlockKeyHash>::iterator it) {
  const Entry entry = it->second;
  used_bytes_ -= entry.size;
  index_.erase(it);
  return entry;
}

Status NvmeTier::Write(const WriteOp& op) { return std::move(WriteBatch({&op, 1})[0]); }

Result<std::size_t> NvmeTier::Read(const ReadOp& op) { return std::move(ReadBatch({&op, 1})[0]); }

std::vector<Status> NvmeTier::WriteBatch(std::span<const WriteOp> ops) {
  TaskPool::BlockingScope blocking;  // disk I/O: an elastic pool may start a thread meanwhile (task_pool.h)
  std::vector<Status> results(ops.size());
  struct Pending {
    std::size_t op;
    Entry entry;
    AlignedBufferPool::Buffer buffer;
  };
  std::vector<Pending> pending;
  std::vector<IoRequest> requests;
  pending.reserve(ops.size());
  requests.reserve(ops.size());
  for (std::size_t i = 0; i < ops.size(); ++i) {
    const WriteOp& op = ops[i];
    const uint64_t size = op.payload.size();
    if (size == 0) {
      results[i] = WriteFailed(Status::InvalidArgument(name() + ": cannot store an empty payload"));
      continue;
    }
    const uint64_t slot_bytes = SlotBytesFor(size);
    if (slot_bytes == 0) {
      results[i] = WriteFailed(Status::InvalidArgument(
          name() + ": a " + std::to_string(size) + "-byte block with its 4 KiB header does not fit slot_bytes " +
          std::to_string(options_.slot_bytes)));
      continue;
    }
    Result<RegionSlot> slot = slots_.Allocate(slot_bytes);
    if (!slot.ok()) {
      results[i] = WriteFailed(slot.status().WithContext(name() + ": no room for a " + std::to_string(size) + "-byte block"));
      continue;
    }
    const uint64_t io_bytes = SizeClassAllocator::RoundUp(kHeaderBytes + size);
    AlignedBufferPool::Buffer buffer = io_buffers_.Acquire(io_bytes);
    if (buffer == nullptr) {
      slots_.Free(*slot, slot_bytes);
      results[i] = WriteFailed(Status::ResourceExhausted(name() + ": cannot allocate a " + std::to_string(io_bytes) +
                                                         "-byte I/O buffer"));
      continue;
    }
    const Entry entry{.slot = *slot,
                      .slot_bytes = slot_bytes,
                      .size = size,
                      .checksum = CopyWithChecksum({buffer.get() + kHeaderBytes, size}, op.payload),
                      .generation = next_generation_.fetch_add(1, std::memory_order_relaxed)};
    if (Status matched = CheckWriterChecksum(name(), op.key, op.checksum, entry.checksum); !matched.ok()) {
      slots_.Free(*slot, slot_bytes);
      results[i] = WriteFailed(std::move(matched));
      continue;
    }
    EncodeHeader({.key = op.key, .size = size, .checksum = entry.checksum, .generation = entry.generation,
                  .format_id = format_id_},
                 buffer.get());
    std::memset(buffer.get() + kHeaderBytes + size, 0, io_bytes - kHeaderBytes - size);
    requests.push_back(
        {.file = slot->region, .write = true, .buffer = buffer.get(), .length = io_bytes, .offset = data_offset_ + slot->offset});
    pending.push_back({i, entry, std::move(buffer)});
  }
  if (!requests.empty()) io_->Run(requests);

  std::vector<Entry> replaced;
  std::unique_lock lock(mutex_);
  for (std::size_t k = 0; k < pending.size(); ++k) {
    const Pending& p = pending[k];
    const BlockKey& key = ops[p.op].key;
    if (const int error = requests[k].error; error != 0) {
      slots_.Free(p.entry.slot, p.entry.slot_bytes);
      std::string message = name() + ": writing block " + key.ToHex() + " to '" + options_.files[p.entry.slot.region] +
                            "' at offset " + std::to_string(data_offset_ + p.entry.slot.offset) + " failed: " + Errno(error);
      results[p.op] = WriteFailed(error == ENOSPC || error == EDQUOT ? Status::ResourceExhausted(std::move(message))
                                                                     : Status::IoError(std::move(message)));
      continue;
    }
    auto [it, inserted] = index_.try_emplace(key, p.entry);
    if (!inserted) {  // replace: the old slot is retired only now that the new one is in place
      used_bytes_ -= it->second.size;
      replaced.push_back(it->second);
      it->second = p.entry;
    }
    used_bytes_ += p.entry.size;
    counters_.writes.fetch_add(1, std::memory_order_relaxed);
    counters_.write_bytes.fetch_add(p.entry.size, std::memory_order_relaxed);
  }
  lock.unlock();
  // The replaced blocks' headers lose to their successors' generations: a failure to zero
  // one is counted and retried, not this Write's failure.
  (void)RetireSlots(replaced);
  return results;
}

std::vector<Result<std::size_t>> NvmeTier::ReadBatch(std::span<const ReadOp> ops) {
  TaskPool::BlockingScope blocking;
  std::vector<Result<std::size_t>> results(ops.size(), Result<std::size_t>(Status::Internal("read not run")));
  auto miss = [&](std::size_t i) {
    counters_.read_misses.fetch_add(1, std::memory_order_relaxed);
    results[i] = Status::NotFound(name() + ": block " + ops[i].key.ToHex() + " is not here");
  };
  std::vector<std::size_t> todo(ops.size());
  for (std::size_t i = 0; i < ops.size(); ++i) todo[i] = i;
  for (int attempt = 0; attempt < kReadAttempts && !todo.empty(); ++attempt) {
    struct Pending {
      std::size_t op;
      Entry entry;
      AlignedBufferPool::Buffer buffer;
    };
    std::vector<Pending> pending;
    {
      std::lock_guard lock(mutex_);
      for (std::size_t i : todo) {
        auto it = index_.find(ops[i].key);
        if (it == index_.end()) {
          miss(i);
        } else if (ops[i].out.size() < it->second.size) {
          results[i] = Status::InvalidArgument(name() + ": a buffer of " + std::to_string(ops[i].out.size()) +
                                               " bytes cannot hold block " + ops[i].key.ToHex() + " of " +
                                               std::to_string(it->second.size));
        } else {
          pending.push_back({i, it->second, nullptr});
        }
      }
    }
    todo.clear();
    std::vector<IoRequest> requests;
    std::vector<Pending*> issued;
    for (Pending& p : pending) {
      const uint64_t io_bytes = SizeClassAllocator::RoundUp(kHeaderBytes + p.entry.size);
      p.buffer = io_buffers_.Acquire(io_bytes);
      if (p.buffer == nullptr) {
        results[p.op] = Status::ResourceExhausted(name() + ": cannot allocate a " + std::to_string(io_bytes) +
                                                  "-byte I/O buffer");
        continue;
      }
      requests.push_back({.file = p.entry.slot.region, .write = false, .buffer = p.buffer.get(), .length = io_bytes,
                          .offset = data_offset_ + p.entry.slot.offset});
      issued.push_back(&p);
    }
    if (!requests.empty()) io_->Run(requests);

    std::vector<const Pending*> mismatched;
    for (std::size_t k = 0; k < issued.size(); ++k) {
      const Pending& p = *issued[k];
      const ReadOp& op = ops[p.op];
      if (const int error = requests[k].error; error != 0) {
        results[p.op] = Status::IoError(name() + ": reading block " + op.key.ToHex() + " from '" +
                                        options_.files[p.entry.slot.region] + "' at offset " +
                                        std::to_string(data_offset_ + p.entry.slot.offset) + " failed: " + Errno(error));
        continue;
      }
      const std::optional<Header> header = DecodeHeader(p.buffer.get());
      const std::span<const std::byte> payload(p.buffer.get() + kHeaderBytes, p.entry.size);
      // The payload is copied out and checked in one pass.
      if (header && header->key == op.key && header->size == p.entry.size && header->checksum == p.entry.checksum &&
          header->generation == p.entry.generation && header->format_id == format_id_ &&
          CopyWithChecksum(op.out.first(payload.size()), payload) == p.entry.checksum) {
        counters_.reads.fetch_add(1, std::memory_order_relaxed);
        counters_.read_bytes.fetch_add(payload.size(), std::memory_order_relaxed);
        results[p.op] = static_cast<std::size_t>(payload.size());
        if (op.checksum != nullptr) *op.checksum = p.entry.checksum;
      } else {
        // Hand back none of the bytes that failed the check.
        std::memset(op.out.data(), 0, std::min<std::size_t>(op.out.size(), payload.size()));
        mismatched.push_back(&p);
      }
    }
    if (mismatched.empty()) continue;
    std::vector<Entry> dropped;
    std::unique_lock lock(mutex_);
    for (const Pending* p : mismatched) {
      const BlockKey& key = ops[p->op].key;
      auto it = index_.find(key);
      if (it == index_.end() || it->second.generation != p->entry.generation) {
        todo.push_back(p->op);  // replaced or evicted while we read, its slot reused: look again
        continue;
      }
      dropped.push_back(EraseLocked(it));
      counters_.checksum_failures.fetch_add(1, std::memory_order_relaxed);
      results[p->op] = Status::Corruption(name() + ": block " + key.ToHex() + " in '" + options_.files[p->entry.slot.region] +
                                          "' at offset " + std::to_string(data_offset_ + p->entry.slot.offset) +
                                          " failed its header or checksum check and was dropped");
    }
    lock.unlock();
    (void)RetireSlots(dropped);  // a header left unzeroed is counted and retried
  }
  for (std::size_t i : todo) miss(i);  // kept changing under us: report a miss
  return results;
}

std::optional<std::size_t> NvmeTier::Size(const BlockKey& key) const {
  std::lock_guard lock(mutex_);
  auto it = index_.find(key);
  if (it == index_.end()) return std::nullopt;
  return static_cast<std::size_t>(it->second.size);
}

Status NvmeTier::Evict(const BlockKey& key) {
  TaskPool::BlockingScope blocking;
  Entry evicted;
  {
    std::lock_guard lock(mutex_);
    auto it = index_.find(key);
    if (it == index_.end()) return Status::NotFound(name() + ": block " + key.ToHex() + " is not here");
    evicted = EraseLocked(it);
  }
  counters_.evictions.fetch_add(1, std::memory_order_relaxed);
  return RetireSlots({&evicted, 1}).WithContext(name() + ": block " + key.ToHex() + " is evicted");
}

TierStats NvmeTier::GetStats() const {
  TierStats s;
  s.capacity_bytes = slots_.total_bytes();
  {
    std::lock_guard lock(mutex_);
    s.used_bytes = used_bytes_;
    s.blocks = index_.size();
  }
  counters_.Fill(s);
  return s;
}

Result<std::vector<BlockKey>> NvmeTier::ListKeys() const {
  std::vector<BlockKey> keys;
  std::lock_guard lock(mutex_);
  keys.reserve(index_.size());
  for (const auto& [key, entry] : index_) keys.push_back(key);
  return keys;
}

std::optional<NvmeTier::Location> NvmeTier::LocationForTesting(const BlockKey& key) const {
  std::lock_guard lock(mutex_);
  auto it = index_.find(key);
  if (it == index_.end()) return std::nullopt;
  return Location{options_.files[it->second.slot.region], data_offset_ + it->second.slot.offset, it->second.slot_bytes};
}

std::unique_ptr<BlockIo> NvmeTier::ReplaceIoForTesting(std::unique_ptr<BlockIo> io) {
  std::swap(io, io_);
  return io;
}

}  // namespace kvtier
