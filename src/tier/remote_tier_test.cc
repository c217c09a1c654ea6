// Tests of what is particular to the remote-pool tier, against real redis-server processes
// (testing/redis_server.h): both topologies, cluster redirections during a slot migration,
// a killed and restarted node, damaged values, capacity accounting and the options. The
// semantics every tier shares are in the conformance suite (tests/tier/).
#include "tier/remote_tier.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "testing/redis_server.h"
#include "tier/redis_cluster_slots.h"
#include "tier/redis_connection.h"

namespace kvtier {
namespace {

using namespace std::chrono_literals;
using testing::RedisServers;

#define SKIP_WITHOUT_REDIS()                                                              \
  if (!RedisServers::Available()) {                                                       \
    GTEST_SKIP() << "redis-server or redis-cli is not on PATH (scripts/setup.sh installs them)"; \
  }

std::vector<std::byte> Payload(std::size_t size, uint8_t seed) {
  std::vector<std::byte> bytes(size);
  for (std::size_t i = 0; i < size; ++i) bytes[i] = static_cast<std::byte>((i * 131 + seed) & 0xff);
  return bytes;
}

BlockKey Key(uint64_t n) { return {n * 0x9E3779B97F4A7C15ull, n + 1}; }

// A command timeout a loaded CI machine does not reach (at 200 ms, a slow reply under a load
// average of 8 marked a live node down); the dead-node test sets its own.
RemoteTierOptions Options(RemoteTopology topology, std::vector<std::string> endpoints) {
  return {.topology = topology,
          .endpoints = std::move(endpoints),
          .key_prefix = "kvtier-test:",
          .connections_per_node = 4,
          .timeout_ms = 2000,
          .reconnect_interval_ms = 200};
}

std::unique_ptr<RemoteTier> OpenTier(const RemoteTierOptions& options) {
  Result<std::unique_ptr<RemoteTier>> tier = RemoteTier::Open(options);
  EXPECT_TRUE(tier.ok()) << tier.status().ToString();
  return tier.ok() ? std::move(*tier) : nullptr;
}

std::vector<std::byte> ReadAll(Tier& tier, const BlockKey& key, std::size_t size) {
  std::vector<std::byte> out(size);
  Result<std::size_t> n = tier.Read(key, out);
  EXPECT_TRUE(n.ok()) << n.status().ToString();
  out.resize(n.ok() ? *n : 0);
  return out;
}

// Writes `count` blocks in one batch and reads them back in another.
void RoundTrip(Tier& tier, uint64_t count) {
  std::vector<std::vector<std::byte>> payloads;
  std::vector<Tier::WriteOp> writes;
  for (uint64_t i = 0; i < count; ++i) payloads.push_back(Payload(4096 + i, static_cast<uint8_t>(i)));
  for (uint64_t i = 0; i < count; ++i) writes.push_back({Key(i), payloads[i]});
  for (const Status& status : tier.WriteBatch(writes)) ASSERT_TRUE(status.ok()) << status.ToString();
  std::vector<std::vector<std::byte>> outs(count, std::vector<std::byte>(8192));
  std::vector<Tier::ReadOp> reads;
  for (uint64_t i = 0; i < count; ++i) reads.push_back({Key(i), outs[i]});
  const std::vector<Result<std::size_t>> results = tier.ReadBatch(reads);
  for (uint64_t i = 0; i < count; ++i) {
    ASSERT_TRUE(results[i].ok()) << results[i].status().ToString();
    ASSERT_EQ(*results[i], payloads[i].size());
    EXPECT_TRUE(std::equal(payloads[i].begin(), payloads[i].end(), outs[i].begin())) << i;
  }
  EXPECT_EQ(tier.Size(Key(0)), payloads[0].size());
  EXPECT_EQ(tier.GetStats().blocks, count);
}

TEST(RedisClusterSlots, Crc16AndHashTags) {
  EXPECT_EQ(Crc16Xmodem("123456789"), 0x31C3);  // the XMODEM check value
  EXPECT_EQ(ClusterKeySlot("foo"), 12182);       // values from the cluster specification
  EXPECT_EQ(ClusterKeySlot("{user1000}.following"), ClusterKeySlot("{user1000}.followers"));
  EXPECT_EQ(ClusterKeySlot("foo{}{bar}"), Crc16Xmodem("foo{}{bar}") % kClusterSlots);  // empty tag: whole key
  EXPECT_EQ(ClusterKeySlot("foo{{bar}}zap"), ClusterKeySlot("{bar"));
  EXPECT_EQ(ClusterKeySlot("foo{bar}{zap}"), ClusterKeySlot("bar"));
}

TEST(RedisClusterSlots, ParsesRedirections) {
  auto error_reply = [](const char* text) {
    redisReply reply{};
    reply.type = REDIS_REPLY_ERROR;
    reply.str = const_cast<char*>(text);
    reply.len = std::strlen(text);
    return ParseRedirection(reply);
  };
  std::optional<Redirection> moved = error_reply("MOVED 3999 127.0.0.1:6381");
  ASSERT_TRUE(moved);
  EXPECT_FALSE(moved->ask);
  EXPECT_EQ(moved->slot, 3999);
  EXPECT_EQ(moved->address, "127.0.0.1:6381");
  std::optional<Redirection> ask = error_reply("ASK 12 ::1:7000");
  ASSERT_TRUE(ask);
  EXPECT_TRUE(ask->ask);
  EXPECT_EQ(ask->address, "[::1]:7000");
  EXPECT_FALSE(error_reply("MOVED 16384 127.0.0.1:1"));
  EXPECT_FALSE(error_reply("MOVED x"));
  EXPECT_FALSE(error_reply("ERR wrong type"));
}

TEST(RemoteTierOptions, ValidateExplainsWhatIsWrong) {
  auto error = [](RemoteTierOptions options) { return options.Validate().message(); };
  RemoteTierOptions good = Options(RemoteTopology::kHashRing, {"127.0.0.1:6379", "unix:/tmp/redis.sock"});
  EXPECT_TRUE(good.Validate().ok()) << good.Validate().ToString();
  EXPECT_NE(error(Options(RemoteTopology::kCluster, {})).find("at least one"), std::string::npos);
  EXPECT_NE(error(Options(RemoteTopology::kCluster, {"localhost"})).find("host:port"), std::string::npos);
  EXPECT_NE(error(Options(RemoteTopology::kCluster, {"localhost:0"})).find("1 to 65535"), std::string::npos);
  EXPECT_NE(error(Options(RemoteTopology::kCluster, {"localhost:99999"})).find("1 to 65535"), std::string::npos);
  EXPECT_NE(error(Options(RemoteTopology::kCluster, {":6379"})).find("host is empty"), std::string::npos);
  EXPECT_NE(error(Options(RemoteTopology::kCluster, {"unix:/tmp/r.sock"})).find("hash-ring"), std::string::npos);
  EXPECT_NE(error(Options(RemoteTopology::kHashRing, {"unix:relative"})).find("absolute"), std::string::npos);
  EXPECT_NE(error(Options(RemoteTopology::kHashRing, {"a:1", "a:1"})).find("twice"), std::string::npos);
  EXPECT_TRUE(Options(RemoteTopology::kCluster, {"[::1]:7000"}).Validate().ok());
  RemoteTierOptions options = Options(RemoteTopology::kCluster, {"a:1"});
  options.key_prefix = "{kv}:";
  EXPECT_NE(error(options).find("one cluster slot"), std::string::npos);
  options = Options(RemoteTopology::kCluster, {"a:1"});
  options.connections_per_node = 0;
  EXPECT_NE(error(options).find("connections_per_node must be 1 to 64, got 0"), std::string::npos);
  options = Options(RemoteTopology::kCluster, {"a:1"});
  options.timeout_ms = -5;
  EXPECT_NE(error(options).find("timeout_ms"), std::string::npos);
  options = Options(RemoteTopology::kHashRing, {"a:1"});
  options.username = "kvtier";
  EXPECT_NE(error(options).find("needs its password"), std::string::npos);
  options = Options(RemoteTopology::kHashRing, {"a:1"});
  options.virtual_nodes = 0;
  EXPECT_NE(error(options).find("virtual_nodes"), std::string::npos);
  EXPECT_EQ(NewRemoteTier(options).status().code(), StatusCode::kInvalidArgument);
}

TEST(RemoteTier, ClusterTopologyRefusesAStandaloneServerAndUnreachableSeeds) {
  SKIP_WITHOUT_REDIS();
  Result<std::unique_ptr<RedisServers>> servers = RedisServers::StartStandalone(1);
  ASSERT_TRUE(servers.ok()) << servers.status().ToString();
  Result<std::unique_ptr<RemoteTier>> tier = RemoteTier::Open(Options(RemoteTopology::kCluster, (*servers)->endpoints()));
  EXPECT_EQ(tier.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(tier.status().message().find("not in cluster mode"), std::string::npos) << tier.status().ToString();
  const std::string dead = (*servers)->endpoint(0);
  (*servers)->Kill(0);
  EXPECT_EQ(RemoteTier::Open(Options(RemoteTopology::kCluster, {dead})).status().code(), StatusCode::kUnavailable);
}

TEST(RemoteTier, RingRoundTripOnOneServer) {
  SKIP_WITHOUT_REDIS();
  Result<std::unique_ptr<RedisServers>> servers = RedisServers::StartStandalone(1);
  ASSERT_TRUE(servers.ok()) << servers.status().ToString();
  std::unique_ptr<RemoteTier> tier = OpenTier(Options(RemoteTopology::kHashRing, (*servers)->endpoints()));
  ASSERT_NE(tier, nullptr);
  RoundTrip(*tier, 40);
  // The value is the header and the payload, under the prefix and the key's hex digits.
  Result<RedisReply> length = (*servers)->Command(0, {"STRLEN", "kvtier-test:" + Key(3).ToHex()});
  ASSERT_TRUE(length.ok());
  EXPECT_EQ((*length)->integer, static_cast<long long>(RemoteTier::kHeaderBytes + 4096 + 3));
}

// With a sink, kvtier reads a GET's reply off the socket itself (RedisValueReader): a value goes
// to the sink as it arrives (the reply holds no bytes), the replies around it (status, nil,
// error, integer) are replies as hiredis makes them, and hiredis reads the replies asked for
// without a sink, on the same socket, in between: each reader hands the other the bytes it read
// past its reply.
TEST(RedisConnection, ValuesAreReadIntoTheSinkAndTheTwoReadersShareTheSocket) {
  SKIP_WITHOUT_REDIS();
  Result<std::unique_ptr<RedisServers>> servers = RedisServers::StartStandalone(1);
  ASSERT_TRUE(servers.ok()) << servers.status().ToString();
  Result<RedisEndpoint> endpoint = ParseRedisEndpoint((*servers)->endpoint(0), false);
  ASSERT_TRUE(endpoint.ok());
  Result<std::unique_ptr<RedisConnection>> connected = RedisConnection::Connect(*endpoint, 5s, {});
  ASSERT_TRUE(connected.ok()) << connected.status().ToString();
  RedisConnection& connection = **connected;
  // Reads the first `prefix` bytes of a value into one string and the rest into another (all
  // of it when `prefix` is 0), or only `prefix` bytes when `partial`.
  struct Taken final : RedisStringSink {
    void Take(std::size_t size, RedisValueStream& value) override {
      const std::size_t first = std::min(prefix, size);
      std::string head(first, '\0'), rest(partial ? 0 : size - first, '\0');
      ok = value.Read(std::as_writable_bytes(std::span(head))).ok() &&
           value.Read(std::as_writable_bytes(std::span(rest))).ok();
      values.push_back(head + rest);
    }
    std::size_t prefix = 48;
    bool partial = false;
    bool ok = false;
    std::vector<std::string> values;
  } sink;
  std::string big(100'000, '\0');  // more than any one read of either reader
  for (std::size_t i = 0; i < big.size(); ++i) big[i] = static_cast<char>('a' + i % 23);
  const auto command = [&](std::initializer_list<std::string_view> words) {
    RedisArgs args;
    for (std::string_view w : words) args.Add(w);
    ASSERT_TRUE(connection.Append(args).ok());
  };
  command({"SET", "a", big});
  command({"GET", "a"});
  command({"PING"});
  command({"GET", "a"});
  command({"MGET", "a", "a"});
  command({"GET", "a"});
  command({"STRLEN", "a"});
  command({"GET", "missing"});
  command({"NO-SUCH-COMMAND"});
  command({"GET", "a"});

  Result<RedisReply> reply = connection.GetReply(&sink);
  ASSERT_TRUE(reply.ok()) << reply.status().ToString();
  EXPECT_EQ(ReplyText(**reply), "OK");
  reply = connection.GetReply(&sink);
  ASSERT_TRUE(reply.ok()) << reply.status().ToString();
  EXPECT_TRUE(IsTakenStringReply(**reply));
  EXPECT_EQ((*reply)->len, big.size());
  ASSERT_TRUE(sink.ok);
  ASSERT_EQ(sink.values.size(), 1u);
  EXPECT_TRUE(sink.values[0] == big) << "the value read in two parts differs";
  reply = connection.GetReply();  // hiredis, after bytes the value reader read past its reply
  ASSERT_TRUE(reply.ok()) << reply.status().ToString();
  EXPECT_EQ(ReplyText(**reply), "PONG");
  sink.prefix = 0;
  reply = connection.GetReply(&sink);  // the value reader, after bytes hiredis read past PONG
  ASSERT_TRUE(reply.ok()) << reply.status().ToString();
  ASSERT_EQ(sink.values.size(), 2u);
  EXPECT_TRUE(sink.values[1] == big);
  reply = connection.GetReply();
  ASSERT_TRUE(reply.ok()) << reply.status().ToString();
  ASSERT_EQ((*reply)->type, REDIS_REPLY_ARRAY);
  ASSERT_EQ((*reply)->elements, 2u);
  EXPECT_TRUE(ReplyText(*(*reply)->element[1]) == big);
  sink.prefix = 10;
  sink.partial = true;  // the rest of this value is skipped
  reply = connection.GetReply(&sink);
  ASSERT_TRUE(reply.ok()) << reply.status().ToString();
  EXPECT_EQ(sink.values.back(), big.substr(0, 10));
  reply = connection.GetReply(&sink);
  ASSERT_TRUE(reply.ok()) << reply.status().ToString();
  EXPECT_EQ((*reply)->type, REDIS_REPLY_INTEGER);
  EXPECT_EQ((*reply)->integer, static_cast<long long>(big.size()));
  reply = connection.GetReply(&sink);
  ASSERT_TRUE(reply.ok()) << reply.status().ToString();
  EXPECT_EQ((*reply)->type, REDIS_REPLY_NIL);
  reply = connection.GetReply(&sink);
  ASSERT_TRUE(reply.ok()) << reply.status().ToString();
  EXPECT_TRUE(IsErrorReply(**reply));
  EXPECT_TRUE(ReplyText(**reply).starts_with("ERR")) << ReplyText(**reply);
  const std::size_t taken = sink.values.size();
  reply = connection.GetReply();
  ASSERT_TRUE(reply.ok()) << reply.status().ToString();
  EXPECT_FALSE(IsTakenStringReply(**reply));
  EXPECT_TRUE(ReplyText(**reply) == big) << "without a sink, hiredis's own reply";
  EXPECT_EQ(sink.values.size(), taken);

  // An array is not a reply the value reader parses: the connection is broken, and says so.
  command({"MGET", "a"});
  reply = connection.GetReply(&sink);
  ASSERT_FALSE(reply.ok());
  EXPECT_EQ(reply.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(reply.status().message().find("protocol error"), std::string::npos) << reply.status().ToString();
  EXPECT_TRUE(connection.broken());
}

// A server that answers whatever it is sent with `reply`, then hangs up: for replies no Redis
// sends, which the value reader must refuse without crashing, reading out of bounds or waiting
// forever.
class ScriptedServer {
 public:
  explicit ScriptedServer(std::string reply) : reply_(std::move(reply)) {
    listener_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t length = sizeof(address);
    if (::bind(listener_, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0 || ::listen(listener_, 1) != 0 ||
        ::getsockname(listener_, reinterpret_cast<sockaddr*>(&address), &length) != 0) {
      ADD_FAILURE() << "cannot listen: " << std::strerror(errno);
    }
    port_ = ntohs(address.sin_port);
    thread_ = std::thread([this] {
      const int client = ::accept(listener_, nullptr, nullptr);
      if (client < 0) return;
      char request[4096];
      (void)::read(client, request, sizeof(request));  // the GET
      (void)::write(client, reply_.data(), reply_.size());
      ::shutdown(client, SHUT_WR);
      while (::read(client, request, sizeof(request)) > 0) {
      }
      ::close(client);
    });
  }
  ~ScriptedServer() {
    thread_.join();
    ::close(listener_);
  }
  std::string endpoint() const { return "127.0.0.1:" + std::to_string(port_); }

 private:
  std::string reply_;
  int listener_ = -1;
  int port_ = 0;
  std::thread thread_;
};

TEST(RedisConnection, TheValueReaderRefusesRepliesNoRedisSends) {
  struct Whole final : RedisStringSink {
    void Take(std::size_t size, RedisValueStream& value) override {
      bytes.assign(size, '\0');
      (void)value.Read(std::as_writable_bytes(std::span(bytes)));
    }
    std::string bytes;
  };
  const struct {
    std::string reply;
    std::string why;
  } cases[] = {
      {"$abc\r\n", "is not a number"},
      {"$-5\r\n", "bulk length of -5"},
      {"$10\r\nhello", "server closed the connection"},  // cut inside the value
      {"$5\r\nhelloXY", "does not end in CRLF"},
      {"*1\r\n$1\r\na\r\n", "which a GET does not get"},
      {"", "server closed the connection"},
      {"+OK", "server closed the connection"},  // a line without its CRLF
      {std::string(70'000, 'x'), "longer than 64 KiB"},
  };
  for (const auto& c : cases) {
    ScriptedServer server(c.reply);
    Result<RedisEndpoint> endpoint = ParseRedisEndpoint(server.endpoint(), false);
    ASSERT_TRUE(endpoint.ok());
    Result<std::unique_ptr<RedisConnection>> connection = RedisConnection::Connect(*endpoint, 5s, {});
    ASSERT_TRUE(connection.ok()) << connection.status().ToString();
    RedisArgs get;
    get.Add("GET").Add("k");
    ASSERT_TRUE((*connection)->Append(get).ok());
    Whole sink;
    Result<RedisReply> reply = (*connection)->GetReply(&sink);
    ASSERT_FALSE(reply.ok()) << "reply " << c.reply.substr(0, 20);
    EXPECT_EQ(reply.status().code(), StatusCode::kUnavailable);
    EXPECT_NE(reply.status().message().find(c.why), std::string::npos) << reply.status().ToString();
    EXPECT_TRUE((*connection)->broken());
  }
}

TEST(RemoteTier, RingSpreadsKeysOverThreeServers) {
  SKIP_WITHOUT_REDIS();
  Result<std::unique_ptr<RedisServers>> servers = RedisServers::StartStandalone(3);
  ASSERT_TRUE(servers.ok()) << servers.status().ToString();
  std::unique_ptr<RemoteTier> tier = OpenTier(Options(RemoteTopology::kHashRing, (*servers)->endpoints()));
  ASSERT_NE(tier, nullptr);
  RoundTrip(*tier, 300);
  for (int i = 0; i < 3; ++i) {
    Result<RedisReply> keys = (*servers)->Command(i, {"DBSIZE"});
    ASSERT_TRUE(keys.ok());
    EXPECT_GT((*keys)->integer, 50) << "server " << i;  // about 100 each
  }
}

TEST(RemoteTier, ClusterRoundTripSpreadsOverMasters) {
  SKIP_WITHOUT_REDIS();
  Result<std::unique_ptr<RedisServers>> servers = RedisServers::StartCluster(3);
  ASSERT_TRUE(servers.ok()) << servers.status().ToString();
  std::unique_ptr<RemoteTier> tier = OpenTier(Options(RemoteTopology::kCluster, {(*servers)->endpoint(0)}));
  ASSERT_NE(tier, nullptr);
  RoundTrip(*tier, 150);
  for (int i = 0; i < 3; ++i) {
    Result<RedisReply> keys = (*servers)->Command(i, {"DBSIZE"});
    ASSERT_TRUE(keys.ok());
    EXPECT_GT((*keys)->integer, 20) << "server " << i;
  }
}

class RemoteTierClusterMigration : public ::testing::Test {
 protected:
  void SetUp() override {
    SKIP_WITHOUT_REDIS();
    Result<std::unique_ptr<RedisServers>> servers = RedisServers::StartCluster(3);
    ASSERT_TRUE(servers.ok()) << servers.status().ToString();
    servers_ = std::move(*servers);
    tier_ = OpenTier(Options(RemoteTopology::kCluster, {servers_->endpoint(0)}));
    ASSERT_NE(tier_, nullptr);
    ASSERT_TRUE(tier_->Write(Key(1), payload_).ok());
    redis_key_ = tier_->RedisKey(Key(1));
    slot_ = std::to_string(ClusterKeySlot(redis_key_));
    source_ = servers_->ServerHolding(redis_key_);
    ASSERT_GE(source_, 0);
    target_ = (source_ + 1) % 3;
  }

  std::string NodeId(int i) {
    Result<RedisReply> id = servers_->Command(i, {"CLUSTER", "MYID"});
    EXPECT_TRUE(id.ok());
    return id.ok() ? std::string(ReplyText(**id)) : "";
  }
  void Expect(int i, const std::vector<std::string>& command, std::string_view reply) {
    Result<RedisReply> result = servers_->Command(i, command);
    ASSERT_TRUE(result.ok()) << result.status().ToString();
    EXPECT_EQ(ReplyText(**result), reply) << command[0] << " " << command[1];
  }
  // Starts moving the block's slot from source_ to target_ and moves its key.
  void StartMigration() {
    Expect(target_, {"CLUSTER", "SETSLOT", slot_, "IMPORTING", NodeId(source_)}, "OK");
    Expect(source_, {"CLUSTER", "SETSLOT", slot_, "MIGRATING", NodeId(target_)}, "OK");
    Expect(source_, {"MIGRATE", "127.0.0.1", std::to_string(servers_->port(target_)), redis_key_, "0", "5000"}, "OK");
  }
  void FinishMigration() {
    const std::string target_id = NodeId(target_);
    for (int i = 0; i < 3; ++i) Expect(i, {"CLUSTER", "SETSLOT", slot_, "NODE", target_id}, "OK");
  }

  const std::vector<std::byte> payload_ = Payload(10000, 9);
  std::unique_ptr<RedisServers> servers_;
  std::unique_ptr<RemoteTier> tier_;
  std::string redis_key_, slot_;
  int source_ = -1, target_ = -1;
};

TEST_F(RemoteTierClusterMigration, FollowsAskWhileASlotMigrates) {
  StartMigration();
  EXPECT_EQ(servers_->ServerHolding(redis_key_), -1);  // the source answers ASK, the target MOVED without ASKING
  EXPECT_EQ(ReadAll(*tier_, Key(1), payload_.size()), payload_);
  EXPECT_EQ(tier_->Size(Key(1)), payload_.size());
  FinishMigration();
  EXPECT_EQ(servers_->ServerHolding(redis_key_), target_);
}

TEST_F(RemoteTierClusterMigration, FollowsMovedAfterASlotMigrated) {
  StartMigration();
  FinishMigration();
  EXPECT_EQ(ReadAll(*tier_, Key(1), payload_.size()), payload_);  // MOVED from the source, then the new map
  const std::vector<std::byte> replacement = Payload(5000, 10);
  ASSERT_TRUE(tier_->Write(Key(1), replacement).ok());
  EXPECT_EQ(ReadAll(*tier_, Key(1), replacement.size()), replacement);
  EXPECT_TRUE(tier_->Evict(Key(1)).ok());
  EXPECT_EQ(tier_->GetStats().blocks, 0u);
}

// A failover as a node that has not spoken to the pool since sees it: its slot map names a
// master that is gone, and the slot's new owner has the data. The write finds the old owner
// down, the refreshed map names the new one, and the write goes there instead of failing
// (it did fail, before: one block of a chain published nowhere, docs/cluster.md).
TEST_F(RemoteTierClusterMigration, AnOperationTheOldOwnerLeftUnansweredGoesToTheNewOwner) {
  StartMigration();
  FinishMigration();
  servers_->Kill(source_);
  // Past the refresh's rate limit (reconnect_interval_ms) since the map was loaded at Open.
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  const std::vector<std::byte> replacement = Payload(5000, 11);
  ASSERT_TRUE(tier_->Write(Key(1), replacement).ok());
  EXPECT_EQ(servers_->ServerHolding(redis_key_), target_);
  EXPECT_EQ(ReadAll(*tier_, Key(1), replacement.size()), replacement);
}

TEST(RemoteTier, KilledNodeMissesFastThenRecoversAfterRestart) {
  SKIP_WITHOUT_REDIS();
  Result<std::unique_ptr<RedisServers>> started = RedisServers::StartStandalone(3);
  ASSERT_TRUE(started.ok()) << started.status().ToString();
  RedisServers& servers = **started;
  RemoteTierOptions options = Options(RemoteTopology::kHashRing, servers.endpoints());
  options.timeout_ms = 200;
  std::unique_ptr<RemoteTier> tier = OpenTier(options);
  ASSERT_NE(tier, nullptr);
  const std::vector<std::byte> payload = Payload(2048, 1);
  std::vector<BlockKey> on_killed, on_others;
  for (uint64_t i = 0; i < 60; ++i) {
    ASSERT_TRUE(tier->Write(Key(i), payload).ok());
    (servers.ServerHolding(tier->RedisKey(Key(i))) == 1 ? on_killed : on_others).push_back(Key(i));
  }
  ASSERT_FALSE(on_killed.empty());
  servers.Kill(1);

  std::vector<std::byte> out(payload.size());
  const auto start = std::chrono::steady_clock::now();
  for (int round = 0; round < 20; ++round) {
    for (const BlockKey& key : on_killed) {
      EXPECT_EQ(tier->Read(key, out).status().code(), StatusCode::kNotFound);
    }
  }
  // Down: failing fast, not one 200 ms timeout per call.
  EXPECT_LT(std::chrono::steady_clock::now() - start, 2s);
  for (const BlockKey& key : on_others) EXPECT_EQ(ReadAll(*tier, key, payload.size()), payload);
  EXPECT_EQ(tier->Write(on_killed[0], payload).code(), StatusCode::kUnavailable);
  EXPECT_EQ(tier->Evict(on_killed[0]).code(), StatusCode::kUnavailable);
  EXPECT_EQ(tier->Size(on_killed[0]), std::nullopt);
  EXPECT_GE(tier->unavailable_operations(), 20 * on_killed.size());
  EXPECT_GE(tier->GetStats().read_misses, 20 * on_killed.size());

  ASSERT_TRUE(servers.Restart(1).ok());
  const auto deadline = std::chrono::steady_clock::now() + 2s;
  Status write;
  while (!(write = tier->Write(on_killed[0], payload)).ok() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(20ms);
  }
  ASSERT_TRUE(write.ok()) << write.ToString();
  EXPECT_EQ(ReadAll(*tier, on_killed[0], payload.size()), payload);
  // The restarted server is empty: the other blocks it held are misses, and leave the accounting.
  if (on_killed.size() > 1) {
    EXPECT_EQ(tier->Read(on_killed[1], out).status().code(), StatusCode::kNotFound);
  }
}

class RemoteTierDamage : public ::testing::Test {
 protected:
  void SetUp() override {
    SKIP_WITHOUT_REDIS();
    Result<std::unique_ptr<RedisServers>> servers = RedisServers::StartStandalone(1);
    ASSERT_TRUE(servers.ok()) << servers.status().ToString();
    servers_ = std::move(*servers);
    tier_ = OpenTier(Options(RemoteTopology::kHashRing, servers_->endpoints()));
    ASSERT_NE(tier_, nullptr);
    ASSERT_TRUE(tier_->Write(Key(5), payload_).ok());
    Result<RedisReply> value = servers_->Command(0, {"GET", tier_->RedisKey(Key(5))});
    ASSERT_TRUE(value.ok());
    value_ = std::string(ReplyText(**value));
    ASSERT_EQ(value_.size(), RemoteTier::kHeaderBytes + payload_.size());
  }
  void Store(const std::string& value) {
    Result<RedisReply> set = servers_->Command(0, {"SET", tier_->RedisKey(Key(5)), value});
    ASSERT_TRUE(set.ok());
  }
  void ExpectCorruptionThenGone() {
    std::vector<std::byte> out(payload_.size());
    EXPECT_EQ(tier_->Read(Key(5), out).status().code(), StatusCode::kCorruption);
    // Issue 18, hole 8: none of the bytes that failed the check are handed back.
    EXPECT_TRUE(std::ranges::all_of(out, [](std::byte b) { return b == std::byte{0}; }));
    EXPECT_EQ(tier_->GetStats().checksum_failures, 1u);
    EXPECT_EQ(tier_->GetStats().blocks, 0u);
    Result<RedisReply> exists = servers_->Command(0, {"EXISTS", tier_->RedisKey(Key(5))});
    ASSERT_TRUE(exists.ok());
    EXPECT_EQ((*exists)->integer, 0) << "the corrupt value was not deleted";
    EXPECT_EQ(tier_->Read(Key(5), out).status().code(), StatusCode::kNotFound);
  }

  const std::vector<std::byte> payload_ = Payload(3000, 7);
  std::unique_ptr<RedisServers> servers_;
  std::unique_ptr<RemoteTier> tier_;
  std::string value_;
};

TEST_F(RemoteTierDamage, FlippedPayloadBitIsCorruption) {
  value_[RemoteTier::kHeaderBytes + 1234] ^= 0x10;
  Store(value_);
  ExpectCorruptionThenGone();
}

TEST_F(RemoteTierDamage, FlippedKeyInHeaderIsCorruption) {
  value_[20] ^= 0x01;
  Store(value_);
  ExpectCorruptionThenGone();
}

TEST_F(RemoteTierDamage, TruncatedValueIsCorruption) {
  Store(value_.substr(0, value_.size() - 1));
  ExpectCorruptionThenGone();
}

TEST_F(RemoteTierDamage, ValueShorterThanItsHeaderIsCorruption) {
  Store(value_.substr(0, 10));
  ExpectCorruptionThenGone();
}

TEST(RemoteTier, ConcurrentWritersAndReadersOfOneKeyNeverSeeATornBlock) {
  SKIP_WITHOUT_REDIS();
  Result<std::unique_ptr<RedisServers>> servers = RedisServers::StartStandalone(1);
  ASSERT_TRUE(servers.ok()) << servers.status().ToString();
  std::unique_ptr<RemoteTier> tier = OpenTier(Options(RemoteTopology::kHashRing, (*servers)->endpoints()));
  ASSERT_NE(tier, nullptr);
  constexpr std::size_t kSize = 128 * 1024;
  ASSERT_TRUE(tier->Write(Key(1), std::vector<std::byte>(kSize, std::byte{0})).ok());
  std::atomic<int> torn{0}, good{0}, errors{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int version = 1; version <= 40; ++version) {
        if (!tier->Write(Key(1), std::vector<std::byte>(kSize, static_cast<std::byte>(t * 50 + version))).ok()) {
          errors.fetch_add(1);
        }
      }
    });
    threads.emplace_back([&] {
      std::vector<std::byte> out(kSize);
      for (int i = 0; i < 40; ++i) {
        Result<std::size_t> n = tier->Read(Key(1), out);
        if (!n.ok()) {
          errors.fetch_add(1);
          continue;
        }
        const std::byte first = out[0];
        (std::all_of(out.begin(), out.end(), [&](std::byte b) { return b == first; }) ? good : torn).fetch_add(1);
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  EXPECT_EQ(torn.load(), 0);
  EXPECT_EQ(errors.load(), 0);
  EXPECT_EQ(good.load(), 160);
}

// The number after `field` (e.g. "Threads:") in a /proc status file; -1 when it is not there.
int64_t ProcStatusValue(const std::filesystem::path& status_file, std::string_view field) {
  std::ifstream status(status_file);
  for (std::string line; std::getline(status, line);) {
    if (line.starts_with(field)) return std::stoll(line.substr(field.size()));
  }
  return -1;
}

// This process's threads.
int ProcessThreads() { return static_cast<int>(ProcStatusValue("/proc/self/status", "Threads:")); }

// Issue 16: a batch's parts run on the calling thread or on the workers the tier started at
// Open, so batches from many threads at once start no thread of their own (a thread per part
// per batch cost the reading daemon clone and munmap time), and every block of every batch
// still reads back whole.
TEST(RemoteTier, ConcurrentClusterBatchesStartNoThreadOfTheirOwn) {
  SKIP_WITHOUT_REDIS();
  Result<std::unique_ptr<RedisServers>> servers = RedisServers::StartCluster(3);
  ASSERT_TRUE(servers.ok()) << servers.status().ToString();
  std::unique_ptr<RemoteTier> tier = OpenTier(Options(RemoteTopology::kCluster, {(*servers)->endpoint(0)}));
  ASSERT_NE(tier, nullptr);
  constexpr uint64_t kBlocks = 64;  // a chain: parts on every master, several per master
  std::vector<std::vector<std::byte>> payloads;
  std::vector<Tier::WriteOp> writes;
  for (uint64_t i = 0; i < kBlocks; ++i) payloads.push_back(Payload(32 * 1024, static_cast<uint8_t>(i)));
  for (uint64_t i = 0; i < kBlocks; ++i) writes.push_back({Key(i), payloads[i]});
  for (const Status& status : tier->WriteBatch(writes)) ASSERT_TRUE(status.ok()) << status.ToString();

  constexpr int kReaders = 4;
  const int threads_before = ProcessThreads();
  std::atomic<int> readers_done{0}, wrong{0}, max_threads{0};
  std::thread sampler([&] {
    while (readers_done.load() < kReaders) {
      const int now = ProcessThreads();
      if (now > max_threads.load()) max_threads.store(now);
    }
  });
  std::vector<std::thread> readers;
  for (int r = 0; r < kReaders; ++r) {
    readers.emplace_back([&] {
      std::vector<std::vector<std::byte>> outs(kBlocks, std::vector<std::byte>(32 * 1024));
      std::vector<Tier::ReadOp> reads;
      for (uint64_t i = 0; i < kBlocks; ++i) reads.push_back({Key(i), outs[i]});
      for (int pass = 0; pass < 20; ++pass) {
        const std::vector<Result<std::size_t>> results = tier->ReadBatch(reads);
        for (uint64_t i = 0; i < kBlocks; ++i) {
          if (!results[i].ok() || *results[i] != payloads[i].size() || outs[i] != payloads[i]) wrong.fetch_add(1);
        }
      }
      readers_done.fetch_add(1);
    });
  }
  for (std::thread& reader : readers) reader.join();
  sampler.join();
  EXPECT_EQ(wrong.load(), 0);
  // The readers and the sampler, nothing else.
  EXPECT_LE(max_threads.load(), threads_before + kReaders + 1);
}

// Voluntary context switches of the remote tiers' workers: how often they went to sleep, i.e.
// were woken for a part.
uint64_t RemoteWorkerSleeps() {
  uint64_t sleeps = 0;
  for (const auto& task : std::filesystem::directory_iterator("/proc/self/task")) {
    std::string name;
    std::getline(std::ifstream(task.path() / "comm"), name);
    if (name != RemoteTier::kWorkerThreadName) continue;
    sleeps += static_cast<uint64_t>(ProcStatusValue(task.path() / "status", "voluntary_ctxt_switches:"));
  }
  return sleeps;
}

// Reads `count` blocks of `size` bytes `passes` times, each pass one batch, checking every
// byte; returns how often the tier's workers slept meanwhile.
uint64_t SleepsWhileReading(RemoteTier& tier, uint64_t count, std::size_t size, int passes) {
  std::vector<std::vector<std::byte>> payloads;
  std::vector<Tier::WriteOp> writes;
  for (uint64_t i = 0; i < count; ++i) payloads.push_back(Payload(size, static_cast<uint8_t>(i)));
  for (uint64_t i = 0; i < count; ++i) writes.push_back({Key(i), payloads[i]});
  for (const Status& status : tier.WriteBatch(writes)) EXPECT_TRUE(status.ok()) << status.ToString();
  std::vector<std::vector<std::byte>> outs(count, std::vector<std::byte>(size));
  std::vector<Tier::ReadOp> reads;
  for (uint64_t i = 0; i < count; ++i) reads.push_back({Key(i), outs[i]});
  const uint64_t before = RemoteWorkerSleeps();
  for (int pass = 0; pass < passes; ++pass) {
    const std::vector<Result<std::size_t>> results = tier.ReadBatch(reads);
    for (uint64_t i = 0; i < count; ++i) {
      EXPECT_TRUE(results[i].ok() && *results[i] == size && outs[i] == payloads[i]) << "pass " << pass << " block " << i;
    }
  }
  return RemoteWorkerSleeps() - before;
}

// A chain of small blocks is read by the calling thread from every master at once (no worker
// wakes: its hand-off would cost more than the copy); parts of kParallelChunkBytes and more
// are spread over the workers, which then wake for every batch.
TEST(RemoteTier, SmallBatchesStayOnTheCallingThreadLargeOnesAreSpread) {
  SKIP_WITHOUT_REDIS();
  Result<std::unique_ptr<RedisServers>> servers = RedisServers::StartCluster(3);
  ASSERT_TRUE(servers.ok()) << servers.status().ToString();
  std::unique_ptr<RemoteTier> tier = OpenTier(Options(RemoteTopology::kCluster, {(*servers)->endpoint(0)}));
  ASSERT_NE(tier, nullptr);
  constexpr int kPasses = 20;
  const uint64_t small_sleeps = SleepsWhileReading(*tier, 64, 32 * 1024, kPasses);
  // 24 blocks of 1 MiB: about 8 MiB per master, a part each.
  const uint64_t large_sleeps = SleepsWhileReading(*tier, 24, RemoteTier::kParallelChunkBytes / 4, kPasses);
  EXPECT_EQ(small_sleeps, 0u);
  EXPECT_GE(large_sleeps, static_cast<uint64_t>(kPasses));
}

TEST(RemoteTier, CapacityCountsWhatThisClientWrote) {
  SKIP_WITHOUT_REDIS();
  Result<std::unique_ptr<RedisServers>> servers = RedisServers::StartStandalone(1);
  ASSERT_TRUE(servers.ok()) << servers.status().ToString();
  RemoteTierOptions options = Options(RemoteTopology::kHashRing, (*servers)->endpoints());
  options.capacity_bytes = 3 * 65536;
  std::unique_ptr<RemoteTier> tier = OpenTier(options);
  ASSERT_NE(tier, nullptr);
  const std::vector<std::byte> block = Payload(65536, 1);
  for (uint64_t i = 0; i < 3; ++i) ASSERT_TRUE(tier->Write(Key(i), block).ok());
  EXPECT_EQ(tier->Write(Key(3), block).code(), StatusCode::kResourceExhausted);
  EXPECT_TRUE(tier->Write(Key(0), block).ok());  // a replacement of the same size fits
  EXPECT_EQ(tier->Write(Key(0), Payload(65537, 2)).code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(ReadAll(*tier, Key(0), block.size()), block);  // the failed replacement left it
  TierStats stats = tier->GetStats();
  EXPECT_EQ(stats.used_bytes, 3u * 65536);
  EXPECT_EQ(stats.blocks, 3u);
  EXPECT_EQ(stats.write_failures, 2u);
  ASSERT_TRUE(tier->Evict(Key(1)).ok());
  EXPECT_TRUE(tier->Write(Key(3), block).ok());
  // Blocks the server lost (here: flushed) leave the accounting when a read misses them.
  ASSERT_TRUE((*servers)->Command(0, {"FLUSHALL"}).ok());
  std::vector<std::byte> out(block.size());
  EXPECT_EQ(tier->Read(Key(3), out).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(tier->GetStats().used_bytes, 2u * 65536);
}

TEST(RemoteTier, AuthenticatesAsTheDefaultUserOrAnAclUser) {
  SKIP_WITHOUT_REDIS();
  Result<std::unique_ptr<RedisServers>> servers = RedisServers::StartStandalone(1);
  ASSERT_TRUE(servers.ok()) << servers.status().ToString();
  // An ACL user allowed only the test's keys; then a password for the default user, after
  // which the server answers only connections that AUTH.
  ASSERT_TRUE((*servers)->Command(0, {"ACL", "SETUSER", "kvtier", "on", ">acl-secret", "~kvtier-test:*", "+@all"}).ok());
  ASSERT_TRUE((*servers)->Command(0, {"CONFIG", "SET", "requirepass", "default-secret"}).ok());
  auto write_status = [](const RemoteTierOptions& options) {
    std::unique_ptr<RemoteTier> tier = OpenTier(options);
    return tier == nullptr ? Status::Internal("no tier") : tier->Write(Key(1), Payload(100, 1));
  };
  RemoteTierOptions options = Options(RemoteTopology::kHashRing, (*servers)->endpoints());
  EXPECT_NE(write_status(options).message().find("NOAUTH"), std::string::npos) << write_status(options).ToString();
  options.password = "default-secret";
  std::unique_ptr<RemoteTier> as_default = OpenTier(options);
  ASSERT_NE(as_default, nullptr);
  RoundTrip(*as_default, 4);
  options.username = "kvtier";
  options.password = "acl-secret";
  std::unique_ptr<RemoteTier> as_user = OpenTier(options);
  ASSERT_NE(as_user, nullptr);
  RoundTrip(*as_user, 4);
  options.password = "wrong";
  const Status wrong = write_status(options);
  EXPECT_NE(wrong.message().find("AUTH as user 'kvtier' failed: WRONGPASS"), std::string::npos) << wrong.ToString();
  options.password = "acl-secret";
  options.key_prefix = "elsewhere:";  // outside the user's key pattern
  EXPECT_NE(write_status(options).message().find("NOPERM"), std::string::npos) << write_status(options).ToString();
}

TEST(RemoteTier, TtlExpiresBlocks) {
  SKIP_WITHOUT_REDIS();
  Result<std::unique_ptr<RedisServers>> servers = RedisServers::StartStandalone(1);
  ASSERT_TRUE(servers.ok()) << servers.status().ToString();
  RemoteTierOptions options = Options(RemoteTopology::kHashRing, (*servers)->endpoints());
  options.ttl_seconds = 100;
  std::unique_ptr<RemoteTier> tier = OpenTier(options);
  ASSERT_NE(tier, nullptr);
  ASSERT_TRUE(tier->Write(Key(1), Payload(100, 1)).ok());
  Result<RedisReply> ttl = (*servers)->Command(0, {"TTL", tier->RedisKey(Key(1))});
  ASSERT_TRUE(ttl.ok());
  EXPECT_GT((*ttl)->integer, 90);
  EXPECT_LE((*ttl)->integer, 100);
}

}  // namespace
}  // namespace kvtier
