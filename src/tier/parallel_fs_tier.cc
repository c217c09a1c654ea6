// T5, the parallel-filesystem tier: one file per block under sharded subdirectories.
//
// On disk (do not change without bumping kFormatVersion): `<dir>/<aa>/<bb>/<key hex>.blk`
// for shard_levels = 2, where aa, bb are the key's leading hex bytes, holding
//   offset 0   "KVTB"                      magic
//   offset 4   uint32 little-endian        format version (1)
//   offset 8   uint64 little-endian        payload length
//   offset 16  uint64 little-endian        xxh3-64 of the payload (PayloadChecksum)
//   offset 24  the payload
// A block is written to `<key hex>.<pid>.<nonce>.<n>.tmp` beside its final name (nonce: a
// random 64-bit id per tier instance, so that processes on different hosts with the same pid
// never pick one name) and renamed over it, so readers see the old file or the new one, never
// a mix: a reader that opened the old file keeps reading the old inode after the rename.
//
// Shared (`ParallelFsTierOptions::shared`, issue 16): several nodes use one directory. The
// directory is then the pool's, not this process's:
//  - Open neither scans nor counts nor deletes anything: not other nodes' blocks (which
//    `recover` would count as ours or, off, delete) and not their in-flight temporaries
//    (which a node cannot tell from a crashed writer's). `recover` is ignored, and
//    `recover: false` is refused by Validate, since it asks to delete every node's blocks.
//  - Evict forgets the block in this process's accounting and leaves the file: another
//    node may have indexed it. What evicts is a janitor outside kvtier, e.g. from cron
//      find <dir> -name '*.blk' -amin +1440 -delete   (blocks unread for a day; use -mmin
//                                                        where the filesystem keeps no atime)
//      find <dir> -name '*.tmp' -mmin +60 -delete     (temporaries of crashed writers)
//    or the filesystem's quota (a full quota is ResourceExhausted on Write). A block the
//    janitor deleted reads as NotFound, and the read forgets it here.
//  - Used bytes and capacity count what this process wrote and has not evicted; Size and
//    Read see every node's files. A file that fails its checksum is still deleted: nobody
//    can use it.
#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <random>
#include <string>
#include <system_error>
#include <unordered_map>
#include <utility>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kvtier/tiers.h"
#include "tier/tier_counters.h"
#include "tier/writer_checksum.h"
#include "util/little_endian.h"
#include "util/posix_file.h"
#include "util/task_pool.h"

