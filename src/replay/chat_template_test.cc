#include "replay/chat_template.h"

#include <algorithm>
#include <map>

#include <gtest/gtest.h>

#include "kvtier/trace.h"
#include "testing/test_paths.h"

namespace kvtier {
namespace {

const std::string kFixtures = testing::FixturesDir() + "/traces";

bool IsPrefix(const std::vector<uint32_t>& head, const std::vector<uint32_t>& whole) {
  return head.size() <= whole.size() && std::equal(head.begin(), head.end(), whole.begin());
}

// Turn k's prompt + output is an exact token prefix of turn k+1's prompt in every session.
void ExpectPrefixProperty(const Trace& trace) {
  std::map<std::string, const TraceRequest*> last;
  std::size_t checked = 0;
  for (const TraceRequest& r : trace.requests) {
    ASSERT_EQ(r.prompt_tokens, r.tokens.size());
    if (auto it = last.find(r.session); it != last.end()) {
      std::vector<uint32_t> before = it->second->tokens;
      before.insert(before.end(), it->second->output_token_ids.begin(), it->second->output_token_ids.end());
      EXPECT_EQ(r.turn, it->second->turn + 1) << r.session;
      EXPECT_GE(r.arrival_s, it->second->arrival_s) << r.session;
      EXPECT_TRUE(IsPrefix(before, r.tokens)) << r.session << " turn " << r.turn;
      ++checked;
    }
    last[r.session] = &r;
  }
  EXPECT_GT(checked, 0u);
}

TEST(ChatTemplate, ShareGptTurnsArePrefixesOfTheNext) {
  for (ChatTemplate t : {ChatTemplate::kChatMl, ChatTemplate::kLlama3}) {
    auto trace = ReadTrace(kFixtures + "/sharegpt.jsonl", TraceFormat::kShareGpt, {.chat_template = t});
    ASSERT_TRUE(trace.ok()) << trace.status().ToString();
    ExpectPrefixProperty(*trace);
  }
}

TEST(ChatTemplate, TauBenchStepsArePrefixesOfTheNext) {
  auto trace = ReadTrace(kFixtures + "/taubench.json", TraceFormat::kTauBench);
  ASSERT_TRUE(trace.ok()) << trace.status().ToString();
  ExpectPrefixProperty(*trace);
}

TEST(ChatTemplate, TagsFollowRolesAndCoverThePrompt) {
  auto tokenizer = NewApproximateTokenizer();
  ASSERT_TRUE(tokenizer.ok());
  replay::ChatRenderer renderer(**tokenizer, ChatTemplate::kChatMl);
  replay::Conversation c{"s",
                         {{replay::Role::kSystem, "You are helpful.", "", "", false},
                          {replay::Role::kUser, "Find flights.", "", "", false},
                          {replay::Role::kAssistant, "calling", "search", "main", false},
                          {replay::Role::kTool, "[]", "search", "", false},
                          {replay::Role::kAssistant, "None found.", "", "main", false}}};
  std::vector<TraceRequest> out;
  renderer.AppendRequests(c, /*include_output=*/true, 0, out);
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].tool, "search");
  EXPECT_EQ(out[0].agent, "main");
  std::vector<BlockType> types;
  for (const TraceTag& t : out[1].tags) types.push_back(t.type);
  EXPECT_EQ(types, (std::vector<BlockType>{BlockType::kSystemPrompt, BlockType::kUserContext,
                                           BlockType::kIntermediateReasoning, BlockType::kToolContext,
                                           BlockType::kIntermediateReasoning}));
  EXPECT_EQ(out[1].tags.front().begin, 0u);
  EXPECT_EQ(out[1].tags.back().end, out[1].prompt_tokens);
  for (std::size_t k = 1; k < out[1].tags.size(); ++k) EXPECT_EQ(out[1].tags[k].begin, out[1].tags[k - 1].end);
  // The output is the reply plus <|im_end|>.
  EXPECT_EQ(out[1].output_tokens, (*tokenizer)->Encode("None found.").size() + 1);
  EXPECT_EQ(out[1].output_token_ids.size(), out[1].output_tokens);

  std::vector<TraceRequest> no_output;
  renderer.AppendRequests(c, /*include_output=*/false, 0, no_output);
  EXPECT_TRUE(no_output[1].output_token_ids.empty());
  EXPECT_EQ(no_output[1].output_tokens, out[1].output_tokens);
  EXPECT_EQ(no_output[1].tokens, out[1].tokens);  // the reply is history either way
}

TEST(ChatTemplate, AssistantMessagesBeforeAnyInputAreHistoryOnly) {
  auto tokenizer = NewApproximateTokenizer();
  ASSERT_TRUE(tokenizer.ok());
  replay::ChatRenderer renderer(**tokenizer, ChatTemplate::kChatMl);
  replay::Conversation c{"cut", {{replay::Role::kAssistant, "…continued answer", "", "", false},
                                 {replay::Role::kUser, "thanks, more?", "", "", false},
                                 {replay::Role::kAssistant, "Sure.", "", "", false}}};
  std::vector<TraceRequest> out;
  renderer.AppendRequests(c, true, 0, out);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].turn, 0u);
  EXPECT_EQ(out[0].tags.front().type, BlockType::kIntermediateReasoning);
}

TEST(ChatTemplate, ToolCallText) {
  EXPECT_EQ(replay::RenderToolCall("f", R"({"a":1})"), "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\":1}}\n</tool_call>");
}

}  // namespace
}  // namespace kvtier
