// TLS for the service's TCP connections (OpenSSL): a context built once from the configured
// certificate, key and CA files, and per connection a handshake that yields the ByteStream
// the frames then travel through (byte_stream.h). TLS 1.2 is the minimum, 1.3 preferred.
//
// Handshakes run on the connection's own thread with a deadline, so a client that connects
// and says nothing holds only its own slot, and only until the deadline.
//
// Thread-safety: a TlsContext may be shared by any number of threads once built; each stream
// belongs to its connection's thread.
#pragma once

#include <memory>
#include <string>

#include "kvtier/client.h"
#include "kvtier/server.h"
#include "kvtier/status.h"
#include "server/byte_stream.h"

struct ssl_ctx_st;  // OpenSSL's SSL_CTX

namespace kvtier::server {

class TlsContext {
 public:
  // InvalidArgument naming the file for a certificate, key or CA file that does not load,
  // and for a key that is not the certificate's.
  static Result<std::unique_ptr<TlsContext>> ForServer(const ServerTlsOptions& options);
  static Result<std::unique_ptr<TlsContext>> ForClient(const ClientTlsOptions& options);
  ~TlsContext();
  TlsContext(const TlsContext&) = delete;
  TlsContext& operator=(const TlsContext&) = delete;

  // The server's side of a handshake on `fd` (a connected TCP socket, made non-blocking),
  // finished within `timeout_ms` (0: no limit). Unavailable when it fails or runs out of time.
  Result<std::unique_ptr<ByteStream>> Accept(int fd, int timeout_ms) const;
  // The client's side: the server's certificate must verify and name `server_name` (a host
  // name or an IP address). PermissionDenied when it does not; Unavailable for the rest.
  Result<std::unique_ptr<ByteStream>> Connect(int fd, const std::string& server_name, int timeout_ms) const;

 private:
  explicit TlsContext(ssl_ctx_st* ctx) : ctx_(ctx) {}
  ssl_ctx_st* ctx_;  // owned
};

// Whether the first bytes waiting on `fd` are a kvtier frame's magic rather than a TLS
// record: a plain client knocking on a TLS port. Waits up to `timeout_ms` (0: no limit) for
// the first bytes; Unavailable when none come.
Result<bool> PlainKvtierWaiting(int fd, int timeout_ms);

}  // namespace kvtier::server
