#include "server/tls.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <string>

namespace kvtier::server {
namespace {

using SslPtr = std::unique_ptr<SSL, decltype(&::SSL_free)>;
using Clock = std::chrono::steady_clock;

// OpenSSL's socket BIO writes with write(2), so a write to a peer that has gone raises
// SIGPIPE, which kills a process that does not ignore it (an engine embedding the client, a
// test). Every TLS stream writes through this BIO instead: OpenSSL's socket BIO, its writes
// sent with MSG_NOSIGNAL, so that such a write fails with EPIPE. (Blocking SIGPIPE around each
// OpenSSL call instead, as libpq does, costs three system calls per call, and a read is one
// call per TLS record.)
int SendNoSignal(BIO* bio, const char* data, int length) {
  const int fd = static_cast<int>(::BIO_ctrl(bio, BIO_C_GET_FD, 0, nullptr));
  errno = 0;
  const auto n = static_cast<int>(::send(fd, data, static_cast<std::size_t>(length), MSG_NOSIGNAL));
  BIO_clear_retry_flags(bio);
  if (n <= 0 && ::BIO_sock_should_retry(n) != 0) BIO_set_retry_write(bio);
  return n;
}

const BIO_METHOD* NoSignalSocketMethod() {
  static BIO_METHOD* const method = [] {
    const BIO_METHOD* socket = ::BIO_s_socket();
    BIO_METHOD* m = ::BIO_meth_new(::BIO_get_new_index() | BIO_TYPE_SOURCE_SINK | BIO_TYPE_DESCRIPTOR, "kvtier socket");
    if (m != nullptr) {
      ::BIO_meth_set_write(m, SendNoSignal);
      ::BIO_meth_set_read(m, ::BIO_meth_get_read(socket));
      ::BIO_meth_set_puts(m, ::BIO_meth_get_puts(socket));
      ::BIO_meth_set_ctrl(m, ::BIO_meth_get_ctrl(socket));
      ::BIO_meth_set_create(m, ::BIO_meth_get_create(socket));
      ::BIO_meth_set_destroy(m, ::BIO_meth_get_destroy(socket));
    }
    return m;
  }();
  return method;
}

// OpenSSL's queued errors, oldest first, as "reason; reason"; the queue is left empty.
std::string TakeErrors() {
  std::string text;
  while (const unsigned long e = ::ERR_get_error()) {
    const char* reason = ::ERR_reason_error_string(e);
    if (!text.empty()) text += "; ";
    text += reason != nullptr ? reason : "error " + std::to_string(e);
  }
  return text.empty() ? "connection closed" : text;
}

// The file must exist and be readable: OpenSSL's own error for that ("system lib") does
// not say which.
Status CheckReadable(const std::string& path, const char* what) {
  if (::access(path.c_str(), R_OK) == 0) return Status::Ok();
  return Status::InvalidArgument(std::string("TLS ") + what + " '" + path + "' cannot be read: " + std::strerror(errno));
}

Status LoadCertificateAndKey(SSL_CTX* ctx, const std::string& cert, const std::string& key) {
  KVTIER_RETURN_IF_ERROR(CheckReadable(cert, "certificate"));
  KVTIER_RETURN_IF_ERROR(CheckReadable(key, "key"));
  if (::SSL_CTX_use_certificate_chain_file(ctx, cert.c_str()) != 1) {
    return Status::InvalidArgument("TLS certificate '" + cert + "' is not a PEM certificate: " + TakeErrors());
  }
  // Loading the key checks it against the certificate loaded before it.
  if (::SSL_CTX_use_PrivateKey_file(ctx, key.c_str(), SSL_FILETYPE_PEM) == 1) return Status::Ok();
  if (ERR_GET_REASON(::ERR_peek_last_error()) == X509_R_KEY_VALUES_MISMATCH) {
    return Status::InvalidArgument("TLS key '" + key + "' is not the key of certificate '" + cert + "': " + TakeErrors());
  }
  return Status::InvalidArgument("TLS key '" + key + "' is not a PEM private key: " + TakeErrors());
}

Status LoadCas(SSL_CTX* ctx, const std::string& ca_file) {
  KVTIER_RETURN_IF_ERROR(CheckReadable(ca_file, "CA file"));
  if (::SSL_CTX_load_verify_locations(ctx, ca_file.c_str(), nullptr) != 1) {
    return Status::InvalidArgument("TLS CA file '" + ca_file + "' holds no PEM certificate: " + TakeErrors());
  }
  return Status::Ok();
}

constexpr std::size_t kReadAheadBytes = 64 << 10;

Result<SSL_CTX*> NewContext(const SSL_METHOD* method) {
  ::ERR_clear_error();
  SSL_CTX* ctx = ::SSL_CTX_new(method);
  if (ctx == nullptr) return Status::Internal("SSL_CTX_new failed: " + TakeErrors());
  ::SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
  // A peer that vanishes without close_notify is an ordinary end of stream to the frame layer,
  // which already tells a clean end between frames from a cut inside one.
  ::SSL_CTX_set_options(ctx, SSL_OP_NO_RENEGOTIATION | SSL_OP_IGNORE_UNEXPECTED_EOF);
  // AES-128-GCM first (TLS 1.3's mandatory suite; BoringSSL's and Go's first choice too): 10%
  // faster than AES-256-GCM here (`openssl speed -evp`, 16 KiB records), and block payloads
  // are most of what these connections carry.
  if (::SSL_CTX_set_ciphersuites(ctx, "TLS_AES_128_GCM_SHA256:TLS_AES_256_GCM_SHA384:TLS_CHACHA20_POLY1305_SHA256") != 1) {
    ::SSL_CTX_free(ctx);
    return Status::Internal("SSL_CTX_set_ciphersuites failed: " + TakeErrors());
  }
  // Read ahead: one recv brings up to kReadAheadBytes of records, not a record header and its
  // body in two (a 2 MiB reply was 256 reads). Buffered() then asks SSL_has_pending.
  SSL_CTX_set_read_ahead(ctx, 1);
  ::SSL_CTX_set_default_read_buffer_len(ctx, kReadAheadBytes);
  // Buffers are handed back while a connection is idle: thousands of open connections hold
  // none, an active one reuses what malloc keeps.
  SSL_CTX_set_mode(ctx, SSL_MODE_RELEASE_BUFFERS);
  return ctx;
}

class TlsStream final : public ByteStream {
 public:
  TlsStream(SslPtr ssl, int fd) : ByteStream(fd), ssl_(std::move(ssl)) {}

