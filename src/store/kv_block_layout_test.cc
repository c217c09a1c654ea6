#include "kvtier/kv_block_layout.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <utility>

#include "kvtier/model_catalog.h"
#include "kvtier/sizing.h"

namespace kvtier {
namespace {

ModelSpec Model(std::string_view name) {
  Result<ModelSpec> spec = LoadCatalogModel(name);
  EXPECT_TRUE(spec.ok()) << spec.status().ToString();
  return *spec;
}

KvBlockLayout Layout(std::string_view name, uint32_t tokens = 16, uint32_t element_bytes = 2, int tp = 1) {
  Result<KvBlockLayout> layout = KvBlockLayout::ForModel(Model(name), tokens, element_bytes, tp);
  EXPECT_TRUE(layout.ok()) << layout.status().ToString();
  return *layout;
}

std::vector<std::byte> RandomBytes(std::size_t size, std::mt19937_64& rng) {
  std::vector<std::byte> bytes(size);
  for (std::byte& b : bytes) b = static_cast<std::byte>(rng() & 0xffu);
  return bytes;
}

// Expected shapes come from the models' published configs.
TEST(KvBlockLayoutTest, CatalogShapes) {
  EXPECT_EQ(Layout("llama-3-8b"), (KvBlockLayout{32, 8, 16, 128, 128, 2}));   // GQA
  EXPECT_EQ(Layout("deepseek-v3"), (KvBlockLayout{61, 1, 16, 512 + 64, 0, 2}));  // MLA latent
  EXPECT_EQ(Layout("falcon-7b"), (KvBlockLayout{32, 1, 16, 4544 / 71, 4544 / 71, 2}));  // MQA
  EXPECT_EQ(Layout("gemma-2-9b"), (KvBlockLayout{42, 8, 16, 256, 256, 2}));  // sliding + full
}

TEST(KvBlockLayoutTest, BytesEqualTheSizingEngine) {
  for (std::string_view name :
       {"llama-3-8b", "deepseek-v3", "falcon-7b", "gemma-2-9b", "qwen3-next-80b-a3b-thinking"}) {
    for (int tp : {1, 2, 8}) {
      SCOPED_TRACE(std::string(name) + " tp " + std::to_string(tp));
      SizingOptions options;
      options.kv_dtype = "bf16";
      options.parallel.tensor_parallel = tp;
      options.block_size = 16;
      Result<KvSizing> sizing = ComputeKvSizing(Model(name), options);
      Result<KvBlockLayout> layout_or = KvBlockLayout::ForModel(Model(name), 16, 2, tp);
      if (!sizing.ok()) {  // falcon-7b's 71 heads split over no TP size but 1 and 71: both refuse
        EXPECT_EQ(layout_or.status().code(), sizing.status().code());
        continue;
      }
      ASSERT_TRUE(layout_or.ok()) << layout_or.status().ToString();
      const KvBlockLayout& layout = *layout_or;
      EXPECT_EQ(layout.block_bytes(), sizing->kv_bytes_per_block);
      EXPECT_EQ(layout.layer_bytes(), sizing->kv_bytes_per_token_per_layer * 16);
      EXPECT_EQ(int64_t{layout.kv_heads}, sizing->kv_heads_per_gpu);
    }
  }
}

TEST(KvBlockLayoutTest, HybridModelCountsOnlyKvLayers) {
  const ModelSpec model = Model("qwen3-next-80b-a3b-thinking");
  const KvBlockLayout layout = Layout("qwen3-next-80b-a3b-thinking");
  EXPECT_EQ(int64_t{layout.layers}, model.CountLayers(LayerMixer::kFullAttention) +
                                        model.CountLayers(LayerMixer::kSlidingAttention));
  EXPECT_LT(int64_t{layout.layers}, model.num_layers);
}

TEST(KvBlockLayoutTest, TensorParallelSplitsOrReplicatesHeads) {
  EXPECT_EQ(Layout("llama-3-8b", 16, 2, 2).kv_heads, 4u);
  EXPECT_EQ(Layout("llama-3-8b", 16, 2, 16).kv_heads, 1u);  // 8 heads over 16 ranks: replicated
  EXPECT_EQ(Layout("deepseek-v3", 16, 2, 8).kv_heads, 1u);  // MLA: replicated
  Result<KvBlockLayout> uneven = KvBlockLayout::ForModel(Model("llama-3-8b"), 16, 2, 3);
  EXPECT_EQ(uneven.status().code(), StatusCode::kInvalidArgument);
}

TEST(KvBlockLayoutTest, MlaHasOneUnitPerLayer) {
  const KvBlockLayout layout = Layout("deepseek-v3");
  EXPECT_EQ(layout.unit_count(), 61u);
  const HeadUnitRanges ranges = layout.UnitRanges(5);
  EXPECT_EQ(ranges.k_offset, 5u * 16u * 576u * 2u);
  EXPECT_EQ(ranges.k_bytes, 16u * 576u * 2u);
  EXPECT_EQ(ranges.v_bytes, 0u);
}

TEST(KvBlockLayoutTest, KvDtypeOverloadRejectsScaledFormats) {
  const ModelSpec model = Model("llama-3-8b");
  Result<KvDtype> fp8 = ParseKvDtype("fp8", "bfloat16");
  ASSERT_TRUE(fp8.ok());
  Result<KvBlockLayout> layout = KvBlockLayout::ForModel(model, 16, *fp8);
  ASSERT_TRUE(layout.ok()) << layout.status().ToString();
  EXPECT_EQ(layout->element_bytes, 1u);
  for (std::string_view name : {"int8", "int4", "nvfp4"}) {
    Result<KvDtype> dtype = ParseKvDtype(name, "bfloat16");
    ASSERT_TRUE(dtype.ok());
    Result<KvBlockLayout> rejected = KvBlockLayout::ForModel(model, 16, *dtype);
    EXPECT_EQ(rejected.status().code(), StatusCode::kUnsupported) << name;
  }
}

TEST(KvBlockLayoutTest, ValidateRejectsZeroAndOverflow) {
  EXPECT_TRUE((KvBlockLayout{1, 1, 1, 1, 0, 1}).Validate().ok());
  EXPECT_FALSE((KvBlockLayout{0, 1, 1, 1, 1, 1}).Validate().ok());
  EXPECT_FALSE((KvBlockLayout{1, 1, 0, 1, 1, 1}).Validate().ok());
  EXPECT_FALSE((KvBlockLayout{1, 1, 1, 1, 1, 0}).Validate().ok());
  const Status huge = KvBlockLayout{UINT32_MAX, UINT32_MAX, UINT32_MAX, UINT32_MAX, UINT32_MAX, 8}.Validate();
  EXPECT_EQ(huge.code(), StatusCode::kInvalidArgument);
  Result<KvBlockLayout> zero_tokens = KvBlockLayout::ForModel(Model("llama-3-8b"), 0, 2);
  EXPECT_FALSE(zero_tokens.ok());
}

TEST(KvBlockLayoutTest, KvLayerIndexSkipsLayersWithoutKv) {
  ModelSpec model;
  model.name = "hybrid";
  model.layers = {{LayerMixer::kLinearAttention}, {LayerMixer::kFullAttention}, {LayerMixer::kNoKv},
                  {LayerMixer::kSlidingAttention, 4096}};
  EXPECT_EQ(KvLayerIndex(model, 0).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(*KvLayerIndex(model, 1), 0u);
  EXPECT_EQ(KvLayerIndex(model, 2).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(*KvLayerIndex(model, 3), 1u);
  EXPECT_EQ(KvLayerIndex(model, 4).status().code(), StatusCode::kInvalidArgument);
}

// Every byte of a block belongs to exactly one unit's K or V slice.
TEST(KvBlockLayoutTest, UnitRangesTileTheBlock) {
  for (const KvBlockLayout& layout : {Layout("llama-3-8b"), Layout("deepseek-v3"), Layout("falcon-7b"),
                                      Layout("gemma-2-9b", 4, 1), KvBlockLayout{3, 5, 7, 11, 13, 2}}) {
    std::vector<std::pair<uint64_t, uint64_t>> ranges;
    for (std::size_t unit = 0; unit < layout.unit_count(); ++unit) {
      const HeadUnitRanges r = layout.UnitRanges(unit);
      EXPECT_EQ(r.k_bytes + r.v_bytes, layout.UnitBytes());
      ranges.emplace_back(r.k_offset, r.k_bytes);
      if (r.v_bytes > 0) ranges.emplace_back(r.v_offset, r.v_bytes);
    }
    std::sort(ranges.begin(), ranges.end());
    uint64_t next = 0;
    for (const auto& [offset, bytes] : ranges) {
      ASSERT_EQ(offset, next);
      next += bytes;
    }
    EXPECT_EQ(next, layout.block_bytes());
  }
}

TEST(HeadUnitMaskTest, SetTestCountComplement) {
  for (std::size_t size : {0u, 1u, 63u, 64u, 65u, 130u}) {
    HeadUnitMask mask(size);
    EXPECT_EQ(mask.Count(), 0u);
    EXPECT_TRUE(mask.None());
    EXPECT_EQ(HeadUnitMask::All(size).Count(), size);
    for (std::size_t unit = 0; unit < size; unit += 3) mask.Set(unit);
    const std::size_t set = (size + 2) / 3;
    EXPECT_EQ(mask.Count(), set);
    const HeadUnitMask rest = mask.Complement();
    EXPECT_EQ(rest.Count(), size - set);  // no stray bits past the end
    EXPECT_FALSE(rest.Intersects(mask));
    EXPECT_EQ(mask.Intersects(mask), set > 0);
    HeadUnitMask both = mask;
    both |= rest;
    EXPECT_EQ(both, HeadUnitMask::All(size));
    for (std::size_t unit = 0; unit < size; ++unit) EXPECT_EQ(mask.Test(unit), unit % 3 == 0);
    if (size > 0) {
      mask.Set(0, false);
      EXPECT_FALSE(mask.Test(0));
    }
  }
}

TEST(KvBlockLayoutPackTest, FullMaskPacksTheBlockItself) {
  std::mt19937_64 rng(1);
  const KvBlockLayout layout{3, 5, 7, 11, 13, 2};
  const std::vector<std::byte> block = RandomBytes(layout.block_bytes(), rng);
  Result<std::vector<std::byte>> packed = PackUnits(layout, block, HeadUnitMask::All(layout.unit_count()));
  ASSERT_TRUE(packed.ok()) << packed.status().ToString();
  EXPECT_EQ(*packed, block);
}

TEST(KvBlockLayoutPackTest, PackedOrderIsLayerKThenV) {
  // 1 layer, 2 heads, 1 token, k 1, v 1, 1 byte: the block is K0 K1 V0 V1.
  const KvBlockLayout layout{1, 2, 1, 1, 1, 1};
  const std::vector<std::byte> block = {std::byte{10}, std::byte{11}, std::byte{20}, std::byte{21}};
  HeadUnitMask head1(2);
  head1.Set(1);
  Result<std::vector<std::byte>> packed = PackUnits(layout, block, head1);
  ASSERT_TRUE(packed.ok());
  EXPECT_EQ(*packed, (std::vector<std::byte>{std::byte{11}, std::byte{21}}));
}

// A block split into 2 to 4 disjoint parts, each packed on its own (as if stored in a
// different tier) and unpacked into a fresh buffer, comes back bit for bit.
TEST(KvBlockLayoutPackTest, RandomSplitsReassembleExactly) {
  std::mt19937_64 rng(42);
  const KvBlockLayout layouts[] = {KvBlockLayout{3, 5, 7, 11, 13, 2}, Layout("llama-3-8b", 4), Layout("deepseek-v3", 2),
                                   Layout("falcon-7b", 3, 4), Layout("gemma-2-9b", 2, 1)};
  for (const KvBlockLayout& layout : layouts) {
    const std::vector<std::byte> block = RandomBytes(layout.block_bytes(), rng);
    for (int trial = 0; trial < 20; ++trial) {
      const std::size_t parts = 2 + rng() % 3;
      std::vector<HeadUnitMask> masks(parts, HeadUnitMask(layout.unit_count()));
      for (std::size_t unit = 0; unit < layout.unit_count(); ++unit) masks[rng() % parts].Set(unit);
      std::vector<std::vector<std::byte>> stored;
      for (const HeadUnitMask& mask : masks) {
        Result<std::vector<std::byte>> packed = PackUnits(layout, block, mask);
        ASSERT_TRUE(packed.ok()) << packed.status().ToString();
        EXPECT_EQ(packed->size(), layout.PackedBytes(mask));
        stored.push_back(*std::move(packed));
      }
      std::vector<std::byte> out(layout.block_bytes(), std::byte{0xAA});
      for (std::size_t part = parts; part-- > 0;) {  // any order
        ASSERT_TRUE(UnpackUnits(layout, stored[part], masks[part], out).ok());
      }
      ASSERT_EQ(out, block) << "trial " << trial;
    }
  }
}

TEST(KvBlockLayoutPackTest, UnpackLeavesOtherUnitsAlone) {
  std::mt19937_64 rng(7);
  const KvBlockLayout layout{2, 4, 3, 5, 5, 2};
  const std::vector<std::byte> block = RandomBytes(layout.block_bytes(), rng);
  HeadUnitMask some(layout.unit_count());
  some.Set(1);
  some.Set(2);
  some.Set(7);
  Result<std::vector<std::byte>> packed = PackUnits(layout, block, some);
  ASSERT_TRUE(packed.ok());
  std::vector<std::byte> out(layout.block_bytes(), std::byte{0xAA});
  ASSERT_TRUE(UnpackUnits(layout, *packed, some, out).ok());
  for (std::size_t unit = 0; unit < layout.unit_count(); ++unit) {
    const HeadUnitRanges r = layout.UnitRanges(unit);
    for (auto [offset, bytes] : {std::pair{r.k_offset, r.k_bytes}, std::pair{r.v_offset, r.v_bytes}}) {
      for (uint64_t i = offset; i < offset + bytes; ++i) {
        ASSERT_EQ(out[i], some.Test(unit) ? block[i] : std::byte{0xAA}) << "unit " << unit;
      }
    }
  }
}

TEST(KvBlockLayoutPackTest, SizeMismatchesAreErrorsAndWriteNothing) {
  const KvBlockLayout layout{2, 2, 2, 2, 2, 1};
  std::vector<std::byte> block(layout.block_bytes(), std::byte{1});
  const HeadUnitMask all = HeadUnitMask::All(layout.unit_count());
  EXPECT_EQ(PackUnits(layout, std::span(block).first(3), all).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(PackUnits(layout, block, HeadUnitMask(3)).status().code(), StatusCode::kInvalidArgument);
  std::vector<std::byte> short_packed(layout.block_bytes() - 1, std::byte{9});
  EXPECT_EQ(UnpackUnits(layout, short_packed, all, block).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(block, std::vector<std::byte>(layout.block_bytes(), std::byte{1}));
  EXPECT_EQ(PackUnitsInto(layout, block, all, short_packed).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(PackUnits(KvBlockLayout{}, block, all).status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace kvtier
