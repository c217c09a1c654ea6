// The promotion gate inside the store (promotion_gate.h): blocks a Get reads from a networked
// tier (here a parallel FS in a temporary directory) are promoted into DRAM while promotions
// are read again, and mostly left below while the reads are a scan wider than DRAM.
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "kvtier/store.h"
#include "kvtier/tiers.h"
#include "testing/test_store.h"

namespace kvtier {
namespace {

constexpr uint32_t kBlockBytes = 16u << 10;
constexpr uint64_t kBlocksPerChain = 4;
constexpr uint64_t kChains = 200;  // 800 blocks, 12.5 MiB: DRAM holds about 60 of them
const testing::TestChains kChainData(kBlockBytes);
// A promotion from the parallel FS into DRAM pays once 0.5% of them are read again, by the
// paper's costs (DefaultTierCost): 5.1 us to load 16 KiB from DRAM against 1,008 us from the FS.
constexpr double kFsBreakEven = 0.00506;

class StorePromotion : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = (std::filesystem::temp_directory_path() / "kvtier-promotion-XXXXXX").string();
    ASSERT_NE(::mkdtemp(dir_.data()), nullptr);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  // 1 MiB of DRAM over a parallel FS; every chain put, so that most of them sit below.
  std::unique_ptr<TieredStore> OpenFilled(PromotionGateOptions gate = {}) {
    std::vector<std::unique_ptr<Tier>> tiers;
    tiers.push_back(testing::TestDram(1u << 20));
    Result<std::unique_ptr<Tier>> fs = NewParallelFsTier({.directory = dir_ + "/pfs", .capacity_bytes = 64u << 20});
    EXPECT_TRUE(fs.ok()) << fs.status().ToString();
    if (!fs.ok()) return nullptr;
    tiers.push_back(std::move(*fs));
    Result<std::unique_ptr<TieredStore>> store = TieredStore::Open(
        std::move(tiers), {.policy = PolicyKind::kLru, .promotion_gate = gate, .synchronous_moves = true});
    EXPECT_TRUE(store.ok()) << store.status().ToString();
    if (!store.ok()) return nullptr;
    for (uint64_t chain = 0; chain < kChains; ++chain) {
      EXPECT_TRUE(kChainData.Put(**store, chain, kBlocksPerChain).ok());
    }
    return std::move(*store);
  }

  // Reads every chain once, in order; every byte is checked.
  static void Scan(TieredStore& store) {
    for (uint64_t chain = 0; chain < kChains; ++chain) {
      ASSERT_EQ(kChainData.Get(store, chain, kBlocksPerChain), kBlocksPerChain) << "chain " << chain;
    }
  }

  // Reads chains 0..hot-1, `passes` times over.
  static void ReadHot(TieredStore& store, uint64_t hot, int passes) {
    for (int pass = 0; pass < passes; ++pass) {
      for (uint64_t chain = 0; chain < hot; ++chain) {
        ASSERT_EQ(kChainData.Get(store, chain, kBlocksPerChain), kBlocksPerChain) << "chain " << chain;
      }
    }
  }

