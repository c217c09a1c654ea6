// One client connection's state and request handling, apart from the socket: its tenant,
// its mapped shared-memory segments, its pins and its expected reads. The server reads frames and hands each
// decoded request here; the reply (an ErrorReply when refused) goes back on the socket.
//
// Thread-safety: not thread-safe. The server hands a connection's requests to one worker at a
// time, in order (server.h), so a Session is never used by two threads at once.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <unordered_map>
#include <vector>

#include "kvtier/protocol.h"
#include "kvtier/server.h"
#include "kvtier/store.h"
#include "server/shared_segment.h"
#include "server/tenant_namespace.h"

namespace kvtier::server {

struct Reply {
  protocol::Message message;
  bool close = false;  // close the connection once the reply is sent (a refused Hello)
  uint64_t blocks = 0, payload_bytes = 0;  // what the request moved, for the metrics
  uint64_t put_checksum_mismatches = 0;    // Put blocks refused for their end-to-end checksum
  // What a Get reply's inline blocks view (protocol.h, "Views"): kept until it is encoded.
  std::unique_ptr<std::byte[]> inline_storage;
};

class Session {
 public:
  // `tcp`: the client came over TCP (it cannot pass shared-memory descriptors).
  Session(TieredStore& store, const ServerOptions& options, bool tcp);

  // Serves one decoded request that came in protocol `version` (its reply's); `fds` are the
  // descriptors that came with it (Hello's segments).
  Reply Handle(const protocol::Message& request, uint16_t version, std::vector<ScopedFd>& fds);

 private:
  Reply Hello(const protocol::Hello& m, uint16_t version, std::vector<ScopedFd>& fds);
  Reply Lookup(const protocol::Lookup& m);
  Reply Put(const protocol::Put& m);
  Reply Get(const protocol::Get& m, uint16_t version);
  Reply Pin(const protocol::Pin& m);
  Reply Unpin(const protocol::Unpin& m);
  Reply Expect(const protocol::Expect& m);
  Reply Unexpect(const protocol::Unexpect& m);
  Reply Tags(const protocol::Tags& m);
  Reply Importance(const protocol::Importance& m);
  Reply Stats();
  Result<std::span<std::byte>> Resolve(const protocol::PayloadRef& ref) const;

  TieredStore& store_;
  const ServerOptions& options_;
  const bool tcp_;
  std::optional<TenantNamespace> tenant_;  // set by a successful Hello
  std::vector<SharedSegment> segments_;
  std::unordered_map<uint64_t, StorePin> pins_;
  uint64_t next_pin_id_ = 1;
  std::unordered_map<uint64_t, StoreExpectation> expectations_;  // withdrawn when the connection closes
  uint64_t next_expect_id_ = 1;
};

}  // namespace kvtier::server
