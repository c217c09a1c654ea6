// T4 remote-pool tier (RemoteTierOptions in tiers.h): blocks as string values in Redis or
// Valkey, routed by RedisRouter (a cluster's slot map, or a hash ring of standalone nodes)
// to RedisNode connection pools. Made by NewRemoteTier; this header exposes the class for
// its tests (dynamic_cast a Tier* to RemoteTier*).
//
// One value per block, under key_prefix + the key's 32 hex digits (no hash tag, so blocks
// spread over every slot), written with one SET (EX ttl_seconds when set):
//   0  u64 magic "KVTRMT01"   8 u32 version (1)   12 u32 header bytes (48)
//   16 u64 key.hi            24 u64 key.lo        32 u64 payload bytes
//   40 u64 payload xxh3-64 (PayloadChecksum)      48 payload
// little-endian; on the wire and in the servers' memory: do not reorder or renumber. Redis
// replaces a string value atomically, so a GET sees the old value or the new one. Every
// Read checks magic, version, key, length and checksum; a value that fails is Corruption,
// counted, and deleted from the server unless a writer replaced it meanwhile (a Lua
// compare-and-delete).
//
// Batches: the operations are grouped by node, and each node's group is split over up to
// connections_per_node connections (at least kMinOpsPerConnection operations each), each part
// pipelined on one connection (commands appended in windows, then their replies read).
// Where a part carries less than kParallelChunkBytes of payload on average, the calling
// thread runs every part: it sends each part's first window before it reads any reply, so the
// nodes work at once while it reads one node's replies after another's. Larger parts are
// spread: the calling thread runs one, the tier's own workers (a TaskPool of
// connections_per_node threads per node known at Open, at most 256) the others, so a batch
// starts no thread.
// MOVED updates the slot map and retries, ASK sends ASKING and the command to the importing
// node; an operation its node left unanswered (down, or its connection lost) is retried when
// the slot map, refreshed after the failure, names another owner (a replica promoted by a
// failover); at most kMaxRedirections rounds. Every command the tier sends (SET, GET,
// EXISTS, STRLEN, UNLINK, a compare-and-delete) may be sent twice.
//
// Shared (`RemoteTierOptions::shared`): Evict forgets the block in the accounting and sends
// nothing: other nodes may still list it, and the servers' maxmemory policy (or ttl_seconds)
// is what evicts. A value that fails its checksum is still deleted: nobody can use it.
//
// A node that failed (see redis_node.h) makes its operations fail fast: reads are NotFound
// misses, writes and evictions Unavailable, Size nullopt; each such operation is counted in
// unavailable_operations(). In cluster mode it also triggers a slot-map refresh.
//
// Accounting: used bytes, blocks and capacity count what this client wrote and has not
// evicted (a local map, key -> payload bytes, in lock shards); a read that finds a block
// gone (expired, or lost with a restarted node) drops it from the map. Size() asks the
// server (STRLEN), so it sees blocks other clients wrote too. The map follows the server
// only approximately when one key is written and read (or evicted) at the same time: a
// read that missed just before a concurrent first write landed may drop that write's entry,
// so used bytes can undercount until the block is evicted; no server-side version is kept
// to order the two.
//
// Thread-safety: every method may be called concurrently. Locks: each accounting shard's
// mutex (never held across a network call, never two at once), plus the router's and the
// nodes' own (redis_router.h, redis_node.h), taken without holding a shard's.
#pragma once

#include <array>
#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "kvtier/tiers.h"
#include "tier/redis_router.h"
#include "tier/tier_counters.h"
#include "util/task_pool.h"

namespace kvtier {

class RemoteTier final : public Tier {
 public:
  static constexpr std::size_t kHeaderBytes = 48;
  static constexpr int kMaxRedirections = 5;
  // Fewer operations than this per connection are not worth another worker's wake-up: a
  // 64-block chain over three masters is two parts per master, not four.
  static constexpr std::size_t kMinOpsPerConnection = 8;
  // Parts of a batch go to the workers only from this much payload each, on average. A
  // worker's hand-off costs two thread wake-ups (tens of microseconds on a busy host), which
  // only pays where copying the part takes a millisecond or more; below that the calling
  // thread reads the parts' replies in turn, which with many concurrent batches (a busy
  // node) is also where the cores already are. 4 MiB is about 1 ms of copy and checksum.
  static constexpr uint64_t kParallelChunkBytes = 4u << 20;
  static constexpr std::string_view kWorkerThreadName = "kvtier-remote";

  static Result<std::unique_ptr<RemoteTier>> Open(const RemoteTierOptions& options);

