#include "kvtier/tag_inference.h"

#include <gtest/gtest.h>

namespace kvtier {
namespace {

TEST(TagInference, BlockTypes) {
  EXPECT_EQ(InferBlockType({.sessions = 5}), BlockType::kSystemPrompt);
  EXPECT_EQ(InferBlockType({.sessions = 2, .generated = true}), BlockType::kSystemPrompt) << "sharing wins";
  EXPECT_EQ(InferBlockType({.sessions = 3, .tool_output = true}), BlockType::kToolContext);
  EXPECT_EQ(InferBlockType({.sessions = 1, .tool_output = true}), BlockType::kToolContext);
  EXPECT_EQ(InferBlockType({.sessions = 1, .earlier_turn = true, .generated = true}), BlockType::kUserContext);
  EXPECT_EQ(InferBlockType({.sessions = 1, .generated = true}), BlockType::kIntermediateReasoning);
  EXPECT_EQ(InferBlockType({.sessions = 1}), BlockType::kUserContext);
  EXPECT_EQ(InferBlockType({.sessions = 2}, {.shared_sessions_threshold = 3}), BlockType::kUserContext);
}

TEST(TagInference, Transitions) {
  EXPECT_EQ(InferTransition({.first_request = false, .previous_tool = "grep", .tool = "grep"}),
            TransitionType::kSameToolRepeat);
  EXPECT_EQ(InferTransition({.first_request = false, .previous_tool = "grep", .tool = "search"}),
            TransitionType::kToolSwitch);
  EXPECT_EQ(InferTransition({.first_request = false, .tool = "search"}), TransitionType::kToolSwitch);
  EXPECT_EQ(InferTransition({.first_request = true, .previous_tool = "grep", .tool = "grep"}),
            TransitionType::kToolSwitch);
  EXPECT_EQ(InferTransition({.first_request = false, .previous_agent = "planner", .agent = "planner"}),
            TransitionType::kReasoningStep);
  EXPECT_EQ(InferTransition({.first_request = false, .previous_tool = "grep", .tool = "grep",
                             .previous_agent = "planner", .agent = "coder"}),
            TransitionType::kAgentHandoff);
  EXPECT_EQ(InferTransition({.first_request = false, .agent = "coder"}), TransitionType::kReasoningStep)
      << "an unknown previous agent is no handoff";
  EXPECT_EQ(InferTransition({}), TransitionType::kReasoningStep);
}

TEST(TagInference, InferTagsCombinesBoth) {
  const BlockTags tags = InferTags({.sessions = 4}, {.first_request = false, .previous_tool = "a", .tool = "b"});
  EXPECT_EQ(tags.type, BlockType::kSystemPrompt);
  EXPECT_EQ(tags.transition, TransitionType::kToolSwitch);
  EXPECT_FALSE(TagInferenceOptions{.shared_sessions_threshold = 1}.Validate().ok());
  EXPECT_TRUE(TagInferenceOptions{}.Validate().ok());
}

}  // namespace
}  // namespace kvtier