  Result<StreamProgress> TryWrite(std::span<const std::byte> bytes, std::span<const int> fds) override {
    if (!fds.empty()) return Status::InvalidArgument("descriptors cannot travel over TLS");
    ::ERR_clear_error();
    std::size_t n = 0;
    const int rc = ::SSL_write_ex(ssl_.get(), bytes.data(), bytes.size(), &n);
    if (rc == 1) return StreamProgress{.bytes = n};
    KVTIER_ASSIGN_OR_RETURN(short wants, Wants(rc, "send"));
    return StreamProgress{.wants = wants};
  }

  Result<StreamProgress> TryRead(std::span<std::byte> into, std::vector<ScopedFd>&) override {
    ::ERR_clear_error();
    std::size_t n = 0;
    const int rc = ::SSL_read_ex(ssl_.get(), into.data(), into.size(), &n);
    starved_ = false;
    if (rc == 1) return StreamProgress{.bytes = n};
    const int error = ::SSL_get_error(ssl_.get(), rc);
    if (error == SSL_ERROR_ZERO_RETURN) return StreamProgress{.end = true};
    // A socket shut down under us (the server stopping) reads as an end of stream too.
    if (error == SSL_ERROR_SYSCALL && ::ERR_peek_error() == 0) return StreamProgress{.end = true};
    KVTIER_ASSIGN_OR_RETURN(short wants, Wants(rc, "receive"));
    starved_ = wants == POLLIN;
    return StreamProgress{.wants = wants};
  }

  bool ConcurrentReadWrite() const override { return false; }
  // Records read ahead (NewContext) but not yet decrypted count too, unless the last read
  // wanted more from the socket: what waits then is part of a record, which only the
  // socket's next bytes complete (and epoll reports those), so the event loop does not spin
  // on it.
  bool Buffered() const override {
    return ::SSL_pending(ssl_.get()) > 0 || (!starved_ && ::SSL_has_pending(ssl_.get()) == 1);
  }

