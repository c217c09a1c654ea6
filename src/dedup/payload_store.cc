#include "kvtier/payload_store.h"

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

namespace kvtier {

struct PayloadStore::StoredPayload {
  BlockDigest digest;
  uint64_t checksum = 0;
  uint64_t size = 0;
  // Immutable bytes, shared with readers; only CorruptForTesting swaps in another copy.
  std::shared_ptr<const std::vector<std::byte>> bytes;  // GUARDED_BY(mutex_)
  uint64_t refs = 0;                                     // GUARDED_BY(mutex_)
};

namespace {

std::string Hex64(uint64_t value) {
  char text[19];
  std::snprintf(text, sizeof(text), "0x%016" PRIx64, value);
  return text;
}

}  // namespace

Status PayloadStoreOptions::Validate() const {
  if (digest != PayloadDigestAlgorithm::kXxh3_128 && digest != PayloadDigestAlgorithm::kSha256) {
    return Status::InvalidArgument("PayloadStoreOptions.digest: unknown algorithm " +
                                   std::to_string(static_cast<int>(digest)) + "; use kXxh3_128 or kSha256");
  }
  return Status::Ok();
}

double PayloadStore::Stats::saving() const {
  if (logical_bytes == 0) return 0.0;
  return 1.0 - static_cast<double>(stored_bytes) / static_cast<double>(logical_bytes);
}

std::size_t PayloadStore::DigestHash::operator()(const BlockDigest& digest) const noexcept {
  // The digest is already uniformly distributed: its first bytes make a good hash.
  uint64_t word = 0;
  std::memcpy(&word, digest.bytes.data(), sizeof(word));
  return static_cast<std::size_t>(word);
}

Result<std::unique_ptr<PayloadStore>> PayloadStore::Create(const PayloadStoreOptions& options) {
  KVTIER_RETURN_IF_ERROR(options.Validate());
  DigestFunction digest =
      options.digest == PayloadDigestAlgorithm::kSha256
          ? DigestFunction([](std::span<const std::byte> p) { return Sha256Digest(p.data(), p.size()); })
          : DigestFunction([](std::span<const std::byte> p) { return Xxh3_128Digest(p.data(), p.size()); });
  return std::unique_ptr<PayloadStore>(new PayloadStore(options, std::move(digest)));
}

std::unique_ptr<PayloadStore> PayloadStore::CreateWithDigestFunctionForTesting(DigestFunction digest) {
  return std::unique_ptr<PayloadStore>(new PayloadStore(PayloadStoreOptions{}, std::move(digest)));
}

PayloadStore::PayloadStore(PayloadStoreOptions options, DigestFunction digest)
    : options_(options), digest_(std::move(digest)) {}

PayloadStore::~PayloadStore() = default;

Status PayloadStore::Put(const BlockKey& key, std::span<const std::byte> payload) {
  const BlockDigest digest = digest_(payload);
  const uint64_t checksum = PayloadChecksum(payload);
  const auto same_bytes = [&payload](const StoredPayload& stored) {
    return std::ranges::equal(*stored.bytes, payload);
  };

  std::lock_guard lock(mutex_);
  const auto existing = keys_.find(key);
  const std::shared_ptr<StoredPayload> old = existing == keys_.end() ? nullptr : existing->second;
  if (old != nullptr && old->digest == digest && same_bytes(*old)) return Status::Ok();

  std::shared_ptr<StoredPayload> target;
  bool collided = false;
  if (const auto bucket = digests_.find(digest); bucket != digests_.end()) {
    const auto match = std::ranges::find_if(bucket->second, [&](const auto& stored) { return same_bytes(*stored); });
    if (match != bucket->second.end()) target = *match;
    collided = target == nullptr;
  }

  if (target != nullptr) {
    ++stats_.dedup_hits;
  } else {
    const uint64_t freed = old != nullptr && old->refs == 1 ? old->size : 0;
    const uint64_t after = stats_.stored_bytes - freed + payload.size();
    if (options_.capacity_bytes != 0 && after > options_.capacity_bytes) {
      return Status::ResourceExhausted("payload store is full: block " + key.ToHex() + " (" +
                                       std::to_string(payload.size()) + " bytes) would take it to " +
                                       std::to_string(after) + " of " + std::to_string(options_.capacity_bytes) +
                                       " bytes; erase blocks or raise PayloadStoreOptions.capacity_bytes");
    }
    target = std::make_shared<StoredPayload>();
    target->digest = digest;
    target->checksum = checksum;
    target->size = payload.size();
    target->bytes = std::make_shared<const std::vector<std::byte>>(payload.begin(), payload.end());
    digests_[digest].push_back(target);
    ++stats_.unique_payloads;
    stats_.stored_bytes += target->size;
    if (collided) ++stats_.digest_collisions;
  }

  ++target->refs;
  stats_.logical_bytes += target->size;
  if (old != nullptr) {
    stats_.logical_bytes -= old->size;
    UnrefLocked(old);
    existing->second = std::move(target);
  } else {
    keys_.emplace(key, std::move(target));
    ++stats_.blocks;
  }
  return Status::Ok();
}

void PayloadStore::UnrefLocked(const std::shared_ptr<StoredPayload>& payload) {
  if (--payload->refs > 0) return;
  const auto bucket = digests_.find(payload->digest);
  std::erase(bucket->second, payload);
  if (bucket->second.empty()) digests_.erase(bucket);
  --stats_.unique_payloads;
  stats_.stored_bytes -= payload->size;
}

Result<std::shared_ptr<const std::vector<std::byte>>> PayloadStore::VerifiedBytes(const BlockKey& key) const {
  std::shared_ptr<const std::vector<std::byte>> bytes;
  uint64_t recorded = 0;
  {
    std::lock_guard lock(mutex_);
    const auto it = keys_.find(key);
    if (it == keys_.end()) return Status::NotFound("block " + key.ToHex() + " has no payload in the store");
    bytes = it->second->bytes;
    recorded = it->second->checksum;
  }
  const uint64_t actual = PayloadChecksum(*bytes);
  if (actual != recorded) {
    checksum_failures_.fetch_add(1, std::memory_order_relaxed);
    return Status::Corruption("block " + key.ToHex() + ": stored payload fails its checksum (recorded xxh3-64 " +
                              Hex64(recorded) + ", now " + Hex64(actual) +
                              "); the in-memory copy is damaged: erase the block and refetch it from another tier");
  }
  return bytes;
}

Result<std::vector<std::byte>> PayloadStore::Get(const BlockKey& key) const {
  KVTIER_ASSIGN_OR_RETURN(const auto bytes, VerifiedBytes(key));
  return *bytes;
}

Result<std::size_t> PayloadStore::Get(const BlockKey& key, std::span<std::byte> out) const {
  KVTIER_ASSIGN_OR_RETURN(const auto bytes, VerifiedBytes(key));
  if (out.size() < bytes->size()) {
    return Status::InvalidArgument("block " + key.ToHex() + ": payload is " + std::to_string(bytes->size()) +
                                   " bytes but the buffer holds " + std::to_string(out.size()) +
                                   "; size it with PayloadSize()");
  }
  std::ranges::copy(*bytes, out.begin());
  return bytes->size();
}

std::optional<std::size_t> PayloadStore::PayloadSize(const BlockKey& key) const {
  std::lock_guard lock(mutex_);
  const auto it = keys_.find(key);
  if (it == keys_.end()) return std::nullopt;
  return static_cast<std::size_t>(it->second->size);
}

Status PayloadStore::Erase(const BlockKey& key) {
  std::lock_guard lock(mutex_);
  const auto it = keys_.find(key);
  if (it == keys_.end()) return Status::NotFound("block " + key.ToHex() + " has no payload in the store");
  stats_.logical_bytes -= it->second->size;
  --stats_.blocks;
  UnrefLocked(it->second);
  keys_.erase(it);
  return Status::Ok();
}

PayloadStore::Snapshot PayloadStore::TakeSnapshot() const {
  Snapshot snapshot;
  std::unordered_map<const StoredPayload*, std::size_t> index_of;
  std::lock_guard lock(mutex_);
  snapshot.payloads.reserve(stats_.unique_payloads);
  snapshot.payload_of.reserve(keys_.size());
  for (const auto& [key, stored] : keys_) {
    const auto [it, inserted] = index_of.try_emplace(stored.get(), snapshot.payloads.size());
    if (inserted) snapshot.payloads.push_back({stored->bytes, stored->checksum});
    snapshot.payload_of.emplace(key, it->second);
  }
  return snapshot;
}

PayloadStore::Stats PayloadStore::GetStats() const {
  Stats stats;
  {
    std::lock_guard lock(mutex_);
    stats = stats_;
  }
  stats.checksum_failures = checksum_failures_.load(std::memory_order_relaxed);
  return stats;
}

Status PayloadStore::CorruptForTesting(const BlockKey& key) {
  std::lock_guard lock(mutex_);
  const auto it = keys_.find(key);
  if (it == keys_.end()) return Status::NotFound("block " + key.ToHex() + " has no payload in the store");
  StoredPayload& stored = *it->second;
  if (stored.size == 0) return Status::FailedPrecondition("block " + key.ToHex() + ": an empty payload has no bit to flip");
  auto damaged = std::make_shared<std::vector<std::byte>>(*stored.bytes);
  (*damaged)[damaged->size() / 2] ^= std::byte{0x01};
  stored.bytes = std::move(damaged);
  return Status::Ok();
}

}  // namespace kvtier
