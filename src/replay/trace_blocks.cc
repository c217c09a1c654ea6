#include "replay/trace_blocks.h"

#include <string>
#include <unordered_map>

namespace kvtier {
namespace {

struct BlockHistory {
  std::string first_session;
  uint32_t sessions = 0;
};

struct SessionState {
  std::string tool;
  std::string agent;
  std::size_t previous_prompt_blocks = 0;
  bool seen = false;
};

BlockType TaggedType(const TraceRequest& r, uint32_t first_token) {
  for (const TraceTag& tag : r.tags) {
    if (first_token >= tag.begin && first_token < tag.end) return tag.type;
  }
  return BlockType::kUserContext;
}

bool Tagged(const TraceRequest& r, uint32_t first_token) {
  for (const TraceTag& tag : r.tags) {
    if (first_token >= tag.begin && first_token < tag.end) return true;
  }
  return false;
}

}  // namespace

Status TraceBlockOptions::Validate() const {
  if (block_tokens == 0 || block_tokens > 1u << 20) return Status::InvalidArgument("block_tokens must be 1 to 1048576");
  return tags.Validate();
}

Result<std::vector<ReplayRequest>> TraceToReplayRequests(const Trace& trace, const TraceBlockOptions& options) {
  KVTIER_RETURN_IF_ERROR(options.Validate());
  KVTIER_ASSIGN_OR_RETURN(BlockHasher hasher, BlockHasher::Create({.block_size = options.block_tokens}));
  std::unordered_map<BlockKey, BlockHistory, BlockKeyHash> history;
  std::unordered_map<std::string, SessionState> sessions;
  std::vector<ReplayRequest> out;
  out.reserve(trace.requests.size());
  uint64_t anonymous = 0;
  for (const TraceRequest& r : trace.requests) {
    const std::string session = r.session.empty() ? "#" + std::to_string(anonymous++) : r.session;
    SessionState& state = sessions[session];
    ReplayRequest request{.arrival_s = r.arrival_s};
    request.transition = InferTransition({.first_request = !state.seen,
                                          .previous_tool = state.tool,
                                          .tool = r.tool,
                                          .previous_agent = state.agent,
                                          .agent = r.agent});
    // The prompt's blocks: keys and token counts.
    std::vector<BlockKey> keys;
    std::vector<uint32_t> tokens;
    if (!r.block_hashes.empty()) {
      const uint32_t size = r.block_tokens == 0 ? 512 : r.block_tokens;
      for (std::size_t i = 0; i < r.block_hashes.size(); ++i) {
        // A fixed high word keeps Mooncake ids apart from hashed token blocks.
        keys.push_back({0x4d4f4f4e43414b45ull, r.block_hashes[i]});
        const uint64_t before = static_cast<uint64_t>(i) * size;
        tokens.push_back(r.prompt_tokens > before ? static_cast<uint32_t>(std::min<uint64_t>(size, r.prompt_tokens - before)) : size);
      }
    } else if (!r.tokens.empty()) {
      keys = hasher.ChainKeys(r.tokens);
      tokens.assign(keys.size(), options.block_tokens);
    }
    for (std::size_t i = 0; i < keys.size(); ++i) {
      BlockHistory& h = history[keys[i]];
      if (h.sessions == 0) {
        h.first_session = session;
        h.sessions = 1;
      } else if (h.sessions == 1 && h.first_session != session) {
        h.sessions = 2;  // only "shared or not" matters to the rules; 2 stands for "2 or more"
      }
      const uint32_t first_token = static_cast<uint32_t>(i) * options.block_tokens;
      const BlockType type = !r.tokens.empty() && Tagged(r, first_token)
                                 ? TaggedType(r, first_token)
                                 : InferBlockType({.sessions = h.sessions, .earlier_turn = i < state.previous_prompt_blocks},
                                                  options.tags);
      request.prompt.push_back({.key = keys[i], .tokens = tokens[i], .type = type});
    }
    // The output's blocks: those completed by appending the generated tokens.
    if (!r.tokens.empty() && !r.output_token_ids.empty()) {
      std::vector<TokenId> all = r.tokens;
      all.insert(all.end(), r.output_token_ids.begin(), r.output_token_ids.end());
      const std::vector<BlockKey> full = hasher.ChainKeys(all);
      for (std::size_t i = keys.size(); i < full.size(); ++i) {
        request.output.push_back({.key = full[i], .tokens = options.block_tokens, .type = BlockType::kIntermediateReasoning});
        BlockHistory& h = history[full[i]];
        if (h.sessions == 0) {
          h.first_session = session;
          h.sessions = 1;
        }
      }
    }
    state.seen = true;
    state.tool = r.tool;
    state.agent = r.agent;
    state.previous_prompt_blocks = keys.size() + request.output.size();
    out.push_back(std::move(request));
  }
  return out;
}

}  // namespace kvtier
