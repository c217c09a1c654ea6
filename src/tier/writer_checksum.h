// End-to-end checksums on the write path (Tier::WriteOp::checksum): what a tier says when the
// bytes it copied are not the bytes their writer hashed.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "kvtier/block.h"
#include "kvtier/status.h"

namespace kvtier {

// Ok when the writer sent no checksum or `copied` (the checksum of the bytes the tier copied)
// matches it; otherwise Corruption naming the tier and the block.
inline Status CheckWriterChecksum(const std::string& tier, const BlockKey& key, std::optional<uint64_t> expected,
                                  uint64_t copied) {
  if (!expected || *expected == copied) return Status::Ok();
  return Status::Corruption(tier + ": block " + key.ToHex() +
                            " does not match the checksum its writer sent (its bytes changed after they were "
                            "hashed: in shared memory, in transit or in memory); not stored");
}

}  // namespace kvtier
