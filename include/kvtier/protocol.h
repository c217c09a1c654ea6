// The kvtier wire protocol (version 2): how engines talk to `kvtier serve` over a Unix socket
// (payloads in shared memory the client maps) or TCP. docs/protocol.md describes it; this
// header is its codec: frames and the messages inside them, encoded and decoded without
// trusting a byte of the input.
//
// A frame is a 24-byte header and a payload (all integers little-endian):
//   0 u32 magic "KVTP"   4 u16 version (1 or 2)   6 u16 message type   8 u64 request id
//   16 u32 payload bytes   20 u16 flags (0)   22 u16 zero
// The reply to a request carries its request id and type | kReplyBit, or type kError with a
// Status code and message. A frame whose header or payload does not decode closes the
// connection (the server sends kError first, request id 0 when the header was unreadable).
//
// Version 2 adds end-to-end checksums: a Put carries each block's PayloadChecksum (xxh3-64)
// and a Get reply each block's stored one. A server answers every request in the version of
// its frame, so version 1 clients keep working; docs/protocol.md has the details.
//
// Views. A block's inline bytes (PutBlock::inline_bytes, GetReply::inline_blocks) are views,
// not copies: to encode, into memory the sender keeps until EncodeFrame returns (a Put's
// caller's buffers, a Get reply's read buffer); decoded, into the payload DecodePayload was
// given, valid while that is. A payload is then copied once, into the frame, instead of into
// a message first.
//
// Thread-safety: pure functions over values.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "kvtier/block.h"
#include "kvtier/status.h"

namespace kvtier::protocol {

inline constexpr uint32_t kMagic = 0x5054564B;  // "KVTP" as little-endian bytes
inline constexpr uint16_t kVersion = 2;     // what this build sends by default
inline constexpr uint16_t kMinVersion = 1;  // the oldest it reads and answers (no checksums)
inline constexpr std::size_t kHeaderBytes = 24;

// Bounds every decoder enforces (a server may configure lower ones).
struct Limits {
  uint32_t max_payload_bytes = 16u << 20;  // Default: 16 MiB per frame (payloads travel in shared memory)
  uint32_t max_batch = 65536;              // Default: keys, blocks or reports per message
  uint32_t max_string_bytes = 4096;        // Default: tenant names, error messages

