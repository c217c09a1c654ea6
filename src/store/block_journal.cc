#include "store/block_journal.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cerrno>
#include <filesystem>
#include <unordered_map>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util/little_endian.h"
#include "util/task_pool.h"

namespace kvtier {
namespace {

using little_endian::GetU32;
using little_endian::GetU64;
using little_endian::PutU32;
using little_endian::PutU64;

constexpr std::array<std::byte, 8> kMagic = {std::byte{'K'}, std::byte{'V'}, std::byte{'T'}, std::byte{'I'},
                                             std::byte{'E'}, std::byte{'R'}, std::byte{'J'}, std::byte{'L'}};
constexpr uint8_t kHasParent = 0x01;

void Encode(const JournalRecord& r, std::byte* out) {
  std::byte* body = out + 12;
  body[0] = std::byte{static_cast<uint8_t>(r.kind)};
  body[1] = std::byte{static_cast<uint8_t>((r.parent ? kHasParent : uint8_t{0}) | (r.tiers << 1))};
  body[2] = std::byte{static_cast<uint8_t>(r.type)};
  body[3] = std::byte{static_cast<uint8_t>(r.transition)};
  PutU32(body + 4, r.tokens);
  PutU32(body + 8, r.bytes);
  PutU64(body + 12, r.key.hi);
  PutU64(body + 20, r.key.lo);
  PutU64(body + 28, r.parent ? r.parent->hi : 0);
  PutU64(body + 36, r.parent ? r.parent->lo : 0);
  PutU64(body + 44, std::bit_cast<uint64_t>(r.recompute_seconds));
  PutU32(out, static_cast<uint32_t>(BlockJournal::kRecordBodyBytes));
  PutU64(out + 4, PayloadChecksum({body, BlockJournal::kRecordBodyBytes}));
}

// nullopt for a record that is torn, fails its checksum, or holds values no writer writes.
std::optional<JournalRecord> Decode(std::span<const std::byte> in) {
  if (in.size() < BlockJournal::kRecordBytes || GetU32(in.data()) != BlockJournal::kRecordBodyBytes) return std::nullopt;
  const std::span<const std::byte> body = in.subspan(12, BlockJournal::kRecordBodyBytes);
  if (GetU64(in.data() + 4) != PayloadChecksum(body)) return std::nullopt;
  const auto kind = std::to_integer<uint8_t>(body[0]);
  const auto flags = std::to_integer<uint8_t>(body[1]);
  const auto type = std::to_integer<uint8_t>(body[2]);
  const auto transition = std::to_integer<uint8_t>(body[3]);
  if (kind < 1 || kind > 2 || type > 3 || transition > 3) return std::nullopt;
  JournalRecord r{.kind = static_cast<JournalRecord::Kind>(kind),
                  .key = {GetU64(body.data() + 12), GetU64(body.data() + 20)},
                  .tiers = static_cast<uint8_t>(flags >> 1),
                  .tokens = GetU32(body.data() + 4),
                  .bytes = GetU32(body.data() + 8),
                  .type = static_cast<BlockType>(type),
                  .transition = static_cast<TransitionType>(transition),
                  .recompute_seconds = std::bit_cast<double>(GetU64(body.data() + 44))};
  if (flags & kHasParent) r.parent = BlockKey{GetU64(body.data() + 28), GetU64(body.data() + 36)};
  return r;
}

// Reads [begin, end) of the file, or less at its end.
Result<std::vector<std::byte>> PreadRange(int fd, const std::string& path, uint64_t begin, uint64_t end) {
  std::vector<std::byte> bytes(static_cast<std::size_t>(end - begin));
  KVTIER_ASSIGN_OR_RETURN(const std::size_t got, PreadFully(fd, bytes, begin, path));
  bytes.resize(got);
  return bytes;
}

// The records of `bytes` (whole records, as Append writes them) that recovery would index:
// the last of each key, when it is a put, in their order.
std::vector<std::byte> LiveRecords(std::span<const std::byte> bytes) {
  std::unordered_map<BlockKey, std::size_t, BlockKeyHash> last;  // key -> offset of its last record
  std::vector<std::pair<BlockKey, bool>> decoded;                 // key, is a put
  for (std::size_t at = 0; at + BlockJournal::kRecordBytes <= bytes.size(); at += BlockJournal::kRecordBytes) {
    std::optional<JournalRecord> r = Decode(bytes.subspan(at));
    if (!r) break;
    last[r->key] = at;
    decoded.emplace_back(r->key, r->kind == JournalRecord::Kind::kPut);
  }
  std::vector<std::byte> live;
  for (std::size_t i = 0; i < decoded.size(); ++i) {
    const std::size_t at = i * BlockJournal::kRecordBytes;
    if (!decoded[i].second || last[decoded[i].first] != at) continue;
    live.insert(live.end(), bytes.begin() + static_cast<std::ptrdiff_t>(at),
                bytes.begin() + static_cast<std::ptrdiff_t>(at + BlockJournal::kRecordBytes));
  }
  return live;
}

std::vector<std::byte> EncodeAll(std::span<const JournalRecord> records) {
  std::vector<std::byte> bytes(records.size() * BlockJournal::kRecordBytes);
  for (std::size_t i = 0; i < records.size(); ++i) Encode(records[i], bytes.data() + i * BlockJournal::kRecordBytes);
  return bytes;
}

}  // namespace

Result<BlockJournal::Contents> BlockJournal::Read(const std::string& path) {
  ScopedFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd.valid()) return ErrnoStatus(path, "open", errno);
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) return ErrnoStatus(path, "stat", errno);
  KVTIER_ASSIGN_OR_RETURN(const std::vector<std::byte> file,
                          PreadRange(fd.get(), path, 0, static_cast<uint64_t>(st.st_size)));
  if (file.size() < kHeaderBytes || !std::equal(kMagic.begin(), kMagic.end(), file.begin())) {
    return Status::Corruption(path +
                              ": not a kvtier block journal (bad magic); move it away or set another journal_path");
  }
  if (const uint32_t version = GetU32(file.data() + 8); version != 1 && version != kVersion) {
    return Status::Corruption(path + ": block journal version " + std::to_string(version) + ", this build reads " +
                              std::to_string(kVersion));
  }
  Contents contents;
  std::size_t at = kHeaderBytes;
  while (at < file.size()) {
    std::optional<JournalRecord> r = Decode(std::span(file).subspan(at));
    if (!r) break;
    contents.records.push_back(*r);
    at += kRecordBytes;
  }
  contents.ignored_bytes = file.size() - at;
  return contents;
}

