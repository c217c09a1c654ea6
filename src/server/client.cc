#include "kvtier/client.h"

#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/un.h>

#include <atomic>
#include <cstring>
#include <mutex>
#include <variant>

#include "server/frame_io.h"
#include "server/shared_segment.h"
#include "server/tls.h"

namespace kvtier {

struct Client::Impl {
  ClientOptions options;
  uint16_t version = protocol::kVersion;  // of every frame sent: kMinVersion without checksums
  std::atomic<uint64_t> checksum_mismatches{0};
  std::unique_ptr<server::FrameSocket> socket;  // GUARDED_BY(mu)
  std::optional<server::SharedSegment> segment;
  uint32_t tier_count = 0;
  std::mutex mu;  // one request at a time on the connection
  uint64_t next_request_id = 1;  // GUARDED_BY(mu)
  bool broken = false;           // GUARDED_BY(mu)
  std::vector<std::byte> out, in;  // GUARDED_BY(mu)

  // Sends `request` and waits for its reply: the reply message, or the server's error.
  Result<protocol::Message> Call(const protocol::Message& request, std::span<const int> fds = {}) {
    std::lock_guard lock(mu);
    return CallLocked(request, fds);
  }
  // Call with `mu` held; the reply's views (protocol.h) point into `in`, valid while it is.
  Result<protocol::Message> CallLocked(const protocol::Message& request, std::span<const int> fds = {}) {
    if (broken) return Status::Unavailable("the connection to the kvtier server broke earlier; connect again");
    const uint64_t id = next_request_id++;
    out.clear();
    KVTIER_RETURN_IF_ERROR(protocol::EncodeFrame(request, id, protocol::MessageType::kError, options.limits, out, version));
    Result<protocol::Message> reply = Exchange(id, fds);
    if (!reply.ok() && (reply.status().code() == StatusCode::kUnavailable)) broken = true;
    return reply;
  }

  Result<protocol::Message> Exchange(uint64_t id, std::span<const int> fds) {
    const Status sent = socket->Send(out, fds);
    // A server that refused the connection (its limit) wrote why before closing: read that
    // rather than report only the failed send.
    if (!sent.ok() && !socket->ReadableNow()) {
      broken = true;
      return Status::Unavailable("kvtier server: " + sent.message());
    }
    std::vector<ScopedFd> unexpected_fds;
    Result<server::FrameSocket::Frame> frame = socket->Receive(options.limits, in, unexpected_fds);
    if (!frame.ok()) {
      broken = true;
      return Status::Unavailable("kvtier server: " + (sent.ok() ? frame.status() : sent).message());
    }
    const protocol::FrameHeader& header = frame->header;
    if (!header.reply || header.request_id != id) {
      if (header.type == protocol::MessageType::kError) {  // e.g. refused before reading (connection limit)
        Result<protocol::Message> error = protocol::DecodePayload(header, frame->payload, options.limits);
        broken = true;
        if (error.ok()) {
          const auto& e = std::get<protocol::ErrorReply>(*error);
          return Status::FromCode(e.code, "kvtier server: " + e.message);
        }
      }
      broken = true;
      return Status::Unavailable("kvtier server answered request " + std::to_string(header.request_id) +
                                 ", expected " + std::to_string(id));
    }
    KVTIER_ASSIGN_OR_RETURN(protocol::Message reply, protocol::DecodePayload(header, frame->payload, options.limits));
    if (const auto* e = std::get_if<protocol::ErrorReply>(&reply)) return Status::FromCode(e->code, "kvtier server: " + e->message);
    return reply;
  }

  template <typename T>
  static Result<T> ReplyOf(Result<protocol::Message> reply) {
    if (!reply.ok()) return reply.status();
    if (auto* m = std::get_if<T>(&*reply)) return std::move(*m);
    return Status::Internal("kvtier server sent a reply of the wrong type");
  }
  template <typename T>
  Result<T> CallFor(const protocol::Message& request) {
    return ReplyOf<T>(Call(request));
  }

