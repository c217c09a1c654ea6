#include "kvtier/protocol.h"

#include <bit>
#include <cstring>
#include <type_traits>

namespace kvtier::protocol {
namespace {

static_assert(std::endian::native == std::endian::little, "the codec copies integers in host order");

// A Put block's fields before its inline bytes: key 16, tokens 4, type and transition 2,
// reference 16, checksum 8, the bytes' length 4.
constexpr std::size_t kPutBlockFieldBytes = 50;

class Writer {
 public:
  explicit Writer(std::vector<std::byte>& out) : out_(out) {}
  template <typename T>
  void Put(T value) {
    Store(Extend(sizeof value), value);
  }
  void Key(const BlockKey& key) { Keys({&key, 1}); }
  // Room for `more` bytes, so that a frame of many blocks grows once, not by doubling.
  void Reserve(std::size_t more) { out_.reserve(out_.size() + more); }
  // A run of fields written through Store into bytes appended at once: a lookup's 64 keys or
  // its reply's 128 fields grow the frame once, not once per field.
  std::byte* Extend(std::size_t n) {
    const std::size_t at = out_.size();
    out_.resize(at + n);
    return out_.data() + at;
  }
  template <typename T>
  static std::byte* Store(std::byte* at, T value) {
    static_assert(std::is_trivially_copyable_v<T>);
    std::memcpy(at, &value, sizeof value);
    return at + sizeof value;
  }
  void Keys(std::span<const BlockKey> keys) {
    std::byte* at = Extend(keys.size() * 16);
    for (const BlockKey& k : keys) at = Store(Store(at, k.hi), k.lo);
  }
  void Bytes(std::span<const std::byte> bytes) {
    Put(static_cast<uint32_t>(bytes.size()));
    out_.insert(out_.end(), bytes.begin(), bytes.end());
  }
  void String(const std::string& s) { Bytes(std::as_bytes(std::span(s.data(), s.size()))); }
  void Ref(const PayloadRef& ref) {
    Put(ref.segment);
    Put(ref.offset);
    Put(ref.length);
  }

 private:
  std::vector<std::byte>& out_;
};

// Every read is checked against what is left; the first failure sticks and names the field.
class Reader {
 public:
  Reader(std::span<const std::byte> in, const Limits& limits) : in_(in), limits_(limits) {}
  template <typename T>
  T Get(const char* what) {
    T value{};
    if (!Take(sizeof value, what)) return value;
    std::memcpy(&value, in_.data() + pos_ - sizeof value, sizeof value);
    return value;
  }
  BlockKey Key(const char* what) {
    BlockKey key;
    if (Take(16, what)) key = LoadKey(in_.data() + pos_ - 16);
    return key;
  }
  // A count of elements of at least `min_bytes` each: bounded by the limit and by the bytes left.
  uint32_t Count(const char* what, std::size_t min_bytes) {
    const uint32_t n = Get<uint32_t>(what);
    if (!status_.ok()) return 0;
    if (n > limits_.max_batch) {
      Fail(std::string(what) + ": " + std::to_string(n) + " entries, over the limit of " +
           std::to_string(limits_.max_batch));
      return 0;
    }
    if (min_bytes > 0 && n > (in_.size() - pos_) / min_bytes) {
      Fail(std::string(what) + ": " + std::to_string(n) + " entries cannot fit in the frame");
      return 0;
    }
    return n;
  }
  std::string String(const char* what) {
    const uint32_t n = Get<uint32_t>(what);
    if (!status_.ok()) return {};
    if (n > limits_.max_string_bytes) {
      Fail(std::string(what) + ": a string of " + std::to_string(n) + " bytes, over the limit");
      return {};
    }
    if (!Take(n, what)) return {};
    return std::string(reinterpret_cast<const char*>(in_.data() + pos_ - n), n);
  }
  // A length-prefixed run of bytes, viewed where it lies in the input.
  std::span<const std::byte> Bytes(const char* what) {
    const uint32_t n = Get<uint32_t>(what);
    if (!status_.ok() || !Take(n, what)) return {};
    return in_.subspan(pos_ - n, n);
  }
  PayloadRef Ref(const char* what) {
    PayloadRef ref;
    ref.segment = Get<uint32_t>(what);
    ref.offset = Get<uint64_t>(what);
    ref.length = Get<uint32_t>(what);
    return ref;
  }
  template <typename Enum>
  Enum EnumValue(const char* what, uint8_t count) {
    const uint8_t v = Get<uint8_t>(what);
    if (status_.ok() && v >= count) Fail(std::string(what) + ": unknown value " + std::to_string(v));
    return static_cast<Enum>(v);
  }
  std::vector<BlockKey> Keys(const char* what) {
    std::vector<BlockKey> keys(Count(what, 16));  // Count checked that they fit in what is left
    if (keys.empty() || !Take(keys.size() * 16, what)) return keys;
    const std::byte* at = in_.data() + pos_ - keys.size() * 16;
    for (BlockKey& key : keys) {
      key = LoadKey(at);
      at += 16;
    }
    return keys;
  }
  // A key as Writer::Keys lays it out: `hi`, then `lo`.
  static BlockKey LoadKey(const std::byte* at) {
    BlockKey key;
    std::memcpy(&key.hi, at, 8);
    std::memcpy(&key.lo, at + 8, 8);
    return key;
  }
  Status Finish() {
    if (status_.ok() && pos_ != in_.size()) {
      Fail(std::to_string(in_.size() - pos_) + " bytes after the end of the message");
    }
    return status_;
  }
  void Fail(std::string message) {
    if (status_.ok()) status_ = Status::InvalidArgument("protocol: " + std::move(message));
  }

