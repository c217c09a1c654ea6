// The lookup phase's baseline in `kvtier bench serve`: redis-benchmark GET against a private
// redis-server (testing/redis_server.h: a free loopback port, a temporary directory, no
// persistence) on the same machine in the same run. A GET with one request in flight per
// connection (-P 1) is the simplest request/reply a server over TCP can answer; the value is
// the size of a lookup's reply frame, so both move the same bytes back.
//
// Thread-safety: none; the benchmark's main thread drives it.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "kvtier/status.h"

namespace kvtier::testing {
class RedisServers;
}

namespace kvtier::bench {

struct RedisGetResult {
  double gets_per_s = 0;
  double p99_us = 0;
};

class RedisGetBaseline {
 public:
  // Starts the server and stores one `value_bytes` value under the key redis-benchmark's GET
  // reads. Unavailable when redis-server or redis-cli is not on PATH.
  static Result<std::unique_ptr<RedisGetBaseline>> Start(uint64_t value_bytes);
  ~RedisGetBaseline();
  RedisGetBaseline(const RedisGetBaseline&) = delete;
  RedisGetBaseline& operator=(const RedisGetBaseline&) = delete;

  // `redis-benchmark -t get -P 1 -c clients -n requests --threads threads --csv`, over TCP
  // loopback or the server's Unix socket (`unix_socket`), killed after `timeout_s`
  // (Unavailable then, or when redis-benchmark is missing or fails).
  Result<RedisGetResult> Run(int clients, int threads, uint64_t requests, double timeout_s, bool unix_socket) const;

  uint64_t value_bytes() const { return value_bytes_; }

 private:
  RedisGetBaseline(std::unique_ptr<testing::RedisServers> servers, uint64_t value_bytes);

  std::unique_ptr<testing::RedisServers> servers_;
  uint64_t value_bytes_;
};

// The GET row of `redis-benchmark --csv` output (redis 6 and 7: a header row naming the
// columns, then one row per test): its requests per second and, when present, p99.
Result<RedisGetResult> ParseRedisBenchmarkCsv(const std::string& csv);

}  // namespace kvtier::bench
