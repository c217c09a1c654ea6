#include "testing/test_certs.h"

#include <gtest/gtest.h>
#include <openssl/pem.h>
#include <openssl/x509_vfy.h>

#include <cstdio>
#include <filesystem>
#include <memory>

namespace kvtier::testing {
namespace {

std::unique_ptr<X509, decltype(&::X509_free)> ReadCert(const std::string& path) {
  std::unique_ptr<FILE, decltype(&::fclose)> f(::fopen(path.c_str(), "r"), &::fclose);
  return {f == nullptr ? nullptr : ::PEM_read_X509(f.get(), nullptr, nullptr, nullptr), &::X509_free};
}

// Whether `leaf` verifies against the CA certificate in `ca`.
bool Verifies(const std::string& leaf, const std::string& ca) {
  auto cert = ReadCert(leaf);
  auto root = ReadCert(ca);
  std::unique_ptr<X509_STORE, decltype(&::X509_STORE_free)> store(::X509_STORE_new(), &::X509_STORE_free);
  std::unique_ptr<X509_STORE_CTX, decltype(&::X509_STORE_CTX_free)> ctx(::X509_STORE_CTX_new(), &::X509_STORE_CTX_free);
  return cert != nullptr && root != nullptr && ::X509_STORE_add_cert(store.get(), root.get()) == 1 &&
         ::X509_STORE_CTX_init(ctx.get(), store.get(), cert.get(), nullptr) == 1 && ::X509_verify_cert(ctx.get()) == 1;
}

TEST(TestCerts, EachPkiVerifiesOnlyItsOwnCertificates) {
  char pattern[] = "/tmp/kvtier-certs-XXXXXX";
  ASSERT_NE(::mkdtemp(pattern), nullptr);
  const std::string dir = pattern;
  Result<TestPki> a = MakeTestPki(dir, "a");
  Result<TestPki> b = MakeTestPki(dir, "b");
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_TRUE(Verifies(a->server_cert, a->ca_cert));
  EXPECT_TRUE(Verifies(a->client_cert, a->ca_cert));
  EXPECT_FALSE(Verifies(a->server_cert, b->ca_cert));
  EXPECT_TRUE(std::filesystem::file_size(a->server_key) > 0);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace kvtier::testing