 private:
  // After an operation returned `rc`: the socket readiness it waits for, or why it failed.
  Result<short> Wants(int rc, const char* what) {
    switch (::SSL_get_error(ssl_.get(), rc)) {
      case SSL_ERROR_WANT_READ: return static_cast<short>(POLLIN);
      case SSL_ERROR_WANT_WRITE: return static_cast<short>(POLLOUT);
      case SSL_ERROR_SYSCALL:
        if (::ERR_peek_error() == 0) return Status::Unavailable(std::string("TLS ") + what + " failed: " + std::strerror(errno));
        [[fallthrough]];
      default: return Status::Unavailable(std::string("TLS ") + what + " failed: " + TakeErrors());
    }
  }

  SslPtr ssl_;
  bool starved_ = false;  // the last read wanted more bytes from the socket
};

// One step of SSL_accept or SSL_connect on a non-blocking socket: 0 when the handshake is
// done, else the readiness (POLLIN, POLLOUT) it waits for; Unavailable when it failed.
template <typename Step>
Result<short> HandshakeStep(SSL* ssl, Step step) {
  ::ERR_clear_error();
  const int rc = step(ssl);
  if (rc == 1) return short{0};
  const int error = ::SSL_get_error(ssl, rc);
  if (error == SSL_ERROR_WANT_READ) return static_cast<short>(POLLIN);
  if (error == SSL_ERROR_WANT_WRITE) return static_cast<short>(POLLOUT);
  const bool quiet = error == SSL_ERROR_SYSCALL && ::ERR_peek_error() == 0;
  return Status::Unavailable("TLS handshake failed: " + (quiet ? std::string("the peer closed the connection") : TakeErrors()));
}

// Runs SSL_accept or SSL_connect to completion on non-blocking `fd` within `timeout_ms`
// (0: no limit).
template <typename Step>
Status Handshake(SSL* ssl, int fd, int timeout_ms, Step step) {
  const auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
  for (;;) {
    KVTIER_ASSIGN_OR_RETURN(short wants, HandshakeStep(ssl, step));
    if (wants == 0) return Status::Ok();
    int wait_ms = -1;
    if (timeout_ms > 0) {
      const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - Clock::now()).count();
      if (left <= 0) return Status::Unavailable("TLS handshake did not finish within " + std::to_string(timeout_ms) + " ms");
      wait_ms = static_cast<int>(left);
    }
    pollfd p{.fd = fd, .events = wants, .revents = 0};
    if (::poll(&p, 1, wait_ms) < 0 && errno != EINTR) return Status::Unavailable(std::string("poll failed: ") + std::strerror(errno));
  }
}

Result<SslPtr> NewSsl(SSL_CTX* ctx, int fd) {
  const int flags = ::fcntl(fd, F_GETFL);
  if (flags < 0 || ::fcntl(fd, F_SETFL, flags | O_NONBLOCK) != 0) return ErrnoStatus("TLS socket", "fcntl", errno);
  SslPtr ssl(::SSL_new(ctx), &::SSL_free);
  const BIO_METHOD* method = NoSignalSocketMethod();
  BIO* bio = ssl != nullptr && method != nullptr ? ::BIO_new(method) : nullptr;
  if (bio == nullptr) return Status::Internal("SSL_new failed: " + TakeErrors());
  BIO_set_fd(bio, fd, BIO_NOCLOSE);  // the FrameSocket owns the descriptor
  ::SSL_set_bio(ssl.get(), bio, bio);    // the session owns the BIO
  return ssl;
}

}  // namespace

Result<std::unique_ptr<TlsContext>> TlsContext::ForServer(const ServerTlsOptions& options) {
  if (options.cert_file.empty() || options.key_file.empty()) {
    return Status::InvalidArgument("TLS needs both a certificate (cert) and its private key (key)");
  }
  KVTIER_ASSIGN_OR_RETURN(SSL_CTX * ctx, NewContext(::TLS_server_method()));
  std::unique_ptr<TlsContext> context(new TlsContext(ctx));
  KVTIER_RETURN_IF_ERROR(LoadCertificateAndKey(ctx, options.cert_file, options.key_file));
  if (!options.client_ca_file.empty()) {
    KVTIER_RETURN_IF_ERROR(LoadCas(ctx, options.client_ca_file));
    ::SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, nullptr);
  }
  return context;
}

