#include "server/tier_health.h"

#include <algorithm>

namespace kvtier::server {

TierHealthVerdict TierHealth::Check(const std::vector<TierHealthInput>& tiers) {
  std::lock_guard lock(mu_);
  seen_.resize(tiers.size());
  TierHealthVerdict verdict;
  auto note = [&](const std::string& line) { verdict.detail += (verdict.detail.empty() ? "" : "; ") + line; };
  for (std::size_t i = 0; i < tiers.size(); ++i) {
    const TierStats& now = tiers[i].stats;
    Seen& before = seen_[i];
    const uint64_t writes = now.writes - std::min(now.writes, before.writes);
    const uint64_t failures = now.write_failures - std::min(now.write_failures, before.write_failures);
    const uint64_t corrupt = now.checksum_failures - std::min(now.checksum_failures, before.checksum_failures);
    if (failures > 0 || writes > 0) before.failing = failures > 0 && writes == 0;
    before.writes = now.writes;
    before.write_failures = now.write_failures;
    before.checksum_failures = now.checksum_failures;
    const bool persist = persist_tier_ == i;
    if (before.failing) {
      note("tier \"" + tiers[i].name + "\": every write failed since the last check (" + std::to_string(failures) +
           " failures)" + (persist ? ", and it is the persist tier: puts cannot be made durable" : ""));
      if (persist) {
        verdict.healthy = false;
      } else {
        verdict.degraded = true;
      }
    }
    if (corrupt > 0) {
      note("tier \"" + tiers[i].name + "\": " + std::to_string(corrupt) +
           " reads failed their checksum since the last check (dropped, never returned)");
      verdict.degraded = true;
    }
  }
  return verdict;
}

}  // namespace kvtier::server