 private:
  bool Take(std::size_t n, const char* what) {
    if (!status_.ok()) return false;
    if (n > in_.size() - pos_) {
      Fail(std::string(what) + ": the frame ends early");
      return false;
    }
    pos_ += n;
    return true;
  }

  std::span<const std::byte> in_;
  const Limits& limits_;
  std::size_t pos_ = 0;
  Status status_;
};

Status CheckBatch(std::size_t n, const Limits& limits, const char* what) {
  if (n > limits.max_batch) {
    return Status::InvalidArgument(std::string("protocol: ") + what + " has " + std::to_string(n) +
                                   " entries, over the limit of " + std::to_string(limits.max_batch));
  }
  return Status::Ok();
}

Status CheckString(const std::string& s, const Limits& limits, const char* what) {
  if (s.size() > limits.max_string_bytes) {
    return Status::InvalidArgument(std::string("protocol: ") + what + " is longer than " +
                                   std::to_string(limits.max_string_bytes) + " bytes");
  }
  return Status::Ok();
}

// What EncodeFrame needs from a message once its body is written: the header's type and reply
// bit, and whether the message keeps the limits and its version's rules.
struct EncodedBody {
  MessageType type;
  bool reply;
  Status checked;
};

// Writes a message's body, one operator per message type. A failed check does not stop the
// writing: EncodeFrame then takes back everything written, so each layout reads straight through.
class BodyEncoder {
 public:
  BodyEncoder(Writer& w, const Limits& limits, bool checksums, MessageType reply_to)
      : w_(w), limits_(limits), checksums_(checksums), reply_to_(reply_to) {}