  std::string dir_;
};

// A loop over 800 blocks with room for about 60 in DRAM: promoting every block read gets no
// DRAM hit at all (each is evicted long before the loop comes back to it), and copies every
// block. The gate learns within the first pass that promotions are wasted, then promotes the
// floor's sample; what it promoted last stays in DRAM and is read there on the next pass.
TEST_F(StorePromotion, ALoopWiderThanDramIsMostlyLeftBelow) {
  auto gated = OpenFilled();
  auto promote_all = OpenFilled({.adaptive = false});
  ASSERT_NE(gated, nullptr);
  ASSERT_NE(promote_all, nullptr);
  const StoreStats gated_before = gated->GetStats();
  const StoreStats all_before = promote_all->GetStats();
  for (int pass = 0; pass < 3; ++pass) {
    Scan(*gated);
    Scan(*promote_all);
  }
  const StoreStats gated_after = gated->GetStats();
  const StoreStats all_after = promote_all->GetStats();
  const auto delta = [](const StoreStats& after, const StoreStats& before, auto field) {
    return field(after) - field(before);
  };
  const auto promotions = [](const StoreStats& s) { return s.tiers[0].promotions; };
  const auto dram_hits = [](const StoreStats& s) { return s.tiers[0].hits; };
  const uint64_t gated_promotions = delta(gated_after, gated_before, promotions);
  const uint64_t all_promotions = delta(all_after, all_before, promotions);
  const StoreTierStats& fs = gated_after.tiers[1];
  const std::string seen = "gated: " + std::to_string(gated_promotions) + " promotions, " +
                           std::to_string(delta(gated_after, gated_before, dram_hits)) + " DRAM hits, rate " +
                           std::to_string(fs.promotion_rate) + "; promoting all: " + std::to_string(all_promotions) +
                           " promotions, " + std::to_string(delta(all_after, all_before, dram_hits)) + " DRAM hits";
  EXPECT_EQ(all_after.tiers[1].promotions_declined, 0u);
  EXPECT_EQ(fs.promotions_declined + gated_promotions, delta(gated_after, gated_before, [](const StoreStats& s) {
              return s.tiers[1].hits;
            }));
  EXPECT_GT(fs.promotions_wasted, 0u) << seen;
  EXPECT_LT(gated_promotions * 2, all_promotions) << seen;
  EXPECT_GT(delta(gated_after, gated_before, dram_hits), delta(all_after, all_before, dram_hits)) << seen;
}

TEST_F(StorePromotion, BlocksReadAgainKeepBeingPromoted) {
  auto store = OpenFilled();
  ASSERT_NE(store, nullptr);
  constexpr uint64_t kHot = 4;  // 16 blocks: they fit in DRAM
  ReadHot(*store, kHot, 10);
  const StoreStats stats = store->GetStats();
  const StoreTierStats& fs = stats.tiers[1];
  EXPECT_EQ(fs.promotions_declined, 0u);
  EXPECT_GE(fs.promotions_used, kHot * kBlocksPerChain - 1) << "the first chain may have stayed in DRAM";
  EXPECT_EQ(fs.promotions_wasted, 0u);
  EXPECT_EQ(fs.promotion_rate, 1.0);
  ReadHot(*store, kHot, 1);
  EXPECT_EQ(store->GetStats().tiers[0].hits - stats.tiers[0].hits, kHot * kBlocksPerChain) << "the hot chains left DRAM";
}

// After a loop that drove the rate down, reads that come back (a working set that fits in
// DRAM) are promoted by the sample, used, and raise the rate again.
TEST_F(StorePromotion, ReadsThatComeBackAfterALoopArePromotedAgain) {
  auto store = OpenFilled();
  ASSERT_NE(store, nullptr);
  Scan(*store);
  Scan(*store);
  const double low = store->GetStats().tiers[1].promotion_rate;
  ASSERT_LT(low, 0.5);
  constexpr uint64_t kHot = 12;  // 48 blocks: they fit in DRAM
  ReadHot(*store, kHot, 100);
  const StoreStats stats = store->GetStats();
  EXPECT_GT(stats.tiers[1].promotion_rate, low);
  ReadHot(*store, kHot, 1);
  EXPECT_EQ(store->GetStats().tiers[0].hits - stats.tiers[0].hits, kHot * kBlocksPerChain);
}

TEST_F(StorePromotion, WithoutAdaptationEveryBlockReadIsPromoted) {
  auto store = OpenFilled({.adaptive = false});
  ASSERT_NE(store, nullptr);
  Scan(*store);
  Scan(*store);
  const StoreStats stats = store->GetStats();
  EXPECT_EQ(stats.tiers[1].promotions_declined, 0u);
  EXPECT_EQ(stats.tiers[0].promotions, stats.tiers[1].hits);
}

}  // namespace
}  // namespace kvtier
