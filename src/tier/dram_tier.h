// Test seams of the DRAM tier (the tier itself is made by NewDramTier in tiers.h).
#pragma once

#include <functional>

#include "kvtier/tier.h"

namespace kvtier {

// Flips one byte of a block stored in a DRAM tier, as a memory fault would. False when
// `tier` is not a DRAM tier or holds no such block.
bool CorruptDramBlockForTesting(Tier* tier, const BlockKey& key);

// Runs `hook` in every Read whose checksum fails, after the read let go of the block and
// before it drops it: where a concurrent Write of the same key could land. Set it while no
// Read runs; nullptr removes it. Does nothing when `tier` is not a DRAM tier.
void SetDramFailedReadHookForTesting(Tier* tier, std::function<void()> hook);

}  // namespace kvtier
