#include "server/tenant_namespace.h"

#include <cstring>
#include <string_view>

#include "util/little_endian.h"

namespace kvtier::server {
TenantNamespace::TenantNamespace(std::string tenant) : tenant_(std::move(tenant)) {
  static constexpr std::string_view kDomain{"kvtier-tenant-v1\0", 17};  // with its NUL, as v1 was defined
  message_.resize(kDomain.size() + 8 + tenant_.size());
  std::memcpy(message_.data(), kDomain.data(), kDomain.size());
  little_endian::PutU64(reinterpret_cast<std::byte*>(message_.data() + kDomain.size()), tenant_.size());
  std::memcpy(message_.data() + kDomain.size() + 8, tenant_.data(), tenant_.size());
}

BlockKey TenantNamespace::Map(const BlockKey& key) const {
  // Every key of every request comes through here: the prefix is copied whole and the key
  // written in place, into a buffer each thread keeps.
  thread_local std::vector<uint8_t> message;
  message.resize(message_.size() + 16);
  std::memcpy(message.data(), message_.data(), message_.size());
  auto* key_bytes = reinterpret_cast<std::byte*>(message.data() + message_.size());
  little_endian::PutU64(key_bytes, key.hi);
  little_endian::PutU64(key_bytes + 8, key.lo);
  return Sha256Digest(message.data(), message.size()).key();
}

std::vector<BlockKey> TenantNamespace::Map(std::span<const BlockKey> keys) const {
  std::vector<BlockKey> out;
  out.reserve(keys.size());
  for (const BlockKey& k : keys) out.push_back(Map(k));
  return out;
}

}  // namespace kvtier::server
