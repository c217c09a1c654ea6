// WriteCheckpoint: snapshot, plan, then write a temporary file and rename it into place.
#include "kvtier/checkpoint.h"

#include <cerrno>
#include <memory>
#include <vector>

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>
#include <xxhash.h>

#include "dedup/checkpoint_format.h"
#include "dedup/checkpoint_internal.h"
#include "util/little_endian.h"
#include "util/posix_file.h"

namespace kvtier {
namespace {

namespace fmt = checkpoint_format;

constexpr char kTempName[] = "checkpoint.kvt.tmp";
constexpr char kLockName[] = "checkpoint.lock";

// Buffers appends to one file and checksums them, so the trailer costs no second pass.
class ChecksummedWriter {
 public:
  ChecksummedWriter(int fd, std::string path) : fd_(fd), path_(std::move(path)), state_(XXH3_createState()) {
    buffer_.reserve(kBufferBytes);
    XXH3_64bits_reset(state_.get());
  }

  Status Append(std::span<const std::byte> bytes) {
    XXH3_64bits_update(state_.get(), bytes.data(), bytes.size());
    if (buffer_.size() + bytes.size() > kBufferBytes) {
      KVTIER_RETURN_IF_ERROR(Flush());
      if (bytes.size() >= kBufferBytes) return WriteFully(fd_, bytes, path_);
    }
    buffer_.insert(buffer_.end(), bytes.begin(), bytes.end());
    return Status::Ok();
  }

  // Appends the checksum of everything appended so far, and writes out the buffer.
  Status Finish() {
    std::array<std::byte, fmt::kTrailerBytes> trailer;
    little_endian::PutU64(trailer.data(), XXH3_64bits_digest(state_.get()));
    buffer_.insert(buffer_.end(), trailer.begin(), trailer.end());
    return Flush();
  }

 private:
  static constexpr std::size_t kBufferBytes = std::size_t{1} << 20;

  struct StateDeleter {
    void operator()(XXH3_state_t* state) const { XXH3_freeState(state); }
  };

  Status Flush() {
    KVTIER_RETURN_IF_ERROR(WriteFully(fd_, buffer_, path_));
    buffer_.clear();
    return Status::Ok();
  }

