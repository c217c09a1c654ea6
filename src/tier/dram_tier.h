// Test seams of the DRAM tier (the tier itself is made by NewDramTier in tiers.h).
#pragma once

#include <chrono>
#include <cstddef>
#include <functional>
#include <span>

#include "kvtier/tier.h"

namespace kvtier {

// Flips one byte of a block stored in a DRAM tier, as a memory fault would. False when
// `tier` is not a DRAM tier or holds no such block.
bool CorruptDramBlockForTesting(Tier* tier, const BlockKey& key);

// Runs `hook` in every Read whose checksum fails, after the read let go of the block and
// before it drops it: where a concurrent Write of the same key could land. Set it while no
// Read runs; nullptr removes it. Does nothing when `tier` is not a DRAM tier.
void SetDramFailedReadHookForTesting(Tier* tier, std::function<void()> hook);

// Waits up to `timeout` for a DRAM or CXL tier's background prefault (region_prefaulter.h) to
// end; true when it has, or when none runs.
bool WaitForMemoryTierPrefaultForTesting(Tier* tier, std::chrono::milliseconds timeout);
// Whether a DRAM or CXL tier started a background prefault (false when its memory is locked).
bool MemoryTierPrefaultsForTesting(const Tier* tier);
// A DRAM or CXL tier's whole region; empty for any other tier.
std::span<const std::byte> MemoryTierRegionForTesting(const Tier* tier);

}  // namespace kvtier
