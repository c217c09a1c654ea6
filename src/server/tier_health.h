// TierHealth: what /healthz says about a store's tiers. It reads each tier's counters
// (tier.h TierStats) and judges what changed since the previous check, so a probe has no side
// effect on the tiers (a canary write could strand a slab in a size class no real block uses,
// or leave an orphan in a persistent tier when the daemon dies mid-probe):
//   - a tier whose writes all failed since the last check (at least one failed, none
//     succeeded) is failing: a down Redis, a full or read-only disk;
//   - failing persist tier: unhealthy (503), since acknowledged puts can no longer be made
//     durable; any other failing tier, or checksum failures anywhere: degraded (200), the
//     store still serves (misses, never wrong bytes);
//   - no traffic since the last check: nothing is known to fail, and the previous verdict of
//     each tier stands, so a failure is not forgotten because the probe came twice.
//
// Thread-safety: Check may be called from several threads at once (it takes a mutex).
#pragma once

#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "kvtier/tier.h"

namespace kvtier::server {

struct TierHealthInput {
  std::string name;
  TierStats stats;
};

struct TierHealthVerdict {
  bool healthy = true;    // false: 503
  bool degraded = false;  // serving, with a tier failing or corrupt reads
  std::string detail;     // for a person: which tier, what failed
};

class TierHealth {
 public:
  // `persist_tier`: the index of the tier acknowledged blocks persist in, if any.
  explicit TierHealth(std::optional<std::size_t> persist_tier) : persist_tier_(persist_tier) {}

  // Judges `tiers` (the store's, in order, the same set each call) against the last call.
  TierHealthVerdict Check(const std::vector<TierHealthInput>& tiers);

 private:
  struct Seen {
    uint64_t writes = 0, write_failures = 0, checksum_failures = 0;
    bool failing = false;
  };

  const std::optional<std::size_t> persist_tier_;
  std::mutex mu_;
  std::vector<Seen> seen_;  // GUARDED_BY(mu_): per tier, at the last check
};

}  // namespace kvtier::server
