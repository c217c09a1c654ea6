#include "chaos_benchmark.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <random>
#include <thread>
#include <utility>

#include <nlohmann/json.hpp>

#include "chaos_clients.h"
#include "chaos_daemon.h"
#include "chaos_faults.h"
#include "chaos_model.h"
#include "testing/redis_server.h"

namespace kvtier::bench {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using namespace chaos;

enum Fault : std::size_t {
  kKillDaemon, kKillRedis, kFullDisk, kFlipDisk, kFlipRedis, kSlowRedis, kVanishClient, kMalformedFrame, kFaultKinds
};
constexpr std::array<const char*, kFaultKinds> kFaultNames = {
    "kill_daemon", "kill_redis", "full_disk", "flip_disk", "flip_redis", "slow_redis", "vanish_client", "malformed_frame"};

enum class Node { kUp, kStopped, kDown };

// A fault's end, due at `at`: the disk freed, a stopped Redis node continued, a killed one
// restarted.
struct Pending {
  Clock::time_point at;
  Fault kind;
  int node = 0;
};

// Daemon RSS and descriptors over one incarnation, for the flatness check.
struct Incarnation {
  Clock::time_point started;
  std::vector<std::pair<double, ProcessSample>> samples;  // seconds since started
  std::string early_fds, late_fds;  // ChaosDaemon::FdKinds at 3 s and at the end
};

struct Totals {
  std::array<uint64_t, kFaultKinds> faults{};
  uint64_t restarts = 0, crashes = 0, checked = 0, missing = 0, explained = 0, lost = 0, verify_failures = 0;
  uint64_t max_rss_bytes = 0;
  int64_t fd_growth = 0, rss_growth_bytes = 0, journal_growth_bytes = 0;
  uint64_t max_journal_bytes = 0;
  std::vector<std::string> crash_logs;
  uint64_t failed_starts = 0;
  std::vector<std::string> start_failures;
  std::string fatal;
  std::string stuck;  // why no put was acknowledged once the faults were over
};

class ChaosRun {
 public:
  explicit ChaosRun(const ChaosBenchmarkOptions& o) : o_(o), rng_(o.seed) {}
  ~ChaosRun() { TearDown(); }

  Status SetUp();
  void Run();
  nlohmann::json Report() const;

 private:
  double Now() const { return std::chrono::duration<double>(Clock::now() - start_).count(); }
  void Log(const std::string& line) const { std::fprintf(stderr, "chaos: t=%7.2f s  %s\n", Now(), line.c_str()); }
  Status SetUpDisk();
  void StartClients();
  void StopClients();
  void Inject(Fault kind);
  bool InjectRedis(Fault kind, double seconds);
  void Resolve(const Pending& p);
  void ResolveAll();
  std::optional<int> PickNode(bool stopped_ok);
  void Restart(bool crashed);
  Status StartDaemon();
  void Verify(uint64_t corrupt_before);
  void Sample();
  void EndIncarnation();
  void CheckLiveness(const std::string& when);
  void TearDown();

  const ChaosBenchmarkOptions& o_;
  std::mt19937_64 rng_;  // the schedule: kinds, moments, targets
  std::vector<Fault> kinds_;
  Clock::time_point start_;
  std::string dir_, disk_dir_;
  bool remove_dir_ = false, disk_fault_ok_ = false, disk_full_ = false;
  std::unique_ptr<TmpfsMount> mount_;
  std::unique_ptr<testing::RedisServers> redis_;
  std::vector<Node> nodes_;
  std::unique_ptr<ChaosDaemon> daemon_;
  std::vector<Pending> pending_;
  Incarnation incarnation_;
  uint64_t flips_since_restart_ = 0;
  uint64_t probe_chain_ = 0;  // CheckLiveness's chains

