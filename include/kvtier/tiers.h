// Factories for the tiers (tier.h). Each options struct is validated when the tier is made.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

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
  // Default: true; a background thread faults the whole region in after the tier opens
  // (MADV_POPULATE_WRITE), so that puts never pay first-touch page faults; the region is
  // resident from the start. Skipped where lock_memory's mlock succeeded (it faults it all).
  bool prefault = true;
  int shards = 16;                // Default: 16 lock shards over keys
  // Default: true; when a CUDA device is present the region is page-locked for it
  // (cudaHostRegister), so copies to and from GPU HBM are DMA without a staging copy.
  bool pin_for_gpu = true;

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
  bool prefault = true;             // Default: true, as DramTierOptions::prefault

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
  // Default: true, count the blocks an earlier run left in the directory as held; false
  // deletes them, so the tier starts empty (a tier whose blocks no journal lists). Ignored
  // when shared (nothing is counted or deleted at open); false with shared is refused.
  bool recover = true;
  // Default: false. One directory for many nodes (Tier::shared, docs/cluster.md): Open
  // neither counts nor deletes the files in it, Evict forgets a block locally and leaves its
  // file, used bytes count what this process wrote; a janitor (find -amin ... -delete) or the
  // filesystem's quota evicts.
  bool shared = false;

  Status Validate() const;
};
Result<std::unique_ptr<Tier>> NewParallelFsTier(const ParallelFsTierOptions& options);

// T3: NVMe. One or more large files (or raw block devices) opened with O_DIRECT and
// preallocated to the capacity, split evenly between them; space is managed as 4 KiB-aligned
// slots in size classes (like the DRAM tier's slabs, but of file offsets). Each block is one
// slot holding a 4 KiB header (magic, version, key, payload length, xxh3-64 checksum) and its
// payload, padded to 4 KiB; the header is verified on every read. I/O goes through io_uring:
// WriteBatch and ReadBatch put every block of a batch in flight at once, up to queue_depth
// per ring, spread over the files. A replacing Write goes to a new slot and switches the
// index only once the write completed, so a failed Write leaves the old block readable.
// Where O_DIRECT is refused (tmpfs, some overlay filesystems) the files are used buffered;
// where io_uring is refused (seccomp, io_uring_disabled) I/O falls back to pread/pwrite.
// Each file starts with a superblock and a journal of the slabs carved from it; on open the
// tier replays the journal and reads every slot header to rebuild its index, so blocks
// acknowledged before a restart or a kill -9 are readable again (see nvme_tier.h).
// GPUDirect Storage (cuFile) is detected at run time but not used yet.
struct NvmeTierOptions {
  std::string name = "nvme";       // Default: "nvme"
  std::vector<std::string> files;  // Required: one or more large files (created if absent) or block devices
  uint64_t capacity_bytes = 0;     // Required: total across files (> 0), split evenly between them
  // Default: 0, size classes as the DRAM tier has them (header + payload rounded up to
  // 4 KiB); or a fixed slot size (a multiple of 4 KiB, at least 8 KiB) for every block.
  uint32_t slot_bytes = 0;
  int queue_depth = 32;            // Default: 32 requests in flight per ring (1 to 4096)
  // Default: true; falls back to pread/pwrite when io_uring is refused (e.g. seccomp).
  bool use_io_uring = true;
  // Default: true, rebuild the index from files an earlier run formatted (files formatted
  // for another layout are refused, naming the difference); false formats them afresh.
  bool recover = true;

  Status Validate() const;
};
Result<std::unique_ptr<Tier>> NewNvmeTier(const NvmeTierOptions& options);

// T0: GPU HBM. One device pool allocated up front (cudaMalloc), carved into slabs with size
// classes like the DRAM tier; copies between host buffers and the pool go through pinned
// staging buffers on dedicated streams (`streams` per direction), completed by CUDA events. The
// block's xxh3-64 checksum is kept beside it and verified on every read, so a corrupted
// block is never returned. Unavailable where no CUDA device (or no driver) answers, and
// Unsupported in a build without CUDA.
struct GpuHbmTierOptions {
  std::string name = "gpu_hbm";  // Default: "gpu_hbm"
  int device = 0;                // Default: 0, the CUDA device index
  uint64_t capacity_bytes = 0;   // Required: bytes of HBM reserved for payloads (> 0)
  int streams = 2;               // Default: 2 copy streams per direction (1 to 16)
  uint64_t staging_bytes = 8u << 20;  // Default: 8 MiB pinned staging buffer per stream

  Status Validate() const;
};
Result<std::unique_ptr<Tier>> NewGpuHbmTier(const GpuHbmTierOptions& options);

// T4: a remote pool on a real distributed store, Redis or Valkey (through hiredis). Either a
// Redis Cluster, routed by hash slot (CLUSTER SLOTS; MOVED and ASK redirections followed), or
// standalone nodes on a consistent-hash ring. Each block is one string value: a header (magic,
// version, key, length, xxh3-64 checksum) and the payload, written with one SET, so a reader
// sees the old value or the new one, never a torn one. Batches are pipelined per node over
// several connections. A node that does not answer within the timeout is marked down: reads
// of its blocks are misses (not errors), writes to it fail with Unavailable, and it is
// reconnected once it answers again. Capacity and used bytes count what this client wrote.
enum class RemoteTopology : uint8_t {
  kCluster = 0,   // Redis Cluster: `endpoints` are seeds; the slot map comes from the cluster
  kHashRing = 1,  // standalone nodes on a consistent-hash ring: `endpoints` are all of them
};
struct RemoteTierOptions {
  std::string name = "remote_pool";      // Default: "remote_pool"
  RemoteTopology topology = RemoteTopology::kCluster;  // Default: kCluster
  std::vector<std::string> endpoints;    // Required: "host:port" (or "unix:/path" for kHashRing)
  uint64_t capacity_bytes = 0;           // Default: 0, unbounded (the servers' maxmemory)
  std::string key_prefix = "kvtier:";    // Default: "kvtier:"; namespaces this pool's keys
  std::string password;                  // Default: none; sent with AUTH when set
  // A Redis 6 ACL user to AUTH as, with `password`. Default: none, Redis's default user
  std::string username;
  int connections_per_node = 4;          // Default: 4 (1 to 64)
  int timeout_ms = 1000;                 // Default: 1000, connect and per-command timeout
  int reconnect_interval_ms = 1000;      // Default: 1000, how often a down node is retried
  int virtual_nodes = 160;               // Default: 160 ring points per node (kHashRing)
  uint32_t ttl_seconds = 0;              // Default: 0, no expiry
  // Default: false. One pool for many nodes (Tier::shared): Evict forgets a block locally and
  // leaves it on the servers, whose maxmemory policy or ttl_seconds evicts it.
  bool shared = false;

  Status Validate() const;
};
Result<std::unique_ptr<Tier>> NewRemoteTier(const RemoteTierOptions& options);

}  // namespace kvtier