  TierKind kind() const override { return TierKind::kRemotePool; }
  const std::string& name() const override { return options_.name; }
  using Tier::Write;
  Status Write(const WriteOp& op) override;
  using Tier::Read;
  Result<std::size_t> Read(const ReadOp& op) override;
  std::optional<std::size_t> Size(const BlockKey& key) const override;
  Status Evict(const BlockKey& key) override;
  bool shared() const override { return options_.shared; }
  TierStats GetStats() const override;
  std::vector<Status> WriteBatch(std::span<const WriteOp> ops) override;
  std::vector<Result<std::size_t>> ReadBatch(std::span<const ReadOp> ops) override;

  // Operations that met a node marked down (or a cluster that refused service).
  uint64_t unavailable_operations() const { return unavailable_.load(std::memory_order_relaxed); }
  // The Redis key that holds `key`'s block (for tests that damage values).
  std::string RedisKey(const BlockKey& key) const { return options_.key_prefix + key.ToHex(); }

 private:
  // A pipelined batch of single-key commands. `build` fills the command for operation i
  // (into `args`, with bytes it needs in `scratch`, which lives until the command is
  // queued); `finish` receives its reply (never a redirection) or why there is none. Both
  // run on worker threads, concurrently for different i.
  struct CommandBatch {
    std::vector<std::string> keys;
    std::function<void(std::size_t i, RedisArgs& args, std::string& scratch)> build;
    std::function<void(std::size_t i, Result<RedisReply> reply)> finish;
    // When set, the replies are read by a RedisValueReader: operation i's value (a bulk string of
    // `size` bytes) is handed here as it comes off the socket, before finish gets a reply
    // without its bytes (IsTakenStringReply).
    std::function<void(std::size_t i, std::size_t size, RedisValueStream& value)> take_value;
    uint64_t payload_bytes = 0;  // the bytes the batch moves, about: whether its parts are spread
  };
  struct Chunk;
  class ChunkPipeline;
  class ValueSink;

  struct Shard {
    std::mutex mutex;
    std::unordered_map<BlockKey, uint64_t, BlockKeyHash> sizes;  // GUARDED_BY(mutex)
  };
  static constexpr std::size_t kShards = 16;

  RemoteTier(RemoteTierOptions options, std::unique_ptr<RedisRouter> router, int workers);

  void Run(CommandBatch& batch) const;
  void RunChunk(Chunk& chunk, CommandBatch& batch) const;
  void RunChunksOnThisThread(std::span<Chunk> chunks, CommandBatch& batch) const;
  // After a round: the operations a failed node left unanswered go to `next` when the slot
  // map (refreshed after the failure) now names another owner for their key (a replica that
  // took over); the others finish with their failure.
  void RetryUnanswered(std::span<const Chunk> chunks, int round, std::vector<std::optional<Status>>& unanswered,
                       std::vector<bool>& asking, std::vector<std::shared_ptr<RedisNode>>& ask_target,
                       CommandBatch& batch, std::vector<std::size_t>& next) const;
  // Deletes the value under `redis_key` if it still equals `value` (a corrupt block); true
  // when it did.
  bool DeleteIfUnchanged(const std::string& redis_key, std::string_view value) const;
  Status NodeUnavailable(Status status) const;

  Shard& ShardFor(const BlockKey& key) const { return shards_[BlockKeyHash{}(key) % kShards]; }
  // Room for a block of `size` bytes under `key`: the bytes reserved (0 when unbounded or
  // not growing), or ResourceExhausted.
  Result<uint64_t> Reserve(const BlockKey& key, uint64_t size);
  void Commit(const BlockKey& key, uint64_t size, uint64_t reservation);
  void Release(uint64_t reservation) { accounted_bytes_.fetch_sub(reservation, std::memory_order_relaxed); }
  void Forget(const BlockKey& key) const;

  const RemoteTierOptions options_;
  const std::unique_ptr<RedisRouter> router_;
  // Runs the parts of batches past each batch's first. Declared after router_, so that it
  // finishes its tasks before the nodes they use are destroyed.
  const std::unique_ptr<TaskPool> workers_;

  mutable std::array<Shard, kShards> shards_;
  mutable std::atomic<uint64_t> used_bytes_{0};       // sum of the shards' sizes
  mutable std::atomic<uint64_t> accounted_bytes_{0};  // used_bytes_ + reservations of writes in flight
  mutable std::atomic<uint64_t> blocks_{0};
  mutable std::atomic<uint64_t> unavailable_{0};
  mutable TierCounters counters_;
};

}  // namespace kvtier
