// TLS on the TCP listener (server.h ServerTlsOptions, client.h ClientTlsOptions), expiring
// tokens, and the options that keep an exposed listener safe. Certificates are made here,
// per test, by testing/test_certs.h.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/ssl.h>
#include <sys/socket.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include "kvtier/client.h"
#include "kvtier/server.h"
#include "kvtier/tiers.h"
#include "kvtier/protocol.h"
#include "server/service_metrics.h"
#include "server/tls.h"
#include "testing/loopback.h"
#include "testing/test_certs.h"
#include "testing/test_store.h"
#include "util/posix_file.h"

namespace kvtier {
namespace {

using std::chrono::system_clock;

constexpr uint32_t kBlockBytes = 16 << 10;

BlockKey Key(uint64_t i) { return {0xC0FFEEull, i + 1}; }

std::vector<std::byte> Payload(uint64_t i) {
  std::vector<std::byte> bytes(kBlockBytes);
  for (std::size_t k = 0; k < bytes.size(); ++k) bytes[k] = static_cast<std::byte>((k * 7 + i * 31) & 0xff);
  return bytes;
}

std::chrono::sys_seconds InSeconds(int64_t seconds) {
  return std::chrono::floor<std::chrono::seconds>(system_clock::now()) + std::chrono::seconds(seconds);
}

class TlsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char pattern[] = "/tmp/kvtier-tls-XXXXXX";
    ASSERT_NE(::mkdtemp(pattern), nullptr);
    dir_ = pattern;
    Result<testing::TestPki> pki = testing::MakeTestPki(dir_, "ours");
    ASSERT_TRUE(pki.ok()) << pki.status().ToString();
    pki_ = *pki;
    Result<testing::TestPki> other = testing::MakeTestPki(dir_, "theirs");
    ASSERT_TRUE(other.ok()) << other.status().ToString();
    other_ = *other;
    store_ = testing::DramOnlyStore(16u << 20);
    ASSERT_NE(store_, nullptr);
  }
  void TearDown() override {
    server_.reset();
    store_.reset();
    std::filesystem::remove_all(dir_);
  }

  ServerOptions TlsOptions() {
    ServerOptions options;
    options.tcp = true;
    options.tls = {.cert_file = pki_.server_cert, .key_file = pki_.server_key};
    options.metrics = &metrics_;
    return options;
  }

  void StartServer(ServerOptions options) {
    Result<std::unique_ptr<Server>> server = Server::Start(*store_, std::move(options));
    ASSERT_TRUE(server.ok()) << server.status().ToString();
    server_ = std::move(*server);
  }

  ClientOptions Trusting(const testing::TestPki& pki) const {
    return {.tls = {.enabled = true, .ca_file = pki.ca_cert}};
  }

  Result<std::unique_ptr<Client>> Connect(ClientOptions options, const std::string& host = "127.0.0.1") {
    return Client::ConnectTcp(host, server_->tcp_port(), std::move(options));
  }

  // A TLS connection below the Client, for tests that pipeline frames or cork records.
  struct RawTls {
    ScopedFd fd;
    std::unique_ptr<server::TlsContext> context;
    std::unique_ptr<server::ByteStream> stream;  // borrows fd: declared last, so gone first
  };
  Result<RawTls> ConnectRawTls() const {
    RawTls raw{.fd = testing::ConnectLoopbackTcp(server_->tcp_port())};
    if (!raw.fd.valid()) return Status::Unavailable("cannot connect to the server's TCP port");
    KVTIER_ASSIGN_OR_RETURN(raw.context, server::TlsContext::ForClient(Trusting(pki_).tls));
    KVTIER_ASSIGN_OR_RETURN(raw.stream, raw.context->Connect(raw.fd.get(), "127.0.0.1", 5000));
    return raw;
  }

