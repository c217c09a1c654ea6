#include "tier/size_class_allocator.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <vector>

namespace kvtier {
namespace {

constexpr uint64_t kMiB = uint64_t{1} << 20;

std::vector<RegionSlot> FillWith(SizeClassAllocator& slots, uint64_t slot_bytes) {
  std::vector<RegionSlot> got;
  for (Result<RegionSlot> s = slots.Allocate(slot_bytes); s.ok(); s = slots.Allocate(slot_bytes)) got.push_back(*s);
  return got;
}

TEST(SizeClassAllocator, ReusesFreedSlotsAndStaysInsideRegions) {
  SizeClassAllocator slots({3 * kMiB, 3 * kMiB + 100});  // the odd tail is rounded off
  EXPECT_EQ(slots.total_bytes(), 6 * kMiB);
  const std::vector<RegionSlot> got = FillWith(slots, kMiB);
  EXPECT_EQ(got.size(), 6u);
  for (const RegionSlot& s : got) EXPECT_LE(s.offset + kMiB, 3 * kMiB);
  EXPECT_EQ(got[0].region, 0u);  // new slabs go to the regions in turn
  EXPECT_EQ(got[2].region, 1u);
  EXPECT_FALSE(slots.Allocate(4096).ok());
  slots.Free(got[2], kMiB);
  Result<RegionSlot> again = slots.Allocate(kMiB);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*again, got[2]);
}

TEST(SizeClassAllocator, RejectsSizesThatAreNotWholePages) {
  SizeClassAllocator slots({4 * kMiB});
  EXPECT_EQ(slots.Allocate(1000).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(slots.Allocate(0).status().code(), StatusCode::kInvalidArgument);
}

TEST(SizeClassAllocator, ExhaustionSaysWhereTheSpaceIs) {
  SizeClassAllocator slots({2 * kMiB});
  const std::vector<RegionSlot> got = FillWith(slots, 512u << 10);
  ASSERT_EQ(got.size(), 4u);
  const Result<RegionSlot> more = slots.Allocate(4096);
  EXPECT_EQ(more.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(more.status().message().find("no free slot of 4096 bytes"), std::string::npos) << more.status().message();
  EXPECT_NE(more.status().message().find(" 0 bytes are free in slabs"), std::string::npos) << more.status().message();
  // A freed slot of the 512 KiB slab is free space another class cannot use: the message counts it.
  slots.Free(got[1], 512u << 10);
  const Result<RegionSlot> still = slots.Allocate(4096);
  EXPECT_NE(still.status().message().find(" 524288 bytes are free in slabs"), std::string::npos) << still.status().message();
  ASSERT_TRUE(slots.Allocate(512u << 10).ok());
  EXPECT_NE(slots.Allocate(4096).status().message().find(" 0 bytes are free in slabs"), std::string::npos);
}

TEST(SizeClassAllocator, LargeClassesUseWholeRegionTails) {
  SizeClassAllocator slots({4 * kMiB});
  // 1 MiB + 4 KiB slots: one per slab, so three fit in 4 MiB and the rest serves small ones.
  EXPECT_EQ(FillWith(slots, kMiB + 4096).size(), 3u);
  EXPECT_TRUE(slots.Allocate(8192).ok());  // a single slot from the tail
}

// The pattern that stranded space while a slab kept its class for life.
TEST(SizeClassAllocator, AnEmptiedSlabServesAnotherClass) {
  SizeClassAllocator slots({8 * kMiB});
  std::vector<RegionSlot> small = FillWith(slots, 64u << 10);
  ASSERT_EQ(small.size(), 128u);
  for (const RegionSlot& s : small) slots.Free(s, 64u << 10);
  EXPECT_EQ(slots.uncarved_bytes(), 8 * kMiB);  // every slab went back, merged into one run
  EXPECT_EQ(FillWith(slots, kMiB + 4096).size(), 7u);
}

TEST(SizeClassAllocator, ASlabWithALiveSlotKeepsItsClass) {
  SizeClassAllocator slots({4 * kMiB});
  std::vector<RegionSlot> got = FillWith(slots, kMiB);
  ASSERT_EQ(got.size(), 4u);
  slots.Free(got[0], kMiB);  // its slab still holds got[1]
  EXPECT_FALSE(slots.Allocate(512u << 10).ok());
  slots.Free(got[1], kMiB);
  EXPECT_EQ(FillWith(slots, 512u << 10).size(), 4u);
}

// Two classes interleaved until full, then one class freed: the other class reuses at least
// 90% of the freed bytes (what it loses is its own rounding: a 12 KiB class fills 2040 KiB of
// a 2 MiB run, and the few single slots carved from small tail runs lose up to one slot).
TEST(SizeClassAllocator, FreedSpaceOfOneClassIsUsableByAnother) {
  constexpr uint64_t kA = 64u << 10, kB = 3u * 4096;
  SizeClassAllocator slots({64 * kMiB, 64 * kMiB});
  std::vector<RegionSlot> a;
  for (;;) {
    Result<RegionSlot> x = slots.Allocate(kA);
    Result<RegionSlot> y = slots.Allocate(kB);
    if (x.ok()) a.push_back(*x);
    if (!x.ok() && !y.ok()) break;
  }
  ASSERT_GT(a.size(), 500u);
  for (const RegionSlot& s : a) slots.Free(s, kA);
  const uint64_t freed = a.size() * kA;
  EXPECT_GE(FillWith(slots, kB).size() * kB, freed / 10 * 9);
}

TEST(SizeClassAllocator, RandomFreesAlwaysReturnAllSpace) {
  SizeClassAllocator slots({16 * kMiB, 16 * kMiB});
  std::mt19937_64 random(7);
  const uint64_t sizes[] = {4096, 64u << 10, 300u << 10, kMiB + 4096, 3 * kMiB};
  std::vector<std::pair<RegionSlot, uint64_t>> live;
  for (int step = 0; step < 5000; ++step) {
    if (live.empty() || random() % 3 != 0) {
      const uint64_t size = sizes[random() % std::size(sizes)];
      if (Result<RegionSlot> s = slots.Allocate(size); s.ok()) live.push_back({*s, size});
    } else {
      const std::size_t k = random() % live.size();
      slots.Free(live[k].first, live[k].second);
      live.erase(live.begin() + static_cast<std::ptrdiff_t>(k));
    }
  }
  // No two live slots overlap.
  std::sort(live.begin(), live.end(), [](const auto& x, const auto& y) {
    return std::pair(x.first.region, x.first.offset) < std::pair(y.first.region, y.first.offset);
  });
  for (std::size_t k = 1; k < live.size(); ++k) {
    if (live[k].first.region == live[k - 1].first.region) {
      EXPECT_GE(live[k].first.offset, live[k - 1].first.offset + live[k - 1].second);
    }
  }
  for (const auto& [slot, size] : live) slots.Free(slot, size);
  EXPECT_EQ(slots.uncarved_bytes(), 32 * kMiB);
}

TEST(SizeClassAllocator, ListenerSeesEachSlabAndCanRefuseIt) {
  SizeClassAllocator slots({4 * kMiB});
  std::vector<RegionSlab> heard;
  bool refuse = false;
  slots.SetSlabListener([&](const RegionSlab& slab) {
    if (refuse) return Status::IoError("journal write failed");
    heard.push_back(slab);
    return Status::Ok();
  });
  ASSERT_TRUE(slots.Allocate(kMiB).ok());
  ASSERT_TRUE(slots.Allocate(kMiB).ok());  // same slab
  ASSERT_EQ(heard.size(), 1u);
  EXPECT_EQ(heard[0], (RegionSlab{0, 0, 2 * kMiB, kMiB}));
  refuse = true;
  EXPECT_EQ(slots.Allocate(kMiB).status().code(), StatusCode::kIoError);
  EXPECT_EQ(slots.uncarved_bytes(), 2 * kMiB);  // the refused slab went back
}

TEST(SizeClassAllocator, RestoredSlabsKeepTheirOccupiedSlots) {
  SizeClassAllocator slots({8 * kMiB});
  // Slots at 0 and 2 MiB of a 1 MiB-class slab pair are occupied; a slab with none is freed.
  ASSERT_TRUE(slots.RestoreSlab({0, 2 * kMiB, 2 * kMiB, kMiB}, [](RegionSlot s) { return s.offset == 2 * kMiB; }).ok());
  ASSERT_TRUE(slots.RestoreSlab({0, 6 * kMiB, 2 * kMiB, kMiB}, [](RegionSlot) { return false; }).ok());
  EXPECT_EQ(slots.RestoreSlab({0, 3 * kMiB, 2 * kMiB, kMiB}, [](RegionSlot) { return false; }).code(),
            StatusCode::kInvalidArgument);  // overlaps the first
  EXPECT_EQ(slots.RestoreSlab({0, 7 * kMiB, 2 * kMiB, kMiB}, [](RegionSlot) { return false; }).code(),
            StatusCode::kInvalidArgument);  // past the region's end
  Result<RegionSlot> next = slots.Allocate(kMiB);
  ASSERT_TRUE(next.ok());
  EXPECT_EQ(next->offset, 3 * kMiB);  // the free slot of the restored slab
  EXPECT_EQ(slots.uncarved_bytes(), 6 * kMiB);
}

}  // namespace
}  // namespace kvtier
