// RedisNode: the connections to one Redis server, lent out one borrower at a time, and the
// server's health as this client sees it.
//
// Up to `connections` connections are opened on demand; a borrower waits for one when all
// are lent. When any connection fails (refused, timeout, EOF) the node is marked down: its
// idle connections are closed, connections lent out are closed when returned, and Borrow
// fails at once with Unavailable -- without a network call -- until `reconnect_interval`
// has passed. Then one borrower probes with a new connection (the others keep failing fast
// meanwhile); if it connects the node is up again, otherwise the interval starts over. So a
// dead server costs one connect attempt per interval, not one timeout per call.
//
// Thread-safety: every method may be called concurrently. A Lease is used by one thread.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "tier/redis_connection.h"

namespace kvtier {

class RedisNode {
 public:
  struct Options {
    RedisEndpoint endpoint;
    RedisAuth auth;
    int connections = 4;
    std::chrono::milliseconds timeout{1000};
    std::chrono::milliseconds reconnect_interval{1000};
  };

  // A borrowed connection, returned to the pool when destroyed (or closed, after Fail).
  class Lease {
   public:
    Lease(Lease&& other) noexcept
        : node_(std::exchange(other.node_, nullptr)), connection_(std::move(other.connection_)), epoch_(other.epoch_) {}
    Lease& operator=(Lease&&) = delete;
    Lease(const Lease&) = delete;
    ~Lease();

    RedisConnection& connection() { return *connection_; }
    // Marks the node down and closes the connection (a command on it failed or timed out).
    void Fail();

   private:
    friend class RedisNode;
    Lease(RedisNode* node, std::unique_ptr<RedisConnection> connection, uint64_t epoch)
        : node_(node), connection_(std::move(connection)), epoch_(epoch) {}

    RedisNode* node_;
    std::unique_ptr<RedisConnection> connection_;
    uint64_t epoch_;
  };

  explicit RedisNode(Options options);
  RedisNode(const RedisNode&) = delete;
  RedisNode& operator=(const RedisNode&) = delete;

  // A connection: an idle one, a new one while fewer than `connections` are open, or the
  // next one returned. Unavailable at once while the node is down (see above).
  Result<Lease> Borrow();

  const std::string& address() const { return address_; }
  int max_connections() const { return options_.connections; }
  bool down() const;

 private:
  using Clock = std::chrono::steady_clock;

  Result<std::unique_ptr<RedisConnection>> Open() const;
  void Return(std::unique_ptr<RedisConnection> connection, uint64_t epoch, bool failed);
  // Marks the node down for the current epoch; returns the idle connections to close
  // outside the lock.
  std::vector<std::unique_ptr<RedisConnection>> MarkDownLocked();
  Status DownStatusLocked() const;

  const Options options_;
  const std::string address_;

  // Lock order: mutex_ only; connections are opened and closed outside it.
  mutable std::mutex mutex_;
  std::condition_variable returned_;
  std::vector<std::unique_ptr<RedisConnection>> idle_;  // GUARDED_BY(mutex_)
  int open_ = 0;              // GUARDED_BY(mutex_): idle + lent + being opened
  bool down_ = false;         // GUARDED_BY(mutex_)
  bool probing_ = false;      // GUARDED_BY(mutex_): a borrower is reconnecting a down node
  Clock::time_point retry_at_;  // GUARDED_BY(mutex_)
  // GUARDED_BY(mutex_): bumped when the node goes down, so that connections lent before it
  // are closed when they come back instead of being reused.
  uint64_t epoch_ = 0;
  std::string down_reason_;   // GUARDED_BY(mutex_)
};

}  // namespace kvtier
