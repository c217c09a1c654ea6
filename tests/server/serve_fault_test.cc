// Faults of the service end to end: the `kvtier serve` binary SIGKILLed while clients write
// (and restarted: every acknowledged put must come back, checked by content), the remote
// tier's Redis killed under load (clients see misses, never errors), and a full disk (puts
// are refused with an error, nothing acknowledged is lost, the server keeps serving).
// The daemon runs as a child process, so this is its own executable.
#include <fcntl.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <cstring>
#include <fstream>
#include <map>
#include <mutex>
#include <thread>

#include <gtest/gtest.h>

#include "kvtier/client.h"
#include "kvtier/daemon.h"
#include "kvtier/tiers.h"
#include "testing/redis_server.h"

namespace kvtier {
namespace {

using namespace std::chrono_literals;

constexpr uint32_t kMaxBlockBytes = 96 << 10;

BlockKey Key(uint64_t chain, uint64_t i) { return {chain * 0x9E3779B97F4A7C15ull + 7, i + 1}; }

// Block (chain, i) has a size and bytes that are functions of (chain, i).
uint32_t BlockBytes(uint64_t chain, uint64_t i) { return 4096 + static_cast<uint32_t>((chain * 7919 + i * 104729) % (kMaxBlockBytes - 4096)); }

void Fill(std::span<std::byte> out, uint64_t chain, uint64_t i) {
  uint64_t x = chain * 0x100000001b3ull + i * 0x9E3779B97F4A7C15ull + 1;
  for (std::byte& b : out) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    b = static_cast<std::byte>(x);
  }
}

std::string TempDir() {
  char pattern[] = "/tmp/kvtier-fault-XXXXXX";
  EXPECT_NE(::mkdtemp(pattern), nullptr);
  return pattern;
}

// Puts chain `chain` (`blocks` blocks) from the client's shared memory.
Result<protocol::PutReply> PutChain(Client& client, uint64_t chain, uint64_t blocks) {
  std::span<std::byte> shm = client.shared_memory();
  std::vector<ClientBlock> put;
  std::size_t offset = 0;
  for (uint64_t i = 0; i < blocks; ++i) {
    std::span<std::byte> slot = shm.subspan(offset, BlockBytes(chain, i));
    Fill(slot, chain, i);
    put.push_back({.key = Key(chain, i), .payload = slot, .tokens = 16});
    offset += kMaxBlockBytes;
  }
  return client.Put(put);
}

// How many of the chain's first `blocks` blocks read back, each checked byte for byte.
// -1 when a block came back wrong.
Result<int> ReadChain(Client& client, uint64_t chain, uint64_t blocks) {
  std::span<std::byte> shm = client.shared_memory();
  std::vector<BlockKey> keys;
  std::vector<std::span<std::byte>> outs;
  for (uint64_t i = 0; i < blocks; ++i) {
    keys.push_back(Key(chain, i));
    outs.push_back(shm.subspan((blocks + i) * kMaxBlockBytes, kMaxBlockBytes));
  }
  KVTIER_ASSIGN_OR_RETURN(std::vector<uint32_t> sizes, client.Get(keys, outs));
  std::vector<std::byte> expected;
  for (uint64_t i = 0; i < sizes.size(); ++i) {
    expected.resize(BlockBytes(chain, i));
    Fill(expected, chain, i);
    if (sizes[i] != expected.size() || !std::ranges::equal(outs[i].first(sizes[i]), expected)) return -1;
  }
  return static_cast<int>(sizes.size());
}

Result<std::unique_ptr<Client>> ConnectWhenUp(const std::string& socket, std::chrono::seconds within) {
  const auto deadline = std::chrono::steady_clock::now() + within;
  for (;;) {
    Result<std::unique_ptr<Client>> c = Client::ConnectUnix(socket, {.shared_memory_bytes = 16 * kMaxBlockBytes});
    if (c.ok() || std::chrono::steady_clock::now() > deadline) return c;
    std::this_thread::sleep_for(20ms);
  }
}

// --- kill -9 ------------------------------------------------------------------------------

pid_t SpawnServe(const std::string& config, const std::string& log) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    ::dup2(fd, 1);
    ::dup2(fd, 2);
    ::execl(KVTIER_CLI, KVTIER_CLI, "serve", "--config", config.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  return pid;
}

TEST(ServeFaults, KillNineDuringWritesLosesNoAcknowledgedPut) {
  const std::string dir = TempDir();
  const std::string config = dir + "/serve.yaml";
  std::ofstream(config) << "data_dir: " << dir << "\n"
                        << "tiers:\n"
                        << "  - kind: cpu_dram\n    capacity: 16MiB\n    lock_memory: false\n"
                        << "  - kind: nvme\n    name: disk\n    files: [disk.slots]\n    capacity: 2GiB\n"
                        << "store:\n  persistence: write_through\n"
                        << "listen:\n  metrics_port: -1\n";
  const std::string socket = dir + "/kvtier.sock";
  std::mutex mu;
  std::map<uint64_t, uint64_t> acknowledged;  // chain -> blocks; GUARDED_BY(mu)
  constexpr uint64_t kBlocks = 4;
  uint64_t next_chain = 0;
  for (int round = 0; round < 3; ++round) {
    const pid_t server = SpawnServe(config, dir + "/serve.log");
    ASSERT_GT(server, 0);
    {
      Result<std::unique_ptr<Client>> probe = ConnectWhenUp(socket, 30s);
      ASSERT_TRUE(probe.ok()) << probe.status().ToString();
    }
    // Four writers put new chains until the server dies under them (or 250 chains each).
    std::vector<std::thread> writers;
    for (int w = 0; w < 4; ++w) {
      const uint64_t base = next_chain + static_cast<uint64_t>(w) * 100000;
      writers.emplace_back([&, base] {
        Result<std::unique_ptr<Client>> client = Client::ConnectUnix(socket, {.shared_memory_bytes = 16 * kMaxBlockBytes});
        if (!client.ok()) return;
        for (uint64_t chain = base; chain < base + 250; ++chain) {
          Result<protocol::PutReply> r = PutChain(**client, chain, kBlocks);
          if (!r.ok()) return;  // the server died: this put was never acknowledged
          if (r->new_blocks + r->present_blocks == kBlocks) {
            std::lock_guard lock(mu);
            acknowledged[chain] = kBlocks;
          }
        }
      });
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(400 + 200 * round));
    ASSERT_EQ(::kill(server, SIGKILL), 0);
    int status = 0;
    ::waitpid(server, &status, 0);
    for (auto& t : writers) t.join();
    next_chain += 400000;
  }
  std::lock_guard lock(mu);
  ASSERT_GT(acknowledged.size(), 0u);

  // A last server start recovers; every acknowledged chain reads back whole and exact.
  const pid_t server = SpawnServe(config, dir + "/serve.log");
  Result<std::unique_ptr<Client>> client = ConnectWhenUp(socket, 30s);
  ASSERT_TRUE(client.ok()) << client.status().ToString();
  std::size_t lost = 0, wrong = 0;
  for (const auto& [chain, blocks] : acknowledged) {
    Result<int> read = ReadChain(**client, chain, blocks);
    ASSERT_TRUE(read.ok()) << read.status().ToString();
    if (*read < 0) ++wrong;
    if (*read >= 0 && static_cast<uint64_t>(*read) < blocks) ++lost;
  }
  EXPECT_EQ(lost, 0u) << "of " << acknowledged.size() << " acknowledged chains";
  EXPECT_EQ(wrong, 0u);
  ::kill(server, SIGTERM);
  int status = 0;
  ::waitpid(server, &status, 0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "a SIGTERMed server exits 0 after draining";
  std::filesystem::remove_all(dir);
}

// --- Redis killed under load ------------------------------------------------------------------

TEST(ServeFaults, RedisKilledUnderLoadGivesMissesNotErrors) {
  if (!testing::RedisServers::Available()) GTEST_SKIP() << "redis-server is not installed";
  Result<std::unique_ptr<testing::RedisServers>> redis = testing::RedisServers::StartStandalone(1);
  ASSERT_TRUE(redis.ok()) << redis.status().ToString();
  const std::string dir = TempDir();
  ServeConfig config = DefaultServeConfig(dir);
  config.tiers.tiers.clear();
  config.tiers.tiers.push_back(
      DramTierOptions{.capacity_bytes = 4u << 20, .lock_memory = false, .huge_pages = false, .pin_for_gpu = false});
  config.tiers.tiers.push_back(RemoteTierOptions{.topology = RemoteTopology::kHashRing,
                                                 .endpoints = {(*redis)->endpoint(0)},
                                                 .timeout_ms = 200,
                                                 .reconnect_interval_ms = 200});
  config.persist = PersistChoice::kNone;
  config.metrics_port = -1;
  Result<std::unique_ptr<Daemon>> daemon = Daemon::Start(config);
  ASSERT_TRUE(daemon.ok()) << daemon.status().ToString();
  const std::string socket = (*daemon)->server().unix_socket_path();

  // Enough chains that most live only in Redis; then Redis dies while four clients read and write.
  constexpr uint64_t kChains = 200, kBlocks = 2;
  {
    Result<std::unique_ptr<Client>> client = Client::ConnectUnix(socket, {.shared_memory_bytes = 16 * kMaxBlockBytes});
    ASSERT_TRUE(client.ok());
    for (uint64_t chain = 0; chain < kChains; ++chain) ASSERT_TRUE(PutChain(**client, chain, kBlocks).ok());
  }
  (*daemon)->store().Drain();
  std::atomic<uint64_t> errors{0}, wrong{0}, misses{0}, hits{0};
  std::atomic<bool> stop{false};
  std::vector<std::thread> clients;
  for (int c = 0; c < 4; ++c) {
    clients.emplace_back([&, c] {
      Result<std::unique_ptr<Client>> client = Client::ConnectUnix(socket, {.shared_memory_bytes = 16 * kMaxBlockBytes});
      if (!client.ok()) {
        ++errors;
        return;
      }
      uint64_t n = 0;
      while (!stop.load()) {
        const uint64_t chain = (n * 37 + static_cast<uint64_t>(c) * 11) % kChains;
        Result<int> read = ReadChain(**client, chain, kBlocks);
        if (!read.ok()) {
          if (errors++ == 0) ADD_FAILURE() << "first error: " << read.status().ToString();
        } else if (*read < 0) {
          ++wrong;
        } else {
          (*read == static_cast<int>(kBlocks) ? hits : misses)++;
        }
        Result<protocol::PutReply> put = PutChain(**client, 1000 + static_cast<uint64_t>(c) * 100000 + n, kBlocks);
        if (!put.ok() && errors++ == 0) ADD_FAILURE() << "first error: " << put.status().ToString();
        ++n;
      }
    });
  }
  std::this_thread::sleep_for(300ms);
  (*redis)->Kill(0);
  std::this_thread::sleep_for(1500ms);
  stop = true;
  for (auto& t : clients) t.join();
  EXPECT_EQ(errors.load(), 0u);
  EXPECT_EQ(wrong.load(), 0u);
  EXPECT_GT(misses.load(), 0u) << "blocks that lived only in Redis are misses now";
  EXPECT_GT(hits.load(), 0u);
  EXPECT_TRUE((*daemon)->Stop().ok());
  std::filesystem::remove_all(dir);
}

// --- A full disk ------------------------------------------------------------------------------

TEST(ServeFaults, FullDiskRefusesPutsAndLosesNothingAcknowledged) {
  const std::string dir = TempDir();
  const std::string disk = dir + "/small-disk";
  std::filesystem::create_directories(disk);
  // A real full filesystem: an 8 MiB tmpfs (needs CAP_SYS_ADMIN; skipped without it).
  if (::mount("tmpfs", disk.c_str(), "tmpfs", 0, "size=8m") != 0) {
    std::filesystem::remove_all(dir);
    GTEST_SKIP() << "cannot mount a small tmpfs here (" << std::strerror(errno) << ")";
  }
  ServeConfig config = DefaultServeConfig(dir);
  config.tiers.tiers.clear();
  config.tiers.tiers.push_back(
      DramTierOptions{.capacity_bytes = 4u << 20, .lock_memory = false, .huge_pages = false, .pin_for_gpu = false});
  // The tier believes it has 64 MiB; the filesystem under it runs out at 8.
  config.tiers.tiers.push_back(ParallelFsTierOptions{.directory = disk + "/blocks", .capacity_bytes = 64u << 20});
  config.journal_path = disk + "/store.journal";
  config.metrics_port = -1;
  std::map<uint64_t, uint64_t> acknowledged;
  uint64_t refused = 0;
  constexpr uint64_t kBlocks = 4;
  {
    Result<std::unique_ptr<Daemon>> daemon = Daemon::Start(config);
    ASSERT_TRUE(daemon.ok()) << daemon.status().ToString();
    Result<std::unique_ptr<Client>> client =
        Client::ConnectUnix((*daemon)->server().unix_socket_path(), {.shared_memory_bytes = 16 * kMaxBlockBytes});
    ASSERT_TRUE(client.ok());
    for (uint64_t chain = 0; chain < 400; ++chain) {
      Result<protocol::PutReply> r = PutChain(**client, chain, kBlocks);
      if (!r.ok()) {
        EXPECT_TRUE(r.status().code() == StatusCode::kIoError || r.status().code() == StatusCode::kResourceExhausted)
            << r.status().ToString();
        ++refused;
        continue;
      }
      if (r->new_blocks + r->present_blocks == kBlocks) acknowledged[chain] = kBlocks;
    }
    // 8 MiB cannot hold 400 chains: the store either refused puts or made room on the disk by
    // dropping older blocks (a write the full filesystem refused is retried after that).
    EXPECT_GT(refused + (*daemon)->store().GetStats().tiers[1].drops, 0u) << "8 MiB cannot hold 400 chains";
    // Still serving: what was acknowledged and is still indexed reads back exact.
    for (const auto& [chain, blocks] : acknowledged) {
      Result<int> read = ReadChain(**client, chain, blocks);
      ASSERT_TRUE(read.ok()) << read.status().ToString();
      EXPECT_GE(*read, 0) << "chain " << chain << " came back wrong";
    }
    // A flush into a full disk may fail; what matters is the restart below.
    (void)(*daemon)->Stop();
  }
  // After a restart, every recovered block is exact (the journal and files were never torn).
  Result<std::unique_ptr<Daemon>> daemon = Daemon::Start(config);
  ASSERT_TRUE(daemon.ok()) << daemon.status().ToString();
  EXPECT_GT((*daemon)->recovered_blocks(), 0u);
  Result<std::unique_ptr<Client>> client =
      Client::ConnectUnix((*daemon)->server().unix_socket_path(), {.shared_memory_bytes = 16 * kMaxBlockBytes});
  ASSERT_TRUE(client.ok());
  for (const auto& [chain, blocks] : acknowledged) {
    Result<int> read = ReadChain(**client, chain, blocks);
    ASSERT_TRUE(read.ok());
    EXPECT_GE(*read, 0);
  }
  daemon->reset();
  ::umount(disk.c_str());
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace kvtier
