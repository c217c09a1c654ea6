// TLS for the service's TCP connections (OpenSSL): a context built once from the configured
// certificate, key and CA files, and per connection a handshake that yields the ByteStream
// the frames then travel through (byte_stream.h). TLS 1.2 is the minimum, 1.3 preferred.
//
// The server's handshakes are stepped by its event loop whenever the socket is ready
// (TlsAccept), so a client that connects and says nothing costs no thread; the server cuts
// it off at its deadline. The client's handshake blocks, with a deadline.
//
// Thread-safety: a TlsContext may be shared by any number of threads once built; each
// TlsAccept and each stream is used by one thread at a time.
#pragma once

#include <memory>
#include <string>

#include "kvtier/client.h"
#include "kvtier/server.h"
#include "kvtier/status.h"
#include "server/byte_stream.h"

struct ssl_ctx_st;  // OpenSSL's SSL_CTX
struct ssl_st;      // OpenSSL's SSL

namespace kvtier::server {

class TlsAccept;

class TlsContext {
 public:
  // InvalidArgument naming the file for a certificate, key or CA file that does not load,
  // and for a key that is not the certificate's.
  static Result<std::unique_ptr<TlsContext>> ForServer(const ServerTlsOptions& options);
  static Result<std::unique_ptr<TlsContext>> ForClient(const ClientTlsOptions& options);
  ~TlsContext();
  TlsContext(const TlsContext&) = delete;
  TlsContext& operator=(const TlsContext&) = delete;

  // Begins the server's side of a handshake on `fd` (a connected TCP socket, made
  // non-blocking); the caller steps it whenever the socket is ready.
  Result<std::unique_ptr<TlsAccept>> StartAccept(int fd) const;
  // The client's side: the server's certificate must verify and name `server_name` (a host
  // name or an IP address). PermissionDenied when it does not; Unavailable for the rest.
  Result<std::unique_ptr<ByteStream>> Connect(int fd, const std::string& server_name, int timeout_ms) const;

 private:
  explicit TlsContext(ssl_ctx_st* ctx) : ctx_(ctx) {}
  ssl_ctx_st* ctx_;  // owned
};

// The server's side of one handshake, never waiting: Step advances it as far as the socket
// allows; once it returns 0, TakeStream gives the stream the frames travel through.
class TlsAccept {
 public:
  ~TlsAccept();
  TlsAccept(const TlsAccept&) = delete;
  TlsAccept& operator=(const TlsAccept&) = delete;

  // 0 when the handshake is done, else the readiness (POLLIN, POLLOUT) it waits for next.
  // Unavailable when it failed (a bad certificate, a peer that is not speaking TLS).
  Result<short> Step();
  // Once Step returned 0: the established stream. Call once.
  std::unique_ptr<ByteStream> TakeStream();

 private:
  friend class TlsContext;
  TlsAccept(ssl_st* ssl, int fd) : ssl_(ssl), fd_(fd) {}
  ssl_st* ssl_;  // owned until TakeStream
  int fd_;
};

// Whether the first bytes waiting on `fd` (readable now, or at its end) are a kvtier frame's
// magic rather than a TLS record: a plain client knocking on a TLS port. Never waits;
// Unavailable when the socket cannot be read.
Result<bool> PlainKvtierWaiting(int fd);

}  // namespace kvtier::server
