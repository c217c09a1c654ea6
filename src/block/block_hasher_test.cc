#include "kvtier/block.h"
#include "testing/test_paths.h"

#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <numeric>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <xxhash.h>

extern char** environ;

namespace kvtier {
namespace {

std::vector<TokenId> Iota(TokenId first, std::size_t count) {
  std::vector<TokenId> tokens(count);
  std::iota(tokens.begin(), tokens.end(), first);
  return tokens;
}

BlockHasher MakeHasher(BlockHashAlgorithm algorithm, int64_t block_size = 16, std::string seed = "vllm-none-hash") {
  Result<BlockHasher> hasher = BlockHasher::Create({algorithm, block_size, std::move(seed)});
  EXPECT_TRUE(hasher.ok());
  return *hasher;
}

std::string ToHex(const std::vector<uint8_t>& bytes) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  for (uint8_t b : bytes) {
    out += kDigits[b >> 4];
    out += kDigits[b & 0xf];
  }
  return out;
}

// Vectors produced by vLLM 0.33.0's own hash_block_tokens / get_request_block_hasher
// (tools/gen_vllm_hash_vectors.py). Cases whose extra keys are not kvtier's tuple-of-tuples
// shape (EAGLE lookahead, a legacy flat key) or whose token ids exceed 32 bits are skipped.
TEST(VllmCompatibility, KeysEqualVllmSha256CborHashes) {
  std::ifstream in(testing::FixturesDir() + "/vllm_hash_vectors.json");
  ASSERT_TRUE(in.good());
  const nlohmann::json vectors = nlohmann::json::parse(in);
  int checked_blocks = 0;
  for (const auto& seed : vectors["seeds"]) {
    const std::string root_seed = seed["none_hash_seed"];
    for (const auto& c : seed["cases"]) {
      if (c["source"] != "get_request_block_hasher" || c["num_hash_lookahead_tokens"] != 0) continue;
      const int64_t block_size = c["block_size"];
      std::vector<std::vector<uint8_t>> serialized;
      // The real hasher for digests; a recording one for the CBOR bytes.
      BlockHasher real = MakeHasher(BlockHashAlgorithm::kVllmSha256Cbor, block_size, root_seed);
      EXPECT_EQ(real.root().ToHex(), seed["none_hash"]) << root_seed;
      BlockHasher recorder = BlockHasher::WithDigestFunctionForTesting(
          {BlockHashAlgorithm::kVllmSha256Cbor, block_size, root_seed}, [&](std::span<const uint8_t> bytes) {
            serialized.emplace_back(bytes.begin(), bytes.end());
            return real.HashBlock({}, {}, {});  // any digest; parents below come from `real`
          });
      (void)recorder;

      const auto& request = c["request"];
      RequestExtras extras;
      if (!request["lora"].is_null()) {
        extras.lora_name = request["lora"]["lora_name"];
        extras.lora_path = request["lora"]["lora_path"];
      }
      if (!request["cache_salt"].is_null()) extras.cache_salt = request["cache_salt"];
      for (const auto& mm : request["mm_features"]) {
        extras.multimodal.push_back({mm["identifier"], mm["offset"], mm["length"]});
      }
      const std::vector<TokenId> tokens = request["all_token_ids"].get<std::vector<TokenId>>();
      const std::vector<BlockDigest> digests = real.HashChain(tokens, extras);
      ASSERT_EQ(digests.size(), c["blocks"].size()) << c["name"];
      for (std::size_t i = 0; i < digests.size(); ++i) {
        const auto& expected = c["blocks"][i];
        EXPECT_EQ(digests[i].ToHex(), expected["hash"]) << c["name"] << " block " << i << " seed " << root_seed;
        // The CBOR bytes themselves, block by block.
        const BlockDigest parent = i == 0 ? real.root() : digests[i - 1];
        serialized.clear();
        const auto block = std::span<const TokenId>(tokens).subspan(i * static_cast<std::size_t>(block_size),
                                                                    static_cast<std::size_t>(block_size));
        (void)recorder.HashBlock(parent, block, BlockExtraKeys(extras, static_cast<int64_t>(i) * block_size, block_size));
        ASSERT_EQ(serialized.size(), 1u);
        EXPECT_EQ(ToHex(serialized[0]), expected["cbor_hex"]) << c["name"] << " block " << i;
        ++checked_blocks;
      }
    }
  }
  EXPECT_GE(checked_blocks, 60);
}

TEST(BlockHasher, ChainingMakesEveryLaterKeyDependOnEarlierBlocks) {
  BlockHasher hasher = MakeHasher(BlockHashAlgorithm::kXxh3_128);
  std::vector<TokenId> a = Iota(100, 48);
  std::vector<TokenId> b = a;
  b[3] = 7;  // differs in block 0 only
  const auto ka = hasher.ChainKeys(a);
  const auto kb = hasher.ChainKeys(b);
  ASSERT_EQ(ka.size(), 3u);
  for (std::size_t i = 0; i < 3; ++i) EXPECT_NE(ka[i], kb[i]) << i;
  std::vector<TokenId> c = a;
  c[40] = 7;  // differs in block 2 only
  const auto kc = hasher.ChainKeys(c);
  EXPECT_EQ(ka[0], kc[0]);
  EXPECT_EQ(ka[1], kc[1]);
  EXPECT_NE(ka[2], kc[2]);
}

TEST(BlockHasher, PartialLastBlockHasNoKey) {
  BlockHasher hasher = MakeHasher(BlockHashAlgorithm::kXxh3_128);
  EXPECT_EQ(hasher.ChainKeys(Iota(0, 40)).size(), 2u);
  EXPECT_EQ(hasher.ChainKeys(Iota(0, 15)).size(), 0u);
  // The full blocks of a longer request are the same keys: a prefix stays a prefix.
  const auto short_keys = hasher.ChainKeys(Iota(0, 40));
  const auto long_keys = hasher.ChainKeys(Iota(0, 64));
  EXPECT_TRUE(std::equal(short_keys.begin(), short_keys.end(), long_keys.begin()));
}

TEST(BlockHasher, TenantsAndAdaptersNeverShareKeys) {
  BlockHasher hasher = MakeHasher(BlockHashAlgorithm::kXxh3_128);
  const auto tokens = Iota(0, 64);
  const auto base = hasher.ChainKeys(tokens);
  const auto tenant_a = hasher.ChainKeys(tokens, {.cache_salt = "tenant-a"});
  const auto tenant_b = hasher.ChainKeys(tokens, {.cache_salt = "tenant-b"});
  const auto lora = hasher.ChainKeys(tokens, {.lora_name = "adapter", .lora_path = "/a"});
  const auto image = hasher.ChainKeys(tokens, {.multimodal = {{"feedbeef", 20, 8}}});
  for (std::size_t i = 0; i < base.size(); ++i) {
    EXPECT_NE(base[i], tenant_a[i]);
    EXPECT_NE(tenant_a[i], tenant_b[i]);
    EXPECT_NE(base[i], lora[i]);
  }
  EXPECT_EQ(base[0], image[0]);  // the image starts in block 1
  EXPECT_NE(base[1], image[1]);
  EXPECT_EQ(hasher.ChainKeys(tokens, {.cache_salt = "tenant-a"}), tenant_a);
}

TEST(BlockHasher, AlgorithmsDifferAndKeepTheirDigestSizes) {
  const auto tokens = Iota(0, 16);
  const auto x = MakeHasher(BlockHashAlgorithm::kXxh3_128).HashChain(tokens);
  const auto s = MakeHasher(BlockHashAlgorithm::kSha256).HashChain(tokens);
  ASSERT_EQ(x.size(), 1u);
  EXPECT_EQ(x[0].size, 16);
  EXPECT_EQ(s[0].size, 32);
  EXPECT_NE(x[0].key(), s[0].key());
  EXPECT_NE(MakeHasher(BlockHashAlgorithm::kXxh3_128, 16, "0").ChainKeys(tokens), MakeHasher(BlockHashAlgorithm::kXxh3_128).ChainKeys(tokens));
}

TEST(BlockHasher, KeysArePinnedAcrossReleases) {
  // Keys are stored on disk and shared between machines: a change here breaks every cache.
  const auto tokens = Iota(0, 16);
  EXPECT_EQ(MakeHasher(BlockHashAlgorithm::kXxh3_128).ChainKeys(tokens)[0].ToHex(), "a9cc3080807f2341f05bf17d5d20df6f");
  EXPECT_EQ(MakeHasher(BlockHashAlgorithm::kSha256, 16, "0").HashChain(tokens)[0].ToHex(), 
            "4bbf3ae7ca718412e4f55f1fce3352885d2b14abedbb27d2589b320b53ac648e");
  // vLLM's layout gives vLLM's hash (tests/fixtures/vllm_hash_vectors.json, seed "0").
  EXPECT_EQ(MakeHasher(BlockHashAlgorithm::kVllmSha256Cbor, 16, "0").HashChain(tokens)[0].ToHex(),
            "d830de3d42c00f25a2949b5d12d98642664a44872c1614c5b0147556276afc9c");
}

// Determinism across processes: a child process (this binary, re-executed) hashes the same
// request and writes its keys; they must equal ours.
TEST(BlockHasher, KeysAreEqualInAnotherProcess) {
  const char* child_out = std::getenv("KVTIER_HASH_CHILD_OUT");
  const auto tokens = Iota(1000, 16 * 8);
  const RequestExtras extras{.cache_salt = "t", .lora_name = "l", .lora_path = "/p", .multimodal = {{"ab", 3, 40}}};
  std::string ours;
  for (BlockHashAlgorithm a : {BlockHashAlgorithm::kXxh3_128, BlockHashAlgorithm::kSha256}) {
    for (const BlockKey& key : MakeHasher(a).ChainKeys(tokens, extras)) ours += key.ToHex() + "\n";
  }
  if (child_out != nullptr) {
    std::ofstream(child_out) << ours;
    return;
  }
  const std::string path = ::testing::TempDir() + "/kvtier_hash_child_" + std::to_string(getpid());
  const std::string env_var = "KVTIER_HASH_CHILD_OUT=" + path;
  std::vector<char*> env;
  for (char** e = environ; *e != nullptr; ++e) env.push_back(*e);
  env.push_back(const_cast<char*>(env_var.c_str()));
  env.push_back(nullptr);
  std::string filter = "--gtest_filter=BlockHasher.KeysAreEqualInAnotherProcess";
  char* argv[] = {const_cast<char*>("/proc/self/exe"), filter.data(), nullptr};
  pid_t pid = 0;
  ASSERT_EQ(posix_spawn(&pid, "/proc/self/exe", nullptr, nullptr, argv, env.data()), 0);
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  std::ifstream in(path);
  const std::string theirs((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::remove(path.c_str());
  EXPECT_EQ(theirs, ours);
  EXPECT_EQ(std::count(ours.begin(), ours.end(), '\n'), 16);
}

TEST(BlockKey, HexRoundTripAndErrors) {
  const BlockKey key{0x0123456789abcdefull, 0xfedcba9876543210ull};
  EXPECT_EQ(key.ToHex(), "0123456789abcdeffedcba9876543210");
  EXPECT_EQ(*BlockKey::FromHex(key.ToHex()), key);
  EXPECT_FALSE(BlockKey::FromHex("xyz").ok());
  EXPECT_FALSE(BlockKey::FromHex(std::string(32, 'g')).ok());
}

TEST(BlockHasher, OptionsAreValidated) {
  EXPECT_FALSE(BlockHasher::Create({BlockHashAlgorithm::kXxh3_128, 0, "s"}).ok());
  EXPECT_FALSE(ParseBlockHashAlgorithm("md5").ok());
  EXPECT_EQ(*ParseBlockHashAlgorithm("sha256_cbor"), BlockHashAlgorithm::kVllmSha256Cbor);
}

TEST(PayloadChecksum, CopyWithChecksumEqualsCopyThenChecksum) {
  // Around xxh3's short-input limit (240), its 64-byte stripes, its 1 KiB blocks and the
  // portable kernel's 4 KiB copy chunks; from aligned and unaligned sources into unaligned
  // destinations, whose bytes past the copy must stay as they were.
  for (std::size_t size : {std::size_t{0}, std::size_t{1}, std::size_t{240}, std::size_t{241}, std::size_t{1023},
                           std::size_t{1024}, std::size_t{1025}, std::size_t{1087}, std::size_t{2049}, std::size_t{4095},
                           std::size_t{4096}, std::size_t{4097}, std::size_t{5121}, std::size_t{32768}, std::size_t{100001},
                           std::size_t{1} << 20, (std::size_t{1} << 20) + 63}) {
    for (std::size_t offset : {std::size_t{0}, std::size_t{3}}) {
      std::vector<std::byte> buffer(size + offset);
      for (std::size_t i = 0; i < buffer.size(); ++i) buffer[i] = static_cast<std::byte>((i * 7919) >> 3);
      const std::span<const std::byte> src = std::span<const std::byte>(buffer).subspan(offset);
      std::vector<std::byte> dst(size + 9, std::byte{0x5a});
      EXPECT_EQ(CopyWithChecksum(std::span(dst).subspan(1, size), src), XXH3_64bits(src.data(), size)) << size;
      EXPECT_TRUE(std::equal(src.begin(), src.end(), dst.begin() + 1)) << size;
      EXPECT_EQ(dst[0], std::byte{0x5a}) << size;
      EXPECT_TRUE(std::all_of(dst.begin() + 1 + static_cast<std::ptrdiff_t>(size), dst.end(),
                              [](std::byte b) { return b == std::byte{0x5a}; }))
          << size;
    }
  }
}

TEST(PayloadChecksum, DetectsAFlippedBit) {
  std::vector<std::byte> payload(4096, std::byte{7});
  const uint64_t before = PayloadChecksum(payload);
  payload[1000] ^= std::byte{1};
  EXPECT_NE(PayloadChecksum(payload), before);
}

TEST(Sha256Digest, MatchesTheStandardsTestVectors) {
  // FIPS 180-2, appendix B.1 and B.2.
  const std::string one = "abc";
  const std::string two = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
  EXPECT_EQ(Sha256Digest(one.data(), one.size()).ToHex(),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(Sha256Digest(two.data(), two.size()).ToHex(),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
}

TEST(Sha256WithPrefix, EqualsTheDigestOfPrefixAndDataAtEveryBlockBoundary) {
  std::vector<std::byte> bytes(300);
  for (std::size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<std::byte>(i * 131 + 7);
  const std::span<const std::byte> all(bytes);
  for (const std::size_t prefix : {0u, 1u, 25u, 39u, 40u, 47u, 48u, 55u, 56u, 63u, 64u, 65u, 103u, 119u, 128u, 200u}) {
    const Sha256WithPrefix hash(all.first(prefix));
    // Around where what is left, with its 9 bytes of padding, fills the last block (55 bytes).
    for (const std::size_t data : {0u, 1u, 7u, 8u, 15u, 16u, 17u, 30u, 31u, 39u, 55u, 56u, 64u, 100u}) {
      EXPECT_EQ(hash.Digest(all.subspan(prefix, data)).ToHex(), Sha256Digest(bytes.data(), prefix + data).ToHex())
          << "prefix " << prefix << ", data " << data;
    }
  }
}

}  // namespace
}  // namespace kvtier
