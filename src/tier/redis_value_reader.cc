#include "tier/redis_value_reader.h"

#include <sys/uio.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <charconv>
#include <cstdlib>
#include <cstring>
#include <string>

namespace kvtier {
namespace {

// A line longer than this is not a reply header of anything this reader parses.
constexpr std::size_t kMaxLineBytes = 64 * 1024;

Status ProtocolError(std::string_view what) { return Status::Unavailable("protocol error: " + std::string(what)); }

// A reply object as hiredis's own functions make one, so that freeReplyObject frees it.
RedisReply MakeReply(int type, std::string_view text = {}, long long integer = 0) {
  auto* reply = static_cast<redisReply*>(std::calloc(1, sizeof(redisReply)));
  if (reply == nullptr) return nullptr;
  reply->type = type;
  reply->integer = integer;
  if (type == REDIS_REPLY_STATUS || type == REDIS_REPLY_ERROR) {
    reply->str = static_cast<char*>(std::malloc(text.size() + 1));
    if (reply->str == nullptr) {
      std::free(reply);
      return nullptr;
    }
    std::memcpy(reply->str, text.data(), text.size());
    reply->str[text.size()] = '\0';
    reply->len = text.size();
  }
  return RedisReply(reply);
}

Result<long long> ParseNumber(std::string_view text, std::string_view what) {
  long long value = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc() || end != text.data() + text.size()) {
    return ProtocolError(std::string(what) + " '" + std::string(text) + "' is not a number");
  }
  return value;
}

}  // namespace

// The value's bytes, read through the reader: what it buffered first, the rest from the socket.
class RedisValueReader::BulkStream final : public RedisValueStream {
 public:
  BulkStream(RedisValueReader& reader, int fd, std::size_t size) : reader_(reader), fd_(fd), left_(size) {}

  Status Read(std::span<std::byte> out) override {
    if (!failure_.ok()) return failure_;
    if (out.size() > left_) return Status::InvalidArgument("read past the end of a value");
    failure_ = reader_.ReadExact(fd_, out);
    if (failure_.ok()) left_ -= out.size();
    return failure_;
  }
  // Reads what the sink left, and the CRLF after the value.
  Status Finish() {
    std::array<std::byte, 16 * 1024> scratch;
    while (left_ > 0) KVTIER_RETURN_IF_ERROR(Read(std::span(scratch).first(std::min(left_, scratch.size()))));
    std::array<std::byte, 2> crlf;
    KVTIER_RETURN_IF_ERROR(reader_.ReadExact(fd_, crlf));
    if (crlf[0] != std::byte{'\r'} || crlf[1] != std::byte{'\n'}) return ProtocolError("a value does not end in CRLF");
    return failure_;
  }

 private:
  RedisValueReader& reader_;
  const int fd_;
  std::size_t left_;
  Status failure_;
};

Result<RedisReply> RedisValueReader::Read(redisContext* context, RedisStringSink& sink) {
  TakeFrom(context);
  KVTIER_ASSIGN_OR_RETURN(std::string_view line, ReadLine(context->fd));
  if (line.empty()) return ProtocolError("an empty reply line");
  const char kind = line[0];
  const std::string_view rest = line.substr(1);
  RedisReply reply;
  switch (kind) {
    case '+': reply = MakeReply(REDIS_REPLY_STATUS, rest); break;
    case '-': reply = MakeReply(REDIS_REPLY_ERROR, rest); break;
    case ':': {
      KVTIER_ASSIGN_OR_RETURN(long long integer, ParseNumber(rest, "an integer reply"));
      reply = MakeReply(REDIS_REPLY_INTEGER, {}, integer);
      break;
    }
    case '$': {
      KVTIER_ASSIGN_OR_RETURN(long long size, ParseNumber(rest, "a bulk length"));
      if (size == -1) {
        reply = MakeReply(REDIS_REPLY_NIL);
        break;
      }
      if (size < 0) return ProtocolError("a bulk length of " + std::to_string(size));
      // The line is consumed: the stream reads the bytes after it.
      BulkStream value(*this, context->fd, static_cast<std::size_t>(size));
      sink.Take(static_cast<std::size_t>(size), value);
      KVTIER_RETURN_IF_ERROR(value.Finish());
      reply = MakeReply(REDIS_REPLY_STRING);
      if (reply != nullptr) reply->len = static_cast<std::size_t>(size);  // IsTakenStringReply: no `str`
      break;
    }
    default:
      return ProtocolError(std::string("a reply of type '") + kind + "', which a GET does not get");
  }
  if (reply == nullptr) return Status::ResourceExhausted("cannot allocate a reply");
  return reply;
}

