// One blocking hiredis connection to one Redis endpoint, the endpoint syntax, and the few
// helpers every user of a reply needs (kinds of reply, their text).
//
// A connection that failed (timeout, EOF, reset, protocol error) is broken for good: every
// later call reports the same Unavailable status, and its owner drops it.
//
// Thread-safety: a RedisConnection is used by one thread at a time (RedisNode lends it out);
// the free functions are pure.
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <hiredis/hiredis.h>

#include "kvtier/status.h"

namespace kvtier {

class RedisValueReader;

struct RedisEndpoint {
  std::string host;       // empty for a Unix socket
  int port = 0;
  std::string unix_path;  // set for "unix:/path"

  std::string ToString() const;  // "host:port" or "unix:/path", as parsed
};

// "host:port", "[ipv6]:port" or, when `allow_unix`, "unix:/absolute/path". The message of an
// error says what was wrong with `text`.
Result<RedisEndpoint> ParseRedisEndpoint(std::string_view text, bool allow_unix);

struct RedisReplyDeleter {
  void operator()(redisReply* reply) const { freeReplyObject(reply); }
};
using RedisReply = std::unique_ptr<redisReply, RedisReplyDeleter>;

// The text of a string, status or error reply ("" for other kinds).
std::string_view ReplyText(const redisReply& reply);
bool IsErrorReply(const redisReply& reply);
// An error reply as a Status (Unavailable for CLUSTERDOWN, LOADING and TRYAGAIN, which pass;
// IoError for the others), prefixed with `context`.
Status ErrorReplyStatus(const redisReply& reply, std::string_view context);

// A command's arguments. Not owning: the bytes must outlive the Append that sends them.
class RedisArgs {
 public:
  RedisArgs& Add(std::string_view text) {
    data_.push_back(text.data());
    sizes_.push_back(text.size());
    return *this;
  }
  RedisArgs& Add(std::span<const std::byte> bytes) {
    return Add(std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()));
  }
  void Clear() {
    data_.clear();
    sizes_.clear();
  }
  int count() const { return static_cast<int>(data_.size()); }
  const char** data() { return data_.data(); }
  const std::size_t* sizes() const { return sizes_.data(); }
  std::size_t bytes() const;  // of all arguments, for bounding a pipeline

 private:
  std::vector<const char*> data_;
  std::vector<std::size_t> sizes_;
};

// Whom a connection authenticates as: nobody (no password), Redis's default user (a password
// alone: requirepass) or a Redis 6 ACL user (a username and its password).
struct RedisAuth {
  std::string username;
  std::string password;
};

// The bytes of one bulk string reply as they arrive, read in order.
class RedisValueStream {
 public:
  // The value's next out.size() bytes (no more than it has left). Unavailable when the
  // connection failed.
  virtual Status Read(std::span<std::byte> out) = 0;

 protected:
  ~RedisValueStream() = default;
};

// Takes the bytes of a bulk string reply as they come off the socket (RedisValueReader), so
// that a large value is copied once, by the kernel, to where it goes, instead of through
// hiredis's buffer and a reply object (docs/cluster.md: most of a reading node's CPU).
class RedisStringSink {
 public:
  // A value of `size` bytes: read what is wanted of it from `value`; the rest is skipped.
  virtual void Take(std::size_t size, RedisValueStream& value) = 0;

 protected:
  ~RedisStringSink() = default;
};

// A string reply whose bytes went to a sink: its type is REDIS_REPLY_STRING, its `len` the
// value's, and it holds no bytes.
bool IsTakenStringReply(const redisReply& reply);

class RedisConnection {
 public:
  // Connects within `timeout`, sets it as the timeout of every later send and receive, and
  // sends AUTH when `auth` has a password. Unavailable when the endpoint does not answer;
  // PermissionDenied when it refuses the credentials.
  static Result<std::unique_ptr<RedisConnection>> Connect(const RedisEndpoint& endpoint,
                                                          std::chrono::milliseconds timeout, const RedisAuth& auth);
  ~RedisConnection();
  RedisConnection(const RedisConnection&) = delete;
  RedisConnection& operator=(const RedisConnection&) = delete;

  // Queues a command; nothing is sent before the next Flush or GetReply.
  Status Append(RedisArgs& args);
  // Sends what is queued, then waits for the next reply (error replies are replies, not
  // errors). Unavailable when the connection failed; it is then broken. With `sink`, the reply
  // is read by a RedisValueReader, not hiredis: it must be one a GET can get (a bulk string, a
  // nil, an error) or a status or integer; a bulk string is handed to the sink, and the reply
  // returned holds no bytes (IsTakenStringReply).
  Result<RedisReply> GetReply(RedisStringSink* sink = nullptr);
  // Append and GetReply.
  Result<RedisReply> Command(RedisArgs& args);
  // Sends what is queued without waiting for a reply, so that a caller can start the
  // pipelines of several connections before it reads any of their replies.
  Status Flush();

  bool broken() const { return !failure_.ok(); }
  const Status& failure() const { return failure_; }
  const std::string& address() const { return address_; }

 private:
  RedisConnection(redisContext* context, std::string address);
  Status Fail();  // records the context's error as this connection's failure

  redisContext* context_;
  std::unique_ptr<RedisValueReader> value_reader_;
  std::string address_;
  Status failure_;
};

}  // namespace kvtier
