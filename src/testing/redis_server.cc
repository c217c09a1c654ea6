#include "testing/redis_server.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <thread>

namespace kvtier::testing {
namespace {

using namespace std::chrono_literals;

bool OnPath(const std::string& program) {
  const char* path = std::getenv("PATH");
  if (path == nullptr) return false;
  std::string_view rest = path;
  while (!rest.empty()) {
    const std::size_t colon = rest.find(':');
    const std::string dir(rest.substr(0, colon));
    if (!dir.empty() && ::access((dir + "/" + program).c_str(), X_OK) == 0) return true;
    rest = colon == std::string_view::npos ? std::string_view() : rest.substr(colon + 1);
  }
  return false;
}

// Whether `port` is free on the loopback interface (binding it works).
bool PortFree(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  address.sin_port = htons(static_cast<uint16_t>(port));
  const bool free = ::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0;
  ::close(fd);
  return free;
}

// A port the kernel hands out, whose cluster bus port (+10000) is free too.
Result<int> FreePort() {
  for (int attempt = 0; attempt < 100; ++attempt) {
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return Status::IoError("socket failed");
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t length = sizeof address;
    int port = 0;
    if (::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0 &&
        ::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) == 0) {
      port = ntohs(address.sin_port);
    }
    ::close(fd);
    if (port > 0 && port + 10000 <= 65535 && PortFree(port + 10000)) return port;
  }
  return Status::Unavailable("no free loopback port pair (port, port + 10000) found");
}

// Runs `argv` with stdout and stderr appended to `log`; returns its pid.
Result<pid_t> Spawn(const std::vector<std::string>& argv, const std::string& log) {
  std::vector<char*> args;
  for (const std::string& arg : argv) args.push_back(const_cast<char*>(arg.c_str()));
  args.push_back(nullptr);
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) return Status::IoError("fork failed");
  if (pid == 0) {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(1);
    const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd >= 0) {
      ::dup2(fd, STDOUT_FILENO);
      ::dup2(fd, STDERR_FILENO);
    }
    ::execvp(args[0], args.data());
    ::_exit(127);
  }
  return pid;
}

}  // namespace

bool RedisServers::Available() { return OnPath("redis-server") && OnPath("redis-cli"); }

std::vector<std::string> RedisServers::endpoints() const {
  std::vector<std::string> out;
  for (int i = 0; i < size(); ++i) out.push_back(endpoint(i));
  return out;
}

Result<std::unique_ptr<RedisServers>> RedisServers::StartStandalone(int count) {
  std::string pattern = (std::filesystem::temp_directory_path() / "kvtier-redis-XXXXXX").string();
  if (::mkdtemp(pattern.data()) == nullptr) return Status::IoError("mkdtemp failed for " + pattern);
  auto servers = std::unique_ptr<RedisServers>(new RedisServers(pattern, /*cluster=*/false));
  for (int i = 0; i < count; ++i) {
    KVTIER_ASSIGN_OR_RETURN(const int port, FreePort());
    servers->servers_.push_back({.port = port});
    KVTIER_RETURN_IF_ERROR(servers->StartServer(static_cast<std::size_t>(i)));
  }
  return servers;
}

Result<std::unique_ptr<RedisServers>> RedisServers::StartCluster(int count) {
  if (count < 3) return Status::InvalidArgument("a Redis Cluster needs at least 3 masters");
  std::string pattern = (std::filesystem::temp_directory_path() / "kvtier-redis-cluster-XXXXXX").string();
  if (::mkdtemp(pattern.data()) == nullptr) return Status::IoError("mkdtemp failed for " + pattern);
  auto servers = std::unique_ptr<RedisServers>(new RedisServers(pattern, /*cluster=*/true));
  for (int i = 0; i < count; ++i) {
    KVTIER_ASSIGN_OR_RETURN(const int port, FreePort());
    servers->servers_.push_back({.port = port});
    KVTIER_RETURN_IF_ERROR(servers->StartServer(static_cast<std::size_t>(i)));
  }
  KVTIER_RETURN_IF_ERROR(servers->CreateCluster());
  return servers;
}