  EncodedBody operator()(const ErrorReply& m) const {
    Status checked = CheckString(m.message, limits_, "an error message");
    w_.Put(static_cast<uint8_t>(m.code));
    w_.String(m.message);
    return Reply(MessageType::kError, std::move(checked));
  }
  EncodedBody operator()(const Hello& m) const {
    Status checked = CheckString(m.tenant, limits_, "the tenant");
    if (checked.ok()) checked = CheckString(m.auth_token, limits_, "the auth token");
    if (checked.ok()) checked = CheckBatch(m.segment_bytes.size(), limits_, "Hello's segments");
    w_.String(m.tenant);
    w_.String(m.auth_token);
    w_.Put(static_cast<uint32_t>(m.segment_bytes.size()));
    for (uint64_t b : m.segment_bytes) w_.Put(b);
    return Request(MessageType::kHello, std::move(checked));
  }
  EncodedBody operator()(const Lookup& m) const {
    Status checked = CheckBatch(m.chains.size(), limits_, "Lookup");
    w_.Put(static_cast<uint32_t>(m.chains.size()));
    for (const auto& chain : m.chains) {
      if (checked.ok()) checked = CheckBatch(chain.size(), limits_, "a Lookup chain");
      w_.Put(static_cast<uint32_t>(chain.size()));
      w_.Keys(chain);
    }
    return Request(MessageType::kLookup, std::move(checked));
  }
  EncodedBody operator()(const Put& m) const {
    Status checked = CheckBatch(m.blocks.size(), limits_, "Put");
    w_.Put(static_cast<uint8_t>(m.parent.has_value()));
    if (m.parent) w_.Key(*m.parent);
    w_.Put(static_cast<uint32_t>(m.blocks.size()));
    std::size_t inline_total = 0;
    for (const PutBlock& b : m.blocks) inline_total += b.inline_bytes.size();
    w_.Reserve(inline_total + m.blocks.size() * kPutBlockFieldBytes);
    for (const PutBlock& b : m.blocks) {
      w_.Key(b.key);
      w_.Put(b.tokens);
      w_.Put(static_cast<uint8_t>(b.type));
      w_.Put(static_cast<uint8_t>(b.transition));
      w_.Ref(b.payload);
      if (checksums_) {
        if (checked.ok() && !b.checksum) {
          checked = Status::InvalidArgument("protocol: a version 2 Put needs every block's checksum");
        }
        w_.Put(b.checksum.value_or(0));
      }
      if (b.payload.segment == PayloadRef::kInline) w_.Bytes(b.inline_bytes);
    }
    return Request(MessageType::kPut, std::move(checked));
  }
  EncodedBody operator()(const Get& m) const {
    Status checked = CheckBatch(m.keys.size(), limits_, "Get");
    if (checked.ok() && m.destinations.size() != m.keys.size()) {
      checked = Status::InvalidArgument("protocol: Get needs one destination per key");
    }
    w_.Put(static_cast<uint8_t>(m.transition));
    w_.Put(static_cast<uint32_t>(m.keys.size()));
    for (std::size_t i = 0; i < m.keys.size(); ++i) {
      w_.Key(m.keys[i]);
      w_.Ref(i < m.destinations.size() ? m.destinations[i] : PayloadRef{});
    }
    return Request(MessageType::kGet, std::move(checked));
  }
  EncodedBody operator()(const Prefetch& m) const { return KeysRequest(MessageType::kPrefetch, m.keys, "Prefetch"); }
  EncodedBody operator()(const Pin& m) const { return KeysRequest(MessageType::kPin, m.keys, "Pin"); }
  EncodedBody operator()(const Unpin& m) const {
    w_.Put(m.pin_id);
    return Request(MessageType::kUnpin);
  }
  EncodedBody operator()(const Expect& m) const { return KeysRequest(MessageType::kExpect, m.keys, "Expect"); }
  EncodedBody operator()(const Unexpect& m) const {
    w_.Put(m.expect_id);
    return Request(MessageType::kUnexpect);
  }
  EncodedBody operator()(const Tags& m) const {
    Status checked = CheckBatch(m.updates.size(), limits_, "Tags");
    w_.Put(static_cast<uint32_t>(m.updates.size()));
    for (const TagUpdate& u : m.updates) {
      w_.Key(u.key);
      w_.Put(static_cast<uint8_t>(u.type));
      w_.Put(static_cast<uint8_t>(u.transition));
    }
    return Request(MessageType::kTags, std::move(checked));
  }
  EncodedBody operator()(const Importance& m) const {
    Status checked = CheckBatch(m.reports.size(), limits_, "Importance");
    w_.Put(static_cast<uint32_t>(m.reports.size()));
    for (const ImportanceReport& r : m.reports) {
      w_.Put(r.layer);
      w_.Put(r.head);
      w_.Put(r.value);
    }
    return Request(MessageType::kImportance, std::move(checked));
  }
  EncodedBody operator()(const Stats&) const { return Request(MessageType::kStats); }

