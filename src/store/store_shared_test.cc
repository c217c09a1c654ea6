// Two stores, as two nodes, over one real Redis with the remote tier shared (docs/cluster.md):
// what one puts the other finds and reads byte-equal, a node's drop never deletes a block
// another lists, a block the pool lost is a miss and never wrong bytes, and cards that do not
// continue the chain are not trusted.
#include <atomic>
#include <thread>

#include <gtest/gtest.h>

#include "kvtier/store.h"
#include "kvtier/tiers.h"
#include "store/shared_card.h"
#include "testing/redis_server.h"
#include "testing/test_store.h"

namespace kvtier {
namespace {

using testing::RedisServers;

constexpr uint32_t kBlockBytes = 64 << 10;

const testing::TestChains kChainData(kBlockBytes);

class SharedPool : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!RedisServers::Available()) GTEST_SKIP() << "redis-server or redis-cli is not on PATH";
    Result<std::unique_ptr<RedisServers>> started = RedisServers::StartStandalone(1);
    ASSERT_TRUE(started.ok()) << started.status().ToString();
    servers_ = std::move(*started);
  }

  // A node: a small DRAM tier over the shared pool, whose capacity is this node's share.
  std::unique_ptr<TieredStore> Node(uint64_t pool_bytes = 64u << 20, bool shared = true, StoreOptions options = {}) {
    std::vector<std::unique_ptr<Tier>> tiers;
    std::unique_ptr<Tier> dram = testing::TestDram(2u << 20);
    Result<std::unique_ptr<Tier>> pool = NewRemoteTier({.name = "pool",
                                                        .topology = RemoteTopology::kHashRing,
                                                        .endpoints = servers_->endpoints(),
                                                        .capacity_bytes = pool_bytes,
                                                        .key_prefix = "kvtier-shared:",
                                                        // a loaded CI machine must not make a live
                                                        // server look down (the default is 1 s)
                                                        .timeout_ms = 10000,
                                                        .shared = shared});
    EXPECT_TRUE(pool.ok()) << pool.status().ToString();
    if (dram == nullptr || !pool.ok()) return nullptr;
    tiers.push_back(std::move(dram));
    tiers.push_back(std::move(*pool));
    Result<std::unique_ptr<TieredStore>> store = TieredStore::Open(std::move(tiers), std::move(options));
    EXPECT_TRUE(store.ok()) << store.status().ToString();
    return store.ok() ? std::move(*store) : nullptr;
  }

  // GETs the pool's server has answered (INFO commandstats).
  uint64_t PoolGets() {
    Result<RedisReply> info = servers_->Command(0, {"INFO", "commandstats"});
    EXPECT_TRUE(info.ok()) << info.status().ToString();
    if (!info.ok()) return 0;
    const std::string text(ReplyText(**info));
    const std::size_t at = text.find("cmdstat_get:calls=");
    return at == std::string::npos ? 0 : std::stoull(text.substr(at + std::string("cmdstat_get:calls=").size()));
  }

  std::unique_ptr<RedisServers> servers_;
};

TEST_F(SharedPool, ANodeFindsAndReadsWhatAnotherPut) {
  auto a = Node(), b = Node();
  ASSERT_TRUE(a && b);
  for (uint64_t chain = 0; chain < 10; ++chain) ASSERT_TRUE(kChainData.Put(*a, chain, 8).ok());
  for (uint64_t chain = 0; chain < 10; ++chain) {
    const std::vector<BlockKey> keys = kChainData.Keys(chain, 8);
    EXPECT_EQ(b->Lookup(keys).prefix_blocks, 8u) << chain;
    EXPECT_EQ(kChainData.Get(*b, chain, 8), 8u) << chain;
  }
  EXPECT_EQ(b->GetStats().shared_found_blocks, 80u);
  // A chain B extends past what A put: B finds A's part, then stores its own.
  const std::vector<BlockKey> longer = kChainData.Keys(3, 12);
  EXPECT_EQ(b->Lookup(longer).prefix_blocks, 8u);
  ASSERT_TRUE(kChainData.Put(*b, 3, 12).ok());
  EXPECT_EQ(a->Lookup(longer).prefix_blocks, 12u) << "A finds the blocks B added to its chain";
  EXPECT_EQ(kChainData.Get(*a, 3, 12), 12u);
}