  // The headers of the next `count` frames on `stream`, in order (payloads skipped).
  static Result<std::vector<protocol::FrameHeader>> ReadHeaders(server::ByteStream& stream, std::size_t count) {
    std::vector<protocol::FrameHeader> headers;
    std::vector<std::byte> in;
    std::vector<ScopedFd> fds;
    while (headers.size() < count) {
      std::byte chunk[4096];
      Result<std::size_t> n = stream.ReadSome(chunk, fds, 5000);
      if (!n.ok() || *n == 0) {
        return Status::Unavailable("after " + std::to_string(headers.size()) + " replies: " +
                                   (n.ok() ? std::string("the server closed") : n.status().ToString()));
      }
      in.insert(in.end(), chunk, chunk + *n);
      while (in.size() >= protocol::kHeaderBytes) {
        KVTIER_ASSIGN_OR_RETURN(protocol::FrameHeader h, protocol::DecodeHeader(in, {}));
        if (in.size() < protocol::kHeaderBytes + h.payload_bytes) break;
        headers.push_back(h);
        in.erase(in.begin(), in.begin() + static_cast<std::ptrdiff_t>(protocol::kHeaderBytes + h.payload_bytes));
      }
    }
    return headers;
  }

  // Puts two blocks inline and reads them back, byte for byte.
  static void RoundTrip(Client& client) {
    const std::vector<std::vector<std::byte>> payloads = {Payload(0), Payload(1)};
    const std::vector<ClientBlock> blocks = {{.key = Key(0), .payload = payloads[0]}, {.key = Key(1), .payload = payloads[1]}};
    ASSERT_TRUE(client.Put(blocks).ok());
    std::vector<std::vector<std::byte>> buffers(2, std::vector<std::byte>(kBlockBytes));
    const std::vector<std::span<std::byte>> outs = {buffers[0], buffers[1]};
    const std::vector<BlockKey> keys = {Key(0), Key(1)};
    Result<std::vector<uint32_t>> sizes = client.Get(keys, outs);
    ASSERT_TRUE(sizes.ok()) << sizes.status().ToString();
    EXPECT_EQ(*sizes, (std::vector<uint32_t>{kBlockBytes, kBlockBytes}));
    EXPECT_EQ(buffers, payloads);
  }

