// The server's event loop under load and misbehaviour (issue 19): thousands of connections
// open at once, clients that stall or do not read, pipelined requests, and a shutdown with
// requests in flight. server_test.cc has the behaviour of single connections.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <thread>

#include "kvtier/client.h"
#include "kvtier/server.h"
#include "kvtier/tiers.h"
#include "server/frame_io.h"
#include "server/service_metrics.h"
#include "testing/faulty_tier.h"
#include "testing/loopback.h"
#include "testing/test_store.h"
#include "util/posix_file.h"

namespace kvtier {
namespace {

using Clock = std::chrono::steady_clock;

constexpr uint32_t kBlockBytes = 64 << 10;

BlockKey Key(uint64_t chain, uint64_t i) { return {chain * 0x9E3779B97F4A7C15ull + 7, i + 1}; }

std::vector<std::byte> Payload(uint64_t chain, std::size_t bytes = kBlockBytes) {
  std::vector<std::byte> payload(bytes);
  for (std::size_t k = 0; k < payload.size(); ++k) payload[k] = static_cast<std::byte>((k * 17 + chain * 5) & 0xff);
  return payload;
}

// A put of one 4 KiB block, its payload checksummed as a client sends it. `put` views `payload`.
struct OneBlockPut {
  OneBlockPut(const BlockKey& key, uint64_t seed) : payload(Payload(seed, 4096)) {
    put.blocks.push_back({.key = key, .payload = {.length = 4096}, .inline_bytes = payload, .checksum = PayloadChecksum(payload)});
  }
  OneBlockPut(const OneBlockPut&) = delete;
  OneBlockPut& operator=(const OneBlockPut&) = delete;

  std::vector<std::byte> payload;
  protocol::Put put;
};

// A connection that speaks frames itself: it can pipeline, stop halfway or never read.
class RawConnection {
 public:
  explicit RawConnection(ScopedFd fd) : socket_(std::move(fd), 10000) {}

  int fd() const { return socket_.fd(); }
  Status Send(const protocol::Message& m, uint64_t request_id) {
    std::vector<std::byte> frame;
    KVTIER_RETURN_IF_ERROR(protocol::EncodeFrame(m, request_id, protocol::MessageType::kError, {}, frame));
    return socket_.Send(frame);
  }
  // The next reply, and its request id; its inline blocks are valid until the next Receive.
  Result<std::pair<uint64_t, protocol::Message>> Receive() {
    std::vector<ScopedFd> fds;
    KVTIER_ASSIGN_OR_RETURN(server::FrameSocket::Frame frame, socket_.Receive({}, payload_, fds));
    KVTIER_ASSIGN_OR_RETURN(protocol::Message m, protocol::DecodePayload(frame.header, frame.payload, {}));
    return std::pair<uint64_t, protocol::Message>(frame.header.request_id, std::move(m));
  }
  // Hello without shared memory, and its reply.
  Status Hello() {
    KVTIER_RETURN_IF_ERROR(Send(protocol::Hello{}, 1));
    KVTIER_ASSIGN_OR_RETURN(auto reply, Receive());
    if (!std::holds_alternative<protocol::HelloReply>(reply.second)) return Status::Internal("Hello was refused");
    return Status::Ok();
  }

 private:
  server::FrameSocket socket_;
  std::vector<std::byte> payload_;  // the last reply's: what its inline blocks view
};

class ServerEventLoopTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char pattern[] = "/tmp/kvtier-loop-XXXXXX";
    ASSERT_NE(::mkdtemp(pattern), nullptr);
    dir_ = pattern;
    store_ = testing::DramOnlyStore(128u << 20);
    ASSERT_NE(store_, nullptr);
  }
  void TearDown() override {
    server_.reset();
    store_.reset();
    std::filesystem::remove_all(dir_);
  }

  void StartServer(ServerOptions options) {
    options.unix_socket_path = dir_ + "/kvtier.sock";
    options.metrics = &metrics_;
    Result<std::unique_ptr<Server>> server = Server::Start(*store_, std::move(options));
    ASSERT_TRUE(server.ok()) << server.status().ToString();
    server_ = std::move(*server);
  }

  // The store over one DRAM tier wrapped in a FaultyTier, which the test may slow down.
  testing::FaultyTier& UseFaultyStore() {
    auto [store, faulty] = testing::FaultyDramStore(64u << 20);
    store_ = std::move(store);
    return *faulty;
  }