// A chain read from the pool is promoted into the node's DRAM from the bytes the Get read (one
// GET per block in all) and read from there next time, byte-equal.
TEST_F(SharedPool, BlocksReadFromThePoolArePromotedIntoDram) {
  auto a = Node(), b = Node();
  ASSERT_TRUE(a && b);
  ASSERT_TRUE(kChainData.Put(*a, 7, 8).ok());
  const std::vector<BlockKey> keys = kChainData.Keys(7, 8);
  ASSERT_EQ(b->Lookup(keys).prefix_blocks, 8u);  // B reads the chain's cards from the pool
  const uint64_t gets_before = PoolGets();
  ASSERT_EQ(kChainData.Get(*b, 7, 8), 8u);
  b->Drain();
  EXPECT_EQ(b->Lookup(keys).tier, std::vector<int>(8, 0)) << "every block is in B's DRAM now";
  EXPECT_EQ(b->GetStats().tiers[0].promotions, 8u);
  EXPECT_EQ(PoolGets() - gets_before, 8u) << "promotion places the bytes the Get read: no second read";
  EXPECT_EQ(kChainData.Get(*b, 7, 8), 8u);
  EXPECT_EQ(b->GetStats().tiers[0].hits, 8u) << "the second read came from DRAM";
}

TEST_F(SharedPool, BackgroundPublishingReachesThePoolAfterTheReply) {
  auto a = Node(64u << 20, true, StoreOptions{.publish_in_background = true}), b = Node();
  ASSERT_TRUE(a && b);
  for (uint64_t chain = 0; chain < 6; ++chain) ASSERT_TRUE(kChainData.Put(*a, chain, 8).ok());
  a->Drain();  // the movers have published every block
  for (uint64_t chain = 0; chain < 6; ++chain) EXPECT_EQ(kChainData.Get(*b, chain, 8), 8u) << "Get alone finds it";
  EXPECT_EQ(a->GetStats().shared_publish_failures, 0u);
}

TEST_F(SharedPool, ANodesDropDoesNotDeleteWhatOthersList) {
  auto a = Node(), b = Node(/*pool_bytes=*/1u << 20);  // B's share holds 16 blocks
  ASSERT_TRUE(a && b);
  for (uint64_t chain = 0; chain < 8; ++chain) ASSERT_TRUE(kChainData.Put(*a, chain, 8).ok());
  for (uint64_t chain = 0; chain < 8; ++chain) EXPECT_EQ(b->Lookup(kChainData.Keys(chain, 8)).prefix_blocks, 8u);
  b->Drain();
  EXPECT_LE(b->GetStats().tiers[1].used_bytes, 1u << 20) << "B's share of the pool is its capacity";
  for (uint64_t chain = 0; chain < 8; ++chain) EXPECT_EQ(kChainData.Get(*a, chain, 8), 8u) << chain;
}

TEST_F(SharedPool, ABlockThePoolLostIsAMissNeverWrongBytes) {
  auto a = Node(), b = Node();
  ASSERT_TRUE(a && b);
  ASSERT_TRUE(kChainData.Put(*a, 1, 6).ok());
  ASSERT_EQ(b->Lookup(kChainData.Keys(1, 6)).prefix_blocks, 6u);
  // The pool evicts block 3 (maxmemory, a TTL, a flush): B reads the prefix before it.
  ASSERT_TRUE(servers_->Command(0, {"DEL", "kvtier-shared:" + kChainData.Key(1, 3).ToHex()}).ok());
  EXPECT_EQ(kChainData.Get(*b, 1, 6), 3u);
  EXPECT_GE(b->GetStats().vanished_copies, 1u);
  EXPECT_EQ(b->Lookup(kChainData.Keys(1, 6)).prefix_blocks, 3u) << "no stale hit after the miss";
  ASSERT_TRUE(kChainData.Put(*a, 1, 6).ok());  // present in A: put again only if A lost it too
}

