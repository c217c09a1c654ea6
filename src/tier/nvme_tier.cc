// The NVMe tier (nvme_tier.h has the on-disk format and the locking).
#include "tier/nvme_tier.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <linux/fs.h>
#include <sys/file.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <bit>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <system_error>

namespace kvtier {
namespace {

static_assert(std::endian::native == std::endian::little, "the slot header is written in host order");

// On disk: do not change.
constexpr uint64_t kMagic = 0x31454D564E54564Bull;  // "KVTNVME1" as little-endian bytes
constexpr uint32_t kVersion = 1;
constexpr std::size_t kHeaderChecked = 56;  // bytes covered by the header checksum
constexpr unsigned kRings = 4;               // concurrent batches in flight before one waits
constexpr int kReadAttempts = 3;             // reads that race with a slot's reuse retry

struct FreeDeleter {
  void operator()(std::byte* p) const { std::free(p); }
};
using AlignedBuffer = std::unique_ptr<std::byte, FreeDeleter>;

AlignedBuffer AllocateAligned(std::size_t bytes) {
  void* memory = nullptr;
  if (posix_memalign(&memory, FileSlotAllocator::kAlignment, bytes) != 0) return nullptr;
  return AlignedBuffer(static_cast<std::byte*>(memory));
}

void Put64(std::byte* at, uint64_t value) { std::memcpy(at, &value, sizeof value); }
void Put32(std::byte* at, uint32_t value) { std::memcpy(at, &value, sizeof value); }
uint64_t Get64(const std::byte* at) {
  uint64_t value = 0;
  std::memcpy(&value, at, sizeof value);
  return value;
}
uint32_t Get32(const std::byte* at) {
  uint32_t value = 0;
  std::memcpy(&value, at, sizeof value);
  return value;
}

struct Header {
  BlockKey key;
  uint64_t size = 0;
  uint64_t checksum = 0;
  uint64_t generation = 0;
};

// Writes the header into the first kHeaderBytes of `slot` (zeroing the rest of them).
void EncodeHeader(const Header& h, std::byte* slot) {
  std::memset(slot, 0, NvmeTier::kHeaderBytes);
  Put64(slot + 0, kMagic);
  Put32(slot + 8, kVersion);
  Put32(slot + 12, static_cast<uint32_t>(NvmeTier::kHeaderBytes));
  Put64(slot + 16, h.key.hi);
  Put64(slot + 24, h.key.lo);
  Put64(slot + 32, h.size);
  Put64(slot + 40, h.checksum);
  Put64(slot + 48, h.generation);
  Put64(slot + kHeaderChecked, PayloadChecksum({slot, kHeaderChecked}));
}

std::optional<Header> DecodeHeader(const std::byte* slot) {
  if (Get64(slot) != kMagic || Get32(slot + 8) != kVersion || Get32(slot + 12) != NvmeTier::kHeaderBytes ||
      Get64(slot + kHeaderChecked) != PayloadChecksum({slot, kHeaderChecked})) {
    return std::nullopt;
  }
  return Header{.key = {Get64(slot + 16), Get64(slot + 24)},
                .size = Get64(slot + 32),
                .checksum = Get64(slot + 40),
                .generation = Get64(slot + 48)};
}

std::string Errno(int error) { return std::generic_category().message(error); }

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
  if (capacity_bytes / files.size() < 2 * FileSlotAllocator::kAlignment) {
    return Status::InvalidArgument(who + ": capacity_bytes " + std::to_string(capacity_bytes) +
                                   " leaves less than 8 KiB (one header and one page) per file");
  }
  if (slot_bytes != 0 && (slot_bytes % FileSlotAllocator::kAlignment != 0 || slot_bytes < 2 * NvmeTier::kHeaderBytes)) {
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
  const uint64_t file_bytes = options.capacity_bytes / options.files.size() / FileSlotAllocator::kAlignment *
                              FileSlotAllocator::kAlignment;
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
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
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
  return tier;
}

NvmeTier::NvmeTier(NvmeTierOptions options, std::vector<int> fds, bool direct_io, uint64_t file_bytes)
    : options_(std::move(options)),
      fds_(std::move(fds)),
      direct_io_(direct_io),
      slots_(std::vector<uint64_t>(fds_.size(), file_bytes)) {}

NvmeTier::~NvmeTier() {
  io_.reset();
  for (int fd : fds_) ::close(fd);
}

uint64_t NvmeTier::SlotBytesFor(uint64_t payload_bytes) const {
  const uint64_t needed = FileSlotAllocator::RoundUp(kHeaderBytes + payload_bytes);
  if (options_.slot_bytes == 0) return needed;
  return needed <= options_.slot_bytes ? options_.slot_bytes : 0;
}

void NvmeTier::DropLocked(std::unordered_map<BlockKey, Entry, BlockKeyHash>::iterator it) {
  used_bytes_ -= it->second.size;
  slots_.Free(it->second.slot, it->second.slot_bytes);
  index_.erase(it);
}

Status NvmeTier::Write(const BlockKey& key, std::span<const std::byte> payload) {
  const WriteOp op{key, payload};
  return std::move(WriteBatch({&op, 1})[0]);
}

Result<std::size_t> NvmeTier::Read(const BlockKey& key, std::span<std::byte> out) {
  const ReadOp op{key, out};
  return std::move(ReadBatch({&op, 1})[0]);
}

std::vector<Status> NvmeTier::WriteBatch(std::span<const WriteOp> ops) {
  std::vector<Status> results(ops.size());
  struct Pending {
    std::size_t op;
    Entry entry;
    AlignedBuffer buffer;
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
    std::optional<FileSlot> slot = slots_.Allocate(slot_bytes);
    if (!slot) {
      results[i] = WriteFailed(Status::ResourceExhausted(
          name() + ": no room for a " + std::to_string(size) + "-byte block (capacity " +
          std::to_string(slots_.total_bytes()) + " bytes); evict blocks first"));
      continue;
    }
    const uint64_t io_bytes = FileSlotAllocator::RoundUp(kHeaderBytes + size);
    AlignedBuffer buffer = AllocateAligned(io_bytes);
    if (buffer == nullptr) {
      slots_.Free(*slot, slot_bytes);
      results[i] = WriteFailed(Status::ResourceExhausted(name() + ": cannot allocate a " + std::to_string(io_bytes) +
                                                         "-byte I/O buffer"));
      continue;
    }
    const Entry entry{.slot = *slot,
                      .slot_bytes = slot_bytes,
                      .size = size,
                      .checksum = PayloadChecksum(op.payload),
                      .generation = next_generation_.fetch_add(1, std::memory_order_relaxed)};
    EncodeHeader({.key = op.key, .size = size, .checksum = entry.checksum, .generation = entry.generation}, buffer.get());
    std::memcpy(buffer.get() + kHeaderBytes, op.payload.data(), size);
    std::memset(buffer.get() + kHeaderBytes + size, 0, io_bytes - kHeaderBytes - size);
    requests.push_back({.file = slot->file, .write = true, .buffer = buffer.get(), .length = io_bytes, .offset = slot->offset});
    pending.push_back({i, entry, std::move(buffer)});
  }
  if (!requests.empty()) io_->Run(requests);

  std::lock_guard lock(mutex_);
  for (std::size_t k = 0; k < pending.size(); ++k) {
    const Pending& p = pending[k];
    const BlockKey& key = ops[p.op].key;
    if (const int error = requests[k].error; error != 0) {
      slots_.Free(p.entry.slot, p.entry.slot_bytes);
      std::string message = name() + ": writing block " + key.ToHex() + " to '" + options_.files[p.entry.slot.file] +
                            "' at offset " + std::to_string(p.entry.slot.offset) + " failed: " + Errno(error);
      results[p.op] = WriteFailed(error == ENOSPC || error == EDQUOT ? Status::ResourceExhausted(std::move(message))
                                                                     : Status::IoError(std::move(message)));
      continue;
    }
    auto [it, inserted] = index_.try_emplace(key, p.entry);
    if (!inserted) {  // replace: the old slot is free only now that the new one is in place
      used_bytes_ -= it->second.size;
      slots_.Free(it->second.slot, it->second.slot_bytes);
      it->second = p.entry;
    }
    used_bytes_ += p.entry.size;
    counters_.writes.fetch_add(1, std::memory_order_relaxed);
    counters_.write_bytes.fetch_add(p.entry.size, std::memory_order_relaxed);
  }
  return results;
}

std::vector<Result<std::size_t>> NvmeTier::ReadBatch(std::span<const ReadOp> ops) {
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
      AlignedBuffer buffer;
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
      const uint64_t io_bytes = FileSlotAllocator::RoundUp(kHeaderBytes + p.entry.size);
      p.buffer = AllocateAligned(io_bytes);
      if (p.buffer == nullptr) {
        results[p.op] = Status::ResourceExhausted(name() + ": cannot allocate a " + std::to_string(io_bytes) +
                                                  "-byte I/O buffer");
        continue;
      }
      requests.push_back(
          {.file = p.entry.slot.file, .write = false, .buffer = p.buffer.get(), .length = io_bytes, .offset = p.entry.slot.offset});
      issued.push_back(&p);
    }
    if (!requests.empty()) io_->Run(requests);