  Gate gate_;
  Tally tally_;
  std::atomic<bool> stop_{false};
  ClientEnv env_;
  std::vector<std::unique_ptr<ClientModel>> models_;
  std::vector<std::thread> clients_;
  Totals t_;
};

Status ChaosRun::SetUpDisk() {
  disk_dir_ = dir_ + "/disk";
  std::filesystem::create_directories(disk_dir_);
  // Room for the journal and its compacted copy besides the slot file, which reserves its
  // whole capacity when it opens.
  Result<std::unique_ptr<TmpfsMount>> mount = TmpfsMount::Mount(disk_dir_, (o_.disk_mib + 48) << 20);
  if (mount.ok()) {
    mount_ = std::move(*mount);
    disk_fault_ok_ = true;
    return Status::Ok();
  }
  // Filling the machine's real disk is no test: full_disk is left out instead.
  Log(mount.status().message() + "; the persist tier goes on the work directory's filesystem and full_disk is off");
  return Status::Ok();
}

Status ChaosRun::SetUp() {
  for (std::size_t k = 0; k < kFaultKinds; ++k) {
    if (o_.faults.empty() || std::ranges::find(o_.faults, kFaultNames[k]) != o_.faults.end()) kinds_.push_back(Fault(k));
  }
  dir_ = o_.work_dir;
  if (dir_.empty()) {
    char pattern[] = "/tmp/kvtier-chaos-XXXXXX";
    if (::mkdtemp(pattern) == nullptr) return Status::IoError("mkdtemp in /tmp failed");
    dir_ = pattern;
    remove_dir_ = !o_.keep_work_dir;
  }
  std::filesystem::create_directories(dir_);
  KVTIER_RETURN_IF_ERROR(SetUpDisk());
  if (!disk_fault_ok_) std::erase(kinds_, kFullDisk);
  if (!testing::RedisServers::Available()) return Status::Unavailable("redis-server and redis-cli must be on PATH");
  KVTIER_ASSIGN_OR_RETURN(redis_, testing::RedisServers::StartCluster(3));
  nodes_.assign(3, Node::kUp);
  KVTIER_ASSIGN_OR_RETURN(daemon_, ChaosDaemon::Create({.dir = dir_, .disk_dir = disk_dir_,
                                                        .disk_bytes = o_.disk_mib << 20,
                                                        .redis_endpoints = redis_->endpoints()}));
  start_ = Clock::now();
  KVTIER_RETURN_IF_ERROR(StartDaemon());
  env_ = {.run = o_.seed, .seed = o_.seed, .unix_socket = daemon_->socket_path(), .tcp_port = daemon_->tcp_port(),
          .window = DurableWindow(o_.disk_mib << 20), .gate = &gate_, .tally = &tally_, .stop = &stop_};
  Log("work directory " + dir_ + ", daemon log " + daemon_->log_path() + ", seed " + std::to_string(o_.seed));
  return Status::Ok();
}

void ChaosRun::StartClients() {
  for (int c = 0; c < o_.clients; ++c) models_.push_back(std::make_unique<ClientModel>());
  for (int c = 0; c < o_.clients; ++c) {
    clients_.emplace_back([this, c] { RunChaosClient(env_, c, *models_[static_cast<std::size_t>(c)]); });
  }
}

void ChaosRun::StopClients() {
  stop_ = true;
  gate_.Open();
  for (std::thread& t : clients_) t.join();
  clients_.clear();
}

// Starts the daemon, three times at most, half a second apart. One killed by a signal while
// starting has crashed; one that exits with an error or never answers failed to start (the
// reason is kept: refusing to start on the files a SIGKILL left is a bug of its own).
Status ChaosRun::StartDaemon() {
  for (int attempt = 0;; ++attempt) {
    Status started = daemon_->Start();
    if (started.ok()) {
      incarnation_ = {.started = Clock::now(), .samples = {}};
      return started;
    }
    if (started.code() == StatusCode::kInternal) {
      ++t_.crashes;
      t_.crash_logs.push_back(started.message());
      Log("CRASH while starting: " + started.message());
    } else {
      ++t_.failed_starts;
      t_.start_failures.push_back(started.message());
      Log("FAILED START: " + started.message());
    }
    if (attempt == 2) return started;
    std::this_thread::sleep_for(500ms);
  }
}

std::optional<int> ChaosRun::PickNode(bool stopped_ok) {
  std::vector<int> eligible;
  for (std::size_t i = 0; i < nodes_.size(); ++i) {
    if (nodes_[i] == Node::kUp || (stopped_ok && nodes_[i] == Node::kStopped)) eligible.push_back(static_cast<int>(i));
  }
  if (eligible.empty()) return std::nullopt;
  return eligible[rng_() % eligible.size()];
}

bool ChaosRun::InjectRedis(Fault kind, double seconds) {
  std::optional<int> node = PickNode(kind == kKillRedis);
  if (!node) return false;
  const std::string name = "node " + std::to_string(*node) + " (" + redis_->endpoint(*node) + ")";
  const auto until = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
  if (kind == kKillRedis) {
    redis_->Kill(*node);
    nodes_[static_cast<std::size_t>(*node)] = Node::kDown;
    pending_.push_back({until, kKillRedis, *node});
    Log("kill_redis " + name + ", restarted in " + std::to_string(seconds) + " s");
  } else if (kind == kSlowRedis) {
    ::kill(redis_->pid(*node), SIGSTOP);
    nodes_[static_cast<std::size_t>(*node)] = Node::kStopped;
    pending_.push_back({until, kSlowRedis, *node});
    Log("slow_redis " + name + " stopped for " + std::to_string(seconds) + " s");
  } else {
    Result<std::string> key = FlipRedisValue(*redis_, *node, rng_);
    Log("flip_redis " + name + ": " + (key.ok() ? (key->empty() ? "no key there" : "a byte of " + *key) : key.status().ToString()));
  }
  return true;
}

void ChaosRun::Inject(Fault kind) {
  const double seconds = 0.3 + static_cast<double>(rng_() % 2700) / 1000;  // a fault's length, if it has one
  bool done = true;
  if (kind == kKillDaemon) {
    Log("kill_daemon");
    Restart(/*crashed=*/false);
  } else if (kind == kKillRedis || kind == kSlowRedis || kind == kFlipRedis) {
    done = InjectRedis(kind, seconds);
  } else if (kind == kFullDisk && !disk_full_) {
    Result<uint64_t> filled = FillDisk(disk_dir_);
    disk_full_ = true;
    pending_.push_back({Clock::now() + std::chrono::milliseconds(static_cast<int>(seconds * 1000)), kFullDisk, 0});
    Log("full_disk: " + (filled.ok() ? std::to_string(*filled >> 20) + " MiB taken" : filled.status().ToString()) +
        " for " + std::to_string(seconds) + " s");
  } else if (kind == kFlipDisk) {
    const int count = 1 + static_cast<int>(rng_() % 8);
    const Status flipped = FlipSlotBytes(daemon_->slot_file(), count, rng_);
    flips_since_restart_ += static_cast<uint64_t>(count);
    Log("flip_disk: " + std::to_string(count) + " bytes of " + daemon_->slot_file() + (flipped.ok() ? "" : ": " + flipped.ToString()));
  } else if (kind == kVanishClient || kind == kMalformedFrame) {
    const bool tcp = rng_() % 2 == 1;
    const RawTarget target{.unix_socket = tcp ? "" : daemon_->socket_path(), .tcp_port = tcp ? daemon_->tcp_port() : uint16_t{0}};
    const Status sent = kind == kVanishClient ? SendTruncatedFrame(target, rng_) : SendMalformedFrame(target, rng_);
    Log(std::string(kFaultNames[kind]) + (tcp ? " over TCP" : " over the Unix socket") + (sent.ok() ? "" : ": " + sent.ToString()));
  } else {
    done = false;
  }
  if (done) ++t_.faults[kind];
}

void ChaosRun::Resolve(const Pending& p) {
  const auto node = static_cast<std::size_t>(p.node);
  if (p.kind == kFullDisk) {
    FreeDisk(disk_dir_);
    disk_full_ = false;
    Log("full_disk over");
  } else if (p.kind == kSlowRedis && nodes_[node] == Node::kStopped) {
    ::kill(redis_->pid(p.node), SIGCONT);
    nodes_[node] = Node::kUp;
    Log("slow_redis over: node " + std::to_string(p.node) + " continued");
  } else if (p.kind == kKillRedis) {
    const Status restarted = redis_->Restart(p.node);
    nodes_[node] = restarted.ok() ? Node::kUp : Node::kDown;
    Log("kill_redis over: node " + std::to_string(p.node) + (restarted.ok() ? " restarted (empty)" : ": " + restarted.ToString()));
  }
}

void ChaosRun::ResolveAll() {
  for (const Pending& p : pending_) Resolve(p);
  pending_.clear();
}

// The daemon killed (or found dead), started again on the same files, and every
// acknowledged block that must have survived read back, the clients held off meanwhile.
void ChaosRun::Restart(bool crashed) {
  uint64_t corrupt_before = 0;
  if (!crashed) {
    // Reads it failed for a flipped byte lose blocks the flips explain (see Verify).
    Result<uint64_t> corrupt = DaemonCounter(daemon_->socket_path(), "corrupt_blocks");
    if (corrupt.ok()) corrupt_before = *corrupt;
    incarnation_.late_fds = daemon_->FdKinds();
    daemon_->Kill();
  }
  EndIncarnation();
  gate_.Close();
  const Status started = StartDaemon();
  if (!started.ok()) {
    t_.fatal = "kvtier serve would not start again: " + started.message();
    gate_.Open();
    return;
  }
  ++t_.restarts;
  Verify(corrupt_before);
  gate_.Open();
}

// What a restart lost. A flipped byte in a slot loses at most the block it hit and the
// blocks after it in its chain: the daemon evicts a block whose read fails its checksum
// (corrupt_blocks, its chain's tail then dropped at recovery) or drops it at recovery
// (recovery_dropped_blocks). So missing blocks up to both of these bounds, flipped bytes
// since the last restart x chain length and the daemon's own count, are explained; the
// rest are lost.
void ChaosRun::Verify(uint64_t corrupt_before) {
  Result<VerifyResult> v = VerifyDurable(env_, models_);
  if (!v.ok()) {
    ++t_.verify_failures;
    Log("restart " + std::to_string(t_.restarts) + ": the check failed: " + v.status().ToString());
    return;
  }
  const uint64_t explained =
      std::min({v->missing, flips_since_restart_ * kChainBlocks, v->recovery_dropped + corrupt_before});
  const uint64_t lost = v->missing - explained;
  t_.checked += v->checked;
  t_.missing += v->missing;
  t_.explained += explained;
  t_.lost += lost;
  flips_since_restart_ = 0;
  Log("restart " + std::to_string(t_.restarts) + ": " + std::to_string(v->checked) + " acknowledged blocks checked, " +
      std::to_string(v->missing) + " missing (" + std::to_string(explained) + " explained by flipped bytes: " +
      std::to_string(v->recovery_dropped) + " dropped by recovery, " + std::to_string(corrupt_before) +
      " corrupt reads before), " + std::to_string(lost) + " lost, " + std::to_string(v->wrong) + " wrong");
}

void ChaosRun::Sample() {
  const std::optional<ProcessSample> s = daemon_->Sample();
  if (!s) return;
  t_.max_rss_bytes = std::max(t_.max_rss_bytes, s->rss_bytes);
  t_.max_journal_bytes = std::max(t_.max_journal_bytes, s->journal_bytes);
  const double at = std::chrono::duration<double>(Clock::now() - incarnation_.started).count();
  if (at >= 3 && incarnation_.early_fds.empty()) incarnation_.early_fds = daemon_->FdKinds();
  incarnation_.samples.push_back({at, *s});
}

// Growth of `field` over an incarnation of 20 s or more, from its 3rd second on (once the
// clients have reconnected and the DRAM tier has filled): the least-squares slope of the
// samples times their span. A leak grows with time; connections opened and closed around a
// sample (raw clients, Redis reconnections) only scatter the samples around the line.
std::optional<double> Growth(const std::vector<std::pair<double, ProcessSample>>& samples,
                             uint64_t ProcessSample::*field) {
  if (samples.empty() || samples.back().first < 20) return std::nullopt;
  double n = 0, st = 0, sv = 0, stt = 0, stv = 0;
  for (const auto& [at, sample] : samples) {
    if (at < 3) continue;
    const auto v = static_cast<double>(sample.*field);
    n += 1, st += at, sv += v, stt += at * at, stv += at * v;
  }
  const double denominator = n * stt - st * st;
  if (n < 10 || denominator <= 0) return std::nullopt;
  return (n * stv - st * sv) / denominator * (samples.back().first - 3);
}

void ChaosRun::EndIncarnation() {
  const auto& s = incarnation_.samples;
  const std::optional<double> fds = Growth(s, &ProcessSample::fds);
  if (!fds) return;
  if (*fds >= 1) {
    Log("descriptors grew by " + std::to_string(*fds) + " over " + std::to_string(s.back().first - 3) + " s: at 3 s " +
        incarnation_.early_fds + "; at the end " + incarnation_.late_fds);
  }
  t_.fd_growth = std::max(t_.fd_growth, static_cast<int64_t>(std::lround(*fds)));
  t_.rss_growth_bytes =
      std::max(t_.rss_growth_bytes, static_cast<int64_t>(std::lround(*Growth(s, &ProcessSample::rss_bytes))));
  t_.journal_growth_bytes =
      std::max(t_.journal_growth_bytes, static_cast<int64_t>(std::lround(*Growth(s, &ProcessSample::journal_bytes))));
}

void ChaosRun::Run() {
  StartClients();
  const auto end = start_ + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(o_.seconds));
  std::exponential_distribution<double> gap(1 / o_.fault_interval_s);
  auto next_fault = start_ + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(gap(rng_)));
  while (Clock::now() < end && t_.fatal.empty()) {
    for (std::size_t i = 0; i < pending_.size();) {
      if (pending_[i].at > Clock::now()) {
        ++i;
        continue;
      }
      Resolve(pending_[i]);
      pending_.erase(pending_.begin() + static_cast<std::ptrdiff_t>(i));
    }
    if (Clock::now() >= next_fault && !kinds_.empty()) {
      Inject(kinds_[rng_() % kinds_.size()]);
      next_fault += std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(gap(rng_)));
    }
    if (std::optional<std::string> ended = daemon_->Exited()) {
      ++t_.crashes;
      t_.crash_logs.push_back(*ended + ": " + daemon_->LogTail(4000));
      Log("CRASH: kvtier serve ended by itself (" + *ended + "); its log's tail:\n" + daemon_->LogTail(4000));
      Restart(/*crashed=*/true);
    }
    Sample();
    std::this_thread::sleep_for(100ms);
  }
  StopClients();
  ResolveAll();
  if (!t_.fatal.empty()) return;
  CheckLiveness("with every fault over");
  // A last kill and check with every fault over, then a clean shutdown.
  Log("final kill_daemon, check and SIGTERM");
  Restart(/*crashed=*/false);
  if (!t_.fatal.empty()) return;
  CheckLiveness("after the final restart");
  EndIncarnation();
  if (Status stopped = daemon_->Terminate(); !stopped.ok()) {
    ++t_.crashes;
    t_.crash_logs.push_back(stopped.message() + ": " + daemon_->LogTail(4000));
    Log("CRASH: " + stopped.message());
  }
}