  // The server counts a failed handshake on its event loop, which may finish after
  // the client has seen the failure.
  uint64_t HandshakeFailures(uint64_t expected) const {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (metrics_.Read().tls_handshakes_failed < expected && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return metrics_.Read().tls_handshakes_failed;
  }

  std::string dir_;
  testing::TestPki pki_, other_;
  server::ServiceMetrics metrics_;
  std::unique_ptr<TieredStore> store_;
  std::unique_ptr<Server> server_;
};

TEST_F(TlsTest, PutAndGetOverTls) {
  StartServer(TlsOptions());
  Result<std::unique_ptr<Client>> client = Connect(Trusting(pki_));
  ASSERT_TRUE(client.ok()) << client.status().ToString();
  RoundTrip(**client);
  // By host name too (SNI and the certificate's DNS name), and with a frame far over one TLS record.
  ClientOptions by_name = Trusting(pki_);
  Result<std::unique_ptr<Client>> named = Connect(by_name, "localhost");
  ASSERT_TRUE(named.ok()) << named.status().ToString();
  std::vector<std::byte> big(4u << 20, std::byte{0x5a});
  const std::vector<ClientBlock> blocks = {{.key = Key(9), .payload = big}};
  ASSERT_TRUE((*named)->Put(blocks).ok());
  std::vector<std::byte> back(big.size());
  const std::vector<std::span<std::byte>> outs = {back};
  ASSERT_TRUE((*named)->Get(std::vector<BlockKey>{Key(9)}, outs).ok());
  EXPECT_EQ(back, big);
  EXPECT_EQ(metrics_.Read().tls_handshakes_failed, 0u);
}

TEST_F(TlsTest, ClientThatTrustsAnotherCaIsRefusedWithAReason) {
  StartServer(TlsOptions());
  Result<std::unique_ptr<Client>> client = Connect(Trusting(other_));
  ASSERT_FALSE(client.ok());
  EXPECT_EQ(client.status().code(), StatusCode::kPermissionDenied) << client.status().ToString();
  EXPECT_NE(client.status().message().find("does not verify"), std::string::npos) << client.status().ToString();
  // A certificate of the right CA for another name is refused too.
  ClientOptions wrong_name = Trusting(pki_);
  wrong_name.tls.server_name = "kvtier.example.com";
  client = Connect(wrong_name);
  EXPECT_EQ(client.status().code(), StatusCode::kPermissionDenied) << client.status().ToString();
  // The server saw both handshakes fail, and still serves.
  Result<std::unique_ptr<Client>> good = Connect(Trusting(pki_));
  ASSERT_TRUE(good.ok()) << good.status().ToString();
  RoundTrip(**good);
  EXPECT_EQ(HandshakeFailures(2), 2u);
}

TEST_F(TlsTest, PlainClientOnTheTlsPortIsToldAndOthersAreStillServed) {
  StartServer(TlsOptions());
  Result<std::unique_ptr<Client>> plain = Connect({});
  ASSERT_FALSE(plain.ok());
  EXPECT_EQ(plain.status().code(), StatusCode::kFailedPrecondition) << plain.status().ToString();
  EXPECT_NE(plain.status().message().find("speaks TLS"), std::string::npos) << plain.status().ToString();
  EXPECT_EQ(HandshakeFailures(1), 1u);
  Result<std::unique_ptr<Client>> good = Connect(Trusting(pki_));
  ASSERT_TRUE(good.ok()) << good.status().ToString();
  RoundTrip(**good);
}

TEST_F(TlsTest, WritingToAVanishedPeerIsAnErrorNotSigpipe) {
  StartServer(TlsOptions());
  Result<std::unique_ptr<Client>> client = Connect(Trusting(pki_));
  ASSERT_TRUE(client.ok()) << client.status().ToString();
  server_->Shutdown();
  // Megabytes into a socket the server has closed: the first write meets a reset, the later
  // ones would raise SIGPIPE, which no one here ignores.
  std::vector<std::byte> big(8u << 20, std::byte{1});
  const std::vector<ClientBlock> blocks = {{.key = Key(5), .payload = big}};
  EXPECT_EQ((*client)->Put(blocks).status().code(), StatusCode::kUnavailable);
  EXPECT_EQ((*client)->Put(blocks).status().code(), StatusCode::kUnavailable);
}

// Requests sent back to back, each in TLS records of its own, arrive in one read of the
// server's (it reads ahead): it answers every one, though only the first record was decrypted
// when the socket went quiet.
TEST_F(TlsTest, PipelinedRequestsInRecordsReadAheadAreAllAnswered) {
  StartServer(TlsOptions());
  Result<RawTls> raw = ConnectRawTls();
  ASSERT_TRUE(raw.ok()) << raw.status().ToString();
  server::ByteStream& stream = *raw->stream;
  constexpr uint64_t kRequests = 8;
  std::vector<std::byte> frame;
  ASSERT_TRUE(protocol::EncodeFrame(protocol::Hello{}, 1, protocol::MessageType::kError, {}, frame).ok());
  ASSERT_TRUE(stream.Write(frame, {}, 5000).ok());
  int on = 1, off = 0;  // the records leave together, uncorked, and arrive in one read
  ASSERT_EQ(::setsockopt(raw->fd.get(), IPPROTO_TCP, TCP_CORK, &on, sizeof(on)), 0);
  for (uint64_t id = 2; id <= kRequests; ++id) {  // one Write, so one record, each
    frame.clear();
    ASSERT_TRUE(protocol::EncodeFrame(protocol::Stats{}, id, protocol::MessageType::kError, {}, frame).ok());
    ASSERT_TRUE(stream.Write(frame, {}, 5000).ok());
  }
  ASSERT_EQ(::setsockopt(raw->fd.get(), IPPROTO_TCP, TCP_CORK, &off, sizeof(off)), 0);
  Result<std::vector<protocol::FrameHeader>> replies = ReadHeaders(stream, kRequests);
  ASSERT_TRUE(replies.ok()) << replies.status().ToString();
  std::vector<uint64_t> answered;
  for (const protocol::FrameHeader& h : *replies) {
    EXPECT_TRUE(h.reply);
    answered.push_back(h.request_id);
  }
  EXPECT_EQ(answered, (std::vector<uint64_t>{1, 2, 3, 4, 5, 6, 7, 8}));
}

// Requests whose records TLS decrypted ahead wait there while the request budget is spent:
// no socket event will come for them, so the connection must be resumed when another's
// request frees the budget, and read them from the stream's buffer.
TEST_F(TlsTest, RequestsReadAheadWaitForTheRequestBudgetAndAreAllServed) {
  ServerOptions options = TlsOptions();
  options.workers = 1;
  options.event_loops = 1;
  options.max_request_memory = 1;  // one frame at a time, across connections
  StartServer(options);
  constexpr uint64_t kConnections = 3, kPuts = 6;
  constexpr std::size_t kBytes = 4096;
  std::atomic<uint64_t> served{0};
  std::vector<std::thread> clients;
  for (uint64_t c = 0; c < kConnections; ++c) {
    clients.emplace_back([&, c] {
      Result<RawTls> raw = ConnectRawTls();
      if (!raw.ok()) return;
      server::ByteStream& stream = *raw->stream;
      std::vector<std::byte> frame;
      if (!protocol::EncodeFrame(protocol::Hello{}, 1, protocol::MessageType::kError, {}, frame).ok()) return;
      int on = 1, off = 0;  // every request in its own record, all arriving together
      ::setsockopt(raw->fd.get(), IPPROTO_TCP, TCP_CORK, &on, sizeof(on));
      if (!stream.Write(frame, {}, 5000).ok()) return;
      std::vector<std::vector<std::byte>> payloads;
      for (uint64_t i = 0; i < kPuts; ++i) {
        payloads.emplace_back(kBytes, static_cast<std::byte>(16 * c + i));
        protocol::Put put;
        put.blocks.push_back({.key = Key(100 * c + i), .payload = {.length = kBytes}, .inline_bytes = payloads.back(),
                              .checksum = PayloadChecksum(payloads.back())});
        frame.clear();
        if (!protocol::EncodeFrame(put, i + 2, protocol::MessageType::kError, {}, frame).ok()) return;
        if (!stream.Write(frame, {}, 5000).ok()) return;
      }
      ::setsockopt(raw->fd.get(), IPPROTO_TCP, TCP_CORK, &off, sizeof(off));
      // A connection never resumed times out here.
      Result<std::vector<protocol::FrameHeader>> replies = ReadHeaders(stream, kPuts + 1);
      if (!replies.ok()) return;
      for (const protocol::FrameHeader& h : *replies) {
        if (h.type == protocol::MessageType::kPut) ++served;
      }
    });
  }
  for (std::thread& t : clients) t.join();
  EXPECT_EQ(served.load(), kConnections * kPuts);
  EXPECT_GT(metrics_.Read().reads_paused, 0u);
}

// A request whose TLS record has only half arrived waits in the server's read-ahead buffer.
// The event loop must wait for the socket then, not spin on those bytes; the request is
// answered once the rest comes.
TEST_F(TlsTest, HalfARecordWaitsWithoutSpinningTheEventLoop) {
  StartServer(TlsOptions());
  ScopedFd fd = testing::ConnectLoopbackTcp(server_->tcp_port());
  ASSERT_GE(fd.get(), 0);
  // A client of OpenSSL's own, whose records this test can cut: written into memory, then
  // sent by hand.
  std::unique_ptr<SSL_CTX, decltype(&::SSL_CTX_free)> ctx(::SSL_CTX_new(::TLS_client_method()), &::SSL_CTX_free);
  ASSERT_NE(ctx, nullptr);
  std::unique_ptr<SSL, decltype(&::SSL_free)> ssl(::SSL_new(ctx.get()), &::SSL_free);
  ASSERT_NE(ssl, nullptr);
  ASSERT_EQ(::SSL_set_fd(ssl.get(), fd.get()), 1);
  ASSERT_EQ(::SSL_connect(ssl.get()), 1);
  BIO* written = ::BIO_new(::BIO_s_mem());
  ::SSL_set0_wbio(ssl.get(), written);  // the session owns it
  std::vector<std::byte> frame;
  ASSERT_TRUE(protocol::EncodeFrame(protocol::Hello{}, 1, protocol::MessageType::kError, {}, frame).ok());
  ASSERT_EQ(::SSL_write(ssl.get(), frame.data(), static_cast<int>(frame.size())), static_cast<int>(frame.size()));
  char* record = nullptr;
  const long record_bytes = ::BIO_ctrl(written, BIO_CTRL_INFO, 0, &record);
  ASSERT_GT(record_bytes, 8);
  const auto half = static_cast<std::size_t>(record_bytes / 2);
  ASSERT_EQ(::send(fd.get(), record, half, 0), static_cast<ssize_t>(half));

  const uint64_t before_ns = metrics_.Read().event_loop_cpu_ns;
  std::this_thread::sleep_for(std::chrono::milliseconds(400));
  const uint64_t spent_ns = metrics_.Read().event_loop_cpu_ns - before_ns;
  EXPECT_LT(spent_ns, 100'000'000u) << "the event loops spent " << spent_ns / 1'000'000 << " ms of CPU waiting";

  const auto rest = static_cast<std::size_t>(record_bytes) - half;
  ASSERT_EQ(::send(fd.get(), record + half, rest, 0), static_cast<ssize_t>(rest));
  std::byte header[protocol::kHeaderBytes];
  std::size_t got = 0;
  while (got < sizeof(header)) {
    const int n = ::SSL_read(ssl.get(), header + got, static_cast<int>(sizeof(header) - got));
    ASSERT_GT(n, 0) << "no reply";
    got += static_cast<std::size_t>(n);
  }
  Result<protocol::FrameHeader> h = protocol::DecodeHeader(header, {});
  ASSERT_TRUE(h.ok()) << h.status().ToString();
  EXPECT_TRUE(h->reply);
  EXPECT_EQ(h->request_id, 1u);
}

TEST_F(TlsTest, TlsClientOnAPlainPortFailsCleanly) {
  ServerOptions options;
  options.tcp = true;
  StartServer(options);
  Result<std::unique_ptr<Client>> client = Connect(Trusting(pki_));
  ASSERT_FALSE(client.ok());
  EXPECT_EQ(client.status().code(), StatusCode::kUnavailable) << client.status().ToString();
  EXPECT_NE(client.status().message().find("TLS handshake failed"), std::string::npos) << client.status().ToString();
}

TEST_F(TlsTest, SilentClientIsCutOffAtTheHandshakeDeadline) {
  ServerOptions options = TlsOptions();
  options.tls.handshake_timeout_ms = 200;
  StartServer(options);
  ScopedFd fd = testing::ConnectLoopbackTcp(server_->tcp_port());
  ASSERT_GE(fd.get(), 0);
  const timeval limit{.tv_sec = 5, .tv_usec = 0};
  ::setsockopt(fd.get(), SOL_SOCKET, SO_RCVTIMEO, &limit, sizeof(limit));
  const auto start = std::chrono::steady_clock::now();
  char byte = 0;
  EXPECT_EQ(::recv(fd.get(), &byte, 1, 0), 0);  // closed by the server, not by our 5 s limit
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(4));
  EXPECT_EQ(HandshakeFailures(1), 1u);
}