  Status Validate() const;
};

// On the wire: do not renumber.
enum class MessageType : uint16_t {
  kError = 0,
  kHello = 1,
  kLookup = 2,
  kPut = 3,
  kGet = 4,
  kPrefetch = 5,
  kPin = 6,
  kUnpin = 7,
  kTags = 8,
  kImportance = 9,
  kStats = 10,
  kExpect = 11,
  kUnexpect = 12,
};
inline constexpr uint16_t kReplyBit = 0x8000;
// "error", "hello", "lookup", ... "stats" (logs and the metrics' op label); "unknown" otherwise.
std::string_view MessageTypeName(MessageType type);

struct FrameHeader {
  uint16_t version = kVersion;  // kMinVersion..kVersion: decides the payload's layout
  MessageType type = MessageType::kError;
  bool reply = false;
  uint64_t request_id = 0;
  uint32_t payload_bytes = 0;
};

// Where a block's bytes are: `length` bytes at `offset` of the client's shared-memory segment
// `segment` (announced in Hello), or inline in the frame when segment is kInline.
struct PayloadRef {
  static constexpr uint32_t kInline = 0xFFFFFFFF;
  uint32_t segment = kInline;
  uint64_t offset = 0;
  uint32_t length = 0;
};

// --- Requests ---
struct Hello {
  std::string tenant;                   // the namespace this connection's keys live in
  std::string auth_token;               // required off loopback
  std::vector<uint64_t> segment_bytes;  // sizes of the memfd segments passed with SCM_RIGHTS, in order
};
struct Lookup {
  std::vector<std::vector<BlockKey>> chains;  // longest stored prefix of each
};
struct PutBlock {
  BlockKey key;
  uint32_t tokens = 0;
  BlockType type = BlockType::kUserContext;
  TransitionType transition = TransitionType::kSameToolRepeat;
  PayloadRef payload;
  // When payload.segment == kInline: a view (below, "Views").
  std::span<const std::byte> inline_bytes;
  // Version 2 (required there): PayloadChecksum of the payload as the client computed it.
  // Version 1 carries none (nullopt when decoded).
  std::optional<uint64_t> checksum;
};
struct Put {
  std::optional<BlockKey> parent;
  std::vector<PutBlock> blocks;
};
struct Get {
  TransitionType transition = TransitionType::kSameToolRepeat;
  std::vector<BlockKey> keys;
  std::vector<PayloadRef> destinations;  // one per key: where the server writes the bytes
};
struct Prefetch {
  std::vector<BlockKey> keys;
};
struct Pin {
  std::vector<BlockKey> keys;
};
struct Unpin {
  uint64_t pin_id = 0;
};
// A queued request will read `keys` (a chain, root first, stored yet or not): the store keeps
// them over blocks no queued request needs until the expectation is withdrawn (Unexpect) or
// the connection closes (TieredStore::Expect).
struct Expect {
  std::vector<BlockKey> keys;
};
struct Unexpect {
  uint64_t expect_id = 0;
};
struct TagUpdate {
  BlockKey key;
  BlockType type = BlockType::kUserContext;
  TransitionType transition = TransitionType::kSameToolRepeat;
};
struct Tags {
  std::vector<TagUpdate> updates;
};
struct ImportanceReport {
  uint32_t layer = 0;
  uint32_t head = 0;
  double value = 0;
};
struct Importance {
  std::vector<ImportanceReport> reports;
};
struct Stats {};

// --- Replies ---
struct ErrorReply {
  StatusCode code = StatusCode::kInternal;
  std::string message;
};
struct HelloReply {
  uint16_t version = kVersion;
  uint32_t tier_count = 0;
};
struct ChainLookup {
  uint32_t prefix_blocks = 0;
  uint32_t load_blocks = 0;   // worth loading (cost model), <= prefix_blocks
  std::vector<uint8_t> tier;  // per prefix block: its fastest tier
  std::vector<uint32_t> bytes;  // per prefix block: its size (what a Get destination needs)
};
struct LookupReply {
  std::vector<ChainLookup> chains;
};
struct PutReply {
  uint32_t new_blocks = 0, present_blocks = 0, refused_blocks = 0;
};
struct GetReply {
  std::vector<uint32_t> sizes;  // of the blocks read, the stored prefix of the keys
  // The bytes of the blocks read, when the request's destinations were inline (TCP clients);
  // empty when the server wrote them into the client's shared memory. Views ("Views").
  std::vector<std::span<const std::byte>> inline_blocks;
  // Version 2 (required there): one per size, the checksum the block's stored bytes were
  // checked against (its writer's). Version 1 carries none.
  std::vector<uint64_t> checksums;
};
struct PinReply {
  uint64_t pin_id = 0;
  uint32_t pinned_blocks = 0;
};
struct ExpectReply {
  uint64_t expect_id = 0;
};
struct EmptyReply {};  // Prefetch, Unpin, Tags, Importance, Unexpect
struct StatsReply {
  std::string json;
};

using Message = std::variant<ErrorReply, Hello, Lookup, Put, Get, Prefetch, Pin, Unpin, Tags, Importance, Stats,
                             HelloReply, LookupReply, PutReply, GetReply, PinReply, EmptyReply, StatsReply, Expect,
                             Unexpect, ExpectReply>;

// Appends one whole frame (header and payload) for `message` to `out`, in protocol
// `version` (a reply: its request's). `reply_to` is the request being answered (0 and
// ignored for requests); `request_id` names a request. InvalidArgument when the message
// breaks `limits` (a batch too large, a string too long), or lacks the checksums version 2
// requires, or the version is unknown.
Status EncodeFrame(const Message& message, uint64_t request_id, MessageType reply_to, const Limits& limits,
                   std::vector<std::byte>& out, uint16_t version = kVersion);

// The header at the start of `bytes` (at least kHeaderBytes). InvalidArgument for a wrong
// magic, version, type or flags, or a payload over the limit.
Result<FrameHeader> DecodeHeader(std::span<const std::byte> bytes, const Limits& limits);

// The message in `payload` (exactly header.payload_bytes bytes): InvalidArgument for anything
// malformed (truncated, trailing bytes, counts over the limits, unknown enum values).
Result<Message> DecodePayload(const FrameHeader& header, std::span<const std::byte> payload, const Limits& limits);

}  // namespace kvtier::protocol
