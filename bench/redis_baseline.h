// The remote-pool tier's baseline in `kvtier bench tiers`: the same bytes through raw hiredis,
// without the tier's header, checksum, routing layer or accounting, so the tier's overhead
// over what the servers and the network give shows as the ratio of the two.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kvtier/status.h"
#include "measure.h"

namespace kvtier::bench {

// Writes `count` values of `value_bytes` with pipelined SETs, then reads them with pipelined
// GETs (each copied out, as a tier's Read does), over `connections` connections, one thread
// each; then deletes them. Keys are "kvtier-baseline:<pid>:<n>". With `cluster`, the keys go
// to the masters named by CLUSTER SLOTS of the first endpoint; otherwise they are spread
// round-robin over `endpoints_host_port`. Latencies are not measured (one pipeline per
// thread).
Result<Measure> MeasureRedisBaseline(const std::vector<std::string>& endpoints_host_port, bool cluster,
                                     uint64_t value_bytes, uint64_t count, int connections);

}  // namespace kvtier::bench
