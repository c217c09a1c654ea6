#include "testing/faulty_tier.h"

#include <gtest/gtest.h>

#include "kvtier/tiers.h"

namespace kvtier::testing {
namespace {

std::unique_ptr<FaultyTier> Make() {
  Result<std::unique_ptr<Tier>> dram = NewDramTier({.capacity_bytes = 4u << 20, .lock_memory = false});
  EXPECT_TRUE(dram.ok());
  return std::make_unique<FaultyTier>(std::move(*dram));
}

TEST(FaultyTier, FailsTheNextWritesThenRecovers) {
  auto tier = Make();
  std::vector<std::byte> payload(4096, std::byte{1});
  tier->FailNextWrites(2, StatusCode::kResourceExhausted);
  EXPECT_EQ(tier->Write({1, 1}, payload).code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(tier->Write({1, 1}, payload).code(), StatusCode::kResourceExhausted);
  EXPECT_TRUE(tier->Write({1, 1}, payload).ok());
  EXPECT_EQ(tier->injected_failures(), 2u);
  EXPECT_EQ(tier->GetStats().blocks, 1u);  // failed writes stored nothing
}

TEST(FaultyTier, FailsOneInNReadsAndWrites) {
  auto tier = Make();
  std::vector<std::byte> payload(4096, std::byte{2});
  tier->FailOneWriteIn(3);
  int failed = 0;
  for (uint64_t i = 0; i < 9; ++i) failed += tier->Write({i, 9}, payload).ok() ? 0 : 1;
  EXPECT_EQ(failed, 3);
  tier->FailOneReadIn(2);
  std::vector<std::byte> out(4096);
  int read_failures = 0;
  for (int i = 0; i < 10; ++i) read_failures += tier->Read({0, 9}, out).ok() ? 0 : 1;
  EXPECT_EQ(read_failures, 5);
}

TEST(FaultyTier, BatchesSeeTheFaultsPerBlock) {
  auto tier = Make();
  std::vector<std::byte> payload(4096, std::byte{3});
  tier->FailNextWrites(1);
  std::vector<Tier::WriteOp> ops = {{{1, 2}, payload}, {{3, 4}, payload}};
  const auto results = tier->WriteBatch(ops);
  EXPECT_FALSE(results[0].ok());
  EXPECT_TRUE(results[1].ok());
}

TEST(FaultyTier, CorruptsTheNextReadsBehindTheTiersCheck) {
  auto tier = Make();
  std::vector<std::byte> payload(4096, std::byte{4});
  ASSERT_TRUE(tier->Write({5, 5}, payload).ok());
  tier->CorruptNextReads(1);
  std::vector<std::byte> out(4096);
  uint64_t checksum = 0;
  ASSERT_TRUE(tier->Read({.key = {5, 5}, .out = out, .checksum = &checksum}).ok());
  EXPECT_NE(out, payload);  // handed back as good, with the stored checksum
  EXPECT_EQ(checksum, PayloadChecksum(payload));
  ASSERT_TRUE(tier->Read({5, 5}, out).ok());
  EXPECT_EQ(out, payload);
  EXPECT_EQ(tier->injected_failures(), 1u);
}

}  // namespace
}  // namespace kvtier::testing