  EncodedBody operator()(const HelloReply& m) const {
    w_.Put(m.version);
    w_.Put(m.tier_count);
    return Reply(MessageType::kHello);
  }
  EncodedBody operator()(const LookupReply& m) const {
    Status checked = CheckBatch(m.chains.size(), limits_, "a Lookup reply");
    w_.Put(static_cast<uint32_t>(m.chains.size()));
    for (const ChainLookup& c : m.chains) {
      w_.Put(c.prefix_blocks);
      w_.Put(c.load_blocks);
      if (checked.ok() && c.bytes.size() != c.tier.size()) {
        checked = Status::InvalidArgument("protocol: a Lookup reply needs one size per tier entry");
      }
      w_.Put(static_cast<uint32_t>(c.tier.size()));
      std::byte* at = w_.Extend(c.tier.size() * (sizeof(uint8_t) + sizeof(uint32_t)));
      for (std::size_t i = 0; i < c.tier.size(); ++i) {
        at = Writer::Store(Writer::Store(at, c.tier[i]), i < c.bytes.size() ? c.bytes[i] : 0u);
      }
    }
    return Reply(MessageType::kLookup, std::move(checked));
  }
  EncodedBody operator()(const PutReply& m) const {
    w_.Put(m.new_blocks);
    w_.Put(m.present_blocks);
    w_.Put(m.refused_blocks);
    return Reply(MessageType::kPut);
  }
  EncodedBody operator()(const GetReply& m) const {
    Status checked = CheckBatch(m.sizes.size(), limits_, "a Get reply");
    if (checked.ok() && !m.inline_blocks.empty() && m.inline_blocks.size() != m.sizes.size()) {
      checked = Status::InvalidArgument("protocol: a Get reply carries every block inline or none");
    }
    if (checked.ok() && checksums_ && m.checksums.size() != m.sizes.size()) {
      checked = Status::InvalidArgument("protocol: a version 2 Get reply needs one checksum per block");
    }
    w_.Put(static_cast<uint32_t>(m.sizes.size()));
    for (std::size_t i = 0; i < m.sizes.size(); ++i) {
      w_.Put(m.sizes[i]);
      if (checksums_) w_.Put(i < m.checksums.size() ? m.checksums[i] : uint64_t{0});
    }
    w_.Put(static_cast<uint32_t>(m.inline_blocks.size()));
    std::size_t inline_total = 0;
    for (const auto& b : m.inline_blocks) inline_total += b.size() + 4;
    w_.Reserve(inline_total);
    for (const auto& b : m.inline_blocks) w_.Bytes(b);
    return Reply(MessageType::kGet, std::move(checked));
  }
  EncodedBody operator()(const PinReply& m) const {
    w_.Put(m.pin_id);
    w_.Put(m.pinned_blocks);
    return Reply(MessageType::kPin);
  }
  EncodedBody operator()(const ExpectReply& m) const {
    w_.Put(m.expect_id);
    return Reply(MessageType::kExpect);
  }
  // An empty reply says what it answers only through its header.
  EncodedBody operator()(const EmptyReply&) const { return Reply(reply_to_); }
  EncodedBody operator()(const StatsReply& m) const {
    w_.Bytes(std::as_bytes(std::span(m.json.data(), m.json.size())));
    return Reply(MessageType::kStats);
  }

 private:
  static EncodedBody Request(MessageType type, Status checked = Status::Ok()) {
    return {type, false, std::move(checked)};
  }
  static EncodedBody Reply(MessageType type, Status checked = Status::Ok()) { return {type, true, std::move(checked)}; }
  // Prefetch, Pin and Expect: a batch of keys and nothing else.
  EncodedBody KeysRequest(MessageType type, const std::vector<BlockKey>& keys, const char* what) const {
    Status checked = CheckBatch(keys.size(), limits_, what);
    w_.Put(static_cast<uint32_t>(keys.size()));
    w_.Keys(keys);
    return Request(type, std::move(checked));
  }