TEST_F(TlsTest, ClientCertificatesAreRequiredWhenAsked) {
  ServerOptions options = TlsOptions();
  options.tls.client_ca_file = pki_.ca_cert;
  StartServer(options);
  Result<std::unique_ptr<Client>> anonymous = Connect(Trusting(pki_));
  EXPECT_FALSE(anonymous.ok());
  ClientOptions foreign = Trusting(pki_);
  foreign.tls.cert_file = other_.client_cert;
  foreign.tls.key_file = other_.client_key;
  EXPECT_FALSE(Connect(foreign).ok());
  ClientOptions ours = Trusting(pki_);
  ours.tls.cert_file = pki_.client_cert;
  ours.tls.key_file = pki_.client_key;
  Result<std::unique_ptr<Client>> client = Connect(ours);
  ASSERT_TRUE(client.ok()) << client.status().ToString();
  RoundTrip(**client);
}

TEST_F(TlsTest, CertificatesAndKeysThatDoNotLoadAreNamed) {
  const std::string not_pem = dir_ + "/not-pem.key";
  std::ofstream(not_pem) << "this is not a key\n";
  struct Case {
    ServerTlsOptions tls;
    std::string needle;
  };
  const std::vector<Case> cases = {
      {{.cert_file = dir_ + "/missing.pem", .key_file = pki_.server_key}, "missing.pem' cannot be read"},
      {{.cert_file = pki_.server_cert, .key_file = not_pem}, "not-pem.key' is not a PEM private key"},
      {{.cert_file = not_pem, .key_file = pki_.server_key}, "is not a PEM certificate"},
      {{.cert_file = pki_.server_cert, .key_file = other_.server_key}, "is not the key of certificate"},
      {{.cert_file = pki_.server_cert, .key_file = pki_.server_key, .client_ca_file = dir_ + "/nope"}, "nope' cannot be read"},
      {{.cert_file = pki_.server_cert}, "private key"},
  };
  for (const Case& c : cases) {
    ServerOptions options;
    options.tcp = true;
    options.tls = c.tls;
    Result<std::unique_ptr<Server>> server = Server::Start(*store_, options);
    ASSERT_FALSE(server.ok()) << c.needle;
    EXPECT_EQ(server.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(server.status().message().find(c.needle), std::string::npos) << server.status().ToString();
  }
  ClientOptions client = Trusting(pki_);
  client.tls.ca_file = dir_ + "/missing-ca.pem";
  EXPECT_EQ(Client::ConnectTcp("127.0.0.1", 1, client).status().code(), StatusCode::kInvalidArgument);
}

TEST_F(TlsTest, AnExposedListenerNeedsTlsAndAToken) {
  ServerOptions options;
  options.tcp = true;
  options.tcp_host = "0.0.0.0";
  options.auth_token = "token";
  Result<std::unique_ptr<Server>> refused = Server::Start(*store_, options);
  EXPECT_EQ(refused.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(refused.status().message().find("TLS"), std::string::npos) << refused.status().ToString();
  options.tls = {.cert_file = pki_.server_cert, .key_file = pki_.server_key};
  options.auth_token.clear();
  refused = Server::Start(*store_, options);
  EXPECT_NE(refused.status().message().find("auth_token"), std::string::npos) << refused.status().ToString();
  options.tenants = {{.name = "a", .auth_token = "x"}, {.name = "b"}};
  EXPECT_FALSE(Server::Start(*store_, options).ok());  // tenant b would be open
  options.tenants[1].auth_token = "y";
  EXPECT_TRUE(Server::Start(*store_, options).ok());
  options.tenants.clear();
  options.auth_token = "token";
  StartServer(options);
  ClientOptions client = Trusting(pki_);
  client.auth_token = "token";
  Result<std::unique_ptr<Client>> connected = Connect(client);
  ASSERT_TRUE(connected.ok()) << connected.status().ToString();
  RoundTrip(**connected);
}

TEST_F(TlsTest, ExpiredTokensAreRefusedAsExpired) {
  ServerOptions options = TlsOptions();
  options.auth_token = "global";
  options.auth_token_expires = InSeconds(-60);
  options.tenants = {{.name = "old", .auth_token = "old-secret", .expires = InSeconds(-1)},
                     {.name = "current", .auth_token = "new-secret", .expires = InSeconds(3600)},
                     {.name = "shared", .auth_token = "", .expires = std::nullopt}};
  StartServer(options);
  auto connect = [&](std::string tenant, std::string token) {
    ClientOptions c = Trusting(pki_);
    c.tenant = std::move(tenant);
    c.auth_token = std::move(token);
    return Connect(c);
  };
  Result<std::unique_ptr<Client>> old = connect("old", "old-secret");
  EXPECT_EQ(old.status().code(), StatusCode::kPermissionDenied);
  EXPECT_NE(old.status().message().find("expired at"), std::string::npos) << old.status().ToString();
  // A wrong token is wrong, whether or not the right one has expired.
  old = connect("old", "guess");
  EXPECT_NE(old.status().message().find("wrong auth token"), std::string::npos) << old.status().ToString();
  Result<std::unique_ptr<Client>> shared = connect("shared", "global");
  EXPECT_NE(shared.status().message().find("expired at"), std::string::npos) << shared.status().ToString();
  Result<std::unique_ptr<Client>> current = connect("current", "new-secret");
  ASSERT_TRUE(current.ok()) << current.status().ToString();
  RoundTrip(**current);
}

}  // namespace
}  // namespace kvtier
