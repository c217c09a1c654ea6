// Tier: one kind of memory or storage holding block payloads under their BlockKeys. The six
// tiers of the paper (GPU HBM, pinned DRAM, CXL memory, NVMe, a remote pool, a parallel
// filesystem) implement this one interface; the store (issue 5) moves blocks between them.
//
// Failure semantics are part of the contract and checked by the conformance suite that every
// tier passes (tests/tier/tier_conformance_test.cc):
//  - A successful Write is readable until Evict (or until the process ends, for volatile
//    tiers). A failed Write leaves an earlier block with the same key unaffected and readable.
//  - A tier never evicts on its own: when full, Write fails with ResourceExhausted and the
//    policy decides what to evict.
//  - Read never returns bytes that fail their checksum: it reports Corruption, drops the
//    block and counts it. A torn block (a Write racing a Read of the same key) is never seen:
//    a Read returns the old bytes or the new ones.
//
// Thread-safety: every method may be called concurrently from many threads.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <future>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kvtier/block.h"
#include "kvtier/status.h"

namespace kvtier {

// The paper's T0-T5; the number is the tier's bit in a TierMask (prefix_index.h).
// On disk and on the wire: do not renumber.
enum class TierKind : uint8_t {
  kGpuHbm = 0,
  kCpuDram = 1,
  kCxlMemory = 2,
  kNvme = 3,
  kRemotePool = 4,
  kParallelFs = 5,
};
std::string_view TierKindName(TierKind kind);  // "gpu_hbm", "cpu_dram", ...

struct TierStats {
  uint64_t capacity_bytes = 0;  // 0 when unbounded
  uint64_t used_bytes = 0;      // payload bytes held (allocation overhead excluded)
  uint64_t blocks = 0;
  uint64_t writes = 0;
  uint64_t write_bytes = 0;
  uint64_t write_failures = 0;
  uint64_t reads = 0;           // successful reads
  uint64_t read_bytes = 0;
  uint64_t read_misses = 0;
  uint64_t checksum_failures = 0;
  uint64_t evictions = 0;
  // Evictions that could not erase the block from the device (an NVMe header that could not
  // be zeroed): such a block could come back after a restart.
  uint64_t evict_failures = 0;
};

class Tier {
 public:
  struct WriteOp {
    BlockKey key;
    std::span<const std::byte> payload;
    // PayloadChecksum(payload) as the payload's writer computed it (a client of `kvtier
    // serve`: docs/protocol.md, end-to-end checksums). The tier keeps this value as the
    // block's checksum and checks the bytes it copied against it in the same pass, so that
    // bytes changed after the writer hashed them (in shared memory, a socket buffer or the
    // daemon's memory) are never stored under a valid checksum. Default: none (the tier
    // computes the checksum of what it copies).
    std::optional<uint64_t> checksum;
  };
  struct ReadOp {
    BlockKey key;
    std::span<std::byte> out;
    // When set, a successful read stores here the block's checksum: the one the bytes copied
    // into `out` matched, which is its writer's when it sent one (end to end). Default: none.
    uint64_t* checksum = nullptr;
  };

  virtual ~Tier() = default;

  virtual TierKind kind() const = 0;
  virtual const std::string& name() const = 0;

  // Stores a copy of `op.payload` under `op.key`, replacing a block with that key.
  // InvalidArgument for an empty payload; ResourceExhausted when the tier lacks room; IoError
  // / Unavailable when its device or server fails; Corruption when the bytes copied do not
  // match `op.checksum` (nothing stored, counted as a write failure). On any failure an
  // earlier block stays readable.
  virtual Status Write(const WriteOp& op) = 0;
  // The same without a writer's checksum. Implementations add `using Tier::Write;`.
  Status Write(const BlockKey& key, std::span<const std::byte> payload) { return Write(WriteOp{key, payload, {}}); }

  // Copies the block into `op.out` and returns its size. NotFound on a miss; InvalidArgument
  // when `out` is smaller than the block (nothing copied); Corruption when the stored bytes
  // fail their checksum (the block is dropped and counted). After any error the contents of
  // `out` are unspecified: tiers check the checksum while they copy.
  virtual Result<std::size_t> Read(const ReadOp& op) = 0;
  // The same without the checksum. Implementations add `using Tier::Read;`.
  Result<std::size_t> Read(const BlockKey& key, std::span<std::byte> out) { return Read(ReadOp{key, out, nullptr}); }