RedisServers::~RedisServers() {
  for (int i = 0; i < size(); ++i) Kill(i);
  std::error_code ignored;
  std::filesystem::remove_all(dir_, ignored);
}

Status RedisServers::StartServer(std::size_t i) {
  Server& server = servers_[i];
  const std::string port = std::to_string(server.port);
  std::vector<std::string> argv = {"redis-server", "--port", port, "--bind", "127.0.0.1", "--unixsocket",
                                   unix_socket(static_cast<int>(i)), "--unixsocketperm", "700", "--save", "",
                                   "--appendonly", "no", "--dir", dir_, "--daemonize", "no"};
  if (cluster_) {
    argv.insert(argv.end(), {"--cluster-enabled", "yes", "--cluster-config-file", "nodes-" + port + ".conf",
                             "--cluster-node-timeout", "1000", "--cluster-require-full-coverage", "no"});
  }
  KVTIER_ASSIGN_OR_RETURN(server.pid, Spawn(argv, dir_ + "/redis-" + port + ".log"));
  return WaitUntilReady(i);
}

Status RedisServers::WaitUntilReady(std::size_t i) const {
  const auto deadline = std::chrono::steady_clock::now() + 5s;
  while (std::chrono::steady_clock::now() < deadline) {
    Result<RedisReply> pong = Command(static_cast<int>(i), {"PING"});
    if (pong.ok() && ReplyText(**pong) == "PONG") return Status::Ok();
    std::this_thread::sleep_for(10ms);
  }
  return Status::Unavailable("redis-server on port " + std::to_string(servers_[i].port) +
                             " did not answer PING within 5 s; see " + dir_);
}

Status RedisServers::CreateCluster() {
  std::vector<std::string> argv = {"redis-cli", "--cluster", "create"};
  for (int i = 0; i < size(); ++i) argv.push_back(endpoint(i));
  argv.insert(argv.end(), {"--cluster-replicas", "0", "--cluster-yes"});
  KVTIER_ASSIGN_OR_RETURN(const pid_t pid, Spawn(argv, dir_ + "/cluster-create.log"));
  int wait_status = 0;
  if (::waitpid(pid, &wait_status, 0) != pid || !WIFEXITED(wait_status) || WEXITSTATUS(wait_status) != 0) {
    return Status::Unavailable("redis-cli --cluster create failed; see " + dir_ + "/cluster-create.log");
  }
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  for (int i = 0; i < size(); ++i) {
    for (;;) {
      Result<RedisReply> info = Command(i, {"CLUSTER", "INFO"});
      if (info.ok() && ReplyText(**info).find("cluster_state:ok") != std::string_view::npos) break;
      if (std::chrono::steady_clock::now() > deadline) {
        return Status::Unavailable("the cluster did not reach cluster_state:ok within 10 s");
      }
      std::this_thread::sleep_for(20ms);
    }
  }
  return Status::Ok();
}

void RedisServers::Kill(int i) {
  Server& server = servers_[static_cast<std::size_t>(i)];
  if (server.pid <= 0) return;
  ::kill(server.pid, SIGKILL);
  ::waitpid(server.pid, nullptr, 0);
  server.pid = -1;
}

Status RedisServers::Restart(int i) {
  Kill(i);
  return StartServer(static_cast<std::size_t>(i));
}

Result<RedisReply> RedisServers::Command(int i, const std::vector<std::string>& args) const {
  KVTIER_ASSIGN_OR_RETURN(RedisEndpoint endpoint, ParseRedisEndpoint(this->endpoint(i), /*allow_unix=*/false));
  KVTIER_ASSIGN_OR_RETURN(std::unique_ptr<RedisConnection> connection,
                          RedisConnection::Connect(endpoint, std::chrono::milliseconds(2000), {}));
  RedisArgs command;
  for (const std::string& arg : args) command.Add(arg);
  return connection->Command(command);
}

int RedisServers::ServerHolding(const std::string& key) const {
  for (int i = 0; i < size(); ++i) {
    Result<RedisReply> reply = Command(i, {"EXISTS", key});
    if (reply.ok() && (*reply)->type == REDIS_REPLY_INTEGER && (*reply)->integer == 1) return i;
  }
  return -1;
}

}  // namespace kvtier::testing
