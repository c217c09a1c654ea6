// Checkpoints: the prefix index and its payloads, saved to and restored from one file.
//
// A checkpoint is `<dir>/checkpoint.kvt` in the versioned, little-endian format of
// docs/checkpoint.md: a header, one record per block (key, parent, meta; parents first) and
// one record per unique payload (its checksum and length), with a checksum of the whole
// file at its end. Payloads are deduplicated as the PayloadStore holds them, so a payload
// shared by many blocks is written once.
//
// Crash safety: WriteCheckpoint writes a temporary file in `dir`, fsyncs it, renames it over
// the previous checkpoint and fsyncs `dir`; a crash at any point leaves either the previous
// or the new checkpoint, whole. RestoreCheckpoint verifies every checksum before it touches
// its targets and refuses a truncated, damaged or foreign file with an error naming it.
//
// Thread-safety: writers to one `dir` serialize on an advisory lock (`<dir>/checkpoint.lock`),
// across processes too. WriteCheckpoint may run while the index and store are in use; it
// snapshots each (under its own lock) in turn, so a block inserted between the two snapshots
// may be written without its payload. Quiesce writers for an exact pair. RestoreCheckpoint
// needs its targets to itself until it returns.
#pragma once

#include <cstdint>
#include <string>

#include "kvtier/payload_store.h"
#include "kvtier/prefix_index.h"
#include "kvtier/status.h"

namespace kvtier {

struct CheckpointStats {
  uint64_t blocks = 0;
  uint64_t unique_payloads = 0;
  uint64_t raw_bytes = 0;           // a checkpoint without dedup: each block's payload written in full
  uint64_t deduplicated_bytes = 0;  // the file as written
  double saving = 0.0;              // 1 - deduplicated / raw
};

// The checkpoint file of `dir`.
std::string CheckpointPath(const std::string& dir);

// Writes every block of `index`, and the payload `store` holds for it (if any), to `dir`
// (which must exist), replacing its previous checkpoint. Corruption when a payload fails its
// checksum (nothing is replaced then); IoError, naming the path, when the OS refuses.
// Blocks' pin counts and access counts are not saved; last access times are.
Result<CheckpointStats> WriteCheckpoint(const std::string& dir, const PrefixIndex& index, const PayloadStore& store);

// Loads `dir`'s checkpoint into an empty `index` and `store`. NotFound when `dir` has no
// checkpoint; FailedPrecondition when a target is not empty; InvalidArgument when the file
// is not a kvtier checkpoint; Unsupported when a newer kvtier wrote it; Corruption when it
// is truncated or fails a checksum or a structural check. On any error both targets are
// left empty.
Result<CheckpointStats> RestoreCheckpoint(const std::string& dir, PrefixIndex* index, PayloadStore* store);

}  // namespace kvtier
