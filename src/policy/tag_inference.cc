// The rules are listed in tag_inference.h; the order of the checks below is their precedence.
#include "kvtier/tag_inference.h"

#include <string>

namespace kvtier {

Status TagInferenceOptions::Validate() const {
  if (shared_sessions_threshold < 2) {
    return Status::InvalidArgument("tag inference: shared_sessions_threshold must be at least 2 (one session shares "
                                   "nothing), got " + std::to_string(shared_sessions_threshold));
  }
  return Status::Ok();
}

BlockType InferBlockType(const BlockFacts& facts, const TagInferenceOptions& options) {
  if (facts.sessions >= options.shared_sessions_threshold) {
    return facts.tool_output ? BlockType::kToolContext : BlockType::kSystemPrompt;
  }
  if (facts.tool_output) return BlockType::kToolContext;
  if (facts.earlier_turn) return BlockType::kUserContext;
  if (facts.generated) return BlockType::kIntermediateReasoning;
  return BlockType::kUserContext;
}

TransitionType InferTransition(const AccessFacts& facts) {
  if (!facts.first_request && !facts.agent.empty() && !facts.previous_agent.empty() &&
      facts.agent != facts.previous_agent) {
    return TransitionType::kAgentHandoff;
  }
  if (!facts.tool.empty()) {
    const bool same = !facts.first_request && facts.tool == facts.previous_tool;
    return same ? TransitionType::kSameToolRepeat : TransitionType::kToolSwitch;
  }
  return TransitionType::kReasoningStep;
}

}  // namespace kvtier
