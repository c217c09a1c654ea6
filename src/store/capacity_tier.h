// CapacityTier: a tier that holds no bytes, only a capacity and a kind: what a metadata-only
// TieredStore (StoreOptions::metadata_only) is opened with, where the store does the
// accounting and never calls a tier's I/O. Its I/O methods refuse, so a store that is not
// metadata-only fails loudly rather than losing blocks.
//
// Thread-safety: immutable.
#pragma once

#include <string>

#include "kvtier/tier.h"

namespace kvtier {

class CapacityTier final : public Tier {
 public:
  CapacityTier(std::string name, TierKind kind, uint64_t capacity_bytes)
      : name_(std::move(name)), kind_(kind), capacity_bytes_(capacity_bytes) {}

  TierKind kind() const override { return kind_; }
  const std::string& name() const override { return name_; }
  using Tier::Write;
  Status Write(const WriteOp&) override { return Refuse(); }
  using Tier::Read;
  Result<std::size_t> Read(const ReadOp&) override { return Refuse(); }
  std::optional<std::size_t> Size(const BlockKey&) const override { return std::nullopt; }
  Status Evict(const BlockKey&) override { return Refuse(); }
  TierStats GetStats() const override { return {.capacity_bytes = capacity_bytes_}; }

 private:
  Status Refuse() const { return Status::Unsupported(name_ + " holds no bytes: it serves metadata-only stores"); }

  std::string name_;
  TierKind kind_;
  uint64_t capacity_bytes_;
};

}  // namespace kvtier