// Reads from the pool go in one batch per chain; a damaged value in the batch is refused and
// counted, and the chain's read stops before it.
TEST_F(SharedPool, ADamagedBlockInABatchedReadIsNeverReturned) {
  auto a = Node(), b = Node();
  ASSERT_TRUE(a && b);
  ASSERT_TRUE(kChainData.Put(*a, 4, 6).ok());
  const std::string value_key = "kvtier-shared:" + kChainData.Key(4, 2).ToHex();
  Result<RedisReply> value = servers_->Command(0, {"GET", value_key});
  ASSERT_TRUE(value.ok() && (*value)->type == REDIS_REPLY_STRING);
  std::string damaged((*value)->str, (*value)->len);
  damaged[damaged.size() / 2] = static_cast<char>(damaged[damaged.size() / 2] ^ 0x20);
  ASSERT_TRUE(servers_->Command(0, {"SET", value_key, damaged}).ok());
  EXPECT_EQ(kChainData.Get(*b, 4, 6), 2u);
  EXPECT_EQ(b->GetStats().corrupt_blocks, 1u);
  EXPECT_EQ(b->GetStats().tiers[1].hits, 2u) << "blocks 0 and 1, read in one batch";
}

TEST_F(SharedPool, CardsThatDoNotContinueTheChainAreNotTrusted) {
  auto a = Node(), b = Node();
  ASSERT_TRUE(a && b);
  ASSERT_TRUE(kChainData.Put(*a, 2, 4).ok());
  // B asks for blocks 1..3 without block 0: their cards name a parent the chain lacks.
  const std::vector<BlockKey> keys = kChainData.Keys(2, 4);
  EXPECT_EQ(b->Lookup(std::span(keys).subspan(1)).prefix_blocks, 0u);
  // A card overwritten with another block's card is refused, and the chain stops there.
  Result<RedisReply> other = servers_->Command(0, {"GET", "kvtier-shared:" + CardKey(kChainData.Key(2, 0)).ToHex()});
  ASSERT_TRUE(other.ok() && (*other)->type == REDIS_REPLY_STRING);
  ASSERT_TRUE(servers_->Command(0, {"SET", "kvtier-shared:" + CardKey(kChainData.Key(2, 2)).ToHex(),
                                    std::string((*other)->str, (*other)->len)})
                  .ok());
  EXPECT_EQ(b->Lookup(keys).prefix_blocks, 2u);
  EXPECT_EQ(kChainData.Get(*b, 2, 4), 2u);
}

// An engine that holds a chain's first blocks asks for the rest alone: with keys that name
// their prefix, a run starting mid-chain is found in the pool once its first block's parent is
// indexed here.
TEST_F(SharedPool, ARunStartingMidChainIsFoundUnderAParentIndexedHere) {
  auto a = Node(), b = Node(64u << 20, true, StoreOptions{.keys_name_prefix = true});
  ASSERT_TRUE(a && b);
  ASSERT_TRUE(kChainData.Put(*a, 4, 6).ok());
  const std::vector<BlockKey> keys = kChainData.Keys(4, 6);
  EXPECT_EQ(b->Lookup(std::span(keys).subspan(2)).prefix_blocks, 0u) << "block 1 is not indexed on B";
  ASSERT_EQ(kChainData.Get(*b, 4, 2), 2u);
  EXPECT_EQ(b->Lookup(std::span(keys).subspan(2)).prefix_blocks, 4u);
}