  int fd_;
  std::string path_;
  std::unique_ptr<XXH3_state_t, StateDeleter> state_;
  std::vector<std::byte> buffer_;
};

// What goes in the file, decided before it is opened.
struct Plan {
  std::vector<fmt::BlockRecord> blocks;
  std::vector<PayloadStore::Snapshot::Payload> payloads;  // in file order
  CheckpointStats stats;
};

Result<Plan> MakePlan(const PrefixIndex& index, const PayloadStore& store) {
  std::vector<BlockInfo> infos;
  index.ForEachBlock([&infos](const BlockInfo& info) { infos.push_back(info); });
  const PayloadStore::Snapshot snapshot = store.TakeSnapshot();

  Plan plan;
  plan.blocks.reserve(infos.size());
  std::vector<uint32_t> file_index(snapshot.payloads.size(), fmt::kNoPayload);
  uint64_t payload_bytes = 0;
  uint64_t raw_payload_bytes = 0;
  for (const BlockInfo& info : infos) {
    fmt::BlockRecord record{.key = info.key, .parent = info.parent, .meta = info.meta, .last_access = info.last_access};
    if (const auto held = snapshot.payload_of.find(info.key); held != snapshot.payload_of.end()) {
      const PayloadStore::Snapshot::Payload& payload = snapshot.payloads[held->second];
      uint32_t& index_in_file = file_index[held->second];
      if (index_in_file == fmt::kNoPayload) {
        if (plan.payloads.size() >= fmt::kNoPayload) {
          return Status::ResourceExhausted("a checkpoint holds at most 2^32 - 1 unique payloads");
        }
        // Never persist a damaged copy: the previous checkpoint may still hold a good one.
        if (PayloadChecksum(*payload.bytes) != payload.checksum) {
          return Status::Corruption("block " + info.key.ToHex() +
                                    ": stored payload fails its checksum; checkpoint not written (the previous one "
                                    "is kept). Erase the block and refetch it, then checkpoint again");
        }
        index_in_file = static_cast<uint32_t>(plan.payloads.size());
        plan.payloads.push_back(payload);
        payload_bytes += fmt::kPayloadRecordHeaderBytes + payload.bytes->size();
      }
      record.payload = index_in_file;
      raw_payload_bytes += fmt::kPayloadRecordHeaderBytes + payload.bytes->size();
    }
    plan.blocks.push_back(record);
  }

  const uint64_t fixed = fmt::kHeaderBytes + plan.blocks.size() * fmt::kBlockRecordBytes + fmt::kTrailerBytes;
  plan.stats = MakeCheckpointStats(plan.blocks.size(), plan.payloads.size(), fixed + raw_payload_bytes,
                                   fixed + payload_bytes);
  return plan;
}

Status WriteFile(const std::string& path, const Plan& plan) {
  ScopedFd fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
  if (!fd.valid()) return ErrnoStatus(path, "open", errno);
  ChecksummedWriter out(fd.get(), path);
  const fmt::Header header{.file_bytes = plan.stats.deduplicated_bytes,
                           .block_count = plan.blocks.size(),
                           .payload_count = plan.payloads.size()};
  KVTIER_RETURN_IF_ERROR(out.Append(fmt::EncodeHeader(header)));
  for (const fmt::BlockRecord& record : plan.blocks) KVTIER_RETURN_IF_ERROR(out.Append(fmt::EncodeBlockRecord(record)));
  for (const PayloadStore::Snapshot::Payload& payload : plan.payloads) {
    KVTIER_RETURN_IF_ERROR(out.Append(fmt::EncodePayloadRecordHeader({payload.bytes->size(), payload.checksum})));
    KVTIER_RETURN_IF_ERROR(out.Append(*payload.bytes));
  }
  KVTIER_RETURN_IF_ERROR(out.Finish());
  if (::fsync(fd.get()) != 0) return ErrnoStatus(path, "fsync", errno);
  return fd.Close(path);
}

// Holds `<dir>/checkpoint.lock` exclusively while it lives; the kernel drops it if the
// process dies, so a crashed writer never blocks the next.
Result<ScopedFd> LockDirectory(const std::string& dir) {
  const std::string path = dir + "/" + kLockName;
  ScopedFd fd(::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644));
  if (!fd.valid()) {
    const int error = errno;
    if (error == ENOENT) {
      return Status::NotFound("checkpoint directory " + dir + " does not exist; create it first");
    }
    return ErrnoStatus(path, "open", error);
  }
  while (::flock(fd.get(), LOCK_EX) != 0) {
    if (errno != EINTR) return ErrnoStatus(path, "flock", errno);
  }
  return fd;
}

}  // namespace

std::string CheckpointPath(const std::string& dir) { return dir + "/checkpoint.kvt"; }

CheckpointStats MakeCheckpointStats(uint64_t blocks, uint64_t unique_payloads, uint64_t raw_bytes,
                                    uint64_t deduplicated_bytes) {
  CheckpointStats stats{.blocks = blocks,
                        .unique_payloads = unique_payloads,
                        .raw_bytes = raw_bytes,
                        .deduplicated_bytes = deduplicated_bytes};
  if (raw_bytes > 0) stats.saving = 1.0 - static_cast<double>(deduplicated_bytes) / static_cast<double>(raw_bytes);
  return stats;
}

Result<CheckpointStats> WriteCheckpoint(const std::string& dir, const PrefixIndex& index, const PayloadStore& store) {
  KVTIER_ASSIGN_OR_RETURN(const ScopedFd lock, LockDirectory(dir));
  KVTIER_ASSIGN_OR_RETURN(const Plan plan, MakePlan(index, store));

  // A fixed temporary name is safe under the lock, and a crashed writer's leftover is
  // truncated and reused rather than piling up.
  const std::string temp = dir + "/" + kTempName;
  const std::string final_path = CheckpointPath(dir);
  Status written = WriteFile(temp, plan);
  if (written.ok() && ::rename(temp.c_str(), final_path.c_str()) != 0) written = ErrnoStatus(temp, "rename", errno);
  if (!written.ok()) {
    ::unlink(temp.c_str());
    return written.WithContext("checkpoint not written, the previous one is kept");
  }
  // The rename is durable only once the directory is: until then a crash may bring back the
  // previous checkpoint, which is whole too.
  KVTIER_RETURN_IF_ERROR(
      SyncDirectory(dir).WithContext("the new checkpoint is in place but may not survive a power loss"));
  return plan.stats;
}

}  // namespace kvtier
