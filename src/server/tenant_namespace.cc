#include "server/tenant_namespace.h"

namespace kvtier::server {
namespace {

void AppendLittleEndian(std::vector<uint8_t>& out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<uint8_t>(v >> (8 * i)));
}

}  // namespace

TenantNamespace::TenantNamespace(std::string tenant) : tenant_(std::move(tenant)) {
  static constexpr char kDomain[] = "kvtier-tenant-v1";
  message_.assign(kDomain, kDomain + sizeof(kDomain));
  AppendLittleEndian(message_, tenant_.size());
  message_.insert(message_.end(), tenant_.begin(), tenant_.end());
}

BlockKey TenantNamespace::Map(const BlockKey& key) const {
  thread_local std::vector<uint8_t> message;
  message.assign(message_.begin(), message_.end());
  AppendLittleEndian(message, key.hi);
  AppendLittleEndian(message, key.lo);
  return Sha256Digest(message.data(), message.size()).key();
}

std::vector<BlockKey> TenantNamespace::Map(std::span<const BlockKey> keys) const {
  std::vector<BlockKey> out;
  out.reserve(keys.size());
  for (const BlockKey& k : keys) out.push_back(Map(k));
  return out;
}

}  // namespace kvtier::server