  ScopedFd ConnectUnix() const {
    ScopedFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::strncpy(addr.sun_path, server_->unix_socket_path().c_str(), sizeof(addr.sun_path) - 1);
    if (::connect(fd.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) != 0) return ScopedFd();
    return fd;
  }

  ScopedFd ConnectTcp() const { return testing::ConnectLoopbackTcp(server_->tcp_port()); }

  std::string dir_;
  server::ServiceMetrics metrics_;
  std::unique_ptr<TieredStore> store_;
  std::unique_ptr<Server> server_;
};

TEST_F(ServerEventLoopTest, TwoThousandConnectionsAtOnceAreAllServed) {
  constexpr std::size_t kConnections = 2048;
  // Both ends of every connection live in this process, plus the store's and the test's own.
  constexpr rlim_t kNeeded = 2 * kConnections + 256;
  rlimit limit{};
  ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &limit), 0);
  if (limit.rlim_max != RLIM_INFINITY && limit.rlim_max < kNeeded) {
    GTEST_SKIP() << "RLIMIT_NOFILE's hard limit is " << limit.rlim_max << "; this test needs " << kNeeded
                 << " descriptors (raise it with ulimit -Hn)";
  }
  if (limit.rlim_cur < kNeeded) {
    limit.rlim_cur = std::min<rlim_t>(limit.rlim_max, 2 * kNeeded);
    ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &limit), 0) << std::strerror(errno);
  }
  ServerOptions options;
  options.event_loops = 4;  // the connections spread over several loops
  StartServer(options);

  std::vector<std::unique_ptr<RawConnection>> connections;
  for (std::size_t i = 0; i < kConnections; ++i) {
    ScopedFd fd = ConnectUnix();
    ASSERT_TRUE(fd.valid()) << "connection " << i << ": " << std::strerror(errno);
    connections.push_back(std::make_unique<RawConnection>(std::move(fd)));
  }
  // Every request is sent before any reply is read: all of them wait in the server at once.
  for (std::size_t i = 0; i < kConnections; ++i) ASSERT_TRUE(connections[i]->Send(protocol::Hello{}, i + 1).ok()) << i;
  std::size_t errors = 0;
  for (std::size_t i = 0; i < kConnections; ++i) {
    Result<std::pair<uint64_t, protocol::Message>> reply = connections[i]->Receive();
    if (!reply.ok() || reply->first != i + 1 || !std::holds_alternative<protocol::HelloReply>(reply->second)) ++errors;
  }
  EXPECT_EQ(errors, 0u);
  EXPECT_EQ(server_->connections(), kConnections);
  EXPECT_EQ(metrics_.Read().connections_rejected, 0u);
}

TEST_F(ServerEventLoopTest, ClientStalledMidFrameDoesNotDelayOthersEvenWithOneWorker) {
  ServerOptions options;
  options.workers = 1;
  options.io_timeout_ms = 30000;
  StartServer(options);
  RawConnection stalled(ConnectUnix());
  ASSERT_TRUE(stalled.Hello().ok());
  protocol::Put put;
  const std::vector<std::byte> stalled_payload = Payload(1);
  put.blocks.push_back({.key = Key(1, 0), .payload = {.length = kBlockBytes}, .inline_bytes = stalled_payload,
                        .checksum = PayloadChecksum(stalled_payload)});
  std::vector<std::byte> frame;
  ASSERT_TRUE(protocol::EncodeFrame(put, 2, protocol::MessageType::kError, {}, frame).ok());
  ASSERT_EQ(::write(stalled.fd(), frame.data(), frame.size() / 2), static_cast<ssize_t>(frame.size() / 2));

  // Far within the stalled client's timeout, another is served again and again.
  const auto start = Clock::now();
  Result<std::unique_ptr<Client>> other = Client::ConnectUnix(server_->unix_socket_path());
  ASSERT_TRUE(other.ok()) << other.status().ToString();
  for (uint64_t chain = 10; chain < 30; ++chain) {
    const std::vector<std::byte> payload = Payload(chain);
    std::span<std::byte> shm = (*other)->shared_memory().first(kBlockBytes);
    std::ranges::copy(payload, shm.begin());
    const std::vector<ClientBlock> blocks = {{.key = Key(chain, 0), .payload = shm}};
    ASSERT_TRUE((*other)->Put(blocks).ok());
  }
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(10));
  EXPECT_EQ((*(*other)->Lookup({{Key(1, 0)}}))[0].prefix_blocks, 0u);  // the stalled put is not stored yet
  // Its frame finishes late, and is served.
  ASSERT_EQ(::write(stalled.fd(), frame.data() + frame.size() / 2, frame.size() - frame.size() / 2),
            static_cast<ssize_t>(frame.size() - frame.size() / 2));
  Result<std::pair<uint64_t, protocol::Message>> reply = stalled.Receive();
  ASSERT_TRUE(reply.ok()) << reply.status().ToString();
  EXPECT_TRUE(std::holds_alternative<protocol::PutReply>(reply->second));
}