// With every fault over (and again after the final restart), the daemon must take puts: a
// chain fully acknowledged within 10 s (a Redis node just restarted may still be joining;
// the disk tier may be demoting). A daemon that cannot is stuck, whatever it kept.
void ChaosRun::CheckLiveness(const std::string& when) {
  const auto deadline = Clock::now() + 10s;
  Status put = Status::Ok();
  while (Clock::now() < deadline) {
    put = ProbePut(env_, o_.clients, probe_chain_++);  // a client index no client thread uses
    if (put.ok()) return;
    std::this_thread::sleep_for(200ms);
  }
  const std::string stuck = when + ", no put was acknowledged for 10 s: " + put.ToString();
  t_.stuck += (t_.stuck.empty() ? "" : "; ") + stuck;
  Log("STUCK: " + stuck);
}

void ChaosRun::TearDown() {
  StopClients();
  if (redis_ != nullptr) ResolveAll();
  daemon_.reset();
  redis_.reset();
  if (disk_full_) FreeDisk(disk_dir_);
  mount_.reset();
  std::error_code ignored;
  if (remove_dir_) std::filesystem::remove_all(dir_, ignored);
}

nlohmann::json ChaosRun::Report() const {
  nlohmann::json faults = nlohmann::json::object();
  for (std::size_t k = 0; k < kFaultKinds; ++k) faults[kFaultNames[k]] = t_.faults[k];
  nlohmann::json out = {
      {"seconds", Now()},
      {"seed", o_.seed},
      {"faults", faults},
      {"ops", tally_.ops.load()},
      {"acked_blocks", tally_.acked_blocks.load()},
      {"lost_blocks", t_.lost},
      {"wrong_bytes", tally_.wrong_bytes.load()},
      {"crashes", t_.crashes},
      {"max_rss_mib", static_cast<double>(t_.max_rss_bytes) / (1 << 20)},
      {"fd_growth", t_.fd_growth},
      {"rss_growth_mib", static_cast<double>(t_.rss_growth_bytes) / (1 << 20)},
      {"max_journal_mib", static_cast<double>(t_.max_journal_bytes) / (1 << 20)},
      {"journal_growth_mib", static_cast<double>(t_.journal_growth_bytes) / (1 << 20)},
      {"restarts", t_.restarts},
      {"checked_after_restarts", t_.checked},
      {"missing_after_restarts", t_.missing},
      {"explained_by_flips", t_.explained},
      {"verify_failures", t_.verify_failures},
      {"wrong_sizes", tally_.wrong_sizes.load()},
      {"partial_gets", tally_.misses.load()},
      {"short_puts", tally_.short_puts.load()},
      {"request_errors", tally_.errors()},
      {"request_error_last", tally_.last_errors()},
      {"wrong", tally_.wrong()},
      {"crash_logs", t_.crash_logs},
      {"failed_starts", t_.failed_starts},
      {"start_failures", t_.start_failures},
      {"config",
       {{"clients", o_.clients}, {"fault_interval_s", o_.fault_interval_s}, {"disk_mib", o_.disk_mib},
        {"tmpfs", disk_fault_ok_}, {"work_dir", dir_}}}};
  if (!t_.fatal.empty()) out["fatal"] = t_.fatal;
  if (!t_.stuck.empty()) out["stuck"] = t_.stuck;
  return out;
}

}  // namespace