void RedisValueReader::HandBack(redisContext* context) {
  if (end_ > begin_) (void)redisReaderFeed(context->reader, buffer_.data() + begin_, end_ - begin_);
  begin_ = end_ = 0;
}

void RedisValueReader::TakeFrom(redisContext* context) {
  redisReader* const r = context->reader;
  if (r->len <= r->pos) return;
  // hiredis parses whole replies only, so its unparsed bytes start at a reply: they go before
  // anything this reader holds (which it read after them).
  const std::size_t taken = r->len - r->pos;
  buffer_.insert(buffer_.begin() + static_cast<std::ptrdiff_t>(begin_), r->buf + r->pos, r->buf + r->len);
  end_ += taken;
  r->pos = r->len;  // consumed: hiredis trims its buffer when it next reads
}

Result<std::string_view> RedisValueReader::ReadLine(int fd) {
  std::size_t searched = 0;  // of the held bytes, those without a CRLF (but for a last '\r')
  for (;;) {
    const std::string_view held(buffer_.data() + begin_, end_ - begin_);
    const std::size_t crlf = held.find("\r\n", searched);
    if (crlf != std::string_view::npos) {
      begin_ += crlf + 2;
      return held.substr(0, crlf);
    }
    if (held.size() > kMaxLineBytes) return ProtocolError("a reply line longer than 64 KiB");
    searched = held.empty() ? 0 : held.size() - 1;
    KVTIER_RETURN_IF_ERROR(Receive(fd, {}, kSpillBytes).status());
  }
}

Status RedisValueReader::ReadExact(int fd, std::span<std::byte> out) {
  const std::size_t held = std::min(out.size(), end_ - begin_);
  std::memcpy(out.data(), buffer_.data() + begin_, held);
  begin_ += held;
  out = out.subspan(held);
  while (!out.empty()) {
    KVTIER_ASSIGN_OR_RETURN(std::size_t direct, Receive(fd, out, kSpillBytes));
    out = out.subspan(direct);
  }
  return Status::Ok();
}

Result<std::size_t> RedisValueReader::Receive(int fd, std::span<std::byte> direct, std::size_t spill) {
  if (begin_ > 0) {  // what is held is a reply's first bytes: a few hundred, moved to the front
    std::memmove(buffer_.data(), buffer_.data() + begin_, end_ - begin_);
    end_ -= begin_;
    begin_ = 0;
  }
  if (buffer_.size() < end_ + spill) buffer_.resize(end_ + spill);
  iovec parts[2] = {{direct.data(), direct.size()}, {buffer_.data() + end_, spill}};
  const int first = direct.empty() ? 1 : 0;
  for (;;) {
    const ssize_t n = ::readv(fd, parts + first, 2 - first);
    if (n > 0) {
      const std::size_t into_direct = std::min(static_cast<std::size_t>(n), direct.size());
      end_ += static_cast<std::size_t>(n) - into_direct;
      return into_direct;
    }
    if (n == 0) return Status::Unavailable("server closed the connection");
    if (errno == EINTR) continue;
    // The socket's receive timeout (redisSetTimeout) ran out.
    if (errno == EAGAIN || errno == EWOULDBLOCK) return Status::Unavailable("timed out waiting for a reply");
    return Status::Unavailable(std::string("read failed: ") + std::strerror(errno));
  }
}

}  // namespace kvtier
