// Shared by the checkpoint writer (checkpoint.cc) and restorer (checkpoint_restore.cc).
#pragma once

#include <cstdint>

#include "kvtier/checkpoint.h"

namespace kvtier {

// Stats with `saving` derived from the two byte counts.
CheckpointStats MakeCheckpointStats(uint64_t blocks, uint64_t unique_payloads, uint64_t raw_bytes,
                                    uint64_t deduplicated_bytes);

}  // namespace kvtier