Result<std::unique_ptr<TlsContext>> TlsContext::ForClient(const ClientTlsOptions& options) {
  KVTIER_ASSIGN_OR_RETURN(SSL_CTX * ctx, NewContext(::TLS_client_method()));
  std::unique_ptr<TlsContext> context(new TlsContext(ctx));
  if (!options.ca_file.empty()) {
    KVTIER_RETURN_IF_ERROR(LoadCas(ctx, options.ca_file));
  } else if (::SSL_CTX_set_default_verify_paths(ctx) != 1) {
    return Status::Unavailable("the system's TLS trust store does not load: " + TakeErrors() + "; set ca_file");
  }
  if (!options.cert_file.empty() || !options.key_file.empty()) {
    KVTIER_RETURN_IF_ERROR(LoadCertificateAndKey(ctx, options.cert_file, options.key_file));
  }
  ::SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, nullptr);
  return context;
}

TlsContext::~TlsContext() { ::SSL_CTX_free(ctx_); }

Result<std::unique_ptr<TlsAccept>> TlsContext::StartAccept(int fd) const {
  KVTIER_ASSIGN_OR_RETURN(SslPtr ssl, NewSsl(ctx_, fd));
  return std::unique_ptr<TlsAccept>(new TlsAccept(ssl.release(), fd));
}

TlsAccept::~TlsAccept() { ::SSL_free(ssl_); }

Result<short> TlsAccept::Step() { return HandshakeStep(ssl_, ::SSL_accept); }

std::unique_ptr<ByteStream> TlsAccept::TakeStream() {
  SslPtr ssl(ssl_, &::SSL_free);
  ssl_ = nullptr;
  return std::make_unique<TlsStream>(std::move(ssl), fd_);
}

Result<std::unique_ptr<ByteStream>> TlsContext::Connect(int fd, const std::string& server_name, int timeout_ms) const {
  KVTIER_ASSIGN_OR_RETURN(SslPtr ssl, NewSsl(ctx_, fd));
  in6_addr ip{};
  const bool is_ip = ::inet_pton(AF_INET, server_name.c_str(), &ip) == 1 || ::inet_pton(AF_INET6, server_name.c_str(), &ip) == 1;
  X509_VERIFY_PARAM* param = ::SSL_get0_param(ssl.get());
  // SNI carries host names only (RFC 6066); an address is checked against the certificate's
  // IP entries. SSL_ctrl is what the SSL_set_tlsext_host_name macro expands to, without its C cast.
  const bool named =
      is_ip ? ::X509_VERIFY_PARAM_set1_ip_asc(param, server_name.c_str()) == 1
            : ::SSL_ctrl(ssl.get(), SSL_CTRL_SET_TLSEXT_HOSTNAME, TLSEXT_NAMETYPE_host_name,
                         const_cast<char*>(server_name.c_str())) == 1 &&
                  ::SSL_set1_host(ssl.get(), server_name.c_str()) == 1;
  if (!named) return Status::InvalidArgument("'" + server_name + "' is not a usable TLS server name: " + TakeErrors());
  const Status shaken = Handshake(ssl.get(), fd, timeout_ms, ::SSL_connect);
  if (shaken.ok()) return std::unique_ptr<ByteStream>(new TlsStream(std::move(ssl), fd));
  if (const long verify = ::SSL_get_verify_result(ssl.get()); verify != X509_V_OK) {
    return Status::PermissionDenied("the server's TLS certificate does not verify for '" + server_name +
                                    "': " + ::X509_verify_cert_error_string(verify) +
                                    " (is ca_file the CA that signed it, and server_name a name it carries?)");
  }
  return shaken;
}

Result<bool> PlainKvtierWaiting(int fd) {
  char first[4] = {};
  const ssize_t n = ::recv(fd, first, sizeof(first), MSG_PEEK | MSG_DONTWAIT);
  if (n < 0) return Status::Unavailable(std::string("the client's first bytes cannot be read: ") + std::strerror(errno));
  // protocol::kMagic as it appears on the wire; a TLS ClientHello starts with 0x16.
  return n == static_cast<ssize_t>(sizeof(first)) && std::memcmp(first, "KVTP", sizeof(first)) == 0;
}

}  // namespace kvtier::server
