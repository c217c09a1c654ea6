// Reads the replies of a pipeline of GETs from a hiredis connection's socket itself, so that a
// value's bytes go from the kernel straight into the buffer they are wanted in.
//
// Why not hiredis's reader: it copies every byte it receives into its own buffer (16 KiB reads
// appended to an sds string) and then each value into a reply object, two copies before the
// caller's own; in a node reading a shared pool those copies were most of its CPU
// (docs/cluster.md). Here the bytes of a value are read with readv into the caller's buffer,
// and only what arrives past a value (the next reply's first few hundred bytes, at most
// kSpillBytes per read) passes through this reader's buffer.
//
// Scope: the replies a GET can get (a bulk string, a nil, an error) and the simple ones around
// them in a pipeline (a status such as ASKING's +OK, an integer). Anything else (arrays, maps,
// RESP3 types) is a protocol error here, and the caller reads such commands through hiredis.
//
// One socket, two readers: before reading, this one takes the bytes hiredis's reader holds and
// has not parsed (it parses only whole replies, so none is half read); before hiredis reads
// again, HandBack feeds it whatever this one read past its last reply.
//
// Thread-safety: used by one thread at a time, with its connection (RedisConnection).
#pragma once

#include <cstddef>
#include <span>
#include <string_view>
#include <vector>

#include <hiredis/hiredis.h>

#include "kvtier/status.h"
#include "tier/redis_connection.h"

namespace kvtier {

class RedisValueReader {
 public:
  static constexpr std::size_t kSpillBytes = 512;

  // Reads the next reply from `context`'s socket (its commands sent already). A bulk string is
  // handed to `sink` (RedisStringSink::Take; what it leaves unread is skipped) and comes back
  // as a reply without its bytes (IsTakenStringReply); other replies come back as hiredis
  // would make them. Unavailable when the socket failed or timed out, or the reply is not one
  // this reader parses: the connection is then unusable.
  Result<RedisReply> Read(redisContext* context, RedisStringSink& sink);
  // Gives hiredis's reader the bytes read past the last reply, before hiredis reads again.
  void HandBack(redisContext* context);

 private:
  class BulkStream;

  // Takes over the bytes hiredis's reader holds unparsed.
  void TakeFrom(redisContext* context);
  // Until the buffer holds a line ending in CRLF: its text, without the CRLF.
  Result<std::string_view> ReadLine(int fd);
  // Exactly out.size() bytes: what the buffer holds first, then straight from the socket, with
  // up to kSpillBytes more read into the buffer behind them.
  Status ReadExact(int fd, std::span<std::byte> out);
  // One read from the socket: into `direct` first, then into the buffer's free space (at most
  // `spill` bytes of it). Returns the bytes that went into `direct`.
  Result<std::size_t> Receive(int fd, std::span<std::byte> direct, std::size_t spill);

  std::vector<char> buffer_;
  std::size_t begin_ = 0;  // the unread bytes are buffer_[begin_, end_)
  std::size_t end_ = 0;
};

}  // namespace kvtier
