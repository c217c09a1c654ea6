// RestoreCheckpoint: map the file, check all of it, and only then load the targets.
#include <algorithm>
#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <unordered_set>
#include <utility>
#include <vector>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>

#include "dedup/checkpoint_format.h"
#include "dedup/checkpoint_internal.h"
#include "kvtier/checkpoint.h"
#include "util/little_endian.h"
#include "util/posix_file.h"

namespace kvtier {
namespace {

namespace fmt = checkpoint_format;

// A read-only mapping: payloads go from the page cache straight into the store, with no
// second copy of a file that may hold gigabytes. A checkpoint is never modified in place
// (writers rename a new file over it), so the mapping cannot shrink under us.
class MappedFile {
 public:
  static Result<MappedFile> Open(const std::string& path) {
    ScopedFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
    if (!fd.valid()) return ErrnoStatus(path, "open", errno);
    struct stat info {};
    if (::fstat(fd.get(), &info) != 0) return ErrnoStatus(path, "fstat", errno);
    MappedFile file;
    file.size_ = static_cast<std::size_t>(info.st_size);
    if (file.size_ == 0) return file;
    void* data = ::mmap(nullptr, file.size_, PROT_READ, MAP_PRIVATE, fd.get(), 0);
    if (data == MAP_FAILED) return ErrnoStatus(path, "mmap", errno);
    file.data_ = data;
    ::madvise(data, file.size_, MADV_SEQUENTIAL);
    return file;
  }

  MappedFile(MappedFile&& other) noexcept
      : data_(std::exchange(other.data_, nullptr)), size_(std::exchange(other.size_, 0)) {}
  MappedFile& operator=(MappedFile&&) = delete;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  ~MappedFile() {
    if (data_ != nullptr) ::munmap(data_, size_);
  }

  std::span<const std::byte> bytes() const { return {static_cast<const std::byte*>(data_), size_}; }

 private:
  MappedFile() = default;

