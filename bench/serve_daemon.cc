#include "serve_daemon.h"

#include <sched.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>
#include <thread>

#include <httplib.h>

#include "serve_child.h"

namespace kvtier::bench {
namespace {

using namespace std::chrono_literals;

// The port after `marker` in the daemon's listening line, 0 when absent.
uint16_t PortAfter(const std::string& line, const std::string& marker) {
  const std::size_t at = line.find(marker);
  if (at == std::string::npos) return 0;
  unsigned port = 0;
  const char* first = line.data() + at + marker.size();
  std::from_chars(first, line.data() + line.size(), port);
  return port <= 65535 ? static_cast<uint16_t>(port) : 0;
}

// The first `cores` CPUs of this process's affinity mask, for the child to pin itself to.
Result<cpu_set_t> FirstCpus(int cores) {
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  if (::sched_getaffinity(0, sizeof allowed, &allowed) != 0) {
    return Status::IoError(std::string("sched_getaffinity: ") + std::strerror(errno));
  }
  if (cores <= 0) return allowed;
  cpu_set_t chosen;
  CPU_ZERO(&chosen);
  int taken = 0;
  for (std::size_t cpu = 0; cpu < std::size_t{CPU_SETSIZE} && taken < cores; ++cpu) {
    if (CPU_ISSET(cpu, &allowed)) {
      CPU_SET(cpu, &chosen);
      ++taken;
    }
  }
  if (taken < cores) {
    return Status::InvalidArgument("--cores " + std::to_string(cores) + ": this process may use only " +
                                   std::to_string(CPU_COUNT(&allowed)) + " CPUs");
  }
  return chosen;
}

// The value of the sample named `sample` (with its labels) in a Prometheus text exposition.
Result<double> MetricSample(const std::string& text, const std::string& sample) {
  const std::string prefix = sample + " ";
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    if (line.starts_with(prefix)) return std::strtod(line.c_str() + prefix.size(), nullptr);
  }
  return Status::Internal("kvtier serve's /metrics has no sample " + sample);
}

// The values of every labelled sample of family `name`, keyed by its label set ("{tier=...}").
std::map<std::string, double> LabelledSamples(const std::string& text, const std::string& name) {
  const std::string prefix = name + "{";
  std::map<std::string, double> samples;
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    const std::size_t space = line.rfind(' ');  // a label value may hold spaces, the number none
    if (line.starts_with(prefix) && space != std::string::npos) {
      samples[line.substr(name.size(), space - name.size())] = std::strtod(line.c_str() + space + 1, nullptr);
    }
  }
  return samples;
}

}  // namespace

std::string ServeDaemonConfigYaml(const ServeDaemonOptions& o) {
  std::ostringstream y;
  y << "data_dir: " << o.dir << "\n"
    << "tiers:\n"
    << "  - kind: cpu_dram\n    capacity: " << o.dram_mib << "MiB\n    lock_memory: false\n"
    << "    prefault: " << (o.dram_prefault ? "true" : "false") << "\n"
    << "  - kind: nvme\n    name: disk\n    files: [" << o.dir << "/disk/slab.0]\n    capacity: 4GiB\n"
    << "store:\n  persistence: " << (o.persist ? "write_through" : "none") << "\n"
    << (o.policy_shards > 0 ? "  policy_shards: " + std::to_string(o.policy_shards) + "\n" : "")
    << (o.index_shards > 0 ? "  index_shards: " + std::to_string(o.index_shards) + "\n" : "")
    << "listen:\n  unix_socket: " << o.dir << "/kvtier.sock\n  tcp: true\n  tcp_host: 127.0.0.1\n  tcp_port: 0\n"
    << "  metrics_host: 127.0.0.1\n  metrics_port: 0\n"
    << "limits:\n  max_connections: " << o.max_connections << "\n  io_timeout_ms: 10000\n"
    << "  event_loops: " << o.event_loops << "\n"
    << "  workers: " << o.workers << "\n"
    << "  max_workers: " << o.max_workers << "\n";
  return y.str();
}

