#include "server/tenant_namespace.h"

#include <gtest/gtest.h>

namespace kvtier::server {
namespace {

// The mapping is part of the stored format: a block persisted (or shared in a pool) under a
// mapped key is found again only if every version maps alike. These keys were computed
// outside kvtier, with Python's hashlib and the `cryptography` package:
//   aes_mmo: K = sha256(b"kvtier-tenant-v2\0" + le64(len(tenant)) + tenant)[:16],
//            m = le64(hi) + le64(lo), AES-128-ECB_K(m) XOR m
//   sha256:  sha256(b"kvtier-tenant-v1\0" + le64(len(tenant)) + tenant + le64(hi) + le64(lo))[:16]
TEST(TenantNamespace, MapsKeysAsTheStoredFormatSays) {
  const BlockKey key{0x0123456789abcdefull, 0xfedcba9876543210ull};
  EXPECT_EQ(TenantNamespace("acme").Map(key).ToHex(), "1e2f588b6fdc95621429e3de183ac8b2");
  EXPECT_EQ(TenantNamespace("").Map(key).ToHex(), "a05518c1607f3a0f5a798a7f85a3e6f8");
  EXPECT_EQ(TenantNamespace("acme", TenantKeyMapping::kSha256).Map(key).ToHex(), "4617a00a692701b4acfddd5af862becd");
  EXPECT_EQ(TenantNamespace("", TenantKeyMapping::kSha256).Map(key).ToHex(), "3ec3c9fb7ffac43b26520ea1c7a20a8c");
}

TEST(TenantNamespace, TenantsNeverShareAKeyAndAChainMapsKeyByKey) {
  for (const TenantKeyMapping mapping : {TenantKeyMapping::kAesMmo, TenantKeyMapping::kSha256}) {
    std::vector<BlockKey> chain;
    for (uint64_t i = 0; i < 600; ++i) chain.push_back({i, ~i});  // more keys than one cipher call takes (256)
    TenantNamespace a("a", mapping), b("b", mapping), again("a", mapping);
    const std::vector<BlockKey> mapped = a.Map(chain);
    ASSERT_EQ(mapped.size(), chain.size());
    for (std::size_t i = 0; i < chain.size(); ++i) {
      EXPECT_EQ(mapped[i], a.Map(chain[i]));
      EXPECT_EQ(mapped[i], again.Map(chain[i]));
      EXPECT_NE(mapped[i], b.Map(chain[i]));
      EXPECT_NE(mapped[i], chain[i]);
      if (i > 0) {
        EXPECT_NE(mapped[i], mapped[i - 1]);
      }
    }
  }
}

TEST(TenantNamespace, TheTwoMappingsDiffer) {
  const BlockKey key{7, 8};
  EXPECT_NE(TenantNamespace("t").Map(key), TenantNamespace("t", TenantKeyMapping::kSha256).Map(key));
  EXPECT_TRUE(TenantNamespace("t").Map(std::span<const BlockKey>{}).empty());
}

}  // namespace
}  // namespace kvtier::server