  // Puts block i of a Get's reply into `dst` (its size): copied from the frame when it came
  // inline, already there when it came through shared memory. In version 2 the bytes in
  // `dst` are checked against the server's checksum (hashed while copied when inline), and
  // a block that fails is zeroed and is Corruption.
  Status Receive(const protocol::GetReply& reply, std::size_t i, const BlockKey& key, std::span<std::byte> dst) {
    const bool checked = version >= 2;
    if (checked && reply.checksums.size() != reply.sizes.size()) {
      return Status::Internal("kvtier server sent a Get reply without its checksums");
    }
    uint64_t got = 0;
    if (!reply.inline_blocks.empty()) {
      if (!checked) {
        std::memcpy(dst.data(), reply.inline_blocks[i].data(), dst.size());
        return Status::Ok();
      }
      got = CopyWithChecksum(dst, reply.inline_blocks[i]);
    } else if (checked) {
      got = PayloadChecksum(dst);
    }
    if (!checked || got == reply.checksums[i]) return Status::Ok();
    std::fill(dst.begin(), dst.end(), std::byte{0});
    checksum_mismatches.fetch_add(1, std::memory_order_relaxed);
    return Status::Corruption("kvtier client: block " + std::to_string(i) + " (" + key.ToHex() +
                              ") does not match the checksum the server sent with it: its bytes changed in shared "
                              "memory or in transit. Nothing was returned; retry the Get");
  }

  bool InShared(std::span<const std::byte> bytes) const {
    if (!segment || bytes.empty()) return false;
    const std::span<std::byte> shm = segment->bytes();
    return bytes.data() >= shm.data() && bytes.data() + bytes.size() <= shm.data() + shm.size();
  }

  protocol::PayloadRef RefTo(std::span<const std::byte> bytes) const {
    return {.segment = 0, .offset = static_cast<uint64_t>(bytes.data() - segment->bytes().data()),
            .length = static_cast<uint32_t>(bytes.size())};
  }

