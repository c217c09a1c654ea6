// RedisServers: real redis-server processes for tests, on free loopback ports in a
// temporary directory, either standalone or joined into a Redis Cluster (masters only, slots
// spread by `redis-cli --cluster create`). Without persistence: a restarted server is empty
// (a cluster node keeps its identity and slots through its nodes.conf). Servers die with the
// test process (PR_SET_PDEATHSIG) and are killed by the destructor.
//
// Tests call Available() first and GTEST_SKIP when redis-server or redis-cli is missing.
//
// Thread-safety: none; one test thread drives it.
#pragma once

#include <sys/types.h>

#include <memory>
#include <string>
#include <vector>

#include "kvtier/status.h"
#include "tier/redis_connection.h"

namespace kvtier::testing {

class RedisServers {
 public:
  // Whether redis-server and redis-cli are on PATH.
  static bool Available();

  static Result<std::unique_ptr<RedisServers>> StartStandalone(int count);
  // `count` (at least 3) masters, cluster_state:ok on every one of them. Node timeout 1 s and
  // no full coverage required, so the others keep serving when one is killed.
  static Result<std::unique_ptr<RedisServers>> StartCluster(int count);

  ~RedisServers();
  RedisServers(const RedisServers&) = delete;
  RedisServers& operator=(const RedisServers&) = delete;

  int size() const { return static_cast<int>(servers_.size()); }
  int port(int i) const { return servers_[static_cast<std::size_t>(i)].port; }
  std::string endpoint(int i) const { return "127.0.0.1:" + std::to_string(port(i)); }
  // Server i also listens on this Unix socket (a local client's fastest way in).
  std::string unix_socket(int i) const { return dir_ + "/redis-" + std::to_string(port(i)) + ".sock"; }
  // Server i's process id, -1 while it is killed (the chaos benchmark stops and continues it).
  pid_t pid(int i) const { return servers_[static_cast<std::size_t>(i)].pid; }
  std::vector<std::string> endpoints() const;

  // SIGKILLs server i and waits for it to exit.
  void Kill(int i);
  // Starts server i again on its port (empty) and waits until it answers PING.
  Status Restart(int i);

  // Runs one command on server i over a new connection.
  Result<RedisReply> Command(int i, const std::vector<std::string>& args) const;
  // The index of the server that holds `key` (GET answers without MOVED), or -1.
  int ServerHolding(const std::string& key) const;

 private:
  struct Server {
    int port = 0;
    pid_t pid = -1;
  };

  RedisServers(std::string dir, bool cluster) : dir_(std::move(dir)), cluster_(cluster) {}
  Status StartServer(std::size_t i);
  Status WaitUntilReady(std::size_t i) const;
  Status CreateCluster();

  std::string dir_;
  bool cluster_;
  std::vector<Server> servers_;
};

}  // namespace kvtier::testing
