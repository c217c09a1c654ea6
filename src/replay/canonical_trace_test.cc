#include <sstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "kvtier/trace.h"
#include "testing/test_paths.h"

namespace kvtier {
namespace {

const std::string kFixtures = testing::FixturesDir() + "/traces";

Trace RoundTrip(const Trace& in, std::string* text = nullptr) {
  std::ostringstream out;
  EXPECT_TRUE(WriteCanonicalTrace(out, in).ok());
  if (text != nullptr) *text = out.str();
  auto back = ParseTraceText(out.str(), "rt.jsonl", TraceFormat::kCanonical);
  EXPECT_TRUE(back.ok()) << back.status().ToString();
  return back.ok() ? std::move(back).value() : Trace{};
}

TEST(CanonicalTrace, RoundTripsEveryFormat) {
  struct Source {
    std::string file;
    TraceFormat format;
  };
  for (const Source& s : {Source{"sharegpt.jsonl", TraceFormat::kShareGpt}, Source{"taubench.json", TraceFormat::kTauBench},
                          Source{"sweagent_function_calling.traj", TraceFormat::kSweAgent},
                          Source{"mooncake.jsonl", TraceFormat::kMooncake}, Source{"azure_conv.csv", TraceFormat::kAzure},
                          Source{"toolbench", TraceFormat::kToolBench}, Source{"lmsys.jsonl", TraceFormat::kLmsys}}) {
    auto in = ReadTrace(kFixtures + "/" + s.file, s.format);
    ASSERT_TRUE(in.ok()) << in.status().ToString();
    const Trace back = RoundTrip(*in);
    EXPECT_EQ(back.requests, in->requests) << s.file;
    EXPECT_EQ(back.metadata.source_format, TraceFormatName(s.format));
    EXPECT_EQ(back.metadata.tokenizer, in->metadata.tokenizer);
    EXPECT_EQ(back.metadata.arrivals, in->metadata.arrivals);
  }
}

TEST(CanonicalTrace, LaterTurnsStoreOnlyNewTokens) {
  auto in = ReadTrace(kFixtures + "/taubench.json", TraceFormat::kTauBench);
  ASSERT_TRUE(in.ok());
  std::string text;
  RoundTrip(*in, &text);
  std::size_t total = 0;
  for (const TraceRequest& r : in->requests) total += r.tokens.size();
  std::size_t written = 0;
  std::size_t extending = 0;
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    const nlohmann::json j = nlohmann::json::parse(line);
    if (j.contains("tokens")) written += j["tokens"].size();
    if (j.contains("extends_previous")) ++extending;
  }
  EXPECT_EQ(extending, in->requests.size() - 1);  // one session
  EXPECT_LT(written * 3, total);
}

TEST(CanonicalTrace, HandWrittenFileWithoutHeader) {
  const std::string text =
      "{\"session\": \"a\", \"turn\": 0, \"arrival_s\": 0.5, \"tokens\": [1, 2, 3], \"output_tokens\": 2,"
      " \"output_token_ids\": [4, 5], \"tags\": [[0, 2, \"system_prompt\"], [2, 3, \"user_context\"]], \"tool\": \"t\"}\n"
      "\n"
      "{\"session\": \"a\", \"turn\": 1, \"arrival_s\": 1.5, \"extends_previous\": 5, \"tokens\": [6]}\n"
      "{\"session\": \"m\", \"turn\": 0, \"arrival_s\": 1.0, \"prompt_tokens\": 600, \"block_hashes\": [9, 10],"
      " \"block_tokens\": 512, \"output_tokens\": 3}\n";
  auto t = ParseTraceText(text, "hand.jsonl", TraceFormat::kCanonical);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  ASSERT_EQ(t->requests.size(), 3u);
  EXPECT_EQ(t->requests[1].session, "m");  // sorted by arrival
  EXPECT_EQ(t->requests[2].tokens, (std::vector<uint32_t>{1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(t->requests[2].prompt_tokens, 6u);
  EXPECT_EQ(t->requests[2].output_tokens, 0u);
  EXPECT_EQ(t->requests[0].tags[1], (TraceTag{2, 3, BlockType::kUserContext}));
}

TEST(CanonicalTrace, RejectsInconsistentRequests) {
  const std::pair<const char*, const char*> cases[] = {
      {R"({"session": "a", "turn": 0, "arrival_s": 0, "tokens": [1], "prompt_tokens": 2})", "'prompt_tokens' is 2"},
      {R"({"session": "a", "turn": 0, "arrival_s": -1})", "arrival_s"},
      {R"({"session": "a", "turn": 0, "arrival_s": 0, "extends_previous": 1})", "no earlier turn"},
      {R"({"session": "a", "turn": 0, "arrival_s": 0, "tokens": [1], "tags": [[0, 2, "user_context"]]})", "tags[0]"},
      {R"({"session": "a", "turn": 0, "arrival_s": 0, "tokens": [1], "tags": [[0, 1, "chit_chat"]]})", "chit_chat"},
      {R"({"session": "a", "turn": 0, "arrival_s": 0, "prompt_tokens": 1025, "block_hashes": [1, 2], "block_tokens": 512})", "cover"},
      {R"({"session": "a", "turn": 0, "arrival_s": 0, "tokens": [4294967296]})", "tokens'[0]"},
      {R"({"session": "a", "turn": 0, "arrival_s": 0, "output_tokens": 3, "output_token_ids": [1]})", "output_tokens"},
      {R"({"kvtier_trace": 2})", "version"},
  };
  for (const auto& [line, expect] : cases) {
    auto t = ParseTraceText(line, "c.jsonl", TraceFormat::kCanonical);
    ASSERT_FALSE(t.ok()) << line;
    EXPECT_NE(t.status().message().find(expect), std::string::npos) << t.status().message();
    EXPECT_NE(t.status().message().find("c.jsonl:1"), std::string::npos) << t.status().message();
  }
}

}  // namespace
}  // namespace kvtier
