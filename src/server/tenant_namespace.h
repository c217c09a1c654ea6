// A tenant's namespace: the keys a client names are mapped to the keys the store holds by
// SHA-256("kvtier-tenant-v1", tenant, key) cut to 128 bits. Two tenants that name the same
// key address different blocks, and a tenant cannot name a block of another (it would need
// a preimage of SHA-256), so neither reads nor probes reach across tenants. Every tenant is
// mapped, the default one ("") included: an unmapped namespace could be used to plant blocks
// under another tenant's mapped keys.
//
// Why SHA-256 and not the store's xxh3: isolation must hold against a client that chooses
// its keys to collide, and xxh3 is not collision-resistant against an adversary.
//
// Thread-safety: immutable after construction.
#pragma once

#include <span>
#include <string>
#include <vector>

#include "kvtier/block.h"

namespace kvtier::server {

class TenantNamespace {
 public:
  explicit TenantNamespace(std::string tenant);

  const std::string& tenant() const { return tenant_; }
  BlockKey Map(const BlockKey& key) const;
  std::vector<BlockKey> Map(std::span<const BlockKey> keys) const;

 private:
  std::string tenant_;
  Sha256WithPrefix hash_;  // after what precedes the key: domain, tenant length, tenant
};

}  // namespace kvtier::server
