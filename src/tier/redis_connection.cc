#include "tier/redis_connection.h"

#include <sys/time.h>

#include <charconv>
#include <cstdlib>
#include <numeric>

namespace kvtier {
namespace {

timeval ToTimeval(std::chrono::milliseconds timeout) {
  timeval tv{};
  tv.tv_sec = static_cast<time_t>(timeout.count() / 1000);
  tv.tv_usec = static_cast<suseconds_t>((timeout.count() % 1000) * 1000);
  return tv;
}

// hiredis's own reply functions, which every reader starts with: the sinking ones defer to
// them for everything but the string replies a sink takes. Set once, by the first Connect.
const redisReplyObjectFunctions* default_reply_functions = nullptr;

void* CreateStringOrSink(const redisReadTask* task, char* str, size_t len) {
  auto* sink = static_cast<RedisStringSink*>(task->privdata);
  if (sink == nullptr || task->type != REDIS_REPLY_STRING || task->parent != nullptr) {
    return default_reply_functions->createString(task, str, len);
  }
  sink->Take(std::string_view(str, len));
  // freeReplyObject frees it (and its null `str`) as any string reply.
  auto* reply = static_cast<redisReply*>(std::calloc(1, sizeof(redisReply)));
  if (reply == nullptr) return nullptr;  // hiredis reports an out-of-memory error
  reply->type = REDIS_REPLY_STRING;
  reply->len = len;
  return reply;
}

redisReplyObjectFunctions* SinkingReplyFunctions(const redisReplyObjectFunctions* defaults) {
  static redisReplyObjectFunctions functions = [defaults] {
    default_reply_functions = defaults;
    redisReplyObjectFunctions f = *defaults;
    f.createString = CreateStringOrSink;
    return f;
  }();
  return &functions;
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
  context->reader->fn = SinkingReplyFunctions(context->reader->fn);
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

RedisConnection::~RedisConnection() { redisFree(context_); }

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
  // The reader hands its privdata to the task of each reply it starts: the next one.
  context_->reader->privdata = sink;
  void* reply = nullptr;
  const int outcome = redisGetReply(context_, &reply);
  context_->reader->privdata = nullptr;
  if (outcome != REDIS_OK || reply == nullptr) {
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
