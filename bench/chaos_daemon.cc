#include "chaos_daemon.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "chaos_model.h"
#include "serve_child.h"
#include "kvtier/client.h"

namespace kvtier::bench::chaos {
namespace {

using namespace std::chrono_literals;

// A loopback port the kernel hands out now; the daemon binds it on every start (its listener
// sets SO_REUSEADDR, so a killed incarnation's connections do not hold it).
Result<uint16_t> FreeTcpPort() {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return Status::IoError(std::string("socket: ") + std::strerror(errno));
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof address;
  const bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0 &&
                  ::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) == 0;
  ::close(fd);
  if (!ok) return Status::IoError("no free loopback TCP port");
  return ntohs(address.sin_port);
}

std::string ConfigYaml(const DaemonSetup& s, uint16_t tcp_port) {
  std::ostringstream y;
  y << "data_dir: " << s.dir << "\n"
    << "tiers:\n"
    << "  - kind: cpu_dram\n    capacity: " << kDramBytes << "B\n    lock_memory: false\n    huge_pages: false\n"
    << "  - kind: nvme\n    name: disk\n    files: [" << s.disk_dir << "/slab.0]\n    capacity: " << s.disk_bytes << "B\n"
    << "  - kind: remote_pool\n    name: redis\n    topology: cluster\n    capacity: 128MiB\n    timeout_ms: 500\n"
    << "    reconnect_interval_ms: 200\n    endpoints: [";
  for (std::size_t i = 0; i < s.redis_endpoints.size(); ++i) y << (i ? ", " : "") << s.redis_endpoints[i];
  y << "]\n"
    << "store:\n  policy: lru\n  high_watermark: 0.95\n  low_watermark: " << kLowWatermark << "\n  persistence: write_through\n"
    << "  persist_tier: disk\n  journal: " << s.disk_dir << "/store.journal\n"
    << "listen:\n  unix_socket: kvtier.sock\n  tcp: true\n  tcp_host: 127.0.0.1\n  tcp_port: " << tcp_port << "\n"
    << "  metrics_port: -1\n"
    << "limits:\n  io_timeout_ms: 2000\n";
  return y.str();
}

}  // namespace

Result<std::unique_ptr<ChaosDaemon>> ChaosDaemon::Create(DaemonSetup setup) {
  auto d = std::unique_ptr<ChaosDaemon>(new ChaosDaemon());
  KVTIER_ASSIGN_OR_RETURN(d->tcp_port_, FreeTcpPort());
  d->config_ = setup.dir + "/serve.yaml";
  d->socket_ = setup.dir + "/kvtier.sock";
  d->log_ = setup.dir + "/serve.log";
  d->slot_file_ = setup.disk_dir + "/slab.0";
  d->journal_ = setup.disk_dir + "/store.journal";
  std::ofstream out(d->config_);
  out << ConfigYaml(setup, d->tcp_port_);
  if (!out.flush()) return Status::IoError("cannot write " + d->config_);
  return d;
}

ChaosDaemon::~ChaosDaemon() { Kill(); }

Status ChaosDaemon::Start() {
  KVTIER_ASSIGN_OR_RETURN(pid_, SpawnServe(config_, log_));
  const auto deadline = std::chrono::steady_clock::now() + 120s;
  while (std::chrono::steady_clock::now() < deadline) {
    if (std::optional<std::string> ended = Exited()) {
      // An error exit is the daemon refusing to start, with its reason last in its log; a
      // signal is a crash.
      std::string tail = LogTail(2000);
      while (!tail.empty() && tail.back() == '\n') tail.pop_back();
      const std::string last = tail.substr(tail.rfind('\n') == std::string::npos ? 0 : tail.rfind('\n') + 1);
      const std::string what = "kvtier serve exited while starting (" + *ended + "): " + last;
      return ended->starts_with("signal") ? Status::Internal(what) : Status::FailedPrecondition(what);
    }
    if (Client::ConnectUnix(socket_, {.shared_memory_bytes = 0, .io_timeout_ms = 2000}).ok()) return Status::Ok();
    std::this_thread::sleep_for(20ms);
  }
  Kill();
  return Status::Unavailable("kvtier serve did not accept a client within 120 s; see " + log_);
}

void ChaosDaemon::Kill() {
  if (pid_ <= 0) return;
  ::kill(pid_, SIGKILL);
  ::waitpid(pid_, nullptr, 0);
  pid_ = -1;
}

Status ChaosDaemon::Terminate() {
  if (pid_ <= 0) return Status::FailedPrecondition("kvtier serve is not running");
  ::kill(pid_, SIGTERM);
  const auto deadline = std::chrono::steady_clock::now() + 60s;
  while (std::chrono::steady_clock::now() < deadline) {
    if (std::optional<std::string> ended = Exited()) {
      if (*ended == "exit 0") return Status::Ok();
      return Status::Internal("kvtier serve ended with " + *ended + " after SIGTERM");
    }
    std::this_thread::sleep_for(20ms);
  }
  Kill();
  return Status::Internal("kvtier serve did not exit within 60 s of SIGTERM");
}

std::optional<std::string> ChaosDaemon::Exited() {
  if (pid_ <= 0) return std::nullopt;
  int status = 0;
  if (::waitpid(pid_, &status, WNOHANG) != pid_) return std::nullopt;
  pid_ = -1;
  if (WIFSIGNALED(status)) return "signal " + std::to_string(WTERMSIG(status));
  return "exit " + std::to_string(WEXITSTATUS(status));
}

std::optional<ProcessSample> ChaosDaemon::Sample() const {
  if (pid_ <= 0) return std::nullopt;
  const std::string proc = "/proc/" + std::to_string(pid_);
  std::ifstream status(proc + "/status");
  ProcessSample s;
  bool found = false;
  for (std::string line; std::getline(status, line);) {
    if (line.rfind("VmRSS:", 0) == 0) {
      s.rss_bytes = std::stoull(line.substr(6)) * 1024;  // "VmRSS:  1234 kB"
      found = true;
    }
  }
  std::error_code ec;
  for (auto it = std::filesystem::directory_iterator(proc + "/fd", ec); !ec && it != std::filesystem::directory_iterator();
       it.increment(ec)) {
    ++s.fds;
  }
  if (!found || ec) return std::nullopt;
  s.journal_bytes = std::filesystem::file_size(journal_, ec);
  if (ec) s.journal_bytes = 0;
  return s;
}

std::string ChaosDaemon::FdKinds() const {
  if (pid_ <= 0) return "";
  std::map<std::string, int> kinds;
  std::error_code ec;
  for (auto it = std::filesystem::directory_iterator("/proc/" + std::to_string(pid_) + "/fd", ec);
       !ec && it != std::filesystem::directory_iterator(); it.increment(ec)) {
    const std::string target = std::filesystem::read_symlink(it->path(), ec).string();
    if (ec) continue;
    ++kinds[target.starts_with("/") ? "file" : target.substr(0, target.find_first_of(":["))];
  }
  std::string out;
  for (const auto& [kind, n] : kinds) out += (out.empty() ? "" : ", ") + kind + " " + std::to_string(n);
  return out;
}

std::string ChaosDaemon::LogTail(std::size_t bytes) const {
  std::ifstream in(log_, std::ios::binary | std::ios::ate);
  if (!in) return "(no log)";
  const auto size = static_cast<std::size_t>(in.tellg());
  in.seekg(static_cast<std::streamoff>(size > bytes ? size - bytes : 0));
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

}  // namespace kvtier::bench::chaos