namespace kvtier {
namespace {

constexpr std::size_t kHeaderBytes = 24;
constexpr uint32_t kFormatVersion = 1;
constexpr char kMagic[4] = {'K', 'V', 'T', 'B'};
constexpr std::string_view kBlockSuffix = ".blk";
constexpr std::string_view kTempSuffix = ".tmp";
constexpr int kMaxShardLevels = 4;

using little_endian::GetU32;
using little_endian::GetU64;
using little_endian::PutU32;
using little_endian::PutU64;

using Header = std::array<std::byte, kHeaderBytes>;

Header EncodeHeader(uint64_t length, uint64_t checksum) {
  Header header{};
  std::memcpy(header.data(), kMagic, sizeof(kMagic));
  PutU32(header.data() + 4, kFormatVersion);
  PutU64(header.data() + 8, length);
  PutU64(header.data() + 16, checksum);
  return header;
}

struct DecodedHeader {
  uint64_t length = 0;
  uint64_t checksum = 0;
};

// The header of a file of `file_bytes`, or why it is not a whole block file.
Result<DecodedHeader> DecodeHeader(std::span<const std::byte> header, uint64_t file_bytes) {
  if (file_bytes < kHeaderBytes || header.size() < kHeaderBytes) {
    return Status::Corruption("truncated header (" + std::to_string(file_bytes) + " bytes)");
  }
  if (std::memcmp(header.data(), kMagic, sizeof(kMagic)) != 0) return Status::Corruption("bad magic");
  if (const uint32_t version = GetU32(header.data() + 4); version != kFormatVersion) {
    return Status::Corruption("unknown format version " + std::to_string(version));
  }
  const DecodedHeader decoded{.length = GetU64(header.data() + 8), .checksum = GetU64(header.data() + 16)};
  if (decoded.length != file_bytes - kHeaderBytes) {
    return Status::Corruption("header says " + std::to_string(decoded.length) + " payload bytes, file holds " +
                              std::to_string(file_bytes - kHeaderBytes));
  }
  return decoded;
}

// Like ErrnoStatus, but a full filesystem or quota is ResourceExhausted (the policy can
// evict), and ENOENT stays an IoError: on the write path a vanished file is a failure.
Status FsError(const std::string& path, std::string_view what, int error) {
  const std::string reason = std::generic_category().message(error);
  if (error == ENOSPC || error == EDQUOT) {
    return Status::ResourceExhausted(path + ": " + std::string(what) + " failed: filesystem full (" + reason +
                                     "); evict blocks or free space on the filesystem");
  }
  return Status::IoError(path + ": " + std::string(what) + " failed: " + reason);
}

bool EndsWith(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

// Locking: `mu_` guards the accounting (sizes_, used_bytes_, reserved_bytes_) and is never
// held across a system call. A key's stripe lock (key_locks_) is held around the metadata
// calls that change which file a key names -- the rename of a Write, the unlink of an Evict
// or of a corrupt block -- together with the accounting update, so the map always matches
// the directory. Lock order: stripe lock, then mu_. Data writes, fsyncs and reads hold no
// lock: readers rely on rename's atomic replacement. Counters are relaxed atomics.
class ParallelFsTier final : public Tier {
 public:
  explicit ParallelFsTier(ParallelFsTierOptions options)
      : options_(std::move(options)), temp_tag_(std::to_string(::getpid()) + "." + RandomHex()) {}

  // Rebuilds the accounting from the directory and removes temporaries a crash left behind
  // (not when shared: see the file comment).
  Status Open();

  TierKind kind() const override { return TierKind::kParallelFs; }
  const std::string& name() const override { return options_.name; }
  using Tier::Write;
  Status Write(const WriteOp& op) override;
  using Tier::Read;
  Result<std::size_t> Read(const ReadOp& op) override;
  std::optional<std::size_t> Size(const BlockKey& key) const override;
  Status Evict(const BlockKey& key) override;
  bool shared() const override { return options_.shared; }
  TierStats GetStats() const override;
  Result<std::vector<BlockKey>> ListKeys() const override;

 private:
  static constexpr std::size_t kKeyLocks = 64;

  static std::string RandomHex() {
    std::random_device device;
    const uint64_t id = (uint64_t{device()} << 32) ^ device();
    char text[17];
    std::snprintf(text, sizeof(text), "%016llx", static_cast<unsigned long long>(id));
    return text;
  }

  std::string ShardDir(const std::string& hex) const {
    std::string dir = options_.directory;
    for (int level = 0; level < options_.shard_levels; ++level) {
      dir += '/';
      dir += hex.substr(2 * static_cast<std::size_t>(level), 2);
    }
    return dir;
  }
  std::string BlockPath(const std::string& hex) const { return ShardDir(hex) + "/" + hex + std::string(kBlockSuffix); }
  std::mutex& KeyLock(const BlockKey& key) { return key_locks_[BlockKeyHash{}(key) % kKeyLocks]; }

  Status MakeShardDirs(const std::string& hex) const;
  Status WriteTemp(const std::string& hex, const std::string& temp, std::span<const std::byte> payload,
                   uint64_t checksum) const;
  Status Commit(const BlockKey& key, const std::string& temp, const std::string& path, uint64_t size,
                uint64_t reservation);
  Status DropCorrupt(const BlockKey& key, const std::string& path, const struct stat& opened, const Status& why);
  Status EvictShared(const BlockKey& key, const std::string& path);
  void ForgetVanished(const BlockKey& key, const std::string& path);
  Status ScanDirectory(const std::string& dir, int level);
  void AdmitScanned(const std::string& path, std::string_view file_name);
  uint64_t ForgetLocked(const BlockKey& key);
  Status FailWrite(Status status) {
    counters_.write_failures.fetch_add(1, std::memory_order_relaxed);
    return status;
  }

  const ParallelFsTierOptions options_;
  const std::string temp_tag_;  // "<pid>.<nonce>": this instance's part of its temporaries' names
  std::array<std::mutex, kKeyLocks> key_locks_;

  mutable std::mutex mu_;
  std::unordered_map<BlockKey, uint64_t, BlockKeyHash> sizes_;  // GUARDED_BY(mu_): payload bytes
  uint64_t used_bytes_ = 0;      // GUARDED_BY(mu_): sum of sizes_
  uint64_t reserved_bytes_ = 0;  // GUARDED_BY(mu_): room promised to Writes in flight

  std::atomic<uint64_t> temp_counter_{0};
  TierCounters counters_;
};

Status ParallelFsTier::MakeShardDirs(const std::string& hex) const {
  std::string dir = options_.directory;
  for (int level = 0; level < options_.shard_levels; ++level) {
    const std::string parent = dir;
    dir += '/';
    dir += hex.substr(2 * static_cast<std::size_t>(level), 2);
    if (::mkdir(dir.c_str(), 0755) == 0) {
      if (options_.fsync == FsyncPolicy::kFileAndDir) KVTIER_RETURN_IF_ERROR(SyncDirectory(parent));
    } else if (errno != EEXIST) {
      return FsError(dir, "mkdir", errno);
    }
  }
  return Status::Ok();
}

Status ParallelFsTier::WriteTemp(const std::string& hex, const std::string& temp, std::span<const std::byte> payload,
                                 uint64_t checksum) const {
  constexpr int kFlags = O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC;
  ScopedFd fd(::open(temp.c_str(), kFlags, 0644));
  if (!fd.valid() && errno == ENOENT) {  // the shard's directories are made on first use
    KVTIER_RETURN_IF_ERROR(MakeShardDirs(hex));
    fd = ScopedFd(::open(temp.c_str(), kFlags, 0644));
  }
  if (!fd.valid()) return FsError(temp, "open", errno);
  const Header header = EncodeHeader(payload.size(), checksum);
  Status status = WriteFully(fd.get(), header, temp, std::nullopt, FsError);
  if (status.ok()) status = WriteFully(fd.get(), payload, temp, std::nullopt, FsError);
  if (status.ok() && options_.fsync != FsyncPolicy::kNever && ::fsync(fd.get()) != 0) {
    status = FsError(temp, "fsync", errno);
  }
  if (!status.ok()) return status;
  // NFS and Lustre may report a failed write (a full quota) only at close.
  if (::close(fd.Release()) != 0) return FsError(temp, "close", errno);
  return Status::Ok();
}

Status ParallelFsTier::Write(const WriteOp& op) {
  TaskPool::BlockingScope blocking;  // file I/O: an elastic pool may start a thread meanwhile (task_pool.h)
  const BlockKey& key = op.key;
  const std::span<const std::byte> payload = op.payload;
  const std::string hex = key.ToHex();
  if (payload.empty()) return FailWrite(Status::InvalidArgument("block " + hex + ": empty payload"));
  const uint64_t size = payload.size();
  // The file is written from `payload` by the kernel: the checksum is taken first, and a
  // writer's checksum is checked before anything is reserved or written.
  const uint64_t checksum = PayloadChecksum(payload);
  if (Status matched = CheckWriterChecksum(options_.name, key, op.checksum, checksum); !matched.ok()) {
    return FailWrite(std::move(matched));
  }

  // Reserve room before writing, so concurrent writers cannot overfill the tier together.
  uint64_t reservation = 0;
  {
    std::lock_guard lock(mu_);
    const auto it = sizes_.find(key);
    const uint64_t old = it == sizes_.end() ? 0 : it->second;
    reservation = size > old ? size - old : 0;
    if (options_.capacity_bytes > 0 && used_bytes_ + reserved_bytes_ + reservation > options_.capacity_bytes) {
      return FailWrite(Status::ResourceExhausted(
          "tier '" + options_.name + "' is full: " + std::to_string(used_bytes_ + reserved_bytes_) + " of " +
          std::to_string(options_.capacity_bytes) + " bytes used, block " + hex + " needs " + std::to_string(size)));
    }
    reserved_bytes_ += reservation;
  }

  const std::string path = BlockPath(hex);
  const std::string temp = ShardDir(hex) + "/" + hex + "." + temp_tag_ + "." +
                           std::to_string(temp_counter_.fetch_add(1, std::memory_order_relaxed)) +
                           std::string(kTempSuffix);
  Status status = WriteTemp(hex, temp, payload, checksum);
  if (status.ok()) {
    status = Commit(key, temp, path, size, reservation);  // releases the reservation either way
  } else {
    std::lock_guard lock(mu_);
    reserved_bytes_ -= reservation;
  }
  if (!status.ok()) {
    ::unlink(temp.c_str());  // may not exist; the old block, if any, is untouched
    return FailWrite(std::move(status));
  }
  if (options_.fsync == FsyncPolicy::kFileAndDir) {
    // The rename is durable only once its directory is; the block is already readable.
    if (Status synced = SyncDirectory(ShardDir(hex)); !synced.ok()) {
      return FailWrite(synced.WithContext("block " + hex + " is in place but may not survive a power loss"));
    }
  }
  return Status::Ok();
}

// Renames the temporary over the block and updates the accounting, under the key's lock so
// that no other Write or Evict of the key interleaves. Releases `reservation` either way.
Status ParallelFsTier::Commit(const BlockKey& key, const std::string& temp, const std::string& path, uint64_t size,
                              uint64_t reservation) {
  std::lock_guard key_lock(KeyLock(key));
  uint64_t current = 0;
  {
    std::lock_guard lock(mu_);
    const auto it = sizes_.find(key);
    current = it == sizes_.end() ? 0 : it->second;
    // The block may have shrunk or gone since the reservation (an Evict): take the extra
    // room now, while the key's lock keeps `current` fixed.
    const uint64_t needed = size > current ? size - current : 0;
    if (needed > reservation) {
      const uint64_t extra = needed - reservation;
      if (options_.capacity_bytes > 0 && used_bytes_ + reserved_bytes_ + extra > options_.capacity_bytes) {
        reserved_bytes_ -= reservation;
        return Status::ResourceExhausted("tier '" + options_.name + "' is full: block " + key.ToHex() + " needs " +
                                         std::to_string(size) + " bytes");
      }
      reserved_bytes_ += extra;
      reservation = needed;
    }
  }
  const bool renamed = ::rename(temp.c_str(), path.c_str()) == 0;
  const int error = errno;
  std::lock_guard lock(mu_);
  reserved_bytes_ -= reservation;
  if (!renamed) return FsError(temp, "rename", error);
  used_bytes_ = used_bytes_ - current + size;
  sizes_[key] = size;
  counters_.writes.fetch_add(1, std::memory_order_relaxed);
  counters_.write_bytes.fetch_add(size, std::memory_order_relaxed);
  return Status::Ok();
}

Result<std::size_t> ParallelFsTier::Read(const ReadOp& op) {
  TaskPool::BlockingScope blocking;
  const BlockKey& key = op.key;
  const std::span<std::byte> out = op.out;
  const std::string hex = key.ToHex();
  const std::string path = BlockPath(hex);
  ScopedFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd.valid()) {
    if (errno == ENOENT) {
      if (options_.shared) ForgetVanished(key, path);  // another node's janitor deleted it
      counters_.read_misses.fetch_add(1, std::memory_order_relaxed);
      return Status::NotFound("block " + hex + " is not in tier '" + options_.name + "'");
    }
    return FsError(path, "open", errno);
  }
  struct stat opened {};
  if (::fstat(fd.get(), &opened) != 0) return FsError(path, "fstat", errno);
  Header header{};
  KVTIER_ASSIGN_OR_RETURN(const std::size_t header_bytes, PreadFully(fd.get(), header, 0, path, FsError));
  Result<DecodedHeader> decoded =
      DecodeHeader(std::span(header).first(header_bytes), static_cast<uint64_t>(opened.st_size));
  if (!decoded.ok()) return DropCorrupt(key, path, opened, decoded.status());
  if (decoded->length > out.size()) {
    return Status::InvalidArgument("block " + hex + " holds " + std::to_string(decoded->length) +
                                   " bytes, the buffer only " + std::to_string(out.size()));
  }
  const std::span<std::byte> payload = out.first(static_cast<std::size_t>(decoded->length));
  KVTIER_ASSIGN_OR_RETURN(const std::size_t payload_bytes, PreadFully(fd.get(), payload, kHeaderBytes, path, FsError));
  Status bad;
  if (payload_bytes != payload.size()) {
    bad = Status::Corruption("file shrank while read: " + std::to_string(payload_bytes) + " payload bytes");
  } else if (PayloadChecksum(payload) != decoded->checksum) {
    bad = Status::Corruption("payload checksum mismatch");
  }
  if (!bad.ok()) {
    std::fill(payload.begin(), payload.end(), std::byte{0});  // hand back no bytes that failed the check
    return DropCorrupt(key, path, opened, bad);
  }
  counters_.reads.fetch_add(1, std::memory_order_relaxed);
  counters_.read_bytes.fetch_add(payload.size(), std::memory_order_relaxed);
  if (op.checksum != nullptr) *op.checksum = decoded->checksum;
  return payload.size();
}

// Deletes a corrupt block -- only if `path` still names the file that was read (`opened`,
// held open by the caller so its inode cannot be reused): a Write may have replaced it
// with a good block meanwhile.
Status ParallelFsTier::DropCorrupt(const BlockKey& key, const std::string& path, const struct stat& opened,
                                   const Status& why) {
  counters_.checksum_failures.fetch_add(1, std::memory_order_relaxed);
  {
    std::lock_guard key_lock(KeyLock(key));
    struct stat now {};
    if (::stat(path.c_str(), &now) == 0 && now.st_dev == opened.st_dev && now.st_ino == opened.st_ino &&
        ::unlink(path.c_str()) == 0) {
      std::lock_guard lock(mu_);
      ForgetLocked(key);
    }
  }
  return Status::Corruption("block " + key.ToHex() + " in tier '" + options_.name + "' (" + path +
                            "): " + why.message() + "; the block was dropped");
}

uint64_t ParallelFsTier::ForgetLocked(const BlockKey& key) {
  const auto it = sizes_.find(key);
  if (it == sizes_.end()) return 0;
  const uint64_t size = it->second;
  used_bytes_ -= size;
  sizes_.erase(it);
  return size;
}

std::optional<std::size_t> ParallelFsTier::Size(const BlockKey& key) const {
  struct stat info {};
  if (::stat(BlockPath(key.ToHex()).c_str(), &info) != 0) return std::nullopt;
  const auto bytes = static_cast<uint64_t>(info.st_size);
  if (bytes <= kHeaderBytes) return std::nullopt;  // not a whole block; Read will drop it
  return static_cast<std::size_t>(bytes - kHeaderBytes);
}

// Under the key's lock, so that a Write committing the key meanwhile is not forgotten: the
// file is checked again there.
void ParallelFsTier::ForgetVanished(const BlockKey& key, const std::string& path) {
  std::lock_guard key_lock(KeyLock(key));
  struct stat info {};
  if (::stat(path.c_str(), &info) == 0 || errno != ENOENT) return;
  std::lock_guard lock(mu_);
  ForgetLocked(key);
}

// A shared directory's block stays for the other nodes (see the file comment): this only
// drops it from this process's accounting. NotFound when neither this process holds it nor
// the file exists.
Status ParallelFsTier::EvictShared(const BlockKey& key, const std::string& path) {
  std::lock_guard key_lock(KeyLock(key));
  bool held = false;
  {
    std::lock_guard lock(mu_);
    held = sizes_.contains(key);
    ForgetLocked(key);
  }
  struct stat info {};
  if (!held && ::stat(path.c_str(), &info) != 0) {
    return Status::NotFound("block " + key.ToHex() + " is not in tier '" + options_.name + "'");
  }
  counters_.evictions.fetch_add(1, std::memory_order_relaxed);
  return Status::Ok();
}

Status ParallelFsTier::Evict(const BlockKey& key) {
  TaskPool::BlockingScope blocking;
  const std::string hex = key.ToHex();
  const std::string path = BlockPath(hex);
  if (options_.shared) return EvictShared(key, path);
  std::lock_guard key_lock(KeyLock(key));
  if (::unlink(path.c_str()) != 0) {
    const int error = errno;
    std::lock_guard lock(mu_);
    if (error != ENOENT) return FsError(path, "unlink", error);
    ForgetLocked(key);  // removed behind our back: the directory is the truth
    return Status::NotFound("block " + hex + " is not in tier '" + options_.name + "'");
  }
  std::lock_guard lock(mu_);
  ForgetLocked(key);
  counters_.evictions.fetch_add(1, std::memory_order_relaxed);
  return Status::Ok();
}

TierStats ParallelFsTier::GetStats() const {
  TierStats stats{.capacity_bytes = options_.capacity_bytes};
  counters_.Fill(stats);
  std::lock_guard lock(mu_);
  stats.used_bytes = used_bytes_;
  stats.blocks = sizes_.size();
  return stats;
}

Result<std::vector<BlockKey>> ParallelFsTier::ListKeys() const {
  TaskPool::BlockingScope blocking;
  std::vector<BlockKey> keys;
  std::lock_guard lock(mu_);
  keys.reserve(sizes_.size());
  for (const auto& [key, size] : sizes_) keys.push_back(key);
  return keys;
}

Status ParallelFsTier::Open() {
  // A shared directory's files belong to every node: none is this process's to count or
  // delete, not even a temporary (its writer may be alive on another host).
  if (!options_.shared) KVTIER_RETURN_IF_ERROR(ScanDirectory(options_.directory, 0));
  // Fail now, not at the first Write, on a read-only or full filesystem.
  const std::string probe = options_.directory + "/.probe." + temp_tag_ + std::string(kTempSuffix);
  ScopedFd fd(::open(probe.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
  if (!fd.valid()) return FsError(probe, "open", errno).WithContext("tier directory is not writable");
  ::unlink(probe.c_str());
  return fd.Close(probe);
}

// Walks the shard directories (single-threaded: Open runs before the tier is shared).
Status ParallelFsTier::ScanDirectory(const std::string& dir, int level) {
  std::error_code error;
  std::filesystem::directory_iterator it(dir, error);
  if (error) return Status::IoError(dir + ": cannot list the tier directory: " + error.message());
  for (; it != std::filesystem::directory_iterator(); it.increment(error)) {
    const std::string path = it->path().string();
    const std::string file_name = it->path().filename().string();
    if (level < options_.shard_levels) {
      std::error_code type_error;
      if (file_name.size() == 2 && it->is_directory(type_error)) KVTIER_RETURN_IF_ERROR(ScanDirectory(path, level + 1));
    } else if (EndsWith(file_name, kTempSuffix)) {
      ::unlink(path.c_str());  // a Write that a crash interrupted
    } else if (EndsWith(file_name, kBlockSuffix)) {
      AdmitScanned(path, file_name);
    }
  }
  if (error) return Status::IoError(dir + ": cannot list the tier directory: " + error.message());
  return Status::Ok();
}

// Counts a block file found at startup, or removes it when its header shows it damaged or
// recover is off. Files that are not ours (other names, or a key in the wrong shard) are left
// alone.
void ParallelFsTier::AdmitScanned(const std::string& path, std::string_view file_name) {
  const Result<BlockKey> key = BlockKey::FromHex(file_name.substr(0, file_name.size() - kBlockSuffix.size()));
  if (!key.ok() || BlockPath(key->ToHex()) != path) return;
  if (!options_.recover) {
    ::unlink(path.c_str());
    return;
  }
  ScopedFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  struct stat info {};
  if (!fd.valid() || ::fstat(fd.get(), &info) != 0) return;
  Header header{};
  const Result<std::size_t> got = PreadFully(fd.get(), header, 0, path, FsError);
  if (!got.ok()) return;
  const Result<DecodedHeader> decoded = DecodeHeader(std::span(header).first(*got), static_cast<uint64_t>(info.st_size));
  if (!decoded.ok()) {
    counters_.checksum_failures.fetch_add(1, std::memory_order_relaxed);
    ::unlink(path.c_str());
    return;
  }
  std::lock_guard lock(mu_);
  sizes_[*key] = decoded->length;
  used_bytes_ += decoded->length;
}

}  // namespace

Status ParallelFsTierOptions::Validate() const {
  if (name.empty()) return Status::InvalidArgument("parallel_fs tier: 'name' must not be empty");
  if (directory.empty()) return Status::InvalidArgument("parallel_fs tier '" + name + "': 'directory' is required");
  if (shard_levels < 0 || shard_levels > kMaxShardLevels) {
    return Status::InvalidArgument("parallel_fs tier '" + name + "': 'shard_levels' must be 0 to " +
                                   std::to_string(kMaxShardLevels) + ", got " + std::to_string(shard_levels));
  }
  if (fsync != FsyncPolicy::kNever && fsync != FsyncPolicy::kFile && fsync != FsyncPolicy::kFileAndDir) {
    return Status::InvalidArgument("parallel_fs tier '" + name + "': unknown fsync policy " +
                                   std::to_string(static_cast<int>(fsync)));
  }
  if (shared && !recover) {
    return Status::InvalidArgument("parallel_fs tier '" + name +
                                   "': 'recover: false' deletes the blocks in the directory, and with 'shared: true' "
                                   "they are every node's; remove 'recover' (a shared tier never scans the directory: "
                                   "a janitor or the quota evicts, docs/cluster.md)");
  }
  return Status::Ok();
}

Result<std::unique_ptr<Tier>> NewParallelFsTier(const ParallelFsTierOptions& options) {
  KVTIER_RETURN_IF_ERROR(options.Validate());
  std::error_code error;
  std::filesystem::create_directories(options.directory, error);
  if (error) return Status::IoError(options.directory + ": cannot create the tier directory: " + error.message());
  if (!std::filesystem::is_directory(options.directory, error)) {
    return Status::IoError(options.directory + ": the tier directory is not a directory");
  }
  auto tier = std::make_unique<ParallelFsTier>(options);
  KVTIER_RETURN_IF_ERROR(tier->Open().WithContext("parallel_fs tier '" + options.name + "'"));
  return std::unique_ptr<Tier>(std::move(tier));
}

}  // namespace kvtier