Status ChaosBenchmarkOptions::Validate() const {
  if (!(seconds > 0 && seconds <= 7 * 86400)) return Status::InvalidArgument("--seconds must be in (0, 604800]");
  if (clients < 1 || clients > 64) return Status::InvalidArgument("--clients must be 1 to 64");
  if (!(fault_interval_s >= 0.05)) return Status::InvalidArgument("--fault-interval must be at least 0.05 s");
  if (disk_mib < 64 || disk_mib > 16384) return Status::InvalidArgument("--disk-mib must be 64 to 16384");
  for (const std::string& f : faults) {
    if (std::ranges::find(kFaultNames, f) == kFaultNames.end()) {
      return Status::InvalidArgument("--faults: unknown fault '" + f +
                                     "' (kill_daemon, kill_redis, full_disk, flip_disk, flip_redis, slow_redis, "
                                     "vanish_client, malformed_frame)");
    }
  }
  return Status::Ok();
}

Result<std::string> RunChaosBenchmark(const ChaosBenchmarkOptions& options) {
  KVTIER_RETURN_IF_ERROR(options.Validate());
  // A client writing to a daemon just killed must see an error, not die of SIGPIPE.
  ::signal(SIGPIPE, SIG_IGN);
  ChaosRun run(options);
  KVTIER_RETURN_IF_ERROR(run.SetUp());
  run.Run();
  return run.Report().dump(2) + "\n";
}

}  // namespace kvtier::bench
