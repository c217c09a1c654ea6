// Test seams of the DRAM tier (the tier itself is made by NewDramTier in tiers.h).
#pragma once

#include "kvtier/tier.h"

namespace kvtier {

// Flips one byte of a block stored in a DRAM tier, as a memory fault would. False when
// `tier` is not a DRAM tier or holds no such block.
bool CorruptDramBlockForTesting(Tier* tier, const BlockKey& key);

}  // namespace kvtier
