#include "replay/arrival_process.h"

#include <gtest/gtest.h>

namespace kvtier::replay {
namespace {

std::vector<TraceRequest> Sessions(int sessions, int turns) {
  std::vector<TraceRequest> out;
  for (int s = 0; s < sessions; ++s) {
    for (int t = 0; t < turns; ++t) {
      TraceRequest r;
      r.session = "s" + std::to_string(s);
      r.turn = static_cast<uint32_t>(t);
      out.push_back(r);
    }
  }
  return out;
}

TEST(ArrivalProcess, SeededPoissonIsReproducibleAndKeepsTurnOrder) {
  auto a = Sessions(50, 4);
  auto b = Sessions(50, 4);
  auto c = Sessions(50, 4);
  AssignArrivalTimes(a, {}, 7, {});
  AssignArrivalTimes(b, {}, 7, {});
  AssignArrivalTimes(c, {}, 8, {});
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  std::map<std::string, std::pair<uint32_t, double>> last;
  for (std::size_t k = 0; k < a.size(); ++k) {
    if (k > 0) {
      EXPECT_GE(a[k].arrival_s, a[k - 1].arrival_s);
    }
    if (auto it = last.find(a[k].session); it != last.end()) {
      EXPECT_EQ(a[k].turn, it->second.first + 1);
      EXPECT_GE(a[k].arrival_s, it->second.second);
    }
    last[a[k].session] = {a[k].turn, a[k].arrival_s};
  }
}

TEST(ArrivalProcess, PoissonRateAndThinkTimeMeans) {
  auto single = Sessions(20000, 1);
  AssignArrivalTimes(single, {.session_rate_per_s = 4.0}, 1, {});
  const double rate = static_cast<double>(single.size() - 1) / single.back().arrival_s;
  EXPECT_NEAR(rate, 4.0, 0.15);

  auto turns = Sessions(1, 20001);
  AssignArrivalTimes(turns, {.mean_think_time_s = 3.0}, 1, {});
  EXPECT_NEAR(turns.back().arrival_s / 20000.0, 3.0, 0.1);
}

TEST(ArrivalProcess, AzureShapeGivesSessionStartsAndWraps) {
  const std::vector<double> shape = {0.0, 1.0, 4.0};
  auto r = Sessions(5, 1);
  AssignArrivalTimes(r, {}, 1, shape);
  std::vector<double> times;
  for (const TraceRequest& x : r) times.push_back(x.arrival_s);
  // Second pass is shifted by the span (4) plus the mean gap (4/3).
  EXPECT_EQ(times, (std::vector<double>{0.0, 1.0, 4.0, 4.0 + 4.0 / 3, 5.0 + 4.0 / 3}));
}

TEST(ArrivalProcess, AzureCsvAndTimestamps) {
  auto t = ParseAzureTimestamp("2023-11-16 18:15:46.6805900");
  ASSERT_TRUE(t.ok());
  EXPECT_NEAR(*t, 1700158546.68059, 1e-5);
  EXPECT_FALSE(ParseAzureTimestamp("2023-13-16 18:15:46").ok());
  EXPECT_FALSE(ParseAzureTimestamp("yesterday").ok());
  auto rows = ParseAzureCsv("TIMESTAMP,ContextTokens,GeneratedTokens\r\n2023-11-16 23:59:59.5,10,2\r\n"
                            "2023-11-17 00:00:01,20,3\r\n",
                            "a.csv");
  ASSERT_TRUE(rows.ok()) << rows.status().ToString();
  ASSERT_EQ(rows->size(), 2u);
  EXPECT_DOUBLE_EQ((*rows)[1].time_s, 1.5);
  EXPECT_EQ((*rows)[1].context_tokens, 20u);
  auto bad = ParseAzureCsv("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 00:00:00,-1,2\n", "a.csv");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("a.csv:2"), std::string::npos);
  EXPECT_FALSE(ParseAzureCsv("", "e.csv").ok());
}

}  // namespace
}  // namespace kvtier::replay
