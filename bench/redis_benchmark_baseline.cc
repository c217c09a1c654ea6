#include "redis_benchmark_baseline.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <sstream>
#include <vector>

#include "testing/redis_server.h"
#include "util/posix_file.h"

namespace kvtier::bench {
namespace {

using Clock = std::chrono::steady_clock;

// redis-benchmark without -r reads this very key.
constexpr const char* kBenchmarkKey = "key:__rand_int__";

std::vector<std::string> CsvFields(const std::string& line) {
  std::vector<std::string> fields;
  std::string field;
  bool quoted = false;
  for (char ch : line) {
    if (ch == '"') {
      quoted = !quoted;
    } else if (ch == ',' && !quoted) {
      fields.push_back(std::move(field));
      field.clear();
    } else if (ch != '\r') {
      field += ch;
    }
  }
  fields.push_back(std::move(field));
  return fields;
}

// Runs `argv` with stdout and stderr into a pipe, for at most `timeout_s`: its output, or
// Unavailable when it cannot start, fails or runs out of time.
Result<std::string> RunWithDeadline(const std::vector<std::string>& argv, double timeout_s) {
  int pipe_fds[2];
  if (::pipe2(pipe_fds, O_CLOEXEC) != 0) return Status::IoError(std::string("pipe: ") + std::strerror(errno));
  ScopedFd read_end(pipe_fds[0]), write_end(pipe_fds[1]);
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  const pid_t pid = ::fork();
  if (pid < 0) return Status::IoError(std::string("fork: ") + std::strerror(errno));
  if (pid == 0) {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    ::dup2(write_end.get(), STDOUT_FILENO);
    ::dup2(write_end.get(), STDERR_FILENO);
    ::execvp(args[0], args.data());
    ::_exit(127);
  }
  write_end = ScopedFd();
  std::string output;
  const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(timeout_s));
  bool timed_out = false;
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    pollfd p{.fd = read_end.get(), .events = POLLIN, .revents = 0};
    if (left <= 0 || ::poll(&p, 1, static_cast<int>(left)) == 0) {
      timed_out = true;
      break;
    }
    char buffer[4096];
    const ssize_t n = ::read(read_end.get(), buffer, sizeof buffer);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    output.append(buffer, static_cast<std::size_t>(n));
  }
  if (timed_out) ::kill(pid, SIGKILL);
  int status = 0;
  ::waitpid(pid, &status, 0);
  if (timed_out) return Status::Unavailable(argv[0] + " did not finish within " + std::to_string(timeout_s) + " s");
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    const std::string why = WIFEXITED(status) && WEXITSTATUS(status) == 127 ? "is not on PATH" : "failed";
    return Status::Unavailable(argv[0] + " " + why + ": " + output.substr(0, 500));
  }
  return output;
}

}  // namespace

Result<RedisGetResult> ParseRedisBenchmarkCsv(const std::string& csv) {
  std::istringstream lines(csv);
  std::vector<std::string> header;
  for (std::string line; std::getline(lines, line);) {
    std::vector<std::string> fields = CsvFields(line);
    if (fields.empty()) continue;
    if (fields[0] == "test") {
      header = std::move(fields);
      continue;
    }
    if (fields[0] != "GET" || fields.size() < 2) continue;
    RedisGetResult r;
    r.gets_per_s = std::strtod(fields[1].c_str(), nullptr);
    for (std::size_t i = 0; i < header.size() && i < fields.size(); ++i) {
      if (header[i] == "p99_latency_ms") r.p99_us = std::strtod(fields[i].c_str(), nullptr) * 1000;
    }
    if (!(r.gets_per_s > 0)) return Status::Internal("redis-benchmark's GET row has no rate: " + line);
    return r;
  }
  return Status::Internal("redis-benchmark printed no GET row: " + csv.substr(0, 500));
}

RedisGetBaseline::RedisGetBaseline(std::unique_ptr<testing::RedisServers> servers, uint64_t value_bytes)
    : servers_(std::move(servers)), value_bytes_(value_bytes) {}

RedisGetBaseline::~RedisGetBaseline() = default;

Result<std::unique_ptr<RedisGetBaseline>> RedisGetBaseline::Start(uint64_t value_bytes) {
  if (!testing::RedisServers::Available()) return Status::Unavailable("redis-server or redis-cli is not on PATH");
  KVTIER_ASSIGN_OR_RETURN(std::unique_ptr<testing::RedisServers> servers, testing::RedisServers::StartStandalone(1));
  KVTIER_RETURN_IF_ERROR(servers->Command(0, {"SET", kBenchmarkKey, std::string(value_bytes, 'v')}).status());
  return std::unique_ptr<RedisGetBaseline>(new RedisGetBaseline(std::move(servers), value_bytes));
}

Result<RedisGetResult> RedisGetBaseline::Run(int clients, int threads, uint64_t requests, double timeout_s,
                                             bool unix_socket) const {
  std::vector<std::string> argv = {"redis-benchmark", "-c", std::to_string(clients), "-n", std::to_string(requests),
                                   "-d", std::to_string(value_bytes_), "-P", "1", "-t", "get",
                                   "--threads", std::to_string(threads), "--csv"};
  if (unix_socket) {
    argv.insert(argv.end(), {"-s", servers_->unix_socket(0)});
  } else {
    argv.insert(argv.end(), {"-h", "127.0.0.1", "-p", std::to_string(servers_->port(0))});
  }
  KVTIER_ASSIGN_OR_RETURN(const std::string output, RunWithDeadline(argv, timeout_s));
  return ParseRedisBenchmarkCsv(output);
}

}  // namespace kvtier::bench
