#include "kvtier/server.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <thread>

#include "kvtier/client.h"
#include "kvtier/tiers.h"
#include "server/frame_io.h"
#include "server/service_metrics.h"
#include "server/shared_segment.h"
#include "server/tenant_namespace.h"
#include "testing/faulty_tier.h"
#include "testing/test_store.h"
#include "util/posix_file.h"

namespace kvtier {
namespace {

constexpr uint32_t kBlockBytes = 64 << 10;

BlockKey Key(uint64_t chain, uint64_t i) { return {chain * 0x9E3779B97F4A7C15ull + 1, i + 1}; }

void Fill(std::span<std::byte> bytes, uint64_t chain, uint64_t i) {
  for (std::size_t k = 0; k < bytes.size(); ++k) bytes[k] = static_cast<std::byte>((k * 31 + chain * 7 + i * 13) & 0xff);
}

std::vector<std::byte> Payload(uint64_t chain, uint64_t i) {
  std::vector<std::byte> bytes(kBlockBytes);
  Fill(bytes, chain, i);
  return bytes;
}

class ServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char pattern[] = "/tmp/kvtier-server-XXXXXX";
    ASSERT_NE(::mkdtemp(pattern), nullptr);
    dir_ = pattern;
    store_ = testing::DramOnlyStore(64u << 20);
    ASSERT_NE(store_, nullptr);
  }
  void TearDown() override {
    server_.reset();
    store_.reset();
    std::filesystem::remove_all(dir_);
  }

  void StartServer(ServerOptions options = {}) {
    if (options.unix_socket_path.empty()) options.unix_socket_path = dir_ + "/kvtier.sock";
    options.metrics = &metrics_;
    Result<std::unique_ptr<Server>> server = Server::Start(*store_, std::move(options));
    ASSERT_TRUE(server.ok()) << server.status().ToString();
    server_ = std::move(*server);
  }

  std::unique_ptr<Client> Connect(ClientOptions options = {}) {
    Result<std::unique_ptr<Client>> client = Client::ConnectUnix(server_->unix_socket_path(), std::move(options));
    EXPECT_TRUE(client.ok()) << client.status().ToString();
    return client.ok() ? std::move(*client) : nullptr;
  }

  // A raw connection for frames no client would send.
  ScopedFd RawConnect() {
    ScopedFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::strncpy(addr.sun_path, server_->unix_socket_path().c_str(), sizeof(addr.sun_path) - 1);
    EXPECT_EQ(::connect(fd.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)), 0);
    return fd;
  }

  // Puts chain `chain` of `n` blocks from the client's shared memory.
  void PutChain(Client& client, uint64_t chain, uint64_t n) {
    std::span<std::byte> shm = client.shared_memory();
    ASSERT_GE(shm.size(), n * kBlockBytes);
    std::vector<ClientBlock> blocks;
    for (uint64_t i = 0; i < n; ++i) {
      std::span<std::byte> slot = shm.subspan(i * kBlockBytes, kBlockBytes);
      Fill(slot, chain, i);
      blocks.push_back({.key = Key(chain, i), .payload = slot, .tokens = 16});
    }
    Result<protocol::PutReply> put = client.Put(blocks);
    ASSERT_TRUE(put.ok()) << put.status().ToString();
    EXPECT_EQ(put->new_blocks + put->present_blocks, n);
  }

  // Replaces the store (before StartServer) with one over a FaultyTier around DRAM.
  testing::FaultyTier* UseFaultyStore() {
    auto [store, faulty] = testing::FaultyDramStore(64u << 20);
    store_ = std::move(store);
    return faulty;
  }

  // A client that speaks the protocol itself, over its own shared segment: it can change a
  // payload in shared memory after hashing it, which Client never does.
  struct RawClient {
    std::unique_ptr<server::FrameSocket> socket;
    std::optional<server::SharedSegment> segment;
    uint16_t version = protocol::kVersion;
    uint64_t next_id = 1;
    std::vector<std::byte> payload;  // the last reply's: what its inline blocks view

    Result<protocol::Message> Call(const protocol::Message& m, std::span<const int> fds = {}) {
      std::vector<std::byte> frame;
      KVTIER_RETURN_IF_ERROR(protocol::EncodeFrame(m, next_id++, protocol::MessageType::kError, {}, frame, version));
      KVTIER_RETURN_IF_ERROR(socket->Send(frame, fds));
      std::vector<ScopedFd> no_fds;
      KVTIER_ASSIGN_OR_RETURN(server::FrameSocket::Frame received, socket->Receive({}, payload, no_fds));
      return protocol::DecodePayload(received.header, received.payload, {});
    }
  };
  std::unique_ptr<RawClient> RawHello(uint16_t version = protocol::kVersion) {
    auto raw = std::make_unique<RawClient>();
    raw->socket = std::make_unique<server::FrameSocket>(RawConnect(), 10000);
    raw->version = version;
    Result<server::SharedSegment> segment = server::SharedSegment::Create(4 * kBlockBytes, "kvtier-raw-test");
    EXPECT_TRUE(segment.ok()) << segment.status().ToString();
    raw->segment.emplace(std::move(*segment));
    const int fd = raw->segment->fd();
    Result<protocol::Message> hello =
        raw->Call(protocol::Hello{.tenant = "", .auth_token = "", .segment_bytes = {4 * kBlockBytes}}, {&fd, 1});
    EXPECT_TRUE(hello.ok() && std::holds_alternative<protocol::HelloReply>(*hello));
    if (hello.ok()) {
      EXPECT_EQ(std::get<protocol::HelloReply>(*hello).version, version);
    }
    return raw;
  }

  std::string dir_;
  server::ServiceMetrics metrics_;
  std::unique_ptr<TieredStore> store_;
  std::unique_ptr<Server> server_;
};

