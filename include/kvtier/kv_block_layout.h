// The byte layout of a block's KV payload, cut into head units so that the parts of one block
// can live in different tiers (the paper's head-granular eviction, docs/head_granular.md).
//
// A block holds `tokens` tokens of every KV-holding layer (full and sliding attention; linear
// attention and no-KV layers hold none). For each such layer, in order, K then V, each laid
// out [kv_head][token][dim]:
//
//   layer 0: K[head 0][token][k_dim] ... K[head H-1][...] V[head 0][token][v_dim] ... V[head H-1]
//   layer 1: ...
//
// MLA caches one latent (kv_lora_rank + qk_rope_head_dim) per token and layer, not split into
// K and V: kv_heads is 1, k_dim the latent width and v_dim 0, i.e. [layer][1][token][latent].
//
// A head unit is (layer, head): that head's K slice and V slice, two contiguous ranges. Units
// are numbered layer-major (unit = layer * kv_heads + head), so MLA has one unit per layer.
// Heads outermost within K and V is what makes a unit two ranges instead of 2 x tokens
// scattered vectors; an engine whose paged cache is [token][head][dim] must transpose when
// it hands a block over (the transpose is its business; this layout is the stored one).
//
// Thread-safety: values and pure functions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "kvtier/model_spec.h"
#include "kvtier/sizing.h"
#include "kvtier/status.h"

namespace kvtier {

// A set of head units of one layout: a bitset of unit_count() bits.
class HeadUnitMask {
 public:
  HeadUnitMask() = default;
  explicit HeadUnitMask(std::size_t units);  // none set
  static HeadUnitMask All(std::size_t units);

  std::size_t size() const { return size_; }
  // `unit` must be below size() (checked by assert in debug builds).
  void Set(std::size_t unit, bool value = true);
  bool Test(std::size_t unit) const;
  std::size_t Count() const;
  bool None() const { return Count() == 0; }
  HeadUnitMask Complement() const;
  // Both masks must have the same size.
  bool Intersects(const HeadUnitMask& other) const;
  HeadUnitMask& operator|=(const HeadUnitMask& other);

  friend bool operator==(const HeadUnitMask&, const HeadUnitMask&) = default;

 private:
  std::size_t size_ = 0;
  std::vector<uint64_t> words_;  // bits past size_ are always 0
};

// Where one head unit's bytes lie in a block.
struct HeadUnitRanges {
  uint64_t k_offset = 0;
  uint64_t k_bytes = 0;
  uint64_t v_offset = 0;
  uint64_t v_bytes = 0;  // 0 for MLA
};

struct KvBlockLayout {
  uint32_t layers = 0;         // KV-holding layers only
  uint32_t kv_heads = 0;       // on this tensor-parallel rank; 1 for MLA
  uint32_t tokens = 0;         // tokens per block
  uint32_t k_dim = 0;          // elements of a K vector (MLA: the latent width)
  uint32_t v_dim = 0;          // elements of a V vector; 0 for MLA
  uint32_t element_bytes = 0;  // bytes per element (2 for bf16/fp16, 1 for fp8)

  // The layout of `model`'s blocks on one tensor-parallel rank, with kv heads split or
  // replicated as the sizing engine does (sizing.h; MLA replicated). Pipeline parallelism is
  // not modelled: the layout spans all of the model's KV-holding layers.
  static Result<KvBlockLayout> ForModel(const ModelSpec& model, uint32_t tokens_per_block, uint32_t element_bytes,
                                        int tensor_parallel = 1);
  // The same from a KV storage format: Unsupported for formats that are not a whole number of
  // bytes per element or that carry per-vector or per-group scales (int8, int4, nvfp4), whose
  // scales would have to be cut along with the heads they belong to.
  static Result<KvBlockLayout> ForModel(const ModelSpec& model, uint32_t tokens_per_block, const KvDtype& dtype,
                                        int tensor_parallel = 1);

  // InvalidArgument when a dimension is 0 (v_dim may be 0) or a block exceeds 2^53 bytes.
  // The byte counts below assume a valid layout.
  Status Validate() const;

  uint64_t block_bytes() const { return uint64_t{layers} * layer_bytes(); }
  uint64_t layer_bytes() const { return uint64_t{kv_heads} * UnitBytes(); }
  std::size_t unit_count() const { return std::size_t{layers} * kv_heads; }
  std::size_t UnitIndex(uint32_t layer, uint32_t head) const { return std::size_t{layer} * kv_heads + head; }
  uint64_t KSliceBytes() const { return uint64_t{tokens} * k_dim * element_bytes; }
  uint64_t VSliceBytes() const { return uint64_t{tokens} * v_dim * element_bytes; }
  uint64_t UnitBytes() const { return KSliceBytes() + VSliceBytes(); }
  // Bytes PackUnits produces for `units`.
  uint64_t PackedBytes(const HeadUnitMask& units) const { return units.Count() * UnitBytes(); }
  // `unit` must be below unit_count().
  HeadUnitRanges UnitRanges(std::size_t unit) const;

  friend bool operator==(const KvBlockLayout&, const KvBlockLayout&) = default;
};

// The index of model layer `model_layer` among the model's KV-holding layers (the layout's
// layer index, which the importance matrix also uses); NotFound when that layer holds no KV,
// InvalidArgument when it is out of range.
Result<uint32_t> KvLayerIndex(const ModelSpec& model, int64_t model_layer);

// The packed form of a set of units is the block with every other unit cut out: for each
// layer, the selected heads' K slices in head order, then their V slices. Packing every unit
// gives the block itself, and runs of adjacent selected units are copied with one memcpy.
//
// Copies the bytes of `units` from `block` (block_bytes()) into `packed` (PackedBytes(units)).
// InvalidArgument on a size mismatch or an invalid layout; nothing is written then.
Status PackUnitsInto(const KvBlockLayout& layout, std::span<const std::byte> block, const HeadUnitMask& units,
                     std::span<std::byte> packed);
Result<std::vector<std::byte>> PackUnits(const KvBlockLayout& layout, std::span<const std::byte> block,
                                         const HeadUnitMask& units);

// Writes the packed bytes of `units` back into their places in `block`, leaving every other
// unit's bytes as they are: unpacking disjoint masks that cover all units, from wherever each
// part was stored, reassembles the block exactly. InvalidArgument on a size mismatch or an
// invalid layout; nothing is written then.
Status UnpackUnits(const KvBlockLayout& layout, std::span<const std::byte> packed, const HeadUnitMask& units,
                   std::span<std::byte> block);

}  // namespace kvtier
