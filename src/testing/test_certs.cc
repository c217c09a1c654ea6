#include "testing/test_certs.h"

#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509v3.h>

#include <cstdio>
#include <memory>

namespace kvtier::testing {
namespace {

using KeyPtr = std::unique_ptr<EVP_PKEY, decltype(&::EVP_PKEY_free)>;
using CertPtr = std::unique_ptr<X509, decltype(&::X509_free)>;

struct Issuer {
  X509* cert;     // null: self-signed
  EVP_PKEY* key;  // null: self-signed
};

KeyPtr NewKey() { return KeyPtr(::EVP_PKEY_Q_keygen(nullptr, nullptr, "EC", "P-256"), &::EVP_PKEY_free); }

bool AddExtension(X509* cert, X509V3_CTX* ctx, int nid, const char* value) {
  X509_EXTENSION* ext = ::X509V3_EXT_conf_nid(nullptr, ctx, nid, value);
  if (ext == nullptr) return false;
  const bool added = ::X509_add_ext(cert, ext, -1) == 1;
  ::X509_EXTENSION_free(ext);
  return added;
}

// A certificate for `key` named `common_name`, valid from an hour ago for a day; a CA when
// `subject_alt_name` is null. Serials need only be unique per issuer.
Result<CertPtr> NewCert(EVP_PKEY* key, long serial, const char* common_name, const char* subject_alt_name, Issuer issuer) {
  CertPtr cert(::X509_new(), &::X509_free);
  X509* x = cert.get();
  X509_NAME* name = ::X509_get_subject_name(x);
  const bool ok = x != nullptr && ::X509_set_version(x, 2) == 1 && ::ASN1_INTEGER_set(::X509_get_serialNumber(x), serial) == 1 &&
                  ::X509_gmtime_adj(::X509_getm_notBefore(x), -3600) != nullptr &&
                  ::X509_gmtime_adj(::X509_getm_notAfter(x), 24 * 3600) != nullptr && ::X509_set_pubkey(x, key) == 1 &&
                  ::X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC,
                                               reinterpret_cast<const unsigned char*>(common_name), -1, -1, 0) == 1 &&
                  ::X509_set_issuer_name(x, issuer.cert != nullptr ? ::X509_get_subject_name(issuer.cert) : name) == 1;
  if (!ok) return Status::Internal("cannot build a test certificate");
  X509V3_CTX ctx{};
  ::X509V3_set_ctx(&ctx, issuer.cert != nullptr ? issuer.cert : x, x, nullptr, nullptr, 0);
  const bool ca = subject_alt_name == nullptr;
  const bool extended = AddExtension(x, &ctx, NID_basic_constraints, ca ? "critical,CA:TRUE" : "critical,CA:FALSE") &&
                        AddExtension(x, &ctx, NID_subject_key_identifier, "hash") &&
                        (ca ? AddExtension(x, &ctx, NID_key_usage, "critical,keyCertSign,cRLSign")
                            : AddExtension(x, &ctx, NID_subject_alt_name, subject_alt_name) &&
                                  AddExtension(x, &ctx, NID_authority_key_identifier, "keyid:always"));
  if (!extended || ::X509_sign(x, issuer.key != nullptr ? issuer.key : key, ::EVP_sha256()) == 0) {
    return Status::Internal("cannot sign a test certificate");
  }
  return cert;
}

template <typename Write>
Status WritePem(const std::string& path, Write write) {
  std::unique_ptr<FILE, decltype(&::fclose)> f(::fopen(path.c_str(), "w"), &::fclose);
  if (f == nullptr || !write(f.get())) return Status::IoError("cannot write " + path);
  return Status::Ok();
}

Status WriteCert(const std::string& path, X509* cert) {
  return WritePem(path, [&](FILE* f) { return ::PEM_write_X509(f, cert) == 1; });
}

Status WriteKey(const std::string& path, EVP_PKEY* key) {
  return WritePem(path, [&](FILE* f) {
    return ::PEM_write_PrivateKey(f, key, nullptr, nullptr, 0, nullptr, nullptr) == 1;
  });
}

}  // namespace

Result<TestPki> MakeTestPki(const std::string& dir, const std::string& name) {
  const std::string base = dir + "/" + name;
  TestPki pki{.ca_cert = base + "-ca.pem",
              .server_cert = base + "-server.pem",
              .server_key = base + "-server.key",
              .client_cert = base + "-client.pem",
              .client_key = base + "-client.key"};
  KeyPtr ca_key = NewKey(), server_key = NewKey(), client_key = NewKey();
  if (ca_key == nullptr || server_key == nullptr || client_key == nullptr) return Status::Internal("cannot make test keys");
  const std::string ca_name = "kvtier test CA " + name;
  KVTIER_ASSIGN_OR_RETURN(CertPtr ca, NewCert(ca_key.get(), 1, ca_name.c_str(), nullptr, {nullptr, nullptr}));
  const Issuer by_ca{ca.get(), ca_key.get()};
  KVTIER_ASSIGN_OR_RETURN(CertPtr server,
                          NewCert(server_key.get(), 2, "localhost", "DNS:localhost,IP:127.0.0.1,IP:::1", by_ca));
  KVTIER_ASSIGN_OR_RETURN(CertPtr client, NewCert(client_key.get(), 3, "kvtier test client", "DNS:client.test", by_ca));
  KVTIER_RETURN_IF_ERROR(WriteCert(pki.ca_cert, ca.get()));
  KVTIER_RETURN_IF_ERROR(WriteCert(pki.server_cert, server.get()));
  KVTIER_RETURN_IF_ERROR(WriteKey(pki.server_key, server_key.get()));
  KVTIER_RETURN_IF_ERROR(WriteCert(pki.client_cert, client.get()));
  KVTIER_RETURN_IF_ERROR(WriteKey(pki.client_key, client_key.get()));
  return pki;
}

}  // namespace kvtier::testing