TEST_F(ServerEventLoopTest, ClientThatNeverReadsItsRepliesDoesNotStopOthers) {
  ServerOptions options;
  options.tcp = true;
  options.workers = 1;
  options.io_timeout_ms = 0;  // the hog reads late; a slow (sanitized) run must not cut it off first
  StartServer(options);
  constexpr std::size_t kBig = 1u << 20;
  Result<std::unique_ptr<Client>> writer = Client::ConnectTcp("127.0.0.1", server_->tcp_port());
  ASSERT_TRUE(writer.ok()) << writer.status().ToString();
  const std::vector<std::byte> big = Payload(2, kBig);
  const std::vector<ClientBlock> blocks = {{.key = Key(2, 0), .payload = big}};
  ASSERT_TRUE((*writer)->Put(blocks).ok());

  // 64 inline Gets of 1 MiB each, and not one reply read: far more than the socket buffers
  // and the server's per-connection reply buffer hold.
  RawConnection hog(ConnectTcp());
  ASSERT_TRUE(hog.Hello().ok());
  const int small_buffer = 64 << 10;
  ::setsockopt(hog.fd(), SOL_SOCKET, SO_RCVBUF, &small_buffer, sizeof(small_buffer));
  protocol::Get get{.keys = {Key(2, 0)}, .destinations = {{.length = kBig}}};
  std::vector<std::byte> frame;
  ASSERT_TRUE(protocol::EncodeFrame(get, 100, protocol::MessageType::kError, {}, frame).ok());
  std::vector<std::byte> frames;
  for (int i = 0; i < 64; ++i) frames.insert(frames.end(), frame.begin(), frame.end());
  // The hog's socket may stop taking its requests once the server stops reading it.
  (void)::send(hog.fd(), frames.data(), frames.size(), MSG_DONTWAIT | MSG_NOSIGNAL);

  for (uint64_t round = 0; round < 10; ++round) {
    std::vector<std::byte> back(kBig);
    const std::vector<std::span<std::byte>> outs = {back};
    Result<std::vector<uint32_t>> sizes = (*writer)->Get(std::vector<BlockKey>{Key(2, 0)}, outs);
    ASSERT_TRUE(sizes.ok()) << "round " << round << ": " << sizes.status().ToString();
    ASSERT_EQ(*sizes, std::vector<uint32_t>{kBig});
    EXPECT_EQ(back, big);
  }
  // The hog's replies were kept for it, in order, once it reads.
  for (int i = 0; i < 3; ++i) {
    Result<std::pair<uint64_t, protocol::Message>> reply = hog.Receive();
    ASSERT_TRUE(reply.ok()) << reply.status().ToString();
    ASSERT_TRUE(std::holds_alternative<protocol::GetReply>(reply->second));
    EXPECT_TRUE(std::ranges::equal(std::get<protocol::GetReply>(reply->second).inline_blocks.at(0), big));
  }
}

