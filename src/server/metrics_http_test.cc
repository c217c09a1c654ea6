#include "server/metrics_http.h"

#include <atomic>

#include <gtest/gtest.h>
#include <httplib.h>

#include "server/service_metrics.h"

namespace kvtier::server {
namespace {

httplib::Client Client(uint16_t port) {
  httplib::Client client("127.0.0.1", port);
  client.set_connection_timeout(2, 0);
  client.set_read_timeout(5, 0);
  return client;
}

TEST(MetricsHttp, ServesMetricsHealthAndNotFound) {
  ServiceMetrics service;
  service.RecordRequest(protocol::MessageType::kLookup, 0.001, true, 2, 0);
  StoreStats store;
  store.tiers.push_back({.name = "dram", .blocks = 3});
  Result<std::shared_ptr<ReusePredictor>> predictor = ReusePredictor::Create({});
  ASSERT_TRUE(predictor.ok());
  const auto render = [&] { return RenderPrometheus(service, store, **predictor); };
  std::atomic<bool> healthy{true};
  std::atomic<bool> degraded{false};

  Result<std::unique_ptr<MetricsHttpServer>> server = MetricsHttpServer::Start("127.0.0.1", 0, render, [&] {
    if (!healthy.load()) return HealthReport{.healthy = false, .detail = "tier \"nvme0\": I/O errors"};
    if (degraded.load()) return HealthReport{.degraded = true, .detail = "tier \"redis\": writes failing"};
    return HealthReport{};
  });
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  const uint16_t port = (*server)->port();
  ASSERT_NE(port, 0);
  httplib::Client client = Client(port);

  httplib::Result metrics = client.Get("/metrics");
  ASSERT_TRUE(metrics) << httplib::to_string(metrics.error());
  EXPECT_EQ(metrics->status, 200);
  EXPECT_EQ(metrics->get_header_value("Content-Type"), "text/plain; version=0.0.4; charset=utf-8");
  EXPECT_EQ(metrics->body, render());
  EXPECT_NE(metrics->body.find("kvtier_requests_total{op=\"lookup\",result=\"ok\"} 1\n"), std::string::npos);

  httplib::Result ok = client.Get("/healthz");
  ASSERT_TRUE(ok) << httplib::to_string(ok.error());
  EXPECT_EQ(ok->status, 200);
  EXPECT_EQ(ok->get_header_value("Content-Type"), "application/json");
  EXPECT_EQ(ok->body, R"({"detail":"","status":"ok"})");

  degraded.store(true);
  httplib::Result slow = client.Get("/healthz");
  ASSERT_TRUE(slow) << httplib::to_string(slow.error());
  EXPECT_EQ(slow->status, 200) << "degraded still serves";
  EXPECT_EQ(slow->body, R"({"detail":"tier \"redis\": writes failing","status":"degraded"})");

  healthy.store(false);
  httplib::Result bad = client.Get("/healthz");
  ASSERT_TRUE(bad) << httplib::to_string(bad.error());
  EXPECT_EQ(bad->status, 503);
  EXPECT_EQ(bad->body, R"({"detail":"tier \"nvme0\": I/O errors","status":"unhealthy"})");

  httplib::Result nope = client.Get("/nope");
  ASSERT_TRUE(nope) << httplib::to_string(nope.error());
  EXPECT_EQ(nope->status, 404);
}

TEST(MetricsHttp, PortInUseIsUnavailable) {
  const auto render = [] { return std::string(); };
  const auto health = [] { return HealthReport{}; };
  Result<std::unique_ptr<MetricsHttpServer>> first = MetricsHttpServer::Start("127.0.0.1", 0, render, health);
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  const uint16_t port = (*first)->port();
  // A second server on the same port (httplib's default SO_REUSEPORT would let it share).
  Result<std::unique_ptr<MetricsHttpServer>> second = MetricsHttpServer::Start("127.0.0.1", port, render, health);
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(second.status().message().find("127.0.0.1:" + std::to_string(port)), std::string::npos)
      << second.status().message();
  // The first still serves.
  httplib::Client client = Client(port);
  httplib::Result res = client.Get("/metrics");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200);
}

TEST(MetricsHttp, AnAddressOfAnotherMachineIsUnavailable) {
  // 192.0.2.1 is TEST-NET-1 (RFC 5737): never an address of this machine.
  Result<std::unique_ptr<MetricsHttpServer>> server =
      MetricsHttpServer::Start("192.0.2.1", 0, [] { return std::string(); }, [] { return HealthReport{}; });
  ASSERT_FALSE(server.ok());
  EXPECT_EQ(server.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(server.status().message().find("192.0.2.1:0"), std::string::npos) << server.status().message();
}

TEST(MetricsHttp, RejectsAnEmptyHostOrMissingCallback) {
  const auto health = [] { return HealthReport{}; };
  EXPECT_EQ(MetricsHttpServer::Start("", 0, [] { return std::string(); }, health).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(MetricsHttpServer::Start("127.0.0.1", 0, nullptr, health).status().code(), StatusCode::kInvalidArgument);
}

TEST(MetricsHttp, StopIsIdempotentAndEndsServing) {
  Result<std::unique_ptr<MetricsHttpServer>> server =
      MetricsHttpServer::Start("127.0.0.1", 0, [] { return std::string("x 1\n"); }, [] { return HealthReport{}; });
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  const uint16_t port = (*server)->port();
  httplib::Client client = Client(port);
  ASSERT_TRUE(client.Get("/metrics"));
  (*server)->Stop();
  (*server)->Stop();
  httplib::Client after = Client(port);
  EXPECT_FALSE(after.Get("/metrics"));
  server->reset();  // the destructor stops again
}

}  // namespace
}  // namespace kvtier::server
