#include "server/tenant_namespace.h"

#include <openssl/evp.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <new>
#include <string_view>

#include "util/little_endian.h"

namespace kvtier::server {
namespace {

// What precedes the key (kSha256) or is hashed into the AES key (kAesMmo): the domain with
// its NUL, the tenant's length, the tenant.
std::vector<std::byte> NamespacePrefix(std::string_view domain, const std::string& tenant) {
  std::vector<std::byte> prefix(domain.size() + 8 + tenant.size());
  std::memcpy(prefix.data(), domain.data(), domain.size());
  little_endian::PutU64(prefix.data() + domain.size(), tenant.size());
  std::memcpy(prefix.data() + domain.size() + 8, tenant.data(), tenant.size());
  return prefix;
}

constexpr std::string_view kSha256Domain{"kvtier-tenant-v1\0", 17};
constexpr std::string_view kAesMmoDomain{"kvtier-tenant-v2\0", 17};

void PutKey(std::byte* out, const BlockKey& key) {
  little_endian::PutU64(out, key.hi);
  little_endian::PutU64(out + 8, key.lo);
}

// OpenSSL fails these only when it cannot allocate: the same answer as operator new's.
void Check(int ok) {
  if (ok != 1) throw std::bad_alloc();
}

}  // namespace

void TenantNamespace::CipherFree::operator()(EVP_CIPHER_CTX* ctx) const { EVP_CIPHER_CTX_free(ctx); }

TenantNamespace::TenantNamespace(std::string tenant, TenantKeyMapping mapping) : tenant_(std::move(tenant)) {
  if (mapping == TenantKeyMapping::kSha256) {
    sha_.emplace(NamespacePrefix(kSha256Domain, tenant_));
    return;
  }
  const std::vector<std::byte> prefix = NamespacePrefix(kAesMmoDomain, tenant_);
  const BlockDigest digest = Sha256Digest(prefix.data(), prefix.size());
  aes_.reset(EVP_CIPHER_CTX_new());
  if (aes_ == nullptr) throw std::bad_alloc();
  Check(EVP_EncryptInit_ex(aes_.get(), EVP_aes_128_ecb(), nullptr, digest.bytes.data(), nullptr));
  Check(EVP_CIPHER_CTX_set_padding(aes_.get(), 0));
}

BlockKey TenantNamespace::Map(const BlockKey& key) { return Map(std::span<const BlockKey>(&key, 1)).front(); }

std::vector<BlockKey> TenantNamespace::Map(std::span<const BlockKey> keys) {
  std::vector<BlockKey> mapped;
  mapped.reserve(keys.size());
  if (sha_) {
    std::array<std::byte, 16> key_bytes;
    for (const BlockKey& k : keys) {
      PutKey(key_bytes.data(), k);
      mapped.push_back(sha_->Digest(key_bytes).key());
    }
    return mapped;
  }
  // Every key of every request comes through here: one cipher call per kChunkKeys keys,
  // which OpenSSL runs through AES-NI several blocks at a time, on buffers of the stack (a
  // session keeps nothing of a large request).
  constexpr std::size_t kChunkKeys = 256;
  std::array<std::byte, 16 * kChunkKeys> in, out;
  for (std::size_t first = 0; first < keys.size(); first += kChunkKeys) {
    const std::size_t n = std::min(kChunkKeys, keys.size() - first);
    for (std::size_t i = 0; i < n; ++i) PutKey(in.data() + 16 * i, keys[first + i]);
    int written = 0;
    Check(EVP_EncryptUpdate(aes_.get(), reinterpret_cast<unsigned char*>(out.data()), &written,
                            reinterpret_cast<const unsigned char*>(in.data()), static_cast<int>(16 * n)));
    for (std::size_t i = 0; i < n; ++i) {
      std::array<uint64_t, 2> cipher, plain;
      std::memcpy(cipher.data(), out.data() + 16 * i, 16);
      std::memcpy(plain.data(), in.data() + 16 * i, 16);
      cipher[0] ^= plain[0];
      cipher[1] ^= plain[1];
      std::array<uint8_t, 16> block;
      std::memcpy(block.data(), cipher.data(), 16);
      mapped.push_back(BlockKey::FromDigestBytes(block));
    }
  }
  return mapped;
}

}  // namespace kvtier::server
