#include "kvtier/kv_block_layout.h"

#include <bit>
#include <cassert>
#include <cstring>
#include <string>

#include "util/checked_math.h"

namespace kvtier {
namespace {

constexpr std::size_t kWordBits = 64;

std::size_t WordsFor(std::size_t units) { return (units + kWordBits - 1) / kWordBits; }

bool HoldsKv(LayerMixer mixer) {
  return mixer == LayerMixer::kFullAttention || mixer == LayerMixer::kSlidingAttention;
}

// Narrows a model dimension to the layout's 32 bits.
Result<uint32_t> Dimension(int64_t value, const std::string& what) {
  if (value < 0 || value > int64_t{UINT32_MAX}) {
    return Status::InvalidArgument(what + " (" + std::to_string(value) + ") does not fit a block layout");
  }
  return static_cast<uint32_t>(value);
}

// Calls copy(block_offset, packed_offset, bytes) for each maximal run of block bytes that
// `units` selects, in packed order. Runs merge whenever the next selected slice starts where
// the previous one ended: adjacent heads, and whole layers when every head is selected.
template <typename Copy>
void ForEachRun(const KvBlockLayout& layout, const HeadUnitMask& units, Copy copy) {
  const uint64_t k_slice = layout.KSliceBytes();
  const uint64_t v_slice = layout.VSliceBytes();
  uint64_t run_offset = 0;
  uint64_t run_bytes = 0;
  uint64_t packed = 0;
  auto add = [&](uint64_t offset, uint64_t bytes) {
    if (run_bytes > 0 && run_offset + run_bytes == offset) {
      run_bytes += bytes;
      return;
    }
    if (run_bytes > 0) copy(run_offset, packed, run_bytes);
    packed += run_bytes;
    run_offset = offset;
    run_bytes = bytes;
  };
  for (uint32_t layer = 0; layer < layout.layers; ++layer) {
    const uint64_t k_base = uint64_t{layer} * layout.layer_bytes();
    const uint64_t v_base = k_base + uint64_t{layout.kv_heads} * k_slice;
    const std::size_t first = layout.UnitIndex(layer, 0);
    for (uint32_t head = 0; head < layout.kv_heads; ++head) {
      if (units.Test(first + head)) add(k_base + head * k_slice, k_slice);
    }
    if (v_slice == 0) continue;
    for (uint32_t head = 0; head < layout.kv_heads; ++head) {
      if (units.Test(first + head)) add(v_base + head * v_slice, v_slice);
    }
  }
  if (run_bytes > 0) copy(run_offset, packed, run_bytes);
}

Status CheckSizes(const KvBlockLayout& layout, std::size_t block, const HeadUnitMask& units, std::size_t packed) {
  KVTIER_RETURN_IF_ERROR(layout.Validate());
  if (units.size() != layout.unit_count()) {
    return Status::InvalidArgument("head unit mask has " + std::to_string(units.size()) + " units, the layout " +
                                   std::to_string(layout.unit_count()));
  }
  if (block != layout.block_bytes()) {
    return Status::InvalidArgument("block buffer is " + std::to_string(block) + " bytes, the layout's blocks " +
                                   std::to_string(layout.block_bytes()));
  }
  if (packed != layout.PackedBytes(units)) {
    return Status::InvalidArgument("packed buffer is " + std::to_string(packed) + " bytes, " +
                                   std::to_string(units.Count()) + " head units take " +
                                   std::to_string(layout.PackedBytes(units)));
  }
  return Status::Ok();
}

}  // namespace

HeadUnitMask::HeadUnitMask(std::size_t units) : size_(units), words_(WordsFor(units), 0) {}

HeadUnitMask HeadUnitMask::All(std::size_t units) { return HeadUnitMask(units).Complement(); }

void HeadUnitMask::Set(std::size_t unit, bool value) {
  assert(unit < size_);
  const uint64_t bit = uint64_t{1} << (unit % kWordBits);
  if (value) {
    words_[unit / kWordBits] |= bit;
  } else {
    words_[unit / kWordBits] &= ~bit;
  }
}

bool HeadUnitMask::Test(std::size_t unit) const {
  assert(unit < size_);
  return (words_[unit / kWordBits] >> (unit % kWordBits)) & 1u;
}

std::size_t HeadUnitMask::Count() const {
  std::size_t count = 0;
  for (uint64_t word : words_) count += static_cast<std::size_t>(std::popcount(word));
  return count;
}

HeadUnitMask HeadUnitMask::Complement() const {
  HeadUnitMask out = *this;
  for (uint64_t& word : out.words_) word = ~word;
  if (size_ % kWordBits != 0) out.words_.back() &= (uint64_t{1} << (size_ % kWordBits)) - 1;
  return out;
}

bool HeadUnitMask::Intersects(const HeadUnitMask& other) const {
  assert(size_ == other.size_);
  for (std::size_t i = 0; i < words_.size(); ++i) {
    if ((words_[i] & other.words_[i]) != 0) return true;
  }
  return false;
}

HeadUnitMask& HeadUnitMask::operator|=(const HeadUnitMask& other) {
  assert(size_ == other.size_);
  for (std::size_t i = 0; i < words_.size(); ++i) words_[i] |= other.words_[i];
  return *this;
}

Status KvBlockLayout::Validate() const {
  if (layers == 0 || kv_heads == 0 || tokens == 0 || k_dim == 0 || element_bytes == 0) {
    return Status::InvalidArgument("block layout needs layers, kv_heads, tokens, k_dim and element_bytes above 0 "
                                   "(got " +
                                   std::to_string(layers) + ", " + std::to_string(kv_heads) + ", " +
                                   std::to_string(tokens) + ", " + std::to_string(k_dim) + ", " +
                                   std::to_string(element_bytes) + ")");
  }
  // Step by step, each product checked, so that not even 128 bits overflow (a unit is at
  // most 2^97 bytes, and each later factor multiplies a value at most 2^53 by at most 2^32).
  const Int128 unit = Int128{tokens} * (Int128{k_dim} + v_dim) * element_bytes;
  if (unit > kMaxExactCount || unit * kv_heads > kMaxExactCount || unit * kv_heads * layers > kMaxExactCount) {
    return Status::InvalidArgument("block layout of " + std::to_string(layers) + " layers x " +
                                   std::to_string(kv_heads) + " heads x " + std::to_string(tokens) +
                                   " tokens is over 2^53 bytes; use fewer tokens per block");
  }
  return Status::Ok();
}

HeadUnitRanges KvBlockLayout::UnitRanges(std::size_t unit) const {
  assert(unit < unit_count());
  const uint64_t layer = unit / kv_heads;
  const uint64_t head = unit % kv_heads;
  const uint64_t base = layer * layer_bytes();
  return {.k_offset = base + head * KSliceBytes(),
          .k_bytes = KSliceBytes(),
          .v_offset = base + kv_heads * KSliceBytes() + head * VSliceBytes(),
          .v_bytes = VSliceBytes()};
}

Result<KvBlockLayout> KvBlockLayout::ForModel(const ModelSpec& model, uint32_t tokens_per_block,
                                              uint32_t element_bytes, int tensor_parallel) {
  // The sizing engine owns the rule for splitting and replicating heads across ranks (and
  // its error messages); ask it rather than restate it.
  SizingOptions options;
  options.kv_dtype = "fp16";  // any format: only the head count is read
  options.parallel.tensor_parallel = tensor_parallel;
  KVTIER_ASSIGN_OR_RETURN(KvSizing sizing, ComputeKvSizing(model, options));

  int64_t kv_layers = 0;
  for (const LayerSpec& layer : model.layers) kv_layers += HoldsKv(layer.mixer) ? 1 : 0;
  if (kv_layers == 0) {
    return Status::Unsupported(model.name + " has no attention layers that hold KV; there are no head units to split");
  }
  KvBlockLayout layout;
  layout.tokens = tokens_per_block;
  layout.element_bytes = element_bytes;
  KVTIER_ASSIGN_OR_RETURN(layout.layers, Dimension(kv_layers, model.name + ": KV layers"));
  KVTIER_ASSIGN_OR_RETURN(layout.kv_heads, Dimension(sizing.kv_heads_per_gpu, model.name + ": kv heads"));
  KVTIER_ASSIGN_OR_RETURN(layout.k_dim, Dimension(model.attention.head_dim_k, model.name + ": head_dim_k"));
  KVTIER_ASSIGN_OR_RETURN(layout.v_dim, Dimension(model.attention.head_dim_v, model.name + ": head_dim_v"));
  KVTIER_RETURN_IF_ERROR(layout.Validate().WithContext(model.name));
  return layout;
}

Result<KvBlockLayout> KvBlockLayout::ForModel(const ModelSpec& model, uint32_t tokens_per_block,
                                              const KvDtype& dtype, int tensor_parallel) {
  if (dtype.bits % 8 != 0 || dtype.bits <= 0 || dtype.scale_bytes != 0) {
    return Status::Unsupported("KV format " + dtype.name +
                               " cannot be split by head: head-granular layouts need a whole number of bytes per "
                               "element and no per-vector or per-group scales (use bf16, fp16, fp32 or fp8)");
  }
  return ForModel(model, tokens_per_block, static_cast<uint32_t>(dtype.bits / 8), tensor_parallel);
}

Result<uint32_t> KvLayerIndex(const ModelSpec& model, int64_t model_layer) {
  if (model_layer < 0 || model_layer >= static_cast<int64_t>(model.layers.size())) {
    return Status::InvalidArgument(model.name + ": layer " + std::to_string(model_layer) + " is out of range (0 to " +
                                   std::to_string(model.layers.size()) + ")");
  }
  const auto target = static_cast<std::size_t>(model_layer);
  if (!HoldsKv(model.layers[target].mixer)) {
    return Status::NotFound(model.name + ": layer " + std::to_string(model_layer) + " is " +
                            std::string(LayerMixerName(model.layers[target].mixer)) + " and holds no KV");
  }
  uint32_t index = 0;
  for (std::size_t i = 0; i < target; ++i) index += HoldsKv(model.layers[i].mixer) ? 1u : 0u;
  return index;
}

Status PackUnitsInto(const KvBlockLayout& layout, std::span<const std::byte> block, const HeadUnitMask& units,
                     std::span<std::byte> packed) {
  KVTIER_RETURN_IF_ERROR(CheckSizes(layout, block.size(), units, packed.size()));
  ForEachRun(layout, units, [&](uint64_t block_offset, uint64_t packed_offset, uint64_t bytes) {
    std::memcpy(packed.data() + packed_offset, block.data() + block_offset, bytes);
  });
  return Status::Ok();
}

Result<std::vector<std::byte>> PackUnits(const KvBlockLayout& layout, std::span<const std::byte> block,
                                         const HeadUnitMask& units) {
  KVTIER_RETURN_IF_ERROR(layout.Validate());
  std::vector<std::byte> packed(units.size() == layout.unit_count() ? layout.PackedBytes(units) : 0);
  KVTIER_RETURN_IF_ERROR(PackUnitsInto(layout, block, units, packed));
  return packed;
}

Status UnpackUnits(const KvBlockLayout& layout, std::span<const std::byte> packed, const HeadUnitMask& units,
                   std::span<std::byte> block) {
  KVTIER_RETURN_IF_ERROR(CheckSizes(layout, block.size(), units, packed.size()));
  ForEachRun(layout, units, [&](uint64_t block_offset, uint64_t packed_offset, uint64_t bytes) {
    std::memcpy(block.data() + block_offset, packed.data() + packed_offset, bytes);
  });
  return Status::Ok();
}

}  // namespace kvtier