    std::vector<const Pending*> mismatched;
    for (std::size_t k = 0; k < issued.size(); ++k) {
      const Pending& p = *issued[k];
      const ReadOp& op = ops[p.op];
      if (const int error = requests[k].error; error != 0) {
        results[p.op] = Status::IoError(name() + ": reading block " + op.key.ToHex() + " from '" +
                                        options_.files[p.entry.slot.file] + "' at offset " +
                                        std::to_string(p.entry.slot.offset) + " failed: " + Errno(error));
        continue;
      }
      const std::optional<Header> header = DecodeHeader(p.buffer.get());
      const std::span<const std::byte> payload(p.buffer.get() + kHeaderBytes, p.entry.size);
      if (header && header->key == op.key && header->size == p.entry.size && header->checksum == p.entry.checksum &&
          header->generation == p.entry.generation && PayloadChecksum(payload) == p.entry.checksum) {
        std::memcpy(op.out.data(), payload.data(), payload.size());
        counters_.reads.fetch_add(1, std::memory_order_relaxed);
        counters_.read_bytes.fetch_add(payload.size(), std::memory_order_relaxed);
        results[p.op] = static_cast<std::size_t>(payload.size());
      } else {
        mismatched.push_back(&p);
      }
    }
    if (mismatched.empty()) continue;
    std::lock_guard lock(mutex_);
    for (const Pending* p : mismatched) {
      const BlockKey& key = ops[p->op].key;
      auto it = index_.find(key);
      if (it == index_.end() || it->second.generation != p->entry.generation) {
        todo.push_back(p->op);  // replaced or evicted while we read, its slot reused: look again
        continue;
      }
      DropLocked(it);
      counters_.checksum_failures.fetch_add(1, std::memory_order_relaxed);
      results[p->op] = Status::Corruption(name() + ": block " + key.ToHex() + " in '" + options_.files[p->entry.slot.file] +
                                          "' at offset " + std::to_string(p->entry.slot.offset) +
                                          " failed its header or checksum check and was dropped");
    }
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
  std::lock_guard lock(mutex_);
  auto it = index_.find(key);
  if (it == index_.end()) return Status::NotFound(name() + ": block " + key.ToHex() + " is not here");
  DropLocked(it);
  counters_.evictions.fetch_add(1, std::memory_order_relaxed);
  return Status::Ok();
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

std::optional<NvmeTier::Location> NvmeTier::LocationForTesting(const BlockKey& key) const {
  std::lock_guard lock(mutex_);
  auto it = index_.find(key);
  if (it == index_.end()) return std::nullopt;
  return Location{options_.files[it->second.slot.file], it->second.slot.offset, it->second.slot_bytes};
}

std::unique_ptr<BlockIo> NvmeTier::ReplaceIoForTesting(std::unique_ptr<BlockIo> io) {
  std::swap(io, io_);
  return io;
}

}  // namespace kvtier