Result<std::unique_ptr<ServeDaemon>> ServeDaemon::Start(ServeDaemonOptions options) {
  KVTIER_ASSIGN_OR_RETURN(const cpu_set_t cpus, FirstCpus(options.cores));
  auto d = std::unique_ptr<ServeDaemon>(new ServeDaemon());
  KVTIER_ASSIGN_OR_RETURN(TempDir dir, TempDir::Create());
  d->dir_.emplace(std::move(dir));
  options.dir = d->dir_->path();
  const std::string config = options.dir + "/serve.yaml";
  d->log_ = options.dir + "/serve.log";
  d->socket_ = options.dir + "/kvtier.sock";
  std::ofstream out(config);
  out << ServeDaemonConfigYaml(options);
  if (!out.flush()) return Status::IoError("cannot write " + config);
  KVTIER_ASSIGN_OR_RETURN(d->pid_, SpawnServe(config, d->log_, options.cores > 0 ? &cpus : nullptr));
  KVTIER_RETURN_IF_ERROR(d->WaitUntilListening());
  return d;
}

Status ServeDaemon::WaitUntilListening() {
  const auto deadline = std::chrono::steady_clock::now() + 60s;
  while (std::chrono::steady_clock::now() < deadline) {
    int status = 0;
    if (::waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      return Status::FailedPrecondition("kvtier serve exited while starting: " + LastLogLine());
    }
    std::ifstream log(log_);
    for (std::string line; std::getline(log, line);) {
      if (line.find("listening on") == std::string::npos) continue;
      tcp_port_ = PortAfter(line, "tcp:127.0.0.1:");
      metrics_port_ = PortAfter(line, "metrics http://127.0.0.1:");
      if (tcp_port_ == 0 || metrics_port_ == 0) {
        return Status::Internal("kvtier serve's listening line names no TCP or metrics port: " + line);
      }
      return Status::Ok();
    }
    std::this_thread::sleep_for(20ms);
  }
  return Status::Unavailable("kvtier serve did not listen within 60 s; see " + log_);
}

std::string ServeDaemon::LastLogLine() const {
  std::ifstream log(log_);
  std::string last = "(empty log " + log_ + ")";
  for (std::string line; std::getline(log, line);) {
    if (!line.empty()) last = line;
  }
  return last;
}

ServeDaemon::~ServeDaemon() {
  if (pid_ <= 0) return;  // the TempDir goes after it stopped
  ::kill(pid_, SIGKILL);
  ::waitpid(pid_, nullptr, 0);
}

Status ServeDaemon::Stop() {
  if (pid_ <= 0) return Status::Ok();
  ::kill(pid_, SIGTERM);
  const auto deadline = std::chrono::steady_clock::now() + 30s;
  int status = 0;
  while (std::chrono::steady_clock::now() < deadline) {
    if (::waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return Status::Ok();
      return Status::Internal("kvtier serve did not stop cleanly after SIGTERM: " + LastLogLine());
    }
    std::this_thread::sleep_for(20ms);
  }
  ::kill(pid_, SIGKILL);
  ::waitpid(pid_, nullptr, 0);
  pid_ = -1;
  return Status::Internal("kvtier serve did not exit within 30 s of SIGTERM; see " + log_);
}

Result<double> ServeDaemon::CpuSeconds() const {
  const std::string path = "/proc/" + std::to_string(pid_) + "/stat";
  std::ifstream in(path);
  std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  // Fields after the command name, which is in parentheses and may hold spaces: state is
  // field 3, utime 14 and stime 15 (proc(5)).
  const std::size_t paren = stat.rfind(')');
  if (paren == std::string::npos) return Status::Unavailable("cannot read " + path + ": is kvtier serve running?");
  std::istringstream fields(stat.substr(paren + 1));
  std::string field;
  uint64_t ticks = 0;
  for (int i = 3; i <= 15 && fields >> field; ++i) {
    if (i >= 14) ticks += std::stoull(field);
  }
  return static_cast<double>(ticks) / static_cast<double>(::sysconf(_SC_CLK_TCK));
}