  // The block's size, or nullopt when absent.
  virtual std::optional<std::size_t> Size(const BlockKey& key) const = 0;

  // Removes the block. NotFound when absent. A shared tier only forgets it (see shared()).
  virtual Status Evict(const BlockKey& key) = 0;

  // Whether other nodes use this tier's blocks too (a remote pool with `shared: true`): the
  // store then looks there for blocks its index lacks, publishes its puts there with a card
  // that lets other nodes index them, and never deletes a block there, which the pool evicts
  // by its own rules (docs/cluster.md).
  virtual bool shared() const { return false; }

  virtual TierStats GetStats() const = 0;

  // The keys of every block the tier holds, so that the store can evict at Open what its
  // index does not list (blocks a persistent tier brought back from an earlier run).
  // Unsupported by default: a tier that cannot tell its own blocks from other clients'
  // (a shared remote pool) must not list them, or they would be deleted.
  virtual Result<std::vector<BlockKey>> ListKeys() const;

  // Many blocks per call. These loop over Write / Read; tiers with device queues or
  // pipelines override them. Results are in the order of `ops`.
  virtual std::vector<Status> WriteBatch(std::span<const WriteOp> ops);
  virtual std::vector<Result<std::size_t>> ReadBatch(std::span<const ReadOp> ops);

  // Asynchronous batches: return at once (or block while the I/O queue is full: that is the
  // back-pressure) and call `done` exactly once, with the results in the order of `ops`, on
  // an I/O thread. The buffers the ops point to must stay valid, and the tier alive, until
  // `done` has run. By default a batch runs WriteBatch / ReadBatch on a shared pool of I/O
  // threads; a tier with its own completion queue may override these.
  using WriteDone = std::function<void(std::vector<Status>)>;
  using ReadDone = std::function<void(std::vector<Result<std::size_t>>)>;
  virtual void SubmitWriteBatch(std::vector<WriteOp> ops, WriteDone done);
  virtual void SubmitReadBatch(std::vector<ReadOp> ops, ReadDone done);

  // The same with futures.
  std::future<std::vector<Status>> WriteBatchAsync(std::vector<WriteOp> ops);
  std::future<std::vector<Result<std::size_t>>> ReadBatchAsync(std::vector<ReadOp> ops);
};

// Forwards every call to another tier: decorators (fault injection, metrics) override only
// what they change. Does not own the target unless constructed with a unique_ptr.
class TierWrapper : public Tier {
 public:
  explicit TierWrapper(Tier* target) : target_(target) {}
  explicit TierWrapper(std::unique_ptr<Tier> target) : owned_(std::move(target)), target_(owned_.get()) {}

  TierKind kind() const override { return target_->kind(); }
  const std::string& name() const override { return target_->name(); }
  using Tier::Write;
  Status Write(const WriteOp& op) override { return target_->Write(op); }
  using Tier::Read;
  Result<std::size_t> Read(const ReadOp& op) override { return target_->Read(op); }
  std::optional<std::size_t> Size(const BlockKey& key) const override { return target_->Size(key); }
  Status Evict(const BlockKey& key) override { return target_->Evict(key); }
  bool shared() const override { return target_->shared(); }
  TierStats GetStats() const override { return target_->GetStats(); }
  Result<std::vector<BlockKey>> ListKeys() const override { return target_->ListKeys(); }
  std::vector<Status> WriteBatch(std::span<const WriteOp> ops) override { return target_->WriteBatch(ops); }
  std::vector<Result<std::size_t>> ReadBatch(std::span<const ReadOp> ops) override { return target_->ReadBatch(ops); }
  void SubmitWriteBatch(std::vector<WriteOp> ops, WriteDone done) override {
    target_->SubmitWriteBatch(std::move(ops), std::move(done));
  }
  void SubmitReadBatch(std::vector<ReadOp> ops, ReadDone done) override {
    target_->SubmitReadBatch(std::move(ops), std::move(done));
  }

 protected:
  Tier* target() const { return target_; }

 private:
  std::unique_ptr<Tier> owned_;
  Tier* target_;
};

}  // namespace kvtier
