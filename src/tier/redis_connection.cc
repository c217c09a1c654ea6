#include "tier/redis_connection.h"

#include <sys/time.h>

#include <charconv>
#include <numeric>

#include "tier/redis_value_reader.h"

namespace kvtier {
namespace {

timeval ToTimeval(std::chrono::milliseconds timeout) {
  timeval tv{};
  tv.tv_sec = static_cast<time_t>(timeout.count() / 1000);
  tv.tv_usec = static_cast<suseconds_t>((timeout.count() % 1000) * 1000);
  return tv;
}

Status BadEndpoint(std::string_view text, std::string_view why) {
  return Status::InvalidArgument("endpoint '" + std::string(text) + "': " + std::string(why));
}

}  // namespace

std::string RedisEndpoint::ToString() const {
  if (!unix_path.empty()) return "unix:" + unix_path;
  if (host.find(':') != std::string::npos) return "[" + host + "]:" + std::to_string(port);
  return host + ":" + std::to_string(port);
}

Result<RedisEndpoint> ParseRedisEndpoint(std::string_view text, bool allow_unix) {
  RedisEndpoint endpoint;
  if (text.starts_with("unix:")) {
    if (!allow_unix) return BadEndpoint(text, "Unix sockets are only supported by the hash-ring topology");
    endpoint.unix_path = std::string(text.substr(5));
    if (endpoint.unix_path.empty() || endpoint.unix_path[0] != '/') {
      return BadEndpoint(text, "expected unix:/absolute/path/to/redis.sock");
    }
    return endpoint;
  }
  std::string_view host;
  std::string_view port;
  if (text.starts_with("[")) {  // [ipv6]:port
    const std::size_t close = text.find(']');
    if (close == std::string_view::npos || close + 1 >= text.size() || text[close + 1] != ':') {
      return BadEndpoint(text, "expected [ipv6-address]:port");
    }
    host = text.substr(1, close - 1);
    port = text.substr(close + 2);
  } else {
    const std::size_t colon = text.rfind(':');
    if (colon == std::string_view::npos) return BadEndpoint(text, "expected host:port, e.g. 127.0.0.1:6379");
    host = text.substr(0, colon);
    port = text.substr(colon + 1);
    if (host.find(':') != std::string_view::npos) return BadEndpoint(text, "write an IPv6 address as [address]:port");
  }
  if (host.empty()) return BadEndpoint(text, "the host is empty");
  int value = 0;
  const auto [end, error] = std::from_chars(port.data(), port.data() + port.size(), value);
  if (port.empty() || error != std::errc() || end != port.data() + port.size() || value < 1 || value > 65535) {
    return BadEndpoint(text, "the port must be a number from 1 to 65535");
  }
  endpoint.host = std::string(host);
  endpoint.port = value;
  return endpoint;
}

std::string_view ReplyText(const redisReply& reply) {
  if (reply.type != REDIS_REPLY_STRING && reply.type != REDIS_REPLY_STATUS && reply.type != REDIS_REPLY_ERROR) return {};
  if (reply.str == nullptr) return {};
  return {reply.str, reply.len};
}

bool IsErrorReply(const redisReply& reply) { return reply.type == REDIS_REPLY_ERROR; }

Status ErrorReplyStatus(const redisReply& reply, std::string_view context) {
  const std::string_view text = ReplyText(reply);
  std::string message = std::string(context) + ": server replied '" + std::string(text) + "'";
  if (text.starts_with("CLUSTERDOWN") || text.starts_with("LOADING") || text.starts_with("TRYAGAIN") ||
      text.starts_with("MASTERDOWN")) {
    return Status::Unavailable(std::move(message));
  }
  if (text.starts_with("OOM")) return Status::ResourceExhausted(message + "; raise the server's maxmemory or evict");
  return Status::IoError(std::move(message));
}

std::size_t RedisArgs::bytes() const { return std::accumulate(sizes_.begin(), sizes_.end(), std::size_t{0}); }

Result<std::unique_ptr<RedisConnection>> RedisConnection::Connect(const RedisEndpoint& endpoint,
                                                                  std::chrono::milliseconds timeout,
                                                                  const RedisAuth& auth) {
  const timeval tv = ToTimeval(timeout);
  redisContext* context = endpoint.unix_path.empty() ? redisConnectWithTimeout(endpoint.host.c_str(), endpoint.port, tv)
                                                     : redisConnectUnixWithTimeout(endpoint.unix_path.c_str(), tv);
  const std::string address = endpoint.ToString();
  if (context == nullptr) return Status::ResourceExhausted(address + ": cannot allocate a hiredis context");
  if (context->err != 0) {
    Status status = Status::Unavailable(address + ": cannot connect: " + context->errstr);
    redisFree(context);
    return status;
  }
  auto connection = std::unique_ptr<RedisConnection>(new RedisConnection(context, address));
  if (redisSetTimeout(context, tv) != REDIS_OK) return connection->Fail();
  // Keepalive finds a peer that vanished without a FIN between batches; best effort.
  (void)redisEnableKeepAlive(context);
  if (!auth.password.empty()) {
    RedisArgs command;
    command.Add("AUTH");
    if (!auth.username.empty()) command.Add(auth.username);
    command.Add(auth.password);
    KVTIER_ASSIGN_OR_RETURN(RedisReply reply, connection->Command(command));
    if (IsErrorReply(*reply)) {
      const std::string as = auth.username.empty() ? "the default user" : "user '" + auth.username + "'";
      return Status::PermissionDenied(address + ": AUTH as " + as + " failed: " + std::string(ReplyText(*reply)));
    }
  }
  return connection;
}

RedisConnection::RedisConnection(redisContext* context, std::string address)
    : context_(context), value_reader_(std::make_unique<RedisValueReader>()), address_(std::move(address)) {}

RedisConnection::~RedisConnection() { redisFree(context_); }

Status RedisConnection::Flush() {
  if (broken()) return failure_;
  int done = 0;
  while (done == 0) {
    if (redisBufferWrite(context_, &done) != REDIS_OK) return Fail();
  }
  return Status::Ok();
}

Status RedisConnection::Fail() {
  if (failure_.ok()) {
    const std::string why = context_->err != 0 ? context_->errstr : "unknown connection error";
    failure_ = Status::Unavailable(address_ + ": " + (context_->err == REDIS_ERR_EOF ? "server closed the connection"
                                                                                     : why));
  }
  return failure_;
}

Status RedisConnection::Append(RedisArgs& args) {
  if (broken()) return failure_;
  if (redisAppendCommandArgv(context_, args.count(), args.data(), args.sizes()) != REDIS_OK) return Fail();
  return Status::Ok();
}

bool IsTakenStringReply(const redisReply& reply) { return reply.type == REDIS_REPLY_STRING && reply.str == nullptr; }

Result<RedisReply> RedisConnection::GetReply(RedisStringSink* sink) {
  if (broken()) return failure_;
  if (sink != nullptr) {
    KVTIER_RETURN_IF_ERROR(Flush());
    Result<RedisReply> reply = value_reader_->Read(context_, *sink);
    if (!reply.ok()) failure_ = Status::Unavailable(address_ + ": " + reply.status().message());
    return reply.ok() ? std::move(reply) : Result<RedisReply>(failure_);
  }
  value_reader_->HandBack(context_);
  void* reply = nullptr;
  if (redisGetReply(context_, &reply) != REDIS_OK || reply == nullptr) {
    if (reply != nullptr) freeReplyObject(reply);
    return Fail();
  }
  return RedisReply(static_cast<redisReply*>(reply));
}

Result<RedisReply> RedisConnection::Command(RedisArgs& args) {
  KVTIER_RETURN_IF_ERROR(Append(args));
  return GetReply();
}

}  // namespace kvtier
