#include "server/tenant_namespace.h"

#include <array>
#include <cstring>
#include <string_view>

#include "util/little_endian.h"

namespace kvtier::server {
namespace {

Sha256WithPrefix NamespacePrefix(const std::string& tenant) {
  static constexpr std::string_view kDomain{"kvtier-tenant-v1\0", 17};  // with its NUL, as v1 was defined
  std::vector<std::byte> prefix(kDomain.size() + 8 + tenant.size());
  std::memcpy(prefix.data(), kDomain.data(), kDomain.size());
  little_endian::PutU64(prefix.data() + kDomain.size(), tenant.size());
  std::memcpy(prefix.data() + kDomain.size() + 8, tenant.data(), tenant.size());
  return Sha256WithPrefix(prefix);
}

}  // namespace

TenantNamespace::TenantNamespace(std::string tenant) : tenant_(std::move(tenant)), hash_(NamespacePrefix(tenant_)) {}

BlockKey TenantNamespace::Map(const BlockKey& key) const {
  // Every key of every request comes through here: only the key's 16 bytes are hashed, on
  // the state the prefix left.
  std::array<std::byte, 16> key_bytes;
  little_endian::PutU64(key_bytes.data(), key.hi);
  little_endian::PutU64(key_bytes.data() + 8, key.lo);
  return hash_.Digest(key_bytes).key();
}

std::vector<BlockKey> TenantNamespace::Map(std::span<const BlockKey> keys) const {
  std::vector<BlockKey> out;
  out.reserve(keys.size());
  for (const BlockKey& k : keys) out.push_back(Map(k));
  return out;
}

}  // namespace kvtier::server
