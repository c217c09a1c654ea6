// PayloadStore: an in-memory, content-addressed store of block payloads (the KV bytes).
//
// Many blocks carry identical bytes (the same system prompt under different tenants' salts,
// zero-filled padding), so a payload is stored once and referenced by every key that holds
// it. A Put digests the bytes (xxh3-128 or SHA-256), and on a digest match compares the full
// bytes: two different payloads whose digests collide are stored separately and counted,
// never aliased. Erase drops a key's reference; the payload is freed when none is left.
//
// Every stored payload keeps its PayloadChecksum (xxh3-64, block.h), verified on every Get:
// a damaged copy returns Corruption and is counted, its bytes are never handed out.
//
// Thread-safety and locking: one mutex (`mutex_`) guards the key table, the digest table,
// reference counts and stats; it is the only lock, and no callback runs under it. Digests
// and checksums are computed, and payloads copied out, with it released: stored bytes are
// immutable and shared, so a Get or a Snapshot keeps them alive past a concurrent Erase.
// Costs: a Put whose digest matches compares the bytes under the lock; all callers of one
// store serialize on it for that compare and for table updates.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <unordered_map>
#include <vector>

#include "kvtier/block.h"
#include "kvtier/status.h"

namespace kvtier {

// On disk and on the wire: do not renumber.
enum class PayloadDigestAlgorithm : uint8_t {
  kXxh3_128 = 1,  // fast; collisions are caught by the byte compare anyway
  kSha256 = 2,    // for deployments that want a cryptographic content address
};

struct PayloadStoreOptions {
  PayloadDigestAlgorithm digest = PayloadDigestAlgorithm::kXxh3_128;  // Default: xxh3-128
  // Unique (stored) bytes the store may hold; a Put past it fails. Default: 0 (unbounded).
  uint64_t capacity_bytes = 0;

  Status Validate() const;
};

class PayloadStore {
 public:
  struct Stats {
    uint64_t blocks = 0;             // keys held
    uint64_t unique_payloads = 0;    // payloads stored
    uint64_t logical_bytes = 0;      // sum of every key's payload size
    uint64_t stored_bytes = 0;       // sum of unique payloads' sizes
    uint64_t dedup_hits = 0;         // Puts that referenced an identical stored payload
    uint64_t digest_collisions = 0;  // Puts whose digest matched a payload with other bytes
    uint64_t checksum_failures = 0;  // Gets that found a damaged payload
    double saving() const;           // 1 - stored / logical; 0 when empty
  };

  // A consistent copy of the store's contents at one instant, for checkpoints: each unique
  // payload once, and the payload each key holds. The bytes are shared, not copied, and
  // stay valid after the store changes.
  struct Snapshot {
    struct Payload {
      std::shared_ptr<const std::vector<std::byte>> bytes;
      uint64_t checksum = 0;  // PayloadChecksum of the bytes as first stored
    };
    std::vector<Payload> payloads;
    std::unordered_map<BlockKey, std::size_t, BlockKeyHash> payload_of;  // key -> index into payloads
  };

  using DigestFunction = std::function<BlockDigest(std::span<const std::byte> payload)>;

  static Result<std::unique_ptr<PayloadStore>> Create(const PayloadStoreOptions& options);
  // Test seam: `digest` replaces the content digest (e.g. one that always collides).
  static std::unique_ptr<PayloadStore> CreateWithDigestFunctionForTesting(DigestFunction digest);

  PayloadStore(const PayloadStore&) = delete;
  PayloadStore& operator=(const PayloadStore&) = delete;
  ~PayloadStore();

  // Stores `payload` under `key` (copying it once, or referencing an identical stored copy).
  // A key that already holds other bytes is replaced: its old payload loses a reference. A
  // key that already holds these exact bytes is left as it is. ResourceExhausted when a new
  // unique payload would take the store past capacity_bytes; the key is then unchanged.
  Status Put(const BlockKey& key, std::span<const std::byte> payload);

  // The payload of `key`. NotFound when absent; Corruption when the stored copy fails its
  // checksum (erase it and refetch from another tier).
  Result<std::vector<std::byte>> Get(const BlockKey& key) const;
  // Copies the payload into `out` and returns its size; InvalidArgument (with the size
  // needed) when `out` is too small. Other errors as above; `out` is unspecified on error.
  Result<std::size_t> Get(const BlockKey& key, std::span<std::byte> out) const;

  // The payload size of `key`, without verifying it; nullopt when absent.
  std::optional<std::size_t> PayloadSize(const BlockKey& key) const;

  // Drops `key`'s reference, freeing the payload when it was the last. NotFound when absent.
  Status Erase(const BlockKey& key);

  Snapshot TakeSnapshot() const;
  Stats GetStats() const;

  // Test seam: flips a bit of the stored copy `key` holds (and so of every key sharing it),
  // keeping its recorded checksum. FailedPrecondition for an empty payload.
  Status CorruptForTesting(const BlockKey& key);

 private:
  struct StoredPayload;
  struct DigestHash {
    std::size_t operator()(const BlockDigest& digest) const noexcept;
  };

  PayloadStore(PayloadStoreOptions options, DigestFunction digest);

  // The bytes `key` holds, after checking them against their checksum.
  Result<std::shared_ptr<const std::vector<std::byte>>> VerifiedBytes(const BlockKey& key) const;

  // Takes one reference from `payload`, freeing it when it was the last. REQUIRES(mutex_).
  void UnrefLocked(const std::shared_ptr<StoredPayload>& payload);

  const PayloadStoreOptions options_;
  const DigestFunction digest_;

  mutable std::mutex mutex_;
  std::unordered_map<BlockKey, std::shared_ptr<StoredPayload>, BlockKeyHash> keys_;  // GUARDED_BY(mutex_)
  // Digest -> stored payloads with that digest: more than one only after a collision.
  std::unordered_map<BlockDigest, std::vector<std::shared_ptr<StoredPayload>>, DigestHash> digests_;  // GUARDED_BY(mutex_)
  Stats stats_;  // GUARDED_BY(mutex_), except checksum_failures (below)
  // Counted after the lock is released: Get verifies outside it.
  mutable std::atomic<uint64_t> checksum_failures_{0};
};

}  // namespace kvtier