// Many clients pipelining large inline puts to one slow worker: the daemon holds no more of
// them than its request budget (plus the one frame that may start while there is room), the
// rest wait in their sockets, every put is served, and the budget is all given back.
TEST_F(ServerEventLoopTest, LargePutsFromManyClientsWaitWithinTheRequestBudget) {
  UseFaultyStore().AddLatency(std::chrono::milliseconds(5));
  constexpr uint64_t kClients = 12, kPutsEach = 4;
  constexpr std::size_t kBlock = 256u << 10;
  constexpr uint64_t kBudget = 1u << 20;
  ServerOptions options;
  options.tcp = true;
  options.workers = 1;
  options.event_loops = 1;  // one budget: the gauge is what it holds
  options.max_request_memory = kBudget;
  StartServer(options);

  std::atomic<bool> done{false};
  int64_t most_held = 0;
  std::thread sampler([&] {
    while (!done.load()) {
      most_held = std::max(most_held, metrics_.Read().request_bytes_held);
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  });
  std::atomic<uint64_t> served{0};
  std::vector<std::thread> clients;
  for (uint64_t c = 0; c < kClients; ++c) {
    clients.emplace_back([&, c] {
      RawConnection raw(ConnectTcp());
      if (!raw.Hello().ok()) return;
      std::vector<std::vector<std::byte>> payloads;
      std::vector<std::byte> frames;
      for (uint64_t i = 0; i < kPutsEach; ++i) {
        payloads.push_back(Payload(100 * c + i, kBlock));
        protocol::Put put;
        put.blocks.push_back({.key = Key(100 * c + i, 0), .payload = {.length = kBlock}, .inline_bytes = payloads.back(),
                              .checksum = PayloadChecksum(payloads.back())});
        if (!protocol::EncodeFrame(put, i + 2, protocol::MessageType::kError, {}, frames).ok()) return;
      }
      if (::send(raw.fd(), frames.data(), frames.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(frames.size())) return;
      for (uint64_t i = 0; i < kPutsEach; ++i) {
        Result<std::pair<uint64_t, protocol::Message>> reply = raw.Receive();
        if (!reply.ok() || reply->first != i + 2 || !std::holds_alternative<protocol::PutReply>(reply->second)) return;
        if (std::get<protocol::PutReply>(reply->second).new_blocks == 1) ++served;
      }
    });
  }
  for (std::thread& t : clients) t.join();
  done = true;
  sampler.join();

  EXPECT_EQ(served.load(), kClients * kPutsEach);
  EXPECT_GT(metrics_.Read().reads_paused, 0u) << "the clients sent 12 MiB against a 1 MiB budget";
  EXPECT_GT(most_held, 0);
  EXPECT_LE(static_cast<uint64_t>(most_held), kBudget + kBlock + (64u << 10))
      << "the budget, one frame started under it, and what one read decodes";
  Result<std::unique_ptr<Client>> reader = Client::ConnectTcp("127.0.0.1", server_->tcp_port());
  ASSERT_TRUE(reader.ok()) << reader.status().ToString();
  for (uint64_t c = 0; c < kClients; c += 5) {
    std::vector<std::byte> back(kBlock);
    const std::vector<std::span<std::byte>> outs = {back};
    Result<std::vector<uint32_t>> sizes = (*reader)->Get(std::vector<BlockKey>{Key(100 * c + 3, 0)}, outs);
    ASSERT_TRUE(sizes.ok()) << sizes.status().ToString();
    EXPECT_EQ(back, Payload(100 * c + 3, kBlock));
  }
  reader->reset();
  for (int i = 0; i < 400 && server_->connections() > 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  EXPECT_EQ(server_->connections(), 0u);
  EXPECT_EQ(metrics_.Read().request_bytes_held, 0) << "every charge was given back";
}

TEST_F(ServerEventLoopTest, PipelinedRequestsComeBackInOrder) {
  ServerOptions options;
  options.workers = 4;
  StartServer(options);
  RawConnection client(ConnectUnix());
  ASSERT_TRUE(client.Hello().ok());
  // A put, then a lookup of the block just put and of the next one, again and again, all
  // sent before any reply is read: each lookup finds its put's block and not the next put's,
  // which holds only if they ran one at a time and in order.
  constexpr uint64_t kRounds = 50;
  std::vector<std::byte> frames;
  for (uint64_t i = 0; i < kRounds; ++i) {
    std::vector<std::byte> frame;
    ASSERT_TRUE(protocol::EncodeFrame(OneBlockPut(Key(3, i), i).put, 2 * i + 10, protocol::MessageType::kError, {}, frame).ok());
    frames.insert(frames.end(), frame.begin(), frame.end());
    frame.clear();  // EncodeFrame appends
    ASSERT_TRUE(protocol::EncodeFrame(protocol::Lookup{{{Key(3, i)}, {Key(3, i + 1)}}}, 2 * i + 11, protocol::MessageType::kError, {}, frame).ok());
    frames.insert(frames.end(), frame.begin(), frame.end());
  }
  ASSERT_EQ(::write(client.fd(), frames.data(), frames.size()), static_cast<ssize_t>(frames.size()));
  for (uint64_t i = 0; i < kRounds; ++i) {
    Result<std::pair<uint64_t, protocol::Message>> put = client.Receive();
    ASSERT_TRUE(put.ok()) << put.status().ToString();
    EXPECT_EQ(put->first, 2 * i + 10);
    EXPECT_TRUE(std::holds_alternative<protocol::PutReply>(put->second));
    Result<std::pair<uint64_t, protocol::Message>> lookup = client.Receive();
    ASSERT_TRUE(lookup.ok()) << lookup.status().ToString();
    EXPECT_EQ(lookup->first, 2 * i + 11);
    ASSERT_TRUE(std::holds_alternative<protocol::LookupReply>(lookup->second));
    const protocol::LookupReply& found = std::get<protocol::LookupReply>(lookup->second);
    EXPECT_EQ(found.chains.at(0).prefix_blocks, 1u) << "round " << i;
    EXPECT_EQ(found.chains.at(1).prefix_blocks, 0u) << "round " << i;
  }
}

TEST_F(ServerEventLoopTest, ConnectionsOnSeveralLoopsShareOneStoreAndLeaveCleanly) {
  ServerOptions options;
  options.event_loops = 3;
  options.workers = 2;
  StartServer(options);
  constexpr uint64_t kClients = 30;
  std::vector<std::unique_ptr<RawConnection>> clients;
  for (uint64_t c = 0; c < kClients; ++c) {
    clients.push_back(std::make_unique<RawConnection>(ConnectUnix()));
    ASSERT_TRUE(clients.back()->Hello().ok()) << c;
  }
  for (uint64_t c = 0; c < kClients; ++c) {
    ASSERT_TRUE(clients[c]->Send(OneBlockPut(Key(6, c), c).put, 1).ok());
  }
  for (uint64_t c = 0; c < kClients; ++c) {
    Result<std::pair<uint64_t, protocol::Message>> reply = clients[c]->Receive();
    ASSERT_TRUE(reply.ok()) << reply.status().ToString();
    ASSERT_TRUE(std::holds_alternative<protocol::PutReply>(reply->second)) << c;
  }
  // Each client finds every other client's block, whichever loop served its put.
  for (uint64_t c = 0; c < kClients; ++c) {
    protocol::Lookup lookup;
    for (uint64_t other = 0; other < kClients; ++other) lookup.chains.push_back({Key(6, other)});
    ASSERT_TRUE(clients[c]->Send(lookup, 2).ok());
  }
  for (uint64_t c = 0; c < kClients; ++c) {
    Result<std::pair<uint64_t, protocol::Message>> reply = clients[c]->Receive();
    ASSERT_TRUE(reply.ok()) << reply.status().ToString();
    ASSERT_TRUE(std::holds_alternative<protocol::LookupReply>(reply->second)) << c;
    for (const protocol::ChainLookup& chain : std::get<protocol::LookupReply>(reply->second).chains) {
      EXPECT_EQ(chain.prefix_blocks, 1u) << "client " << c;
    }
  }
  clients.resize(kClients / 3);  // the others hang up, on every loop
  const auto deadline = Clock::now() + std::chrono::seconds(10);
  while (server_->connections() != kClients / 3 && Clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  EXPECT_EQ(server_->connections(), kClients / 3);
  server_->Shutdown();
  EXPECT_EQ(server_->connections(), 0u);
  for (const auto& client : clients) EXPECT_EQ(client->Receive().status().code(), StatusCode::kNotFound);
}

TEST_F(ServerEventLoopTest, LookupsAreAnsweredWhileTheOnlyWorkerWaitsOnASlowTier) {
  testing::FaultyTier& slow = UseFaultyStore();
  ServerOptions options;
  options.workers = 1;
  StartServer(options);
  RawConnection writer(ConnectUnix()), reader(ConnectUnix());
  ASSERT_TRUE(writer.Hello().ok());
  ASSERT_TRUE(reader.Hello().ok());
  ASSERT_TRUE(writer.Send(OneBlockPut(Key(5, 0), 5).put, 3).ok());
  ASSERT_TRUE(writer.Receive().ok());
  // The next put holds the only worker for 3 s in the tier; a lookup needs no worker.
  slow.AddLatency(std::chrono::seconds(3));
  ASSERT_TRUE(writer.Send(OneBlockPut(Key(5, 1), 5).put, 4).ok());
  const auto deadline = Clock::now() + std::chrono::seconds(10);
  while (metrics_.Read().in_flight < 1 && Clock::now() < deadline) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  ASSERT_EQ(metrics_.Read().in_flight, 1);
  const auto lookups_start = Clock::now();
  for (uint64_t i = 0; i < 20; ++i) {
    ASSERT_TRUE(reader.Send(protocol::Lookup{{{Key(5, 0)}}}, 100 + i).ok());
    Result<std::pair<uint64_t, protocol::Message>> reply = reader.Receive();
    ASSERT_TRUE(reply.ok()) << reply.status().ToString();
    EXPECT_EQ(reply->first, 100 + i);
    ASSERT_TRUE(std::holds_alternative<protocol::LookupReply>(reply->second));
    EXPECT_EQ(std::get<protocol::LookupReply>(reply->second).chains.at(0).prefix_blocks, 1u);
  }
  // A pipeline longer than the loop serves in one turn: the rest wait for its next round, not
  // for the worker.
  std::vector<std::byte> pipeline;
  for (uint64_t i = 0; i < 50; ++i) {
    ASSERT_TRUE(protocol::EncodeFrame(protocol::Lookup{{{Key(5, 0)}}}, 200 + i, protocol::MessageType::kError, {}, pipeline).ok());
  }
  ASSERT_EQ(::write(reader.fd(), pipeline.data(), pipeline.size()), static_cast<ssize_t>(pipeline.size()));
  for (uint64_t i = 0; i < 50; ++i) {
    Result<std::pair<uint64_t, protocol::Message>> reply = reader.Receive();
    ASSERT_TRUE(reply.ok()) << reply.status().ToString();
    EXPECT_EQ(reply->first, 200 + i);
  }
  // Answered before the put: its reply has not come yet.
  pollfd put_reply{.fd = writer.fd(), .events = POLLIN, .revents = 0};
  EXPECT_EQ(::poll(&put_reply, 1, 0), 0) << "the lookups waited for the put: they took "
                                         << std::chrono::duration<double>(Clock::now() - lookups_start).count() << " s";
  Result<std::pair<uint64_t, protocol::Message>> second = writer.Receive();
  ASSERT_TRUE(second.ok()) << second.status().ToString();
  EXPECT_TRUE(std::holds_alternative<protocol::PutReply>(second->second));
}

TEST_F(ServerEventLoopTest, ShutdownFinishesTheRequestsInFlightAndSendsTheirReplies) {
  UseFaultyStore().AddLatency(std::chrono::milliseconds(300));
  constexpr uint32_t kClients = 4;
  ServerOptions options;
  options.workers = kClients;
  options.event_loops = 3;  // each loop finishes its own connections' requests
  StartServer(options);

  std::vector<std::unique_ptr<RawConnection>> clients;
  for (uint32_t c = 0; c < kClients; ++c) {
    clients.push_back(std::make_unique<RawConnection>(ConnectUnix()));
    ASSERT_TRUE(clients.back()->Hello().ok());
  }
  for (uint32_t c = 0; c < kClients; ++c) {
    ASSERT_TRUE(clients[c]->Send(OneBlockPut(Key(4, c), c).put, 7).ok());
  }
  // Every put is being served (each waits in the slow tier) when the server is told to stop.
  const auto deadline = Clock::now() + std::chrono::seconds(10);
  while (metrics_.Read().in_flight < kClients && Clock::now() < deadline) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  ASSERT_EQ(metrics_.Read().in_flight, kClients);
  server_->Shutdown();
  for (uint32_t c = 0; c < kClients; ++c) {
    Result<std::pair<uint64_t, protocol::Message>> reply = clients[c]->Receive();
    ASSERT_TRUE(reply.ok()) << "client " << c << ": " << reply.status().ToString();
    EXPECT_EQ(reply->first, 7u);
    EXPECT_TRUE(std::holds_alternative<protocol::PutReply>(reply->second));
    EXPECT_EQ(clients[c]->Receive().status().code(), StatusCode::kNotFound) << "then the server closes";
  }
  EXPECT_EQ(metrics_.Read().in_flight, 0);
  EXPECT_EQ(server_->connections(), 0u);
}

}  // namespace
}  // namespace kvtier
