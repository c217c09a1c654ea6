// BlockJournal: the persistent store's record of which blocks it put into its durable tiers
// (the persist tier, and tiers below it whose blocks survive a restart), with what a block
// needs to be indexed again (parent, tokens, type, transition, the tiers holding it), because
// a tier can say whether it holds a key but cannot list its keys (docs/store.md,
// "Persistence").
//
// On disk (little-endian; do not change: a new layout takes a new kVersion):
//   header  16 bytes: magic "KVTIERJL", u32 version, u32 reserved (0)
//   record  u32 body length (kRecordBodyBytes), u64 xxh3-64 of the body, then the body:
//           u8 kind, u8 flags (bit 0: has parent; bits 1-7: the tiers holding the block, a
//           TierMask of tiers 0-6; 0 in version 1, meaning the persist tier), u8 block
//           type, u8 transition,
//           u32 tokens, u32 bytes, u64 key hi, u64 key lo, u64 parent hi, u64 parent lo,
//           f64 recompute seconds (IEEE-754 bits)
// Records are only appended. Read stops at the first record that is short, fails its
// checksum or does not decode: after a kill -9 or a power loss the last record may be torn,
// which is normal, and everything from there on is ignored (and counted). Create replaces
// the file atomically (temporary file, fsync, rename, directory fsync), which is how the
// store compacts the journal to its live set on open; Compact does the same while appends go
// on, which is how it stays compact while the store runs.
//
// Thread-safety: Append, Sync, Compact and records() may be called concurrently; a record is
// written whole with one pwrite under `mu_`, and a failed write is cut off again, so a later
// record never lands behind a torn one. Compact copies the file without `mu_`, then holds it
// only to copy what was appended meanwhile and switch files. The store calls the journal
// without holding its own mutex.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "kvtier/block.h"
#include "kvtier/status.h"
#include "util/posix_file.h"

namespace kvtier {

struct JournalRecord {
  // On disk: do not renumber.
  enum class Kind : uint8_t { kPut = 1, kDrop = 2 };
  Kind kind = Kind::kPut;
  BlockKey key;
  std::optional<BlockKey> parent;  // kPut only, like the fields below
  // The tiers holding a durable copy (bit t: tier t, tiers 0-6); 0: the persist tier (a
  // version 1 journal).
  uint8_t tiers = 0;
  uint32_t tokens = 0;
  uint32_t bytes = 0;
  BlockType type = BlockType::kUserContext;
  TransitionType transition = TransitionType::kSameToolRepeat;
  double recompute_seconds = 0;
};

class BlockJournal {
 public:
  static constexpr uint32_t kVersion = 2;  // writes this; reads 1 too (its records have tiers 0)
  static constexpr std::size_t kHeaderBytes = 16;
  static constexpr std::size_t kRecordBodyBytes = 52;
  static constexpr std::size_t kRecordBytes = 12 + kRecordBodyBytes;

  struct Contents {
    std::vector<JournalRecord> records;  // in the order they were appended
    uint64_t ignored_bytes = 0;          // a torn or corrupt tail, from its first bad record
  };
  // Reads a journal. NotFound when the file does not exist; Corruption naming the path when
  // it is not a kvtier block journal (wrong magic, or a version this build cannot read).
  static Result<Contents> Read(const std::string& path);

  // Replaces the journal at `path` with one holding `records` (durably: see above) and
  // opens it for appending. With `sync`, Append fdatasyncs each time.
  static Result<std::unique_ptr<BlockJournal>> Create(const std::string& path, std::span<const JournalRecord> records,
                                                      bool sync);

  // Opens the journal at `path` as it is for appending, its torn tail (if any) cut off: the
  // fallback when Create cannot rewrite it (no room on a full disk for the compacted copy).
  static Result<std::unique_ptr<BlockJournal>> OpenExisting(const std::string& path, bool sync);

  // Appends the records (written with one call, synced when the journal was created with
  // `sync` and `durable` is set). IoError when the write fails: the journal then ends where
  // it ended before the call, or, if it cannot be cut back, refuses every later append.
  Status Append(std::span<const JournalRecord> records, bool durable);

  // fdatasync: everything appended so far survives a power loss.
  Status Sync();

  // Rewrites the journal to the last record of each key whose last record is a put (what
  // recovery would index), durably and atomically, as Create does. On failure (a full disk)
  // the journal goes on as it was. Calls must not overlap (the store runs one at a time).
  Status Compact();

  uint64_t records() const;  // in the file now

 private:
  BlockJournal(std::string path, ScopedFd fd, uint64_t end, uint64_t records, bool sync);

  const std::string path_;
  const bool sync_;
  mutable std::mutex mu_;
  // GUARDED_BY(mu_); shared so that Sync can fdatasync outside the lock while Compact
  // switches to the new file.
  std::shared_ptr<const ScopedFd> fd_;
  uint64_t end_;              // GUARDED_BY(mu_): the file's length, where the next record goes
  uint64_t records_;          // GUARDED_BY(mu_)
  Status broken_;             // GUARDED_BY(mu_): set when a failed append could not be cut off
};

}  // namespace kvtier