TEST_F(ServerTest, PutLookupGetThroughSharedMemory) {
  StartServer();
  auto client = Connect();
  ASSERT_NE(client, nullptr);
  EXPECT_EQ(client->tier_count(), 1u);
  PutChain(*client, 1, 4);

  Result<std::vector<protocol::ChainLookup>> found = client->Lookup({{Key(1, 0), Key(1, 1), Key(1, 2), Key(2, 0)}, {Key(2, 0)}});
  ASSERT_TRUE(found.ok()) << found.status().ToString();
  ASSERT_EQ(found->size(), 2u);
  EXPECT_EQ((*found)[0].prefix_blocks, 3u);
  EXPECT_EQ((*found)[0].tier, (std::vector<uint8_t>{0, 0, 0}));
  EXPECT_EQ((*found)[0].bytes, (std::vector<uint32_t>{kBlockBytes, kBlockBytes, kBlockBytes}));
  EXPECT_EQ((*found)[1].prefix_blocks, 0u);

  // Read into the second half of the shared memory, and check every byte.
  std::span<std::byte> shm = client->shared_memory();
  std::vector<std::span<std::byte>> outs;
  std::vector<BlockKey> keys;
  for (uint64_t i = 0; i < 5; ++i) {
    keys.push_back(Key(1, i));
    outs.push_back(shm.subspan((8 + i) * kBlockBytes, kBlockBytes));
  }
  std::fill(shm.begin() + 8 * kBlockBytes, shm.begin() + 13 * kBlockBytes, std::byte{0});
  Result<std::vector<uint32_t>> sizes = client->Get(keys, outs);
  ASSERT_TRUE(sizes.ok()) << sizes.status().ToString();
  ASSERT_EQ(sizes->size(), 4u);  // the stored prefix
  for (uint64_t i = 0; i < 4; ++i) {
    EXPECT_EQ((*sizes)[i], kBlockBytes);
    EXPECT_TRUE(std::ranges::equal(outs[i], Payload(1, i))) << "block " << i;
  }

  Result<std::string> stats = client->Stats();
  ASSERT_TRUE(stats.ok());
  const nlohmann::json json = nlohmann::json::parse(*stats);
  EXPECT_EQ(json["put_blocks"], 4);
  EXPECT_EQ(json["tiers"][0]["blocks"], 4);

  // A request is counted once its reply has left, so the last one may lag the client a little.
  uint64_t requests = 0;
  for (int i = 0; i < 200 && requests < 5; ++i) {
    requests = 0;
    for (const auto& op : metrics_.Read().ops) requests += op.ok;
    if (requests < 5) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_EQ(requests, 5u);  // hello, put, lookup, get, stats
}

// Lookups are answered on the event loops, so their CPU time is what `kvtier bench serve`
// divides by the lookups served (docs/serve.md): it must grow with them. The worker pool's
// gauges are published on the loops' ticks too.
TEST_F(ServerTest, EventLoopsCountTheirCpuTime) {
  ServerOptions options;
  options.event_loops = 2;
  options.workers = 3;
  StartServer(std::move(options));
  const auto wait_for = [this](const std::function<bool(const server::ServiceMetrics::Snapshot&)>& done) {
    for (int i = 0; i < 400 && !done(metrics_.Read()); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    return done(metrics_.Read());
  };
  EXPECT_TRUE(wait_for([](const auto& s) { return s.event_loops == 2; }));
  EXPECT_TRUE(wait_for([](const auto& s) { return s.workers == 3 && s.workers_blocked == 0; }));
  auto client = Connect();
  ASSERT_NE(client, nullptr);
  PutChain(*client, 1, 4);

  const uint64_t before_ns = metrics_.Read().event_loop_cpu_ns;
  for (int i = 0; i < 2000; ++i) {
    Result<std::vector<protocol::ChainLookup>> found = client->Lookup({{Key(1, 0), Key(1, 1), Key(1, 2), Key(1, 3)}});
    ASSERT_TRUE(found.ok()) << found.status().ToString();
  }
  // A loop reports its CPU time at its next tick (25 ms).
  EXPECT_TRUE(wait_for([before_ns](const auto& s) { return s.event_loop_cpu_ns > before_ns; }));

  server_->Shutdown();
  EXPECT_EQ(metrics_.Read().event_loops, 0);
}

TEST_F(ServerTest, TcpClientsGetInlinePayloads) {
  ServerOptions options;
  options.tcp = true;
  StartServer(options);
  ASSERT_NE(server_->tcp_port(), 0);
  Result<std::unique_ptr<Client>> client = Client::ConnectTcp("127.0.0.1", server_->tcp_port());
  ASSERT_TRUE(client.ok()) << client.status().ToString();
  EXPECT_TRUE((*client)->shared_memory().empty());
  std::vector<std::vector<std::byte>> payloads = {Payload(3, 0), Payload(3, 1)};
  const std::vector<ClientBlock> blocks = {{.key = Key(3, 0), .payload = payloads[0]}, {.key = Key(3, 1), .payload = payloads[1]}};
  ASSERT_TRUE((*client)->Put(blocks).ok());
  std::vector<std::vector<std::byte>> buffers(2, std::vector<std::byte>(kBlockBytes + 100));
  const std::vector<std::span<std::byte>> outs = {buffers[0], buffers[1]};
  const std::vector<BlockKey> keys = {Key(3, 0), Key(3, 1)};
  Result<std::vector<uint32_t>> sizes = (*client)->Get(keys, outs);
  ASSERT_TRUE(sizes.ok()) << sizes.status().ToString();
  ASSERT_EQ(*sizes, (std::vector<uint32_t>{kBlockBytes, kBlockBytes}));
  EXPECT_TRUE(std::equal(payloads[1].begin(), payloads[1].end(), buffers[1].begin()));

  // A Unix client of the same (default) tenant sees the blocks.
  auto local = Connect();
  ASSERT_NE(local, nullptr);
  EXPECT_EQ((*local->Lookup({keys}))[0].prefix_blocks, 2u);
}

TEST_F(ServerTest, TenantsCannotSeeEachOthersBlocks) {
  ServerOptions options;
  options.tenants = {{.name = "alpha", .auth_token = "a-secret"}, {.name = "beta", .auth_token = ""}};
  options.auth_token = "shared-secret";
  StartServer(options);
  auto alpha = Connect({.tenant = "alpha", .auth_token = "a-secret"});
  auto beta = Connect({.tenant = "beta", .auth_token = "shared-secret"});
  ASSERT_NE(alpha, nullptr);
  ASSERT_NE(beta, nullptr);
  PutChain(*alpha, 5, 3);
  const std::vector<BlockKey> keys = {Key(5, 0), Key(5, 1), Key(5, 2)};
  EXPECT_EQ((*alpha->Lookup({keys}))[0].prefix_blocks, 3u);
  EXPECT_EQ((*beta->Lookup({keys}))[0].prefix_blocks, 0u);
  std::vector<std::byte> buffer(kBlockBytes);
  const std::vector<std::span<std::byte>> outs = {buffer};
  EXPECT_TRUE(beta->Get(std::span(keys).first(1), outs)->empty());
  Result<protocol::PinReply> pin = beta->Pin(keys);
  ASSERT_TRUE(pin.ok());
  EXPECT_EQ(pin->pinned_blocks, 0u);

  // Unknown tenants and wrong tokens are refused, with a reason.
  auto refused = Client::ConnectUnix(server_->unix_socket_path(), {.tenant = "gamma", .auth_token = "shared-secret"});
  EXPECT_EQ(refused.status().code(), StatusCode::kPermissionDenied);
  refused = Client::ConnectUnix(server_->unix_socket_path(), {.tenant = "alpha", .auth_token = "shared-secret"});
  EXPECT_EQ(refused.status().code(), StatusCode::kPermissionDenied);
  refused = Client::ConnectUnix(server_->unix_socket_path(), {.tenant = "beta", .auth_token = "wrong"});
  EXPECT_EQ(refused.status().code(), StatusCode::kPermissionDenied);
}

// The store holds a tenant's blocks under the keys the configured mapping gives (the stored
// format): a store written with sha256 keys is found again by a server told so.
TEST_F(ServerTest, TheStoreHoldsBlocksUnderTheConfiguredMappingsKeys) {
  for (const TenantKeyMapping mapping : {TenantKeyMapping::kAesMmo, TenantKeyMapping::kSha256}) {
    server_.reset();
    store_ = testing::DramOnlyStore(64u << 20);
    ServerOptions options;
    options.tenant_keys = mapping;
    StartServer(options);
    auto client = Connect({.tenant = "alpha"});
    ASSERT_NE(client, nullptr);
    PutChain(*client, 6, 2);
    const std::vector<BlockKey> keys = {Key(6, 0), Key(6, 1)};
    const TenantKeyMapping other = mapping == TenantKeyMapping::kAesMmo ? TenantKeyMapping::kSha256 : TenantKeyMapping::kAesMmo;
    EXPECT_EQ(store_->Lookup(server::TenantNamespace("alpha", mapping).Map(keys)).prefix_blocks, 2u);
    EXPECT_EQ(store_->Lookup(server::TenantNamespace("alpha", other).Map(keys)).prefix_blocks, 0u);
  }
}

TEST_F(ServerTest, MalformedFrameClosesOnlyItsConnection) {
  StartServer();
  auto good = Connect();
  ASSERT_NE(good, nullptr);
  ScopedFd raw = RawConnect();
  const char garbage[] = "GET / HTTP/1.1\r\nHost: x\r\n\r\n";
  ASSERT_EQ(::write(raw.get(), garbage, sizeof(garbage)), static_cast<ssize_t>(sizeof(garbage)));
  // The server answers with an Error frame, then closes.
  std::vector<std::byte> reply(4096);
  std::size_t got = 0;
  for (;;) {
    const ssize_t n = ::read(raw.get(), reply.data() + got, reply.size() - got);
    if (n <= 0) break;
    got += static_cast<std::size_t>(n);
  }
  ASSERT_GE(got, protocol::kHeaderBytes);
  Result<protocol::FrameHeader> header = protocol::DecodeHeader(std::span(reply).first(got), {});
  ASSERT_TRUE(header.ok());
  EXPECT_EQ(header->type, protocol::MessageType::kError);
  PutChain(*good, 7, 2);
  EXPECT_EQ(metrics_.Read().frames_rejected, 1u);
}

TEST_F(ServerTest, RequestsBeforeHelloAreRefused) {
  StartServer();
  ScopedFd raw = RawConnect();
  std::vector<std::byte> frame;
  ASSERT_TRUE(protocol::EncodeFrame(protocol::Stats{}, 42, protocol::MessageType::kError, {}, frame).ok());
  ASSERT_EQ(::write(raw.get(), frame.data(), frame.size()), static_cast<ssize_t>(frame.size()));
  std::vector<std::byte> reply(4096);
  const ssize_t n = ::read(raw.get(), reply.data(), reply.size());
  ASSERT_GT(n, static_cast<ssize_t>(protocol::kHeaderBytes));
  Result<protocol::FrameHeader> header = protocol::DecodeHeader(reply, {});
  ASSERT_TRUE(header.ok());
  EXPECT_EQ(header->request_id, 42u);
  Result<protocol::Message> m = protocol::DecodePayload(
      *header, std::span(reply).subspan(protocol::kHeaderBytes, header->payload_bytes), {});
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(std::get<protocol::ErrorReply>(*m).code, StatusCode::kFailedPrecondition);
}

TEST_F(ServerTest, ConnectionLimitRefusesWithAReason) {
  ServerOptions options;
  options.max_connections = 2;
  StartServer(options);
  auto a = Connect();
  auto b = Connect();
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  Result<std::unique_ptr<Client>> c = Client::ConnectUnix(server_->unix_socket_path());
  EXPECT_EQ(c.status().code(), StatusCode::kResourceExhausted) << c.status().ToString();
  a.reset();
  // The slot frees once the server notices the close.
  for (int i = 0; i < 200 && server_->connections() > 1; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  EXPECT_NE(Connect(), nullptr);
}

TEST_F(ServerTest, StalledAndVanishingClientsDoNotStallOthers) {
  StartServer();
  // One client stops halfway through a frame; another disconnects halfway through one.
  ScopedFd stalled = RawConnect();
  std::vector<std::byte> frame;
  protocol::Put put;
  const std::vector<std::byte> payload = Payload(9, 0);
  put.blocks.push_back({.key = Key(9, 0), .payload = {.length = kBlockBytes}, .inline_bytes = payload,
                        .checksum = PayloadChecksum(payload)});
  ASSERT_TRUE(protocol::EncodeFrame(put, 1, protocol::MessageType::kError, {}, frame).ok());
  ASSERT_EQ(::write(stalled.get(), frame.data(), frame.size() / 2), static_cast<ssize_t>(frame.size() / 2));
  {
    ScopedFd vanishing = RawConnect();
    ASSERT_EQ(::write(vanishing.get(), frame.data(), 1000), 1000);
  }
  auto client = Connect();
  ASSERT_NE(client, nullptr);
  for (uint64_t chain = 0; chain < 20; ++chain) PutChain(*client, 100 + chain, 2);
  EXPECT_EQ((*client->Lookup({{Key(119, 0), Key(119, 1)}}))[0].prefix_blocks, 2u);
  EXPECT_EQ((*client->Lookup({{Key(9, 0)}}))[0].prefix_blocks, 0u);  // the torn put stored nothing
}

TEST_F(ServerTest, PinsDieWithTheirConnection) {
  StartServer();
  auto client = Connect();
  ASSERT_NE(client, nullptr);
  PutChain(*client, 11, 3);
  Result<protocol::PinReply> pin = client->Pin(std::vector<BlockKey>{Key(11, 0), Key(11, 1)});
  ASSERT_TRUE(pin.ok());
  EXPECT_EQ(pin->pinned_blocks, 2u);
  EXPECT_EQ(store_->GetStats().pinned_blocks, 2u);
  EXPECT_TRUE(client->Unpin(pin->pin_id).ok());
  EXPECT_EQ(store_->GetStats().pinned_blocks, 0u);
  EXPECT_EQ(client->Unpin(pin->pin_id).code(), StatusCode::kNotFound);
  ASSERT_TRUE(client->Pin(std::vector<BlockKey>{Key(11, 0)}).ok());
  client.reset();
  for (int i = 0; i < 200 && store_->GetStats().pinned_blocks > 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  EXPECT_EQ(store_->GetStats().pinned_blocks, 0u);
}

TEST_F(ServerTest, ExpectationsAreBoundedAndDieWithTheirConnection) {
  ServerOptions options;
  options.max_expectations_per_client = 2;
  StartServer(std::move(options));
  auto client = Connect();
  ASSERT_NE(client, nullptr);
  PutChain(*client, 12, 2);
  // A queued request's chain: two stored blocks and one that is not stored yet.
  Result<uint64_t> first = client->Expect(std::vector<BlockKey>{Key(12, 0), Key(12, 1), Key(12, 2)});
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  EXPECT_EQ(store_->GetStats().expected_blocks, 3u);
  Result<uint64_t> second = client->Expect(std::vector<BlockKey>{Key(12, 0)});
  ASSERT_TRUE(second.ok());
  EXPECT_EQ(store_->GetStats().expected_blocks, 3u) << "a block expected twice is one block";
  EXPECT_EQ(client->Expect(std::vector<BlockKey>{Key(13, 0)}).status().code(), StatusCode::kResourceExhausted);
  EXPECT_TRUE(client->Unexpect(*first).ok());
  EXPECT_EQ(store_->GetStats().expected_blocks, 1u);
  EXPECT_EQ(client->Unexpect(*first).code(), StatusCode::kNotFound);
  // The tenant's namespace applies: another tenant's expectation is of other blocks.
  ClientOptions other;
  other.tenant = "other";
  auto beta = Connect(other);
  ASSERT_NE(beta, nullptr);
  ASSERT_TRUE(beta->Expect(std::vector<BlockKey>{Key(12, 0)}).ok());
  EXPECT_EQ(store_->GetStats().expected_blocks, 2u);
  client.reset();
  beta.reset();
  for (int i = 0; i < 200 && store_->GetStats().expected_blocks > 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_EQ(store_->GetStats().expected_blocks, 0u);
}

TEST_F(ServerTest, BadReferencesAndRequestsGetErrorsAndTheConnectionStays) {
  StartServer();
  auto client = Connect({.shared_memory_bytes = 1 << 20});
  ASSERT_NE(client, nullptr);
  // A Get into buffers half inside, half outside the segment.
  std::vector<std::byte> outside(kBlockBytes);
  const std::vector<std::span<std::byte>> mixed = {client->shared_memory().first(kBlockBytes), outside};
  const std::vector<BlockKey> keys = {Key(1, 0), Key(1, 1)};
  EXPECT_EQ(client->Get(keys, mixed).status().code(), StatusCode::kInvalidArgument);
  // Importance reports without a head layout, tags of unknown blocks (ignored), unpin of nothing.
  const std::vector<protocol::ImportanceReport> reports = {{.layer = 0, .head = 0, .value = 1}};
  EXPECT_EQ(client->ReportImportance(reports).code(), StatusCode::kFailedPrecondition);
  const std::vector<protocol::TagUpdate> tags = {{.key = Key(1, 0), .type = BlockType::kSystemPrompt}};
  EXPECT_TRUE(client->UpdateTags(tags).ok());
  EXPECT_EQ(client->Unpin(77).code(), StatusCode::kNotFound);
  EXPECT_TRUE(client->Prefetch(keys).ok());
  PutChain(*client, 1, 2);  // still connected
}

TEST_F(ServerTest, ShutdownDrainsAndClientsSeeTheServerGo) {
  StartServer();
  auto client = Connect();
  ASSERT_NE(client, nullptr);
  PutChain(*client, 1, 2);
  server_->Shutdown();
  server_->Shutdown();  // idempotent
  EXPECT_EQ(client->Stats().status().code(), StatusCode::kUnavailable);
  EXPECT_FALSE(std::filesystem::exists(dir_ + "/kvtier.sock"));
  EXPECT_EQ(Client::ConnectUnix(dir_ + "/kvtier.sock").status().code(), StatusCode::kUnavailable);
}

TEST_F(ServerTest, OptionsThatWouldExposeTheStoreAreRefused) {
  ServerOptions options;
  options.tcp = true;
  options.tcp_host = "0.0.0.0";
  EXPECT_EQ(Server::Start(*store_, options).status().code(), StatusCode::kInvalidArgument);
  options.auth_token = "token";  // not enough without TLS (tls_test.cc has the rest)
  EXPECT_EQ(Server::Start(*store_, options).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(Server::Start(*store_, ServerOptions{}).status().code(), StatusCode::kInvalidArgument);
  ServerOptions file_in_the_way;
  file_in_the_way.unix_socket_path = dir_ + "/plain-file";
  { std::ofstream(file_in_the_way.unix_socket_path) << "data"; }
  EXPECT_EQ(Server::Start(*store_, file_in_the_way).status().code(), StatusCode::kInvalidArgument);
}

TEST_F(ServerTest, ConcurrentClientsLoseNothing) {
  StartServer();
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int t = 0; t < 6; ++t) {
    threads.emplace_back([&, t] {
      auto client = Client::ConnectUnix(server_->unix_socket_path(), {.shared_memory_bytes = 8 * kBlockBytes});
      if (!client.ok()) {
        ++failures;
        return;
      }
      for (uint64_t round = 0; round < 10; ++round) {
        const uint64_t chain = static_cast<uint64_t>(t) * 100 + round;
        std::span<std::byte> shm = (*client)->shared_memory();
        std::vector<ClientBlock> blocks;
        std::vector<BlockKey> keys;
        std::vector<std::span<std::byte>> outs;
        for (uint64_t i = 0; i < 3; ++i) {
          Fill(shm.subspan(i * kBlockBytes, kBlockBytes), chain, i);
          blocks.push_back({.key = Key(chain, i), .payload = shm.subspan(i * kBlockBytes, kBlockBytes)});
          keys.push_back(Key(chain, i));
          outs.push_back(shm.subspan((4 + i) * kBlockBytes, kBlockBytes));
        }
        if (!(*client)->Put(blocks).ok()) ++failures;
        Result<std::vector<uint32_t>> sizes = (*client)->Get(keys, outs);
        if (!sizes.ok() || sizes->size() != 3) {
          ++failures;
          continue;
        }
        for (uint64_t i = 0; i < 3; ++i) {
          if (!std::ranges::equal(outs[i], Payload(chain, i))) ++failures;
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(failures.load(), 0);
}

// Issue 18, end-to-end checksums. A byte flipped in the client's shared memory after the
// client hashed the payload (here by a client that does so on purpose) is refused with
// Corruption and counted; nothing of that block is stored, the blocks before it are, and the
// connection stays usable. The same for an inline payload changed on its way.
TEST_F(ServerTest, PutOfBytesChangedAfterTheClientHashedThemIsRefused) {
  StartServer();
  std::unique_ptr<RawClient> raw = RawHello();
  std::span<std::byte> shm = raw->segment->bytes();
  protocol::Put put;
  for (uint32_t i = 0; i < 2; ++i) {
    std::span<std::byte> slot = shm.subspan(i * kBlockBytes, kBlockBytes);
    Fill(slot, 5, i);
    put.blocks.push_back({.key = Key(5, i), .tokens = 16,
                          .payload = {.segment = 0, .offset = uint64_t{i} * kBlockBytes, .length = kBlockBytes},
                          .checksum = PayloadChecksum(slot)});
  }
  shm[kBlockBytes + 1000] ^= std::byte{0x20};  // block 1, after it was hashed
  Result<protocol::Message> reply = raw->Call(put);
  ASSERT_TRUE(reply.ok()) << reply.status().ToString();
  ASSERT_TRUE(std::holds_alternative<protocol::ErrorReply>(*reply));
  const protocol::ErrorReply& error = std::get<protocol::ErrorReply>(*reply);
  EXPECT_EQ(error.code, StatusCode::kCorruption);
  EXPECT_NE(error.message.find("checksum"), std::string::npos) << error.message;
  EXPECT_EQ(metrics_.Read().put_checksum_mismatches, 1u);

  Result<protocol::Message> found = raw->Call(protocol::Lookup{{{Key(5, 0), Key(5, 1)}}});
  ASSERT_TRUE(found.ok()) << found.status().ToString();
  EXPECT_EQ(std::get<protocol::LookupReply>(*found).chains[0].prefix_blocks, 1u);

  // The payload corrupted on its way inline: refused the same way.
  protocol::Put inline_put;
  std::vector<std::byte> bytes = Payload(6, 0);
  inline_put.blocks.push_back({.key = Key(6, 0), .payload = {.length = kBlockBytes}, .inline_bytes = bytes,
                               .checksum = PayloadChecksum(bytes)});
  bytes[77] ^= std::byte{1};  // after the checksum: as if changed on its way
  reply = raw->Call(inline_put);
  ASSERT_TRUE(reply.ok());
  ASSERT_TRUE(std::holds_alternative<protocol::ErrorReply>(*reply));
  EXPECT_EQ(std::get<protocol::ErrorReply>(*reply).code, StatusCode::kCorruption);
  EXPECT_EQ(metrics_.Read().put_checksum_mismatches, 2u);

  // Sent again whole, both go in.
  shm[kBlockBytes + 1000] ^= std::byte{0x20};
  reply = raw->Call(put);
  ASSERT_TRUE(reply.ok());
  ASSERT_TRUE(std::holds_alternative<protocol::PutReply>(*reply));
  EXPECT_EQ(std::get<protocol::PutReply>(*reply).new_blocks, 1u);
  EXPECT_EQ(std::get<protocol::PutReply>(*reply).present_blocks, 1u);
}

// A block changed after the tier checked it (in the daemon's memory, in the segment or on the
// wire: here a FaultyTier flips a bit behind the DRAM tier's check) reaches the client with
// the checksum it was stored under: the client refuses it, counts it, zeroes the buffer, and
// the next Get on the same connection reads it whole. Through shared memory and inline.
TEST_F(ServerTest, ClientsRefuseBlocksChangedAfterTheTierCheckedThem) {
  testing::FaultyTier* faulty = UseFaultyStore();
  ServerOptions options;
  options.tcp = true;
  StartServer(options);
  auto local = Connect();
  ASSERT_NE(local, nullptr);
  PutChain(*local, 8, 2);
  const std::vector<BlockKey> keys = {Key(8, 0), Key(8, 1)};

  std::span<std::byte> shm = local->shared_memory();
  const std::vector<std::span<std::byte>> shared_outs = {shm.subspan(4 * kBlockBytes, kBlockBytes),
                                                         shm.subspan(5 * kBlockBytes, kBlockBytes)};
  faulty->CorruptNextReads(1);
  Result<std::vector<uint32_t>> sizes = local->Get(keys, shared_outs);
  ASSERT_FALSE(sizes.ok());
  EXPECT_EQ(sizes.status().code(), StatusCode::kCorruption) << sizes.status().ToString();
  EXPECT_NE(sizes.status().message().find("checksum"), std::string::npos);
  EXPECT_EQ(local->checksum_mismatches(), 1u);
  EXPECT_TRUE(std::ranges::all_of(shared_outs[0], [](std::byte b) { return b == std::byte{0}; }));
  sizes = local->Get(keys, shared_outs);
  ASSERT_TRUE(sizes.ok()) << sizes.status().ToString();
  EXPECT_TRUE(std::ranges::equal(shared_outs[1], Payload(8, 1)));

  Result<std::unique_ptr<Client>> remote = Client::ConnectTcp("127.0.0.1", server_->tcp_port());
  ASSERT_TRUE(remote.ok()) << remote.status().ToString();
  std::vector<std::vector<std::byte>> buffers(2, std::vector<std::byte>(kBlockBytes));
  const std::vector<std::span<std::byte>> inline_outs = {buffers[0], buffers[1]};
  faulty->CorruptNextReads(1);
  sizes = (*remote)->Get(keys, inline_outs);
  EXPECT_EQ(sizes.status().code(), StatusCode::kCorruption) << sizes.status().ToString();
  EXPECT_EQ((*remote)->checksum_mismatches(), 1u);
  sizes = (*remote)->Get(keys, inline_outs);
  ASSERT_TRUE(sizes.ok()) << sizes.status().ToString();
  EXPECT_EQ(buffers[0], Payload(8, 0));
  EXPECT_EQ(buffers[1], Payload(8, 1));
}

// Version 1 clients (no checksums) keep working against this server, over shared memory and
// inline, and see the blocks version 2 clients put (and the other way round).
TEST_F(ServerTest, VersionOneClientsWithoutChecksumsStillWork) {
  ServerOptions options;
  options.tcp = true;
  StartServer(options);
  auto old_client = Connect({.checksums = false});
  ASSERT_NE(old_client, nullptr);
  PutChain(*old_client, 12, 3);
  auto new_client = Connect();
  ASSERT_NE(new_client, nullptr);
  PutChain(*new_client, 13, 2);
  for (Client* client : {old_client.get(), new_client.get()}) {
    for (uint64_t chain : {uint64_t{12}, uint64_t{13}}) {
      std::span<std::byte> shm = client->shared_memory();
      const std::vector<BlockKey> keys = {Key(chain, 0), Key(chain, 1)};
      const std::vector<std::span<std::byte>> outs = {shm.subspan(6 * kBlockBytes, kBlockBytes),
                                                      shm.subspan(7 * kBlockBytes, kBlockBytes)};
      Result<std::vector<uint32_t>> sizes = client->Get(keys, outs);
      ASSERT_TRUE(sizes.ok()) << sizes.status().ToString();
      EXPECT_EQ(sizes->size(), 2u);
      EXPECT_TRUE(std::ranges::equal(outs[1], Payload(chain, 1)));
    }
  }
  Result<std::unique_ptr<Client>> old_remote =
      Client::ConnectTcp("127.0.0.1", server_->tcp_port(), {.shared_memory_bytes = 0, .checksums = false});
  ASSERT_TRUE(old_remote.ok()) << old_remote.status().ToString();
  const std::vector<std::byte> payload = Payload(14, 0);
  const std::vector<ClientBlock> blocks = {{.key = Key(14, 0), .payload = payload}};
  ASSERT_TRUE((*old_remote)->Put(blocks).ok());
  std::vector<std::byte> out(kBlockBytes);
  const std::vector<std::span<std::byte>> outs = {out};
  Result<std::vector<uint32_t>> sizes = (*old_remote)->Get(std::vector<BlockKey>{Key(14, 0)}, outs);
  ASSERT_TRUE(sizes.ok()) << sizes.status().ToString();
  EXPECT_EQ(out, payload);
  // A raw version 1 Hello is answered in version 1.
  EXPECT_NE(RawHello(protocol::kMinVersion), nullptr);
}

}  // namespace
}  // namespace kvtier