  void* data_ = nullptr;
  std::size_t size_ = 0;
};

struct Parsed {
  std::vector<fmt::BlockRecord> blocks;
  std::vector<std::span<const std::byte>> payloads;  // into the mapping
  CheckpointStats stats;
};

std::string Hex64(uint64_t value) {
  char text[19];
  std::snprintf(text, sizeof(text), "0x%016" PRIx64, value);
  return text;
}

// Checks the header far enough to trust its sizes: magic, version, length.
Result<fmt::Header> ParseHeader(std::span<const std::byte> file) {
  const std::size_t magic_bytes = std::min(file.size(), fmt::kMagic.size());
  if (!std::ranges::equal(file.first(magic_bytes), std::span(fmt::kMagic).first(magic_bytes))) {
    return Status::InvalidArgument("not a kvtier checkpoint: it does not start with \"KVTIERCP\"");
  }
  if (file.size() < fmt::kHeaderBytes) {
    return Status::Corruption("truncated to " + std::to_string(file.size()) + " bytes, inside the " +
                              std::to_string(fmt::kHeaderBytes) + "-byte header");
  }
  const fmt::Header header = fmt::DecodeHeader(file.first<fmt::kHeaderBytes>());
  if (header.version == 0) return Status::Corruption("format version 0 does not exist: the header is damaged");
  if (header.version > fmt::kVersion) {
    return Status::Unsupported("format version " + std::to_string(header.version) +
                               " is newer than this build reads (up to " + std::to_string(fmt::kVersion) +
                               "): restore it with a newer kvtier (or the header is damaged)");
  }
  if (header.file_bytes != file.size()) {
    return Status::Corruption((file.size() < header.file_bytes ? "truncated: the header says " : "the header says ") +
                              std::to_string(header.file_bytes) + " bytes but the file has " +
                              std::to_string(file.size()));
  }
  if (header.flags != 0) return Status::Corruption("reserved header flags " + Hex64(header.flags) + " are set");
  return header;
}

Result<Parsed> Parse(std::span<const std::byte> file) {
  KVTIER_ASSIGN_OR_RETURN(const fmt::Header header, ParseHeader(file));
  // The whole-file checksum comes before any count is trusted: a damaged count could
  // otherwise send the parser anywhere.
  if (file.size() < fmt::kHeaderBytes + fmt::kTrailerBytes) return Status::Corruption("no room for the trailer");
  const std::span<const std::byte> body = file.first(file.size() - fmt::kTrailerBytes);
  const uint64_t recorded = little_endian::GetU64(file.last(fmt::kTrailerBytes).data());
  if (const uint64_t actual = PayloadChecksum(body); actual != recorded) {
    return Status::Corruption("file checksum mismatch (trailer says xxh3-64 " + Hex64(recorded) + ", contents hash to " +
                              Hex64(actual) + "): the file is damaged");
  }

  const uint64_t room = body.size() - fmt::kHeaderBytes;
  if (header.block_count > room / fmt::kBlockRecordBytes ||
      header.payload_count > (room - header.block_count * fmt::kBlockRecordBytes) / fmt::kPayloadRecordHeaderBytes ||
      header.payload_count > fmt::kNoPayload) {
    return Status::Corruption("the header's " + std::to_string(header.block_count) + " blocks and " +
                              std::to_string(header.payload_count) + " payloads do not fit in the file");
  }

  Parsed parsed;
  std::size_t at = fmt::kHeaderBytes;
  std::unordered_set<BlockKey, BlockKeyHash> seen;
  parsed.blocks.reserve(header.block_count);
  for (uint64_t i = 0; i < header.block_count; ++i, at += fmt::kBlockRecordBytes) {
    const std::string where = "block record " + std::to_string(i) + " (offset " + std::to_string(at) + ")";
    std::optional<fmt::BlockRecord> record =
        fmt::DecodeBlockRecord(body.subspan(at).first<fmt::kBlockRecordBytes>());
    if (!record) return Status::Corruption(where + ": a reserved field is set or a type is out of range");
    if (record->parent && !seen.contains(*record->parent)) {
      return Status::Corruption(where + ": its parent " + record->parent->ToHex() + " does not come before it");
    }
    if (record->payload != fmt::kNoPayload && record->payload >= header.payload_count) {
      return Status::Corruption(where + ": payload " + std::to_string(record->payload) + " of " +
                                std::to_string(header.payload_count) + " does not exist");
    }
    if (!seen.insert(record->key).second) return Status::Corruption(where + ": key " + record->key.ToHex() + " repeats");
    parsed.blocks.push_back(*record);
  }

  parsed.payloads.reserve(header.payload_count);
  for (uint64_t i = 0; i < header.payload_count; ++i) {
    const std::string where = "payload record " + std::to_string(i) + " (offset " + std::to_string(at) + ")";
    if (body.size() - at < fmt::kPayloadRecordHeaderBytes) return Status::Corruption(where + ": runs past the end");
    const fmt::PayloadRecordHeader record =
        fmt::DecodePayloadRecordHeader(body.subspan(at).first<fmt::kPayloadRecordHeaderBytes>());
    at += fmt::kPayloadRecordHeaderBytes;
    if (record.length > body.size() - at) {
      return Status::Corruption(where + ": its " + std::to_string(record.length) + " bytes run past the end");
    }
    const std::span<const std::byte> bytes = body.subspan(at, record.length);
    if (PayloadChecksum(bytes) != record.checksum) return Status::Corruption(where + ": fails its checksum");
    parsed.payloads.push_back(bytes);
    at += record.length;
  }
  if (at != body.size()) {
    return Status::Corruption(std::to_string(body.size() - at) + " unexplained bytes after the last payload record");
  }

  uint64_t raw_payload_bytes = 0;
  for (const fmt::BlockRecord& record : parsed.blocks) {
    if (record.payload != fmt::kNoPayload) {
      raw_payload_bytes += fmt::kPayloadRecordHeaderBytes + parsed.payloads[record.payload].size();
    }
  }
  const uint64_t payload_bytes = body.size() - fmt::kHeaderBytes - header.block_count * fmt::kBlockRecordBytes;
  const uint64_t fixed = file.size() - payload_bytes;
  parsed.stats = MakeCheckpointStats(header.block_count, header.payload_count, fixed + raw_payload_bytes, file.size());
  return parsed;
}

// Loads checked records into the targets. Only the targets can fail now (a store's
// capacity); then everything loaded is taken out again, children before parents.
Status Apply(const Parsed& parsed, PrefixIndex* index, PayloadStore* store) {
  std::size_t inserted = 0;
  std::vector<BlockKey> put;
  Status status;
  for (const fmt::BlockRecord& record : parsed.blocks) {
    const std::string block = "block " + record.key.ToHex();
    Result<std::size_t> added = index->Insert({&record.key, 1}, {&record.meta, 1}, record.last_access, record.parent);
    if (!added.ok()) {
      status = added.status().WithContext(block);
      break;
    }
    ++inserted;
    if (*added != 1) {
      status = Status::Internal(block + ": an empty index already held it");
      break;
    }
    if (record.payload == fmt::kNoPayload) continue;
    status = store->Put(record.key, parsed.payloads[record.payload]).WithContext(block);
    if (!status.ok()) break;
    put.push_back(record.key);
  }
  if (status.ok()) return status;

  // The keys were loaded by this call into targets it has to itself, so these cannot fail.
  for (const BlockKey& key : put) static_cast<void>(store->Erase(key));
  for (std::size_t i = inserted; i-- > 0;) static_cast<void>(index->Evict(parsed.blocks[i].key));
  return status;
}

}  // namespace

Result<CheckpointStats> RestoreCheckpoint(const std::string& dir, PrefixIndex* index, PayloadStore* store) {
  if (index == nullptr || store == nullptr) return Status::InvalidArgument("RestoreCheckpoint needs an index and a store");
  const uint64_t store_blocks = store->GetStats().blocks;
  if (index->size() != 0 || store_blocks != 0) {
    return Status::FailedPrecondition("RestoreCheckpoint loads into an empty index and store; they hold " +
                                      std::to_string(index->size()) + " and " + std::to_string(store_blocks) +
                                      " blocks");
  }
  const std::string path = CheckpointPath(dir);
  Result<MappedFile> file = MappedFile::Open(path);
  if (!file.ok() && file.status().code() == StatusCode::kNotFound) {
    return Status::NotFound("no checkpoint in " + dir + " (" + path + " does not exist)");
  }
  if (!file.ok()) return file.status();
  Result<Parsed> parsed = Parse(file->bytes());
  if (!parsed.ok()) return parsed.status().WithContext(path);
  KVTIER_RETURN_IF_ERROR(Apply(*parsed, index, store).WithContext(path));
  return parsed->stats;
}

}  // namespace kvtier