namespace {

// A new journal file at `path` + ".tmp": the header, then `body`; not yet synced or renamed.
Result<ScopedFd> StartReplacement(const std::string& path, std::span<const std::byte> body) {
  const std::string temp = path + ".tmp";
  ScopedFd fd(::open(temp.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
  if (!fd.valid()) return ErrnoStatus(temp, "open", errno);
  std::vector<std::byte> bytes(BlockJournal::kHeaderBytes);
  std::copy(kMagic.begin(), kMagic.end(), bytes.begin());
  PutU32(bytes.data() + 8, BlockJournal::kVersion);
  bytes.insert(bytes.end(), body.begin(), body.end());
  KVTIER_RETURN_IF_ERROR(WriteFully(fd.get(), bytes, temp, 0));
  return fd;
}

// Makes the replacement durable and puts it at `path`. The descriptor still names the file,
// now at `path`: appends go on through it.
Status FinishReplacement(const ScopedFd& fd, const std::string& path) {
  const std::string temp = path + ".tmp";
  if (::fsync(fd.get()) != 0) return ErrnoStatus(temp, "fsync", errno);
  if (::rename(temp.c_str(), path.c_str()) != 0) return ErrnoStatus(path, "rename", errno);
  const std::filesystem::path parent = std::filesystem::path(path).parent_path();
  return SyncDirectory(parent.empty() ? "." : parent.string());
}

}  // namespace

Result<std::unique_ptr<BlockJournal>> BlockJournal::Create(const std::string& path,
                                                           std::span<const JournalRecord> records, bool sync) {
  KVTIER_ASSIGN_OR_RETURN(ScopedFd fd, StartReplacement(path, EncodeAll(records)));
  KVTIER_RETURN_IF_ERROR(FinishReplacement(fd, path));
  const uint64_t end = kHeaderBytes + records.size() * kRecordBytes;
  return std::unique_ptr<BlockJournal>(new BlockJournal(path, std::move(fd), end, records.size(), sync));
}

Status BlockJournal::Compact() {
  TaskPool::BlockingScope blocking;
  std::shared_ptr<const ScopedFd> old;
  uint64_t copied_until = 0;
  {
    std::lock_guard lock(mu_);
    KVTIER_RETURN_IF_ERROR(broken_);
    old = fd_;
    copied_until = end_;
  }
  // The bulk, without the lock: appends go on meanwhile.
  KVTIER_ASSIGN_OR_RETURN(const std::vector<std::byte> before,
                          PreadRange(old->get(), path_, kHeaderBytes, copied_until));
  const std::vector<std::byte> live = LiveRecords(before);
  Result<ScopedFd> replacement = StartReplacement(path_, live);
  std::lock_guard lock(mu_);
  // What was appended meanwhile follows as it is: the last record of a key still wins.
  Result<std::vector<std::byte>> tail = replacement.ok() ? PreadRange(old->get(), path_, copied_until, end_)
                                                         : Result<std::vector<std::byte>>(replacement.status());
  Status s = tail.status();
  const uint64_t new_end = kHeaderBytes + live.size() + (tail.ok() ? tail->size() : 0);
  if (s.ok()) s = WriteFully(replacement->get(), *tail, path_ + ".tmp", kHeaderBytes + live.size());
  if (s.ok()) s = FinishReplacement(*replacement, path_);
  if (!s.ok()) {
    std::error_code ignored;
    std::filesystem::remove(path_ + ".tmp", ignored);
    return s.WithContext("compacting the block journal (it goes on uncompacted)");
  }
  fd_ = std::make_shared<const ScopedFd>(std::move(*replacement));
  end_ = new_end;
  records_ = (new_end - kHeaderBytes) / kRecordBytes;
  return Status::Ok();
}

Result<std::unique_ptr<BlockJournal>> BlockJournal::OpenExisting(const std::string& path, bool sync) {
  KVTIER_ASSIGN_OR_RETURN(Contents contents, Read(path));
  ScopedFd fd(::open(path.c_str(), O_RDWR | O_CLOEXEC));
  if (!fd.valid()) return ErrnoStatus(path, "open", errno);
  const uint64_t end = kHeaderBytes + contents.records.size() * kRecordBytes;
  // Shrinking needs no space, so this works on a full disk too.
  if (contents.ignored_bytes > 0 && ::ftruncate(fd.get(), static_cast<off_t>(end)) != 0) {
    return ErrnoStatus(path, "truncate the torn tail", errno);
  }
  return std::unique_ptr<BlockJournal>(new BlockJournal(path, std::move(fd), end, contents.records.size(), sync));
}

BlockJournal::BlockJournal(std::string path, ScopedFd fd, uint64_t end, uint64_t records, bool sync)
    : path_(std::move(path)),
      sync_(sync),
      fd_(std::make_shared<const ScopedFd>(std::move(fd))),
      end_(end),
      records_(records) {}

Status BlockJournal::Append(std::span<const JournalRecord> records, bool durable) {
  TaskPool::BlockingScope blocking;  // a write, and with `durable` an fdatasync (task_pool.h)
  const std::vector<std::byte> bytes = EncodeAll(records);
  {
    std::lock_guard lock(mu_);
    KVTIER_RETURN_IF_ERROR(broken_);
    const Status written = WriteFully(fd_->get(), bytes, path_, end_);
    if (!written.ok()) {
      // A partial record left here would hide every later one from Read: cut it off.
      if (::ftruncate(fd_->get(), static_cast<off_t>(end_)) != 0) {
        broken_ = ErrnoStatus(path_, "truncate after a failed append", errno);
      }
      return written;
    }
    end_ += bytes.size();
    records_ += records.size();
  }
  // Outside the lock: concurrent appenders share one flush instead of queueing behind it.
  if (sync_ && durable) return Sync();
  return Status::Ok();
}

Status BlockJournal::Sync() {
  TaskPool::BlockingScope blocking;
  std::shared_ptr<const ScopedFd> fd;
  {
    std::lock_guard lock(mu_);
    fd = fd_;
  }
  // A Compact that switched files meanwhile synced everything appended before the switch.
  if (::fdatasync(fd->get()) != 0) return ErrnoStatus(path_, "fdatasync", errno);
  return Status::Ok();
}

uint64_t BlockJournal::records() const {
  std::lock_guard lock(mu_);
  return records_;
}

}  // namespace kvtier
