// Factories for the tiers (tier.h). Each options struct is validated when the tier is made.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "kvtier/tier.h"

namespace kvtier {

// T1: host DRAM. One region reserved up front (huge pages where the kernel allows, locked in
// RAM where RLIMIT_MEMLOCK allows, bound to a NUMA node when asked), carved into 2 MiB slabs;
// each slab serves one size class (payload size rounded up to 4 KiB), so the equal-sized
// blocks of one model never fragment the region.
struct DramTierOptions {
  std::string name = "cpu_dram";  // Default: "cpu_dram"
  uint64_t capacity_bytes = 0;    // Required: bytes reserved for payloads (> 0)
  int numa_node = -1;             // Default: -1, the kernel's choice
  bool lock_memory = true;        // Default: true (best effort: mlock may be refused)
  bool huge_pages = true;         // Default: true (madvise; best effort)
  int shards = 16;                // Default: 16 lock shards over keys

  Status Validate() const;
};
Result<std::unique_ptr<Tier>> NewDramTier(const DramTierOptions& options);

// T2: CXL memory, exposed as a DAX device or a file on CXL-backed memory, mapped shared and
// bound to the CXL NUMA node with mbind; the DRAM tier's slab layout and semantics over it.
// Its contents are volatile for kvtier (the index is not rebuilt from it on restart).
struct CxlTierOptions {
  std::string name = "cxl_memory";  // Default: "cxl_memory"
  std::string path;                 // Required: e.g. /dev/dax0.0 or /dev/shm/kvtier-cxl
  uint64_t capacity_bytes = 0;      // Required (> 0)
  int numa_node = -1;               // Default: -1 (no binding); the CXL node in production
  int shards = 16;                  // Default: 16 lock shards over keys

  Status Validate() const;
};
Result<std::unique_ptr<Tier>> NewCxlTier(const CxlTierOptions& options);

// T5: a parallel-filesystem directory (Lustre, NFS, 3FS in production). One file per block,
// named by its key in sharded subdirectories, written to a temporary file and renamed into
// place; a header carries the size and checksum, verified on every read.
enum class FsyncPolicy : uint8_t {
  kNever = 0,        // fastest; a crash may lose recent blocks (never corrupt them)
  kFile = 1,         // fsync each block before its rename: acknowledged blocks survive a crash
  kFileAndDir = 2,   // also fsync the directory after the rename (for filesystems that need it)
};
struct ParallelFsTierOptions {
  std::string name = "parallel_fs";    // Default: "parallel_fs"
  std::string directory;               // Required: created if absent
  uint64_t capacity_bytes = 0;         // Default: 0, unbounded (the filesystem's space)
  int shard_levels = 2;                // Default: 2 levels of 256 subdirectories
  FsyncPolicy fsync = FsyncPolicy::kFile;  // Default: kFile

  Status Validate() const;
};
Result<std::unique_ptr<Tier>> NewParallelFsTier(const ParallelFsTierOptions& options);

}  // namespace kvtier