  Writer& w_;
  const Limits& limits_;
  const bool checksums_;
  const MessageType reply_to_;
};

ErrorReply DecodeErrorReply(Reader& r) {
  ErrorReply m;
  const uint8_t code = r.Get<uint8_t>("error code");
  if (code > static_cast<uint8_t>(StatusCode::kPermissionDenied)) r.Fail("unknown status code " + std::to_string(code));
  m.code = static_cast<StatusCode>(code);
  m.message = r.String("error message");
  return m;
}

Hello DecodeHello(Reader& r) {
  Hello m;
  m.tenant = r.String("tenant");
  m.auth_token = r.String("auth token");
  m.segment_bytes.resize(r.Count("segments", 8));
  for (uint64_t& b : m.segment_bytes) b = r.Get<uint64_t>("segment size");
  return m;
}

Lookup DecodeLookup(Reader& r) {
  Lookup m;
  m.chains.resize(r.Count("chains", 4));
  for (auto& chain : m.chains) chain = r.Keys("chain keys");
  return m;
}

Put DecodePut(Reader& r, bool checksums) {
  Put m;
  if (r.Get<uint8_t>("has parent") != 0) m.parent = r.Key("parent");
  m.blocks.resize(r.Count("blocks", 16 + 4 + 2 + 16 + (checksums ? 8 : 0)));
  for (PutBlock& b : m.blocks) {
    b.key = r.Key("block key");
    b.tokens = r.Get<uint32_t>("tokens");
    b.type = r.EnumValue<BlockType>("block type", 4);
    b.transition = r.EnumValue<TransitionType>("transition", 4);
    b.payload = r.Ref("payload");
    if (checksums) b.checksum = r.Get<uint64_t>("checksum");
    if (b.payload.segment == PayloadRef::kInline) {
      b.inline_bytes = r.Bytes("inline payload");
      if (b.inline_bytes.size() != b.payload.length) r.Fail("an inline payload's length is not its reference's");
    }
  }
  return m;
}

Get DecodeGet(Reader& r) {
  Get m;
  m.transition = r.EnumValue<TransitionType>("transition", 4);
  const uint32_t n = r.Count("keys", 32);
  m.keys.resize(n);
  m.destinations.resize(n);
  for (uint32_t i = 0; i < n; ++i) {
    m.keys[i] = r.Key("key");
    m.destinations[i] = r.Ref("destination");
  }
  return m;
}

Tags DecodeTags(Reader& r) {
  Tags m;
  m.updates.resize(r.Count("tag updates", 18));
  for (TagUpdate& u : m.updates) {
    u.key = r.Key("key");
    u.type = r.EnumValue<BlockType>("block type", 4);
    u.transition = r.EnumValue<TransitionType>("transition", 4);
  }
  return m;
}

Importance DecodeImportance(Reader& r) {
  Importance m;
  m.reports.resize(r.Count("reports", 16));
  for (ImportanceReport& rep : m.reports) {
    rep.layer = r.Get<uint32_t>("layer");
    rep.head = r.Get<uint32_t>("head");
    rep.value = r.Get<double>("importance");
  }
  return m;
}

Message DecodeRequest(MessageType type, Reader& r, bool checksums) {
  switch (type) {
    case MessageType::kHello: return DecodeHello(r);
    case MessageType::kLookup: return DecodeLookup(r);
    case MessageType::kPut: return DecodePut(r, checksums);
    case MessageType::kGet: return DecodeGet(r);
    case MessageType::kPrefetch: return Prefetch{r.Keys("keys")};
    case MessageType::kPin: return Pin{r.Keys("keys")};
    case MessageType::kUnpin: return Unpin{r.Get<uint64_t>("pin id")};
    case MessageType::kExpect: return Expect{r.Keys("keys")};
    case MessageType::kUnexpect: return Unexpect{r.Get<uint64_t>("expect id")};
    case MessageType::kTags: return DecodeTags(r);
    case MessageType::kImportance: return DecodeImportance(r);
    case MessageType::kStats: return Stats{};
    case MessageType::kError: break;  // DecodePayload reads an error before it asks for a request
  }
  return Message{};
}

HelloReply DecodeHelloReply(Reader& r) {
  HelloReply m;
  m.version = r.Get<uint16_t>("version");
  m.tier_count = r.Get<uint32_t>("tier count");
  return m;
}

LookupReply DecodeLookupReply(Reader& r) {
  LookupReply m;
  m.chains.resize(r.Count("chains", 12));
  for (ChainLookup& c : m.chains) {
    c.prefix_blocks = r.Get<uint32_t>("prefix blocks");
    c.load_blocks = r.Get<uint32_t>("load blocks");
    const std::size_t n = r.Count("tiers", 5);
    c.tier.resize(n);
    c.bytes.resize(n);
    for (std::size_t i = 0; i < n; ++i) {
      c.tier[i] = r.Get<uint8_t>("tier");
      c.bytes[i] = r.Get<uint32_t>("block size");
    }
  }
  return m;
}

PutReply DecodePutReply(Reader& r) {
  PutReply m;
  m.new_blocks = r.Get<uint32_t>("new blocks");
  m.present_blocks = r.Get<uint32_t>("present blocks");
  m.refused_blocks = r.Get<uint32_t>("refused blocks");
  return m;
}

GetReply DecodeGetReply(Reader& r, bool checksums) {
  GetReply m;
  m.sizes.resize(r.Count("sizes", checksums ? 12 : 4));
  if (checksums) m.checksums.resize(m.sizes.size());
  for (std::size_t i = 0; i < m.sizes.size(); ++i) {
    m.sizes[i] = r.Get<uint32_t>("size");
    if (checksums) m.checksums[i] = r.Get<uint64_t>("checksum");
  }
  const std::size_t inline_count = r.Count("inline blocks", 4);
  if (inline_count != 0 && inline_count != m.sizes.size()) {
    r.Fail("a Get reply carries every block inline or none");
    return m;  // the blocks are not read: they would be matched against sizes that are not there
  }
  m.inline_blocks.resize(inline_count);
  for (std::size_t i = 0; i < m.inline_blocks.size(); ++i) {
    m.inline_blocks[i] = r.Bytes("inline block");
    if (m.inline_blocks[i].size() != m.sizes[i]) r.Fail("an inline block's length is not its size");
  }
  return m;
}

PinReply DecodePinReply(Reader& r) {
  PinReply m;
  m.pin_id = r.Get<uint64_t>("pin id");
  m.pinned_blocks = r.Get<uint32_t>("pinned blocks");
  return m;
}

Message DecodeReply(MessageType type, Reader& r, bool checksums) {
  switch (type) {
    case MessageType::kHello: return DecodeHelloReply(r);
    case MessageType::kLookup: return DecodeLookupReply(r);
    case MessageType::kPut: return DecodePutReply(r);
    case MessageType::kGet: return DecodeGetReply(r, checksums);
    case MessageType::kPin: return DecodePinReply(r);
    case MessageType::kExpect: return ExpectReply{r.Get<uint64_t>("expect id")};
    case MessageType::kStats: {
      const std::span<const std::byte> json = r.Bytes("stats");
      return StatsReply{std::string(reinterpret_cast<const char*>(json.data()), json.size())};
    }
    case MessageType::kPrefetch:
    case MessageType::kUnpin:
    case MessageType::kUnexpect:
    case MessageType::kTags:
    case MessageType::kImportance: return EmptyReply{};
    case MessageType::kError: break;  // DecodePayload reads an error before it asks for a reply
  }
  return Message{};
}

}  // namespace

std::string_view MessageTypeName(MessageType type) {
  switch (type) {
    case MessageType::kError: return "error";
    case MessageType::kHello: return "hello";
    case MessageType::kLookup: return "lookup";
    case MessageType::kPut: return "put";
    case MessageType::kGet: return "get";
    case MessageType::kPrefetch: return "prefetch";
    case MessageType::kPin: return "pin";
    case MessageType::kUnpin: return "unpin";
    case MessageType::kTags: return "tags";
    case MessageType::kImportance: return "importance";
    case MessageType::kStats: return "stats";
    case MessageType::kExpect: return "expect";
    case MessageType::kUnexpect: return "unexpect";
  }
  return "unknown";
}

Status Limits::Validate() const {
  if (max_payload_bytes < 64) return Status::InvalidArgument("protocol limits: max_payload_bytes below 64");
  if (max_batch == 0) return Status::InvalidArgument("protocol limits: max_batch must be > 0");
  return Status::Ok();
}

Status EncodeFrame(const Message& message, uint64_t request_id, MessageType reply_to, const Limits& limits,
                   std::vector<std::byte>& out, uint16_t version) {
  if (version < kMinVersion || version > kVersion) {
    return Status::InvalidArgument("protocol: cannot encode version " + std::to_string(version));
  }
  const bool checksums = version >= 2;  // end-to-end checksums in Put and in Get's reply
  // The payload is encoded in place after room for the header, which is written once the
  // payload says what it is: a block's bytes are copied into the frame once, not twice.
  const std::size_t frame_start = out.size();
  out.resize(frame_start + kHeaderBytes);
  Writer w(out);
  EncodedBody body = std::visit(BodyEncoder(w, limits, checksums, reply_to), message);
  const std::size_t payload_bytes = out.size() - frame_start - kHeaderBytes;
  if (body.checked.ok() && payload_bytes > limits.max_payload_bytes) {
    body.checked = Status::InvalidArgument("protocol: a " + std::to_string(payload_bytes) +
                                           "-byte payload is over the " + std::to_string(limits.max_payload_bytes) +
                                           "-byte limit; send payloads in shared memory");
  }
  if (!body.checked.ok()) {
    out.resize(frame_start);  // `out` as it was: a failed encoding appends nothing
    return std::move(body.checked);
  }
  std::byte* header = out.data() + frame_start;
  header = Writer::Store(header, kMagic);
  header = Writer::Store(header, version);
  header = Writer::Store(header,
                         static_cast<uint16_t>(static_cast<uint16_t>(body.type) | (body.reply ? kReplyBit : 0)));
  header = Writer::Store(header, request_id);
  header = Writer::Store(header, static_cast<uint32_t>(payload_bytes));
  header = Writer::Store(header, uint16_t{0});
  Writer::Store(header, uint16_t{0});
  return Status::Ok();
}

Result<FrameHeader> DecodeHeader(std::span<const std::byte> bytes, const Limits& limits) {
  if (bytes.size() < kHeaderBytes) return Status::InvalidArgument("protocol: a frame header needs 24 bytes");
  Reader r(bytes.first(kHeaderBytes), limits);
  const uint32_t magic = r.Get<uint32_t>("magic");
  const uint16_t version = r.Get<uint16_t>("version");
  const uint16_t type = r.Get<uint16_t>("type");
  FrameHeader h;
  h.request_id = r.Get<uint64_t>("request id");
  h.payload_bytes = r.Get<uint32_t>("payload bytes");
  const uint16_t flags = r.Get<uint16_t>("flags");
  const uint16_t zero = r.Get<uint16_t>("reserved");
  if (magic != kMagic) return Status::InvalidArgument("protocol: not a kvtier frame (bad magic)");
  if (version < kMinVersion || version > kVersion) {
    return Status::InvalidArgument("protocol: version " + std::to_string(version) + " is not supported (this reads " +
                                   std::to_string(kMinVersion) + " to " + std::to_string(kVersion) + ")");
  }
  h.version = version;
  if (flags != 0 || zero != 0) return Status::InvalidArgument("protocol: unknown header flags");
  h.reply = (type & kReplyBit) != 0;
  const uint16_t base = static_cast<uint16_t>(type & ~kReplyBit);
  if (base > static_cast<uint16_t>(MessageType::kUnexpect)) {
    return Status::InvalidArgument("protocol: unknown message type " + std::to_string(base));
  }
  h.type = static_cast<MessageType>(base);
  if (h.payload_bytes > limits.max_payload_bytes) {
    return Status::InvalidArgument("protocol: a " + std::to_string(h.payload_bytes) + "-byte payload is over the " +
                                   std::to_string(limits.max_payload_bytes) + "-byte limit");
  }
  return h;
}

Result<Message> DecodePayload(const FrameHeader& h, std::span<const std::byte> payload, const Limits& limits) {
  if (payload.size() != h.payload_bytes) return Status::InvalidArgument("protocol: the payload's size is not the header's");
  Reader r(payload, limits);
  const bool checksums = h.version >= 2;  // end-to-end checksums in Put and in Get's reply
  Message out;
  if (h.type == MessageType::kError) {
    out = DecodeErrorReply(r);
  } else if (!h.reply) {
    out = DecodeRequest(h.type, r, checksums);
  } else {
    out = DecodeReply(h.type, r, checksums);
  }
  KVTIER_RETURN_IF_ERROR(r.Finish());
  return out;
}

}  // namespace kvtier::protocol