// One node puts while another reads the same chains from the pool: every read is a prefix of
// the chain, byte-equal (the other node may be ahead or behind; never wrong).
TEST_F(SharedPool, ReadsRacingAnotherNodesPutsAreNeverWrong) {
  auto a = Node(), b = Node(/*pool_bytes=*/2u << 20);  // B's share drops blocks as it goes
  ASSERT_TRUE(a && b);
  constexpr uint64_t kChains = 40;
  std::atomic<uint64_t> put{0};
  std::thread writer([&] {
    for (uint64_t chain = 0; chain < kChains; ++chain) {
      EXPECT_TRUE(kChainData.Put(*a, chain, 4).ok());
      put = chain + 1;
    }
  });
  std::size_t full = 0;
  // Three passes at least, and a whole one after the writer is done: on a loaded machine the
  // reader can otherwise finish before the writer has put anything.
  uint64_t rounds_after_writer = 0;
  for (uint64_t round = 0; round < 3 * kChains || rounds_after_writer < kChains; ++round) {
    const uint64_t chain = round % kChains;
    const bool writer_done = put == kChains;
    const bool done = chain < put;
    const std::size_t read = kChainData.Get(*b, chain, 4);  // fails the test on a wrong byte
    if (done && read == 4) ++full;
    if (writer_done) ++rounds_after_writer;
  }
  writer.join();
  // B's share (32 blocks) churns: a block it just found may be dropped by a mover before it
  // is read (a last tier keeps a chain's interior blocks and drops leaves), and while a drop
  // is in flight the block is listed in no tier, so a lookup stops there. Once the movers are
  // idle, what B finds it finds whole: every chain is in the pool, under its cards. Each
  // lookup indexes blocks and wakes the movers again, hence a drain before each.
  for (uint64_t chain = 0; chain < kChains; ++chain) {
    b->Drain();
    EXPECT_EQ(b->Lookup(kChainData.Keys(chain, 4)).prefix_blocks, 4u) << chain;
  }
  EXPECT_GT(full, 0u);
}

TEST_F(SharedPool, NodesWithoutSharingKeepToThemselves) {
  auto a = Node(64u << 20, /*shared=*/false), b = Node(64u << 20, /*shared=*/false);
  ASSERT_TRUE(a && b);
  ASSERT_TRUE(kChainData.Put(*a, 5, 4).ok());
  EXPECT_EQ(b->Lookup(kChainData.Keys(5, 4)).prefix_blocks, 0u);
}

TEST(SharedCard, RoundTripsAndRefusesDamage) {
  const BlockCard card{.key = kChainData.Key(9, 2),
                       .parent = kChainData.Key(9, 1),
                       .bytes = 4096,
                       .tokens = 16,
                       .type = BlockType::kToolContext,
                       .transition = TransitionType::kAgentHandoff,
                       .recompute_seconds = 0.25};
  std::array<std::byte, kBlockCardBytes> bytes = EncodeBlockCard(card);
  const std::optional<BlockCard> back = DecodeBlockCard(bytes);
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(back->key, card.key);
  EXPECT_EQ(back->parent, card.parent);
  EXPECT_EQ(back->bytes, 4096u);
  EXPECT_EQ(back->tokens, 16u);
  EXPECT_EQ(back->type, BlockType::kToolContext);
  EXPECT_EQ(back->transition, TransitionType::kAgentHandoff);
  EXPECT_EQ(back->recompute_seconds, 0.25);
  const std::optional<BlockCard> root = DecodeBlockCard(EncodeBlockCard({.key = kChainData.Key(9, 0), .bytes = 1}));
  ASSERT_TRUE(root.has_value());
  EXPECT_FALSE(root->parent.has_value());
  for (std::size_t at : {0u, 8u, 20u, 48u, 57u, 79u}) {
    std::array<std::byte, kBlockCardBytes> damaged = bytes;
    damaged[at] ^= std::byte{0x10};
    EXPECT_FALSE(DecodeBlockCard(damaged).has_value()) << "byte " << at;
  }
  EXPECT_FALSE(DecodeBlockCard(std::span(bytes).first(kBlockCardBytes - 1)).has_value());
  EXPECT_NE(CardKey(card.key), card.key);
}

}  // namespace
}  // namespace kvtier
