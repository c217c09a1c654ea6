#include "server/tenant_namespace.h"

#include <gtest/gtest.h>

namespace kvtier::server {
namespace {

// The mapping is part of the stored format: a block persisted (or shared in a pool) under a
// mapped key is found again only if every version maps alike. These digests were computed
// outside kvtier, with Python's hashlib:
//   sha256(b"kvtier-tenant-v1\0" + le64(len(tenant)) + tenant + le64(hi) + le64(lo))[:16]
TEST(TenantNamespace, MapsKeysAsTheStoredFormatSays) {
  const BlockKey key{0x0123456789abcdefull, 0xfedcba9876543210ull};
  EXPECT_EQ(TenantNamespace("acme").Map(key).ToHex(), "4617a00a692701b4acfddd5af862becd");
  EXPECT_EQ(TenantNamespace("").Map(key).ToHex(), "3ec3c9fb7ffac43b26520ea1c7a20a8c");
}

TEST(TenantNamespace, TenantsNeverShareAKeyAndAChainMapsKeyByKey) {
  const std::vector<BlockKey> chain{{1, 2}, {3, 4}, {5, 6}};
  const TenantNamespace a("a"), b("b");
  const std::vector<BlockKey> mapped = a.Map(chain);
  ASSERT_EQ(mapped.size(), chain.size());
  for (std::size_t i = 0; i < chain.size(); ++i) {
    EXPECT_EQ(mapped[i], a.Map(chain[i]));
    EXPECT_NE(mapped[i], b.Map(chain[i]));
    EXPECT_NE(mapped[i], chain[i]);
  }
}

}  // namespace
}  // namespace kvtier::server
