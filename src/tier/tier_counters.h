// The event counters behind TierStats, kept the same way by every tier.
//
// Thread-safety: relaxed atomics; counters are statistics, not synchronization.
#pragma once

#include <atomic>
#include <cstdint>

#include "kvtier/tier.h"

namespace kvtier {

struct TierCounters {
  std::atomic<uint64_t> writes{0}, write_bytes{0}, write_failures{0};
  std::atomic<uint64_t> reads{0}, read_bytes{0}, read_misses{0}, checksum_failures{0}, evictions{0};
  std::atomic<uint64_t> evict_failures{0};

  // Copies the counters into `stats`; capacity, used bytes and blocks are the tier's own.
  void Fill(TierStats& stats) const {
    constexpr auto kRelaxed = std::memory_order_relaxed;
    stats.writes = writes.load(kRelaxed);
    stats.write_bytes = write_bytes.load(kRelaxed);
    stats.write_failures = write_failures.load(kRelaxed);
    stats.reads = reads.load(kRelaxed);
    stats.read_bytes = read_bytes.load(kRelaxed);
    stats.read_misses = read_misses.load(kRelaxed);
    stats.checksum_failures = checksum_failures.load(kRelaxed);
    stats.evictions = evictions.load(kRelaxed);
    stats.evict_failures = evict_failures.load(kRelaxed);
  }
};

}  // namespace kvtier
