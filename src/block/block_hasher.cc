// OpenSSL 3 deprecates its SHA256_* calls in favour of EVP's. They are used because they run
// the same SHA-extension code without EVP's per-call dispatch (77 ns against 146 ns for a
// 41-byte message on the 2-vCPU VM, docs/serve.md "SHA-256 without EVP"), and their state is a
// plain struct that can be copied after a common prefix (EVP_MD_CTX_copy_ex allocates).
#define OPENSSL_SUPPRESS_DEPRECATED
#include <openssl/sha.h>
// For XXH3_state_t on the stack (libxxhash's documented way; the library ships with the header).
#define XXH_STATIC_LINKING_ONLY
#include <xxhash.h>

#include <algorithm>
#include <bit>
#include <cstring>
#include <memory>

#include "block/cbor_writer.h"
#include "block/checksum_kernels.h"
#include "kvtier/block.h"

namespace kvtier {
namespace {

constexpr char kHexDigits[] = "0123456789abcdef";

// OpenSSL's SHA256_* calls cannot fail on valid arguments; a failure would leave no safe
// digest to return.
void Check(int ok) {
  if (ok != 1) std::abort();
}

// Hashes `data` on top of `context` and returns the digest.
BlockDigest FinishSha256(SHA256_CTX& context, const void* data, std::size_t size) {
  BlockDigest digest;
  Check(SHA256_Update(&context, data, size));
  Check(SHA256_Final(digest.bytes.data(), &context));
  digest.size = 32;
  return digest;
}

std::string Hex(std::span<const uint8_t> bytes) {
  std::string out;
  out.reserve(bytes.size() * 2);
  for (uint8_t b : bytes) {
    out += kHexDigits[b >> 4];
    out += kHexDigits[b & 0xf];
  }
  return out;
}

BlockHasher::DigestFunction DigestFor(BlockHashAlgorithm algorithm) {
  if (algorithm == BlockHashAlgorithm::kXxh3_128) {
    return [](std::span<const uint8_t> data) { return Xxh3_128Digest(data.data(), data.size()); };
  }
  return [](std::span<const uint8_t> data) { return Sha256Digest(data.data(), data.size()); };
}

}  // namespace

BlockDigest Xxh3_128Digest(const void* data, std::size_t size) {
  XXH128_canonical_t canonical;
  XXH128_canonicalFromHash(&canonical, XXH3_128bits(data, size));
  BlockDigest digest;
  std::copy(std::begin(canonical.digest), std::end(canonical.digest), digest.bytes.begin());
  digest.size = 16;
  return digest;
}

BlockDigest Sha256Digest(const void* data, std::size_t size) {
  SHA256_CTX context;
  Check(SHA256_Init(&context));
  return FinishSha256(context, data, size);
}

static_assert(sizeof(SHA256_CTX) <= 128 && alignof(SHA256_CTX) <= 8, "Sha256WithPrefix::state_ must hold a SHA256_CTX");

Sha256WithPrefix::Sha256WithPrefix(std::span<const std::byte> prefix) {
  SHA256_CTX context;
  Check(SHA256_Init(&context));
  Check(SHA256_Update(&context, prefix.data(), prefix.size()));
  std::memcpy(state_.data(), &context, sizeof(context));
}

BlockDigest Sha256WithPrefix::Digest(std::span<const std::byte> data) const {
  SHA256_CTX context;
  std::memcpy(&context, state_.data(), sizeof(context));
  if (context.num + data.size() + 9 > SHA256_CBLOCK) return FinishSha256(context, data.data(), data.size());
  // What is left of the message fits in its last block with the padding (a tenant mapping's
  // 16-byte key after a short prefix, every key of every request): that block is built here
  // and compressed once, without SHA256_Update's buffering and SHA256_Final's wiping, which
  // were half of a mapping's time (docs/serve.md, "Lookups: the last SHA-256 block").
  std::array<unsigned char, SHA256_CBLOCK> block{};
  std::memcpy(block.data(), context.data, context.num);
  if (!data.empty()) std::memcpy(block.data() + context.num, data.data(), data.size());
  block[context.num + data.size()] = 0x80;
  const uint64_t bits = ((uint64_t{context.Nh} << 32) | context.Nl) + uint64_t{data.size()} * 8;
  for (int i = 0; i < 8; ++i) block[SHA256_CBLOCK - 1 - static_cast<std::size_t>(i)] = static_cast<unsigned char>(bits >> (8 * i));
  SHA256_Transform(&context, block.data());
  BlockDigest digest;
  for (std::size_t i = 0; i < 8; ++i) {
    for (std::size_t b = 0; b < 4; ++b) digest.bytes[4 * i + b] = static_cast<uint8_t>(context.h[i] >> (24 - 8 * b));
  }
  digest.size = 32;
  return digest;
}

std::string BlockKey::ToHex() const {
  std::array<uint8_t, 16> bytes{};
  for (int i = 0; i < 8; ++i) {
    bytes[static_cast<std::size_t>(i)] = static_cast<uint8_t>(hi >> (56 - 8 * i));
    bytes[static_cast<std::size_t>(8 + i)] = static_cast<uint8_t>(lo >> (56 - 8 * i));
  }
  return Hex(bytes);
}

Result<BlockKey> BlockKey::FromHex(std::string_view hex) {
  if (hex.size() != 32) return Status::InvalidArgument("a block key is 32 hex digits, got " + std::to_string(hex.size()));
  BlockKey key;
  for (std::size_t i = 0; i < 32; ++i) {
    const char c = hex[i];
    uint64_t nibble = 0;
    if (c >= '0' && c <= '9') {
      nibble = static_cast<uint64_t>(c - '0');
    } else if (c >= 'a' && c <= 'f') {
      nibble = static_cast<uint64_t>(c - 'a' + 10);
    } else if (c >= 'A' && c <= 'F') {
      nibble = static_cast<uint64_t>(c - 'A' + 10);
    } else {
      return Status::InvalidArgument("'" + std::string(hex) + "' is not hexadecimal");
    }
    uint64_t& word = i < 16 ? key.hi : key.lo;
    word = (word << 4) | nibble;
  }
  return key;
}

BlockKey BlockKey::FromDigestBytes(std::span<const uint8_t> digest) {
  if (digest.size() >= 16) {
    // Every key a tenant names passes here: two loads and byte swaps, not 16 shifts.
    auto big_endian = [](const uint8_t* in) {
      uint64_t word = 0;
      std::memcpy(&word, in, sizeof(word));
      return std::endian::native == std::endian::little ? __builtin_bswap64(word) : word;
    };
    return {big_endian(digest.data()), big_endian(digest.data() + 8)};
  }
  BlockKey key;
  for (std::size_t i = 0; i < 16 && i < digest.size(); ++i) {
    uint64_t& word = i < 8 ? key.hi : key.lo;
    word = (word << 8) | digest[i];
  }
  return key;
}

std::string BlockDigest::ToHex() const { return Hex(view()); }

std::string_view BlockHashAlgorithmName(BlockHashAlgorithm algorithm) {
  switch (algorithm) {
    case BlockHashAlgorithm::kXxh3_128: return "xxh3_128";
    case BlockHashAlgorithm::kSha256: return "sha256";
    case BlockHashAlgorithm::kVllmSha256Cbor: return "sha256_cbor";
  }
  return "unknown";
}

Result<BlockHashAlgorithm> ParseBlockHashAlgorithm(std::string_view name) {
  for (BlockHashAlgorithm a : {BlockHashAlgorithm::kXxh3_128, BlockHashAlgorithm::kSha256, BlockHashAlgorithm::kVllmSha256Cbor}) {
    if (name == BlockHashAlgorithmName(a)) return a;
  }
  return Status::InvalidArgument("unknown block hash '" + std::string(name) + "' (expected xxh3_128, sha256 or sha256_cbor)");
}

std::string_view BlockTypeName(BlockType type) {
  switch (type) {
    case BlockType::kSystemPrompt: return "system_prompt";
    case BlockType::kToolContext: return "tool_context";
    case BlockType::kUserContext: return "user_context";
    case BlockType::kIntermediateReasoning: return "intermediate_reasoning";
  }
  return "unknown";
}

std::string_view TransitionTypeName(TransitionType type) {
  switch (type) {
    case TransitionType::kSameToolRepeat: return "same_tool_repeat";
    case TransitionType::kToolSwitch: return "tool_switch";
    case TransitionType::kReasoningStep: return "reasoning_step";
    case TransitionType::kAgentHandoff: return "agent_handoff";
  }
  return "unknown";
}

Status BlockHasherOptions::Validate() const {
  if (block_size < 1 || block_size > (int64_t{1} << 20)) {
    return Status::InvalidArgument("block size must be 1 to 1048576 tokens, got " + std::to_string(block_size));
  }
  return Status::Ok();
}

BlockHasher::BlockHasher(BlockHasherOptions options, DigestFunction digest)
    : options_(std::move(options)), digest_(std::move(digest)) {
  CborWriter seed;
  seed.Text(options_.root_seed);
  root_ = digest_(seed.bytes());
}

Result<BlockHasher> BlockHasher::Create(const BlockHasherOptions& options) {
  KVTIER_RETURN_IF_ERROR(options.Validate());
  return BlockHasher(options, DigestFor(options.algorithm));
}

BlockHasher BlockHasher::WithDigestFunctionForTesting(const BlockHasherOptions& options, DigestFunction digest) {
  return BlockHasher(options, std::move(digest));
}

namespace {

void WriteExtraKeys(CborWriter& w, const std::vector<ExtraKey>& extra_keys) {
  if (extra_keys.empty()) {
    w.Null();
    return;
  }
  w.ArrayHeader(extra_keys.size());
  for (const ExtraKey& key : extra_keys) {
    w.ArrayHeader(key.size());
    for (const ExtraKeyValue& value : key) {
      if (const auto* text = std::get_if<std::string>(&value)) {
        w.Text(*text);
      } else {
        w.Integer(std::get<int64_t>(value));
      }
    }
  }
}

}  // namespace

BlockDigest BlockHasher::HashBlock(const BlockDigest& parent, std::span<const TokenId> tokens,
                                   const std::vector<ExtraKey>& extra_keys) const {
  // One buffer per thread: hashing is on the request path and must not allocate per block.
  thread_local CborWriter w;
  w.Clear();
  if (options_.algorithm == BlockHashAlgorithm::kVllmSha256Cbor) {
    // vLLM: CBOR([parent, [tokens], extra_keys]).
    w.ArrayHeader(3);
    w.Bytes(parent.view());
    w.ArrayHeader(tokens.size());
    for (TokenId token : tokens) w.Unsigned(token);
  } else {
    // kvtier's own layout: the parent digest, then the token count and ids as fixed-width
    // little-endian words (cheaper to produce than CBOR's variable-width integers), then the
    // extra keys in CBOR. Unambiguous because the digest size and the count are fixed first.
    w.Raw(parent.view());
    w.LittleEndian32(static_cast<uint32_t>(tokens.size()));
    for (TokenId token : tokens) w.LittleEndian32(token);
  }
  WriteExtraKeys(w, extra_keys);
  return digest_(w.bytes());
}

std::vector<ExtraKey> BlockExtraKeys(const RequestExtras& extras, int64_t block_start, int64_t block_size) {
  std::vector<ExtraKey> keys;
  if (!extras.lora_name.empty()) keys.push_back({std::string("lora"), extras.lora_name, extras.lora_path});
  const int64_t block_end = block_start + block_size;
  for (const MultimodalItem& item : extras.multimodal) {
    if (item.offset < block_end && item.offset + item.length > block_start) {
      keys.push_back({std::string("mm"), item.content_hash, item.offset - block_start});
    }
  }
  if (block_start == 0 && !extras.cache_salt.empty()) keys.push_back({std::string("cache_salt"), extras.cache_salt});
  return keys;
}

std::vector<BlockDigest> BlockHasher::HashChain(std::span<const TokenId> tokens, const RequestExtras& extras,
                                                const std::optional<BlockDigest>& parent, int64_t first_token) const {
  const auto block = static_cast<std::size_t>(options_.block_size);
  std::vector<BlockDigest> out;
  out.reserve(tokens.size() / block);
  BlockDigest previous = parent.value_or(root_);
  for (std::size_t start = 0; start + block <= tokens.size(); start += block) {
    const int64_t block_start = first_token + static_cast<int64_t>(start);
    previous = HashBlock(previous, tokens.subspan(start, block), BlockExtraKeys(extras, block_start, options_.block_size));
    out.push_back(previous);
  }
  return out;
}

std::vector<BlockKey> BlockHasher::ChainKeys(std::span<const TokenId> tokens, const RequestExtras& extras) const {
  std::vector<BlockKey> keys;
  for (const BlockDigest& digest : HashChain(tokens, extras)) keys.push_back(digest.key());
  return keys;
}

uint64_t BlockHasher::TokenFingerprint(std::span<const TokenId> tokens) {
  constexpr XXH64_hash_t kFingerprintSeed = 0x6b76746965726670ull;  // "kvtierfp": independent of the key
  return XXH3_64bits_withSeed(tokens.data(), tokens.size_bytes(), kFingerprintSeed);
}

#ifdef KVTIER_HAVE_AVX2_KERNEL
namespace {
// Here, not in the kernel's file: that one is compiled for AVX2 and must not run first.
bool UseAvx2Kernel() {
  static const bool avx2 = __builtin_cpu_supports("avx2");
  return avx2;
}
}  // namespace
#endif

uint64_t PayloadChecksum(std::span<const std::byte> payload) {
#ifdef KVTIER_HAVE_AVX2_KERNEL
  if (UseAvx2Kernel()) return checksum_kernels::ChecksumAvx2(payload.data(), payload.size());
#endif
  return XXH3_64bits(payload.data(), payload.size());
}

uint64_t CopyWithChecksum(std::span<std::byte> dst, std::span<const std::byte> src) {
#ifdef KVTIER_HAVE_AVX2_KERNEL
  if (UseAvx2Kernel()) return checksum_kernels::CopyWithChecksumAvx2(dst.data(), src.data(), src.size());
#endif
  XXH3_state_t state;
  XXH3_64bits_reset(&state);
  for (std::size_t offset = 0; offset < src.size(); offset += checksum_kernels::kCopyChunk) {
    const std::size_t n = std::min(checksum_kernels::kCopyChunk, src.size() - offset);
    std::memcpy(dst.data() + offset, src.data() + offset, n);
    XXH3_64bits_update(&state, dst.data() + offset, n);
  }
  return XXH3_64bits_digest(&state);
}

}  // namespace kvtier
