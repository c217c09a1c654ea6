// Every real trace in ../shared/data/traces (next to the checkout) parses. Skipped where
// that folder is absent: the project's own tests use only tests/fixtures/traces.
#include <filesystem>

#include <gtest/gtest.h>

#include "kvtier/trace.h"
#include "testing/test_paths.h"

namespace kvtier {
namespace {

TEST(TraceRealData, EveryRealTraceParses) {
  const std::filesystem::path root = std::filesystem::path(testing::SourceDir()) / "../shared/data/traces";
  if (!std::filesystem::is_directory(root)) GTEST_SKIP() << root << " is not present";
  const std::pair<const char*, TraceFormat> sources[] = {
      {"mooncake-synthetic", TraceFormat::kMooncake},   {"sharegpt-1000", TraceFormat::kShareGpt},
      {"taubench-airline-gpt4o", TraceFormat::kTauBench}, {"sweagent-demos", TraceFormat::kSweAgent},
      {"toolbench-dfs-examples", TraceFormat::kToolBench}, {"azure-llm-2023", TraceFormat::kAzure},
  };
  for (const auto& [dir, format] : sources) {
    if (!std::filesystem::is_directory(root / dir)) continue;
    auto trace = ReadTrace((root / dir).string(), format);
    ASSERT_TRUE(trace.ok()) << dir << ": " << trace.status().ToString();
    EXPECT_GT(trace->requests.size(), 10u) << dir;
  }
}

}  // namespace
}  // namespace kvtier
