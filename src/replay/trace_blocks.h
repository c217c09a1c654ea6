// From a trace's requests (trace.h) to the block chains the replay drives (replay.h): block
// keys, token counts and the predictor's tags.
//
// Keys: token traces are cut into full blocks of `block_tokens` tokens and keyed by the
// chained hash vLLM uses (BlockHasher, xxh3-128); a partial last block is not cached, as in
// vLLM. Mooncake traces bring their own chained hash ids (one per block of the trace's
// block size, the last one possibly partial and then counted with its real token count).
// Generated tokens: the blocks that become full once a request's output is appended to its
// prompt are its output blocks (cached when ReplayOptions::cache_output).
//
// Tags, decided online (from what was seen up to the request, never from later requests):
// a block inside a trace tag takes the tag's type; an untagged one is inferred with
// tag_inference.h (a block seen in another session before is system_prompt; one from an
// earlier turn of the same session is user_context); output blocks are
// intermediate_reasoning. A request's transition is inferred from its session's previous
// request (tool and agent). Mooncake requests have no session: each is its own.
//
// Thread-safety: pure function.
#pragma once

#include <vector>

#include "kvtier/replay.h"
#include "kvtier/tag_inference.h"
#include "kvtier/trace.h"

namespace kvtier {

struct TraceBlockOptions {
  uint32_t block_tokens = 16;  // Default: 16 (vLLM's default block size) for token traces
  TagInferenceOptions tags;

  Status Validate() const;
};

Result<std::vector<ReplayRequest>> TraceToReplayRequests(const Trace& trace, const TraceBlockOptions& options = {});

}  // namespace kvtier