Result<MetricsSample> ServeDaemon::Metrics(const std::string& op) const {
  httplib::Client client("127.0.0.1", metrics_port_);
  client.set_connection_timeout(5);
  client.set_read_timeout(5);
  const httplib::Result got = client.Get("/metrics");
  if (!got || got->status != 200) {
    return Status::Unavailable("kvtier serve's /metrics on port " + std::to_string(metrics_port_) + " did not answer: " +
                               (got ? "HTTP " + std::to_string(got->status) : httplib::to_string(got.error())));
  }
  const std::string& text = got->body;
  const std::string op_labels = "{op=\"" + op + "\"}";
  MetricsSample m;
  double count = 0, acquisitions = 0, exclusive_waits = 0, shared_waits = 0;
  const std::pair<std::string, double*> samples[] = {
      {"kvtier_request_duration_seconds_sum" + op_labels, &m.request.sum_seconds},
      {"kvtier_request_duration_seconds_count" + op_labels, &count},
      {"kvtier_metadata_lock_hold_seconds_total", &m.locks.metadata.exclusive_hold_seconds},
      {"kvtier_metadata_lock_acquisitions_total", &acquisitions},
      {"kvtier_metadata_lock_waits_total{mode=\"exclusive\"}", &exclusive_waits},
      {"kvtier_metadata_lock_waits_total{mode=\"shared\"}", &shared_waits},
      {"kvtier_metadata_lock_wait_seconds_total{mode=\"exclusive\"}", &m.locks.metadata.exclusive_wait_seconds},
      {"kvtier_metadata_lock_wait_seconds_total{mode=\"shared\"}", &m.locks.metadata.shared_wait_seconds},
      {"kvtier_event_loop_cpu_seconds_total", &m.event_loop_cpu_seconds}};
  for (const auto& [name, value] : samples) {
    KVTIER_ASSIGN_OR_RETURN(*value, MetricSample(text, name));
  }
  m.locks.tier_hold_seconds = LabelledSamples(text, "kvtier_tier_lock_hold_seconds_total");
  m.locks.index_hold_seconds = LabelledSamples(text, "kvtier_index_lock_hold_seconds_total");
  if (m.locks.index_hold_seconds.empty()) {  // a daemon from before the index's shards: one lock, no label
    if (Result<double> index = MetricSample(text, "kvtier_index_lock_hold_seconds_total"); index.ok()) {
      m.locks.index_hold_seconds[""] = *index;
    }
  }
  m.request.count = static_cast<uint64_t>(count);
  m.locks.metadata.exclusive_acquisitions = static_cast<uint64_t>(acquisitions);
  m.locks.metadata.exclusive_waits = static_cast<uint64_t>(exclusive_waits);
  m.locks.metadata.shared_waits = static_cast<uint64_t>(shared_waits);
  return m;
}

uint64_t ProcessStatusBytes(pid_t pid, const std::string& field) {
  std::ifstream status("/proc/" + std::to_string(pid) + "/status");
  const std::string prefix = field + ":";
  for (std::string line; std::getline(status, line);) {
    if (line.rfind(prefix, 0) == 0) return std::strtoull(line.c_str() + prefix.size(), nullptr, 10) * 1024;  // in kB
  }
  return 0;
}

double WaitUntilResident(pid_t pid, uint64_t bytes) {
  const auto start = std::chrono::steady_clock::now();
  while (ProcessStatusBytes(pid, "VmRSS") < bytes && std::chrono::steady_clock::now() - start < std::chrono::seconds(60)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace kvtier::bench