  Status Hello() {
    protocol::Hello hello{.tenant = options.tenant, .auth_token = options.auth_token, .segment_bytes = {}};
    std::vector<int> fds;
    if (segment) {
      hello.segment_bytes.push_back(segment->bytes().size());
      fds.push_back(segment->fd());
    }
    KVTIER_ASSIGN_OR_RETURN(protocol::Message reply, Call(hello, fds));
    const auto* m = std::get_if<protocol::HelloReply>(&reply);
    if (m == nullptr) return Status::Internal("kvtier server answered Hello with another message");
    if (m->version != version) {
      return Status::Internal("kvtier server answered a version " + std::to_string(version) + " Hello in version " +
                              std::to_string(m->version));
    }
    tier_count = m->tier_count;
    return Status::Ok();
  }
};

namespace {

Result<ScopedFd> DialUnix(const std::string& path) {
  sockaddr_un addr{};
  if (path.size() >= sizeof(addr.sun_path)) return Status::InvalidArgument("unix socket path '" + path + "' is too long");
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  ScopedFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd.valid()) return ErrnoStatus(path, "socket", errno);
  if (::connect(fd.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) != 0) {
    return Status::Unavailable(path + ": cannot connect to the kvtier server: " + std::strerror(errno) +
                               " (is `kvtier serve` running?)");
  }
  return fd;
}

Result<ScopedFd> DialTcp(const std::string& host, uint16_t port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  addrinfo* found = nullptr;
  if (const int rc = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found); rc != 0) {
    return Status::InvalidArgument("cannot resolve '" + host + "': " + ::gai_strerror(rc));
  }
  std::unique_ptr<addrinfo, decltype(&::freeaddrinfo)> list(found, &::freeaddrinfo);
  std::string last_error = "no address";
  for (addrinfo* a = found; a != nullptr; a = a->ai_next) {
    ScopedFd fd(::socket(a->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (!fd.valid()) continue;
    if (::connect(fd.get(), a->ai_addr, a->ai_addrlen) == 0) {
      const int one = 1;
      ::setsockopt(fd.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
      return fd;
    }
    last_error = std::strerror(errno);
  }
  return Status::Unavailable(host + ":" + std::to_string(port) + ": cannot connect to the kvtier server: " + last_error);
}

}  // namespace

Result<std::unique_ptr<Client>> Client::ConnectUnix(const std::string& socket_path, ClientOptions options) {
  KVTIER_RETURN_IF_ERROR(options.limits.Validate());
  KVTIER_ASSIGN_OR_RETURN(ScopedFd fd, DialUnix(socket_path));
  auto impl = std::make_unique<Impl>();
  impl->options = std::move(options);
  impl->version = impl->options.checksums ? protocol::kVersion : protocol::kMinVersion;
  impl->socket = std::make_unique<server::FrameSocket>(std::move(fd), impl->options.io_timeout_ms);
  if (impl->options.shared_memory_bytes > 0) {
    KVTIER_ASSIGN_OR_RETURN(server::SharedSegment segment,
                            server::SharedSegment::Create(impl->options.shared_memory_bytes, "kvtier-client"));
    impl->segment.emplace(std::move(segment));
  }
  KVTIER_RETURN_IF_ERROR(impl->Hello());
  return std::unique_ptr<Client>(new Client(std::move(impl)));
}

Result<std::unique_ptr<Client>> Client::ConnectTcp(const std::string& host, uint16_t port, ClientOptions options) {
  KVTIER_RETURN_IF_ERROR(options.limits.Validate());
  std::unique_ptr<server::TlsContext> tls;
  if (options.tls.enabled) {
    KVTIER_ASSIGN_OR_RETURN(tls, server::TlsContext::ForClient(options.tls));
  }
  KVTIER_ASSIGN_OR_RETURN(ScopedFd fd, DialTcp(host, port));
  auto impl = std::make_unique<Impl>();
  impl->options = std::move(options);
  impl->version = impl->options.checksums ? protocol::kVersion : protocol::kMinVersion;
  impl->socket = std::make_unique<server::FrameSocket>(std::move(fd), impl->options.io_timeout_ms);
  if (tls != nullptr) {
    const std::string& name = impl->options.tls.server_name.empty() ? host : impl->options.tls.server_name;
    Result<std::unique_ptr<server::ByteStream>> stream = tls->Connect(impl->socket->fd(), name, impl->options.io_timeout_ms);
    if (!stream.ok()) return stream.status().WithContext(host + ":" + std::to_string(port));
    impl->socket->UseStream(std::move(*stream));
  }
  KVTIER_RETURN_IF_ERROR(impl->Hello());
  return std::unique_ptr<Client>(new Client(std::move(impl)));
}

Client::Client(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Client::~Client() = default;

std::span<std::byte> Client::shared_memory() const {
  return impl_->segment ? impl_->segment->bytes() : std::span<std::byte>();
}
uint32_t Client::tier_count() const { return impl_->tier_count; }

Result<std::vector<protocol::ChainLookup>> Client::Lookup(const std::vector<std::vector<BlockKey>>& chains) {
  KVTIER_ASSIGN_OR_RETURN(protocol::LookupReply reply, impl_->CallFor<protocol::LookupReply>(protocol::Lookup{chains}));
  return std::move(reply.chains);
}

Result<protocol::PutReply> Client::Put(std::span<const ClientBlock> blocks, const std::optional<BlockKey>& parent) {
  protocol::Put put{.parent = parent, .blocks = {}};
  put.blocks.reserve(blocks.size());
  for (const ClientBlock& b : blocks) {
    protocol::PutBlock p{.key = b.key, .tokens = b.tokens, .type = b.type, .transition = b.transition,
                         .payload = {}, .inline_bytes = {}, .checksum = {}};
    const bool checksums = impl_->version >= 2;
    if (impl_->InShared(b.payload)) {
      p.payload = impl_->RefTo(b.payload);
      if (checksums) p.checksum = PayloadChecksum(b.payload);
    } else {
      p.payload.length = static_cast<uint32_t>(b.payload.size());
      // Viewed, and copied once, into the frame. Bytes the caller changes after the hash
      // make the server refuse the block (Corruption), never store it.
      p.inline_bytes = b.payload;
      if (checksums) p.checksum = PayloadChecksum(b.payload);
    }
    put.blocks.push_back(std::move(p));
  }
  return impl_->CallFor<protocol::PutReply>(put);
}

Result<std::vector<uint32_t>> Client::Get(std::span<const BlockKey> keys, std::span<const std::span<std::byte>> outs,
                                          TransitionType transition) {
  if (outs.size() != keys.size()) return Status::InvalidArgument("Get needs one buffer per key");
  protocol::Get get{.transition = transition, .keys = {keys.begin(), keys.end()}, .destinations = {}};
  bool shared = false;
  for (std::size_t i = 0; i < outs.size(); ++i) {
    const bool in_shared = impl_->InShared(outs[i]);
    if (i == 0) shared = in_shared;
    if (in_shared != shared) return Status::InvalidArgument("Get's buffers must all lie inside the shared memory or all outside");
    if (shared) {
      get.destinations.push_back(impl_->RefTo(outs[i]));
    } else {
      get.destinations.push_back({.segment = protocol::PayloadRef::kInline, .offset = 0,
                                  .length = static_cast<uint32_t>(outs[i].size())});
    }
  }
  // `mu` held until the blocks are out of the reply: its inline blocks are views into `in`.
  std::lock_guard lock(impl_->mu);
  KVTIER_ASSIGN_OR_RETURN(protocol::GetReply reply, Impl::ReplyOf<protocol::GetReply>(impl_->CallLocked(get)));
  if (reply.sizes.size() > keys.size()) return Status::Internal("kvtier server read more blocks than asked");
  for (std::size_t i = 0; i < reply.sizes.size(); ++i) {
    if (reply.sizes[i] > outs[i].size()) return Status::Internal("kvtier server sent a block larger than its buffer");
    KVTIER_RETURN_IF_ERROR(impl_->Receive(reply, i, keys[i], outs[i].first(reply.sizes[i])));
  }
  return std::move(reply.sizes);
}

Status Client::Prefetch(std::span<const BlockKey> keys) {
  return impl_->CallFor<protocol::EmptyReply>(protocol::Prefetch{{keys.begin(), keys.end()}}).status();
}

Result<protocol::PinReply> Client::Pin(std::span<const BlockKey> keys) {
  return impl_->CallFor<protocol::PinReply>(protocol::Pin{{keys.begin(), keys.end()}});
}

Status Client::Unpin(uint64_t pin_id) { return impl_->CallFor<protocol::EmptyReply>(protocol::Unpin{pin_id}).status(); }

Result<uint64_t> Client::Expect(std::span<const BlockKey> keys) {
  KVTIER_ASSIGN_OR_RETURN(protocol::ExpectReply reply,
                          impl_->CallFor<protocol::ExpectReply>(protocol::Expect{{keys.begin(), keys.end()}}));
  return reply.expect_id;
}

Status Client::Unexpect(uint64_t expect_id) {
  return impl_->CallFor<protocol::EmptyReply>(protocol::Unexpect{expect_id}).status();
}

Status Client::UpdateTags(std::span<const protocol::TagUpdate> updates) {
  return impl_->CallFor<protocol::EmptyReply>(protocol::Tags{{updates.begin(), updates.end()}}).status();
}

Status Client::ReportImportance(std::span<const protocol::ImportanceReport> reports) {
  return impl_->CallFor<protocol::EmptyReply>(protocol::Importance{{reports.begin(), reports.end()}}).status();
}

uint64_t Client::checksum_mismatches() const { return impl_->checksum_mismatches.load(std::memory_order_relaxed); }

Result<std::string> Client::Stats() {
  KVTIER_ASSIGN_OR_RETURN(protocol::StatsReply reply, impl_->CallFor<protocol::StatsReply>(protocol::Stats{}));
  return std::move(reply.json);
}

}  // namespace kvtier
