#include "kvtier/payload_store.h"

#include <random>
#include <string_view>
#include <thread>

#include <gtest/gtest.h>

namespace kvtier {
namespace {

std::vector<std::byte> Bytes(std::string_view text) {
  std::vector<std::byte> out;
  for (char c : text) out.push_back(static_cast<std::byte>(c));
  return out;
}

BlockKey Key(uint64_t n) { return {n * 0x9E3779B97F4A7C15ull, n + 1}; }

std::unique_ptr<PayloadStore> NewStore(PayloadStoreOptions options = {}) {
  Result<std::unique_ptr<PayloadStore>> store = PayloadStore::Create(options);
  EXPECT_TRUE(store.ok()) << store.status().ToString();
  return std::move(store).value();
}

TEST(PayloadStore, IdenticalPayloadsAreStoredOnceAndRefcounted) {
  auto store = NewStore();
  const auto payload = Bytes("the same system prompt's KV bytes");
  ASSERT_TRUE(store->Put(Key(1), payload).ok());
  ASSERT_TRUE(store->Put(Key(2), payload).ok());
  PayloadStore::Stats stats = store->GetStats();
  EXPECT_EQ(stats.blocks, 2u);
  EXPECT_EQ(stats.unique_payloads, 1u);
  EXPECT_EQ(stats.logical_bytes, 2 * payload.size());
  EXPECT_EQ(stats.stored_bytes, payload.size());
  EXPECT_EQ(stats.dedup_hits, 1u);
  EXPECT_DOUBLE_EQ(stats.saving(), 0.5);

  ASSERT_TRUE(store->Erase(Key(1)).ok());
  EXPECT_EQ(store->Get(Key(1)).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(*store->Get(Key(2)), payload);  // the other reference keeps it
  EXPECT_EQ(store->GetStats().unique_payloads, 1u);

  ASSERT_TRUE(store->Erase(Key(2)).ok());
  stats = store->GetStats();
  EXPECT_EQ(stats.blocks, 0u);
  EXPECT_EQ(stats.unique_payloads, 0u);
  EXPECT_EQ(stats.stored_bytes, 0u);
  EXPECT_EQ(stats.logical_bytes, 0u);
  EXPECT_EQ(store->Erase(Key(2)).code(), StatusCode::kNotFound);
}

TEST(PayloadStore, RePutReplacesAndDropsTheOldReference) {
  auto store = NewStore();
  ASSERT_TRUE(store->Put(Key(1), Bytes("old")).ok());
  ASSERT_TRUE(store->Put(Key(1), Bytes("newer")).ok());
  EXPECT_EQ(*store->Get(Key(1)), Bytes("newer"));
  PayloadStore::Stats stats = store->GetStats();
  EXPECT_EQ(stats.blocks, 1u);
  EXPECT_EQ(stats.unique_payloads, 1u);
  EXPECT_EQ(stats.stored_bytes, 5u);
  EXPECT_EQ(stats.logical_bytes, 5u);

  ASSERT_TRUE(store->Put(Key(1), Bytes("newer")).ok());  // the same bytes again: nothing changes
  EXPECT_EQ(store->GetStats().dedup_hits, 0u);
  EXPECT_EQ(store->GetStats().logical_bytes, 5u);
}

TEST(PayloadStore, DigestCollisionIsStoredSeparatelyNeverAliased) {
  // Every payload gets the same digest, as two colliding payloads would.
  auto store = PayloadStore::CreateWithDigestFunctionForTesting(
      [](std::span<const std::byte>) { return BlockDigest{.bytes = {0xab}, .size = 16}; });
  ASSERT_TRUE(store->Put(Key(1), Bytes("payload A")).ok());
  ASSERT_TRUE(store->Put(Key(2), Bytes("payload B")).ok());
  EXPECT_EQ(*store->Get(Key(1)), Bytes("payload A"));
  EXPECT_EQ(*store->Get(Key(2)), Bytes("payload B"));
  PayloadStore::Stats stats = store->GetStats();
  EXPECT_EQ(stats.digest_collisions, 1u);
  EXPECT_EQ(stats.unique_payloads, 2u);
  EXPECT_EQ(stats.dedup_hits, 0u);

  ASSERT_TRUE(store->Put(Key(3), Bytes("payload A")).ok());  // a true duplicate still dedups
  stats = store->GetStats();
  EXPECT_EQ(stats.dedup_hits, 1u);
  EXPECT_EQ(stats.digest_collisions, 1u);
  EXPECT_EQ(stats.unique_payloads, 2u);

  ASSERT_TRUE(store->Erase(Key(1)).ok());
  ASSERT_TRUE(store->Erase(Key(2)).ok());
  EXPECT_EQ(*store->Get(Key(3)), Bytes("payload A"));
  EXPECT_EQ(store->GetStats().unique_payloads, 1u);
}

TEST(PayloadStore, DamagedPayloadIsReportedNeverReturned) {
  auto store = NewStore();
  const auto payload = Bytes("KV bytes that a stray write will damage");
  ASSERT_TRUE(store->Put(Key(1), payload).ok());
  ASSERT_TRUE(store->Put(Key(2), payload).ok());
  ASSERT_TRUE(store->CorruptForTesting(Key(1)).ok());

  Result<std::vector<std::byte>> got = store->Get(Key(1));
  ASSERT_EQ(got.status().code(), StatusCode::kCorruption);
  EXPECT_NE(got.status().message().find(Key(1).ToHex()), std::string::npos) << got.status().message();
  std::vector<std::byte> buffer(payload.size());
  EXPECT_EQ(store->Get(Key(2), buffer).status().code(), StatusCode::kCorruption);  // they share the copy
  EXPECT_EQ(store->GetStats().checksum_failures, 2u);

  // The good bytes put again are not matched against the damaged copy.
  ASSERT_TRUE(store->Put(Key(3), payload).ok());
  EXPECT_EQ(*store->Get(Key(3)), payload);
  EXPECT_EQ(store->CorruptForTesting(Key(9)).code(), StatusCode::kNotFound);
}

TEST(PayloadStore, GetIntoACallerBuffer) {
  auto store = NewStore();
  const auto payload = Bytes("twelve bytes");
  ASSERT_TRUE(store->Put(Key(1), payload).ok());
  EXPECT_EQ(store->PayloadSize(Key(1)), payload.size());
  EXPECT_EQ(store->PayloadSize(Key(2)), std::nullopt);
  std::vector<std::byte> small(payload.size() - 1);
  EXPECT_EQ(store->Get(Key(1), small).status().code(), StatusCode::kInvalidArgument);
  std::vector<std::byte> buffer(payload.size() + 4);
  ASSERT_EQ(*store->Get(Key(1), buffer), payload.size());
  EXPECT_TRUE(std::equal(payload.begin(), payload.end(), buffer.begin()));
  EXPECT_EQ(store->Get(Key(2), buffer).status().code(), StatusCode::kNotFound);
}

TEST(PayloadStore, CapacityCountsUniqueBytesOnly) {
  auto store = NewStore({.capacity_bytes = 100});
  const std::vector<std::byte> sixty(60, std::byte{1});
  ASSERT_TRUE(store->Put(Key(1), sixty).ok());
  ASSERT_TRUE(store->Put(Key(2), sixty).ok());  // a dedup hit costs nothing
  const std::vector<std::byte> other(60, std::byte{2});
  EXPECT_EQ(store->Put(Key(3), other).code(), StatusCode::kResourceExhausted);
  EXPECT_FALSE(store->PayloadSize(Key(3)).has_value());
  ASSERT_TRUE(store->Erase(Key(2)).ok());
  // Replacing the last reference frees its bytes first, so 90 fits where 60 + 90 would not.
  ASSERT_TRUE(store->Put(Key(1), std::vector<std::byte>(90, std::byte{3})).ok());
  EXPECT_EQ(store->GetStats().stored_bytes, 90u);
}

TEST(PayloadStore, Sha256DigestAndOptionValidation) {
  auto store = NewStore({.digest = PayloadDigestAlgorithm::kSha256});
  ASSERT_TRUE(store->Put(Key(1), Bytes("abc")).ok());
  ASSERT_TRUE(store->Put(Key(2), Bytes("abc")).ok());
  EXPECT_EQ(store->GetStats().unique_payloads, 1u);
  const PayloadStoreOptions bad{.digest = static_cast<PayloadDigestAlgorithm>(7)};
  EXPECT_EQ(bad.Validate().code(), StatusCode::kInvalidArgument);
  EXPECT_FALSE(PayloadStore::Create(bad).ok());
}

TEST(PayloadStore, SnapshotSharesPayloadsAndOutlivesErase) {
  auto store = NewStore();
  ASSERT_TRUE(store->Put(Key(1), Bytes("shared")).ok());
  ASSERT_TRUE(store->Put(Key(2), Bytes("shared")).ok());
  ASSERT_TRUE(store->Put(Key(3), Bytes("own")).ok());
  const PayloadStore::Snapshot snapshot = store->TakeSnapshot();
  ASSERT_EQ(snapshot.payloads.size(), 2u);
  ASSERT_EQ(snapshot.payload_of.size(), 3u);
  EXPECT_EQ(snapshot.payload_of.at(Key(1)), snapshot.payload_of.at(Key(2)));
  for (int k = 1; k <= 3; ++k) ASSERT_TRUE(store->Erase(Key(static_cast<uint64_t>(k))).ok());
  EXPECT_EQ(*snapshot.payloads[snapshot.payload_of.at(Key(3))].bytes, Bytes("own"));
}

TEST(PayloadStore, ConcurrentPutGetErase) {
  auto store = NewStore();
  // A few contents over a few keys, so threads dedup, replace and free each other's payloads.
  std::vector<std::vector<std::byte>> contents;
  for (int c = 0; c < 5; ++c) contents.emplace_back(std::size_t{64} + static_cast<std::size_t>(c), static_cast<std::byte>(c));
  constexpr int kThreads = 4;
  constexpr uint64_t kKeys = 16;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937 rng(static_cast<unsigned>(t));
      for (int op = 0; op < 4000; ++op) {
        const BlockKey key = Key(rng() % kKeys);
        switch (rng() % 3) {
          case 0: ASSERT_TRUE(store->Put(key, contents[rng() % contents.size()]).ok()); break;
          case 1: {
            Result<std::vector<std::byte>> got = store->Get(key);
            if (got.ok()) {
              EXPECT_NE(std::find(contents.begin(), contents.end(), *got), contents.end());
            } else {
              EXPECT_EQ(got.status().code(), StatusCode::kNotFound);
            }
            break;
          }
          default: {
            const Status erased = store->Erase(key);
            EXPECT_TRUE(erased.ok() || erased.code() == StatusCode::kNotFound) << erased.ToString();
          }
        }
      }
    });
  }
  for (std::thread& thread : threads) thread.join();

  PayloadStore::Stats stats = store->GetStats();
  EXPECT_LE(stats.unique_payloads, contents.size());
  uint64_t held = 0;
  for (uint64_t k = 0; k < kKeys; ++k) {
    if (store->Erase(Key(k)).ok()) ++held;
  }
  EXPECT_EQ(held, stats.blocks);
  stats = store->GetStats();
  EXPECT_EQ(stats.unique_payloads, 0u);
  EXPECT_EQ(stats.stored_bytes, 0u);
  EXPECT_EQ(stats.logical_bytes, 0u);
  EXPECT_EQ(stats.checksum_failures, 0u);
}

}  // namespace
}  // namespace kvtier
