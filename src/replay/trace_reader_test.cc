#include <set>

#include <gtest/gtest.h>

#include "kvtier/tokenizer.h"
#include "kvtier/trace.h"
#include "testing/test_paths.h"

namespace kvtier {
namespace {

const std::string kFixtures = testing::FixturesDir() + "/traces";

Trace MustRead(const std::string& name, TraceFormat format, const TraceReadOptions& options = {}) {
  auto trace = ReadTrace(kFixtures + "/" + name, format, options);
  EXPECT_TRUE(trace.ok()) << trace.status().ToString();
  return trace.ok() ? std::move(trace).value() : Trace{};
}

std::set<std::string> Sessions(const Trace& t) {
  std::set<std::string> out;
  for (const TraceRequest& r : t.requests) out.insert(r.session);
  return out;
}

TEST(TraceFormat, NamesRoundTrip) {
  for (TraceFormat f : {TraceFormat::kCanonical, TraceFormat::kMooncake, TraceFormat::kShareGpt, TraceFormat::kLmsys,
                        TraceFormat::kTauBench, TraceFormat::kSweAgent, TraceFormat::kToolBench, TraceFormat::kAzure}) {
    EXPECT_EQ(*ParseTraceFormat(TraceFormatName(f)), f);
  }
  auto bad = ParseTraceFormat("csv");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("sharegpt"), std::string::npos);
}

TEST(TraceReader, MooncakeKeepsHashesAndTimes) {
  const Trace t = MustRead("mooncake.jsonl", TraceFormat::kMooncake);
  ASSERT_EQ(t.requests.size(), 6u);
  EXPECT_EQ(t.metadata.arrivals, "trace");
  EXPECT_TRUE(t.metadata.tokenizer.empty());
  const TraceRequest& first = t.requests[0];
  EXPECT_EQ(first.prompt_tokens, 40160u);
  EXPECT_EQ(first.block_tokens, 512u);
  EXPECT_EQ(first.block_hashes.size(), 79u);
  EXPECT_EQ(first.output_tokens, 6u);
  EXPECT_TRUE(first.tokens.empty());
  for (std::size_t k = 1; k < t.requests.size(); ++k) EXPECT_GE(t.requests[k].arrival_s, t.requests[k - 1].arrival_s);
  // The fixture keeps pairs of requests whose first blocks are shared.
  const TraceStats stats = ComputeTraceStats(t);
  EXPECT_EQ(stats.block_tokens, 512u);
  EXPECT_LT(stats.unique_blocks, stats.blocks);
}

TEST(TraceReader, ShareGptAndLmsys) {
  const Trace sg = MustRead("sharegpt.jsonl", TraceFormat::kShareGpt);
  EXPECT_EQ(Sessions(sg).size(), 3u);
  EXPECT_EQ(sg.metadata.tokenizer, "approximate");
  EXPECT_EQ(sg.metadata.chat_template, "chatml");
  EXPECT_NE(sg.metadata.arrivals.find("poisson"), std::string::npos);
  for (const TraceRequest& r : sg.requests) {
    EXPECT_FALSE(r.tokens.empty());
    EXPECT_FALSE(r.output_token_ids.empty());
  }
  const Trace lm = MustRead("lmsys.jsonl", TraceFormat::kLmsys);
  EXPECT_EQ(lm.requests.size(), 3u);
  EXPECT_EQ(Sessions(lm), (std::set<std::string>{"lmsys-fixture-1", "lmsys-fixture-2"}));
}

TEST(TraceReader, RealTokenizerIsUsedAndNamed) {
  auto tok = LoadHfTokenizer(kFixtures + "/tokenizer.json");
  ASSERT_TRUE(tok.ok());
  const Trace t = MustRead("lmsys.jsonl", TraceFormat::kLmsys, {.tokenizer = tok->get()});
  EXPECT_EQ(t.metadata.tokenizer.rfind("hf-bpe:", 0), 0u);
  // <|im_start|> is an added token of the fixture: one id at the start of every prompt.
  EXPECT_EQ(t.requests[0].tokens[0], (*tok)->Encode("<|im_start|>")[0]);
  EXPECT_EQ((*tok)->Encode("<|im_start|>").size(), 1u);
}

TEST(TraceReader, TauBenchToolsAndTags) {
  const Trace t = MustRead("taubench.json", TraceFormat::kTauBench);
  ASSERT_FALSE(t.requests.empty());
  EXPECT_EQ(Sessions(t), (std::set<std::string>{"task0-trial0"}));
  std::set<std::string> tools;
  bool saw_tool_tag = false;
  for (const TraceRequest& r : t.requests) {
    tools.insert(r.tool);
    EXPECT_EQ(r.tags.front().type, BlockType::kSystemPrompt);
    for (const TraceTag& tag : r.tags) saw_tool_tag = saw_tool_tag || tag.type == BlockType::kToolContext;
  }
  EXPECT_TRUE(tools.count("get_user_details"));
  EXPECT_TRUE(saw_tool_tag);
}

TEST(TraceReader, SweAgentFunctionCallsAndObservations) {
  const Trace fc = MustRead("sweagent_function_calling.traj", TraceFormat::kSweAgent);
  ASSERT_FALSE(fc.requests.empty());
  EXPECT_EQ(fc.requests[0].session, "sweagent_function_calling");
  EXPECT_EQ(fc.requests[0].tool, "find_file");
  EXPECT_EQ(fc.requests[0].agent, "main");

  // Older trajectories send command output back as user messages: tagged tool context.
  const Trace obs = MustRead("sweagent_observations.traj", TraceFormat::kSweAgent);
  ASSERT_EQ(obs.requests.size(), 3u);
  EXPECT_EQ(obs.requests[0].tool, "tshark");
  const std::vector<TraceTag>& tags = obs.requests[1].tags;
  ASSERT_GE(tags.size(), 4u);
  EXPECT_EQ(tags[1].type, BlockType::kUserContext);  // the task statement
  EXPECT_EQ(tags[3].type, BlockType::kToolContext);  // the first command's output
}

TEST(TraceReader, ToolBenchDirectorySkipsQueryFiles) {
  const Trace t = MustRead("toolbench", TraceFormat::kToolBench);
  EXPECT_EQ(t.metadata.skipped_files, (std::vector<std::string>{"query_demo_open_domain.json"}));
  ASSERT_FALSE(t.requests.empty());
  EXPECT_EQ(t.requests[0].tool, "transitaires_for_transitaires");
  auto single = ReadTrace(kFixtures + "/toolbench/query_demo_open_domain.json", TraceFormat::kToolBench);
  EXPECT_FALSE(single.ok());
}

TEST(TraceReader, AzureIsALoadShape) {
  const Trace t = MustRead("azure_conv.csv", TraceFormat::kAzure);
  ASSERT_EQ(t.requests.size(), 12u);
  EXPECT_EQ(t.requests[0].prompt_tokens, 374u);
  EXPECT_EQ(t.requests[0].output_tokens, 44u);
  EXPECT_DOUBLE_EQ(t.requests[0].arrival_s, 0.0);
  EXPECT_NEAR(t.requests[1].arrival_s, 4.3145790, 1e-6);
  EXPECT_TRUE(t.requests[1].tokens.empty());
}

TEST(TraceReader, AzureShapeDrivesTextArrivals) {
  TraceReadOptions options;
  options.arrivals.azure_shape_csv = kFixtures + "/azure_conv.csv";
  const Trace t = MustRead("sharegpt.jsonl", TraceFormat::kShareGpt, options);
  EXPECT_EQ(t.metadata.arrivals.rfind("azure-shape(", 0), 0u);
  // Three sessions start at the CSV's first three instants.
  std::vector<double> starts;
  std::set<std::string> seen;
  for (const TraceRequest& r : t.requests) {
    if (seen.insert(r.session).second) starts.push_back(r.arrival_s);
  }
  ASSERT_EQ(starts.size(), 3u);
  EXPECT_DOUBLE_EQ(starts[0], 0.0);
  EXPECT_NEAR(starts[1], 4.3145790, 1e-6);
  EXPECT_NEAR(starts[2], 4.5418770, 1e-6);
}

TEST(TraceReader, MaxRequestsAndSeeds) {
  const Trace two = MustRead("sharegpt.jsonl", TraceFormat::kShareGpt, {.max_requests = 2});
  EXPECT_EQ(two.requests.size(), 2u);
  const Trace a = MustRead("sharegpt.jsonl", TraceFormat::kShareGpt, {.seed = 3});
  const Trace b = MustRead("sharegpt.jsonl", TraceFormat::kShareGpt, {.seed = 3});
  const Trace c = MustRead("sharegpt.jsonl", TraceFormat::kShareGpt, {.seed = 4});
  EXPECT_EQ(a.requests, b.requests);
  EXPECT_NE(a.requests, c.requests);
}

TEST(TraceReader, BadInputNamesFileAndLine) {
  struct Case {
    std::string file;
    TraceFormat format;
    std::string expect;
  };
  const Case cases[] = {
      {"bad/mooncake_bad_hash.jsonl", TraceFormat::kMooncake, "mooncake_bad_hash.jsonl:2: hash_ids[1]"},
      {"bad/mooncake_truncated.jsonl", TraceFormat::kMooncake, "mooncake_truncated.jsonl:2: not valid JSON"},
      {"bad/sharegpt_bad_role.jsonl", TraceFormat::kShareGpt, "sharegpt_bad_role.jsonl:1: conversations[1]"},
      {"bad/azure_bad_time.csv", TraceFormat::kAzure, "azure_bad_time.csv:3"},
      {"bad/canonical_turn_order.jsonl", TraceFormat::kCanonical, "canonical_turn_order.jsonl:3: turn 0"},
  };
  for (const Case& c : cases) {
    auto t = ReadTrace(kFixtures + "/" + c.file, c.format);
    ASSERT_FALSE(t.ok()) << c.file;
    EXPECT_NE(t.status().message().find(c.expect), std::string::npos) << t.status().message();
  }
  auto missing = ReadTrace(kFixtures + "/nope.jsonl", TraceFormat::kMooncake);
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
}

TEST(TraceReader, LimitsAndOddShapesAreErrorsNotCrashes) {
  auto long_line = ParseTraceText(std::string(100, ' ') + "{}\n", "x.jsonl", TraceFormat::kMooncake,
                                  {.max_line_bytes = 10});
  ASSERT_FALSE(long_line.ok());
  EXPECT_NE(long_line.status().message().find("x.jsonl:1: line of 102 bytes"), std::string::npos);
  const char* odd[] = {"[]", "[1]", "{\"history\": 3}", "{\"history\": [1]}", "{\"history\": [{\"role\": 5}]}",
                       "[{\"traj\": {}}]", "{\"conversations\": null}", "\xff\xfe", "{\"a\":", "null"};
  for (TraceFormat f : {TraceFormat::kCanonical, TraceFormat::kMooncake, TraceFormat::kShareGpt, TraceFormat::kLmsys,
                        TraceFormat::kTauBench, TraceFormat::kSweAgent, TraceFormat::kToolBench, TraceFormat::kAzure}) {
    for (const char* text : odd) {
      auto t = ParseTraceText(text, "odd", f);
      if (!t.ok()) {
        EXPECT_FALSE(t.status().message().empty());
      }
    }
  }
  EXPECT_FALSE(ParseTraceText("", "x", TraceFormat::kShareGpt, {.arrivals = {.session_rate_per_s = 0}}).ok());
}

}  // namespace
}  // namespace kvtier
