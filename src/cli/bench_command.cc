// `kvtier bench <name>`: named, scriptable benchmarks with a baseline measured in the same run.
#include <iostream>
#include <memory>

#include "chaos_benchmark.h"
#include "cli/commands.h"
#include "cluster_benchmark.h"
#include "dedup_benchmark.h"
#include "index_benchmark.h"
#include "replay_benchmark.h"
#include "serve_benchmark.h"
#include "tier_benchmark.h"

namespace kvtier::cli {
namespace {

// Runs a benchmark when its subcommand is chosen: JSON on stdout, or an error and exit code 1.
template <typename Options>
void OnRun(CLI::App* command, std::shared_ptr<Options> options, Result<std::string> (*run)(const Options&),
           int& exit_code) {
  command->callback([command, options, run, &exit_code]() {
    Result<std::string> result = run(*options);
    if (!result.ok()) {
      std::cerr << "kvtier bench " << command->get_name() << ": error: " << result.status().message() << "\n";
      exit_code = kExitError;
      return;
    }
    std::cout << *result;
  });
}

}  // namespace

void AddBenchCommand(CLI::App& app, int& exit_code) {
  CLI::App* bench = app.add_subcommand("bench", "Run a benchmark (JSON on stdout)");
  bench->require_subcommand(1);
  auto options = std::make_shared<bench::IndexBenchmarkOptions>();
  CLI::App* index = bench->add_subcommand("index", "Prefix index vs std::unordered_map, and hash throughput");
  index->add_option("--blocks", options->blocks, "Blocks indexed")->capture_default_str();
  index->add_option("--chain-length", options->chain_length, "Blocks per request")->capture_default_str();
  index->add_option("--lookups", options->lookups, "Longest-prefix lookups")->capture_default_str();
  index->add_option("--hash-blocks", options->hash_blocks, "Blocks hashed per algorithm")->capture_default_str();
  index->add_option("--shards", options->shards, "Shards of the prefix index (a power of two to 64)")->capture_default_str();
  index->add_option("--threads", options->threads, "Threads inserting at once in the parallel phase")->capture_default_str();
  index->add_option("--seed", options->seed, "Workload seed")->capture_default_str();
  index->add_flag("--json", options->json_flag, "Print JSON (the only format; accepted for symmetry)");
  OnRun(index, options, &bench::RunIndexBenchmark, exit_code);

  auto tier_options = std::make_shared<bench::TierBenchmarkOptions>();
  CLI::App* tiers = bench->add_subcommand("tiers", "Each tier vs its baseline (memcpy, fio, hiredis, cudaMemcpy)");
  tiers->add_option("--config", tier_options->config_path,
                    "Tier YAML (default: GPU if present, DRAM, CXL on /dev/shm, NVMe file, local Redis Cluster, directory)");
  tiers->add_option("--scratch-dir", tier_options->scratch_dir, "Where the default tiers put their files")->capture_default_str();
  tiers->add_option("--block-bytes", tier_options->block_bytes, "Block sizes")->capture_default_str();
  tiers->add_option("--bytes-per-size", tier_options->bytes_per_size, "Bytes written and read per block size")->capture_default_str();
  tiers->add_option("--queue-depth", tier_options->queue_depths, "Blocks per batch (several: one run each)")->capture_default_str();
  tiers->add_option("--kinds", tier_options->only_kinds, "Only these tier kinds (gpu_hbm, cpu_dram, cxl_memory, nvme, remote_pool, parallel_fs)");
  tiers->add_flag("--json", tier_options->json_flag, "Print JSON (the only format)");
  OnRun(tiers, tier_options, &bench::RunTierBenchmark, exit_code);

  auto replay_options = std::make_shared<bench::ReplayBenchmarkOptions>();
  CLI::App* replay = bench->add_subcommand("replay", "Replay speed per policy vs a bare LRU simulator");
  replay->add_option("--requests", replay_options->requests, "Synthetic requests")->capture_default_str();
  replay->add_option("--sessions", replay_options->sessions, "Sessions")->capture_default_str();
  replay->add_option("--prompts", replay_options->prompts, "Shared system prompts")->capture_default_str();
  replay->add_option("--capacity-frac", replay_options->capacity_fraction, "Capacity, share of unique blocks")->capture_default_str();
  replay->add_option("--seed", replay_options->seed, "Workload seed")->capture_default_str();
  replay->add_flag("--json", replay_options->json_flag, "Print JSON (the only format)");
  OnRun(replay, replay_options, &bench::RunReplayBenchmark, exit_code);

  auto dedup_options = std::make_shared<bench::DedupBenchmarkOptions>();
  CLI::App* dedup = bench->add_subcommand("dedup", "Deduplicated checkpoint of a multi-tenant workload: raw vs written bytes");
  dedup->add_option("--model", dedup_options->model, "Catalog model (payload size per block)")->capture_default_str();
  dedup->add_option("--tp", dedup_options->tensor_parallel, "Tensor parallel size (payload = one GPU's share)")->capture_default_str();
  dedup->add_option("--tenants", dedup_options->tenants, "Tenants, each with its own cache salt")->capture_default_str();
  dedup->add_option("--system-prompts", dedup_options->system_prompts, "Shared system prompts")->capture_default_str();
  dedup->add_option("--requests-per-tenant", dedup_options->requests_per_tenant, "Requests per tenant")->capture_default_str();
  dedup->add_option("--prompt-blocks", dedup_options->prompt_blocks, "Blocks of a system prompt")->capture_default_str();
  dedup->add_option("--user-blocks", dedup_options->user_blocks, "Blocks of each request's own text")->capture_default_str();
  dedup->add_option("--dir", dedup_options->directory, "Checkpoint directory (default: a temporary one)");
  dedup->add_option("--seed", dedup_options->seed, "Workload seed")->capture_default_str();
  OnRun(dedup, dedup_options, &bench::RunDedupBenchmark, exit_code);

  auto serve_options = std::make_shared<bench::ServeBenchmarkOptions>();
  CLI::App* serve = bench->add_subcommand(
      "serve", "The service's scaling with clients and cores: lookups vs redis-benchmark GET, put+get vs the store in-process");
  serve->add_option("--connect", serve_options->connect,
                    "Put+get phases only, on a running server: its Unix socket (host:port with --tcp) "
                    "(default: start `kvtier serve` children)");
  serve->add_option("--clients", serve_options->clients, "Put+get phases: client threads, one connection each (a list: 32,256)")
      ->delimiter(',')
      ->capture_default_str();
  serve->add_option("--lookup-clients", serve_options->lookup_clients,
                    "Lookup phases: clients, one lookup in flight each (a list: 1,16,256,2048)")
      ->delimiter(',')
      ->capture_default_str();
  serve->add_option("--cores", serve_options->cores, "Lookup phases: the daemon pinned to this many CPUs (a list: 1,2)")
      ->delimiter(',')
      ->capture_default_str();
  serve->add_option("--lookup-chains", serve_options->lookup_chains, "Lookup phases: chains stored and looked up")
      ->capture_default_str();
  serve->add_option("--lookup-chain-blocks", serve_options->lookup_chain_blocks, "Lookup phases: blocks per chain")
      ->capture_default_str();
  serve->add_option("--load-threads", serve_options->load_threads,
                    "Lookup phases: epoll threads driving the clients (and redis-benchmark --threads)")
      ->capture_default_str();
  serve->add_option("--loops-per-core", serve_options->loops_per_core,
                    "Lookup phases: the daemon's event loops per core it is pinned to (0: the daemon's default)")
      ->capture_default_str();
  serve->add_option("--workers", serve_options->workers,
                    "Put+get phases: the daemon's worker threads (limits.workers; 0: its default)")
      ->check(CLI::Range(0, 1024))
      ->capture_default_str();
  serve->add_option("--max-workers", serve_options->max_workers,
                    "Put+get phases: what the daemon's worker pool may grow to while workers wait on I/O "
                    "(limits.max_workers; 0: its default)")
      ->check(CLI::Range(0, 4096))
      ->capture_default_str();
  serve->add_option("--seconds", serve_options->seconds, "Seconds of load per phase")->capture_default_str();
  serve->add_option("--min-block-bytes", serve_options->min_block_bytes, "Smallest block (4 KiB multiple)")->capture_default_str();
  serve->add_option("--max-block-bytes", serve_options->max_block_bytes, "Largest block (4 KiB multiple)")->capture_default_str();
  serve->add_option("--mix", serve_options->mix, "lookup:put:get request weights")->capture_default_str();
  serve->add_option("--chain-blocks", serve_options->chain_blocks, "Blocks per request")->capture_default_str();
  serve->add_option("--recent-chains", serve_options->recent_chains, "Gets and lookups pick among a client's last N chains")
      ->capture_default_str();
  serve->add_flag("--tcp", serve_options->tcp, "TCP loopback (put+get: payloads inline) instead of the Unix socket (and shared memory), for lookups and redis-benchmark too");
  serve->add_flag("!--no-persist", serve_options->persist,
                  "Self-started daemons keep blocks as a cache only (no write-through to disk)");
  serve->add_option("--dram-prefault", serve_options->dram_prefault,
                    "The DRAM tier's prefault: on, off, or both (each client count off, then on)")
      ->capture_default_str();
  serve->add_option("--dram-mib", serve_options->dram_mib, "Put+get phases: the DRAM tier's capacity in MiB")
      ->capture_default_str();
  serve->add_option("--policy-shards", serve_options->policy_shards,
                    "Shards of each tier's eviction policy in the daemon and the baseline (0: the daemon's default)")
      ->capture_default_str();
  serve->add_option("--index-shards", serve_options->index_shards,
                    "Shards of the prefix index in the daemon and the baseline (0: the daemon's default)")
      ->capture_default_str();
  serve->add_flag("!--no-lookups", serve_options->lookups, "Skip the lookup phases (put+get phases only)");
  serve->add_option("--seed", serve_options->seed, "Workload seed")->capture_default_str();
  serve->add_flag("--json", serve_options->json_flag, "Print JSON (the only format)");
  OnRun(serve, serve_options, &bench::RunServeBenchmark, exit_code);

  auto chaos_options = std::make_shared<bench::ChaosBenchmarkOptions>();
  CLI::App* chaos = bench->add_subcommand(
      "chaos", "A real daemon over DRAM, disk and a Redis Cluster under load and a seeded fault schedule (docs/chaos.md)");
  chaos->add_option("--seconds", chaos_options->seconds, "Seconds of load and faults")->capture_default_str();
  chaos->add_option("--seed", chaos_options->seed, "Seed of the fault schedule and the workload")->capture_default_str();
  chaos->add_option("--clients", chaos_options->clients, "Client threads (even: Unix socket, odd: TCP)")->capture_default_str();
  chaos->add_option("--work-dir", chaos_options->work_dir, "Where the daemon's files go (default: a fresh /tmp/kvtier-chaos-*)");
  chaos->add_option("--fault-interval", chaos_options->fault_interval_s, "Mean seconds between faults")->capture_default_str();
  chaos->add_option("--faults", chaos_options->faults,
                    "Only these faults (kill_daemon, kill_redis, full_disk, flip_disk, flip_redis, slow_redis, "
                    "vanish_client, malformed_frame)");
  chaos->add_option("--disk-mib", chaos_options->disk_mib, "The persist tier's capacity in MiB")->capture_default_str();
  chaos->add_flag("--keep-work-dir", chaos_options->keep_work_dir, "Keep the default work directory (logs) after the run");
  chaos->add_flag("--json", chaos_options->json_flag, "Print JSON (the only format)");
  OnRun(chaos, chaos_options, &bench::RunChaosBenchmark, exit_code);

  auto cluster_options = std::make_shared<bench::ClusterBenchmarkOptions>();
  CLI::App* cluster = bench->add_subcommand(
      "cluster", "Running nodes sharing one Redis Cluster: cross-node lookups and reads vs redis-benchmark (docs/cluster.md)");
  cluster->add_option("--nodes", cluster_options->nodes,
                      "kvtier serve addresses: a Unix socket path, or host:port over TCP; the first puts, the others read")
      ->required();
  cluster->add_option("--auth-token", cluster_options->auth_token, "The nodes' auth token");
  cluster->add_option("--tls-ca", cluster_options->tls_ca_file,
                      "PEM CAs that sign the nodes' certificates: TCP nodes are reached over TLS (default: plain TCP)");
  cluster->add_option("--tenant", cluster_options->tenant, "Tenant of every client (default: the default tenant)");
  cluster->add_option("--redis", cluster_options->redis, "Redis Cluster endpoints host:port (the baseline asks the first)")->required();
  cluster->add_option("--redis-password", cluster_options->redis_password, "The cluster's requirepass");
  cluster->add_option("--chains", cluster_options->chains, "Chains put through the first node")->capture_default_str();
  cluster->add_option("--chain-blocks", cluster_options->chain_blocks, "Blocks per chain")->capture_default_str();
  cluster->add_option("--block-bytes", cluster_options->block_bytes, "Bytes per block (and the baseline's value size)")
      ->capture_default_str();
  cluster->add_option("--clients", cluster_options->clients, "Reading threads, one connection each (and the baseline's -c)")
      ->capture_default_str();
  cluster->add_option("--passes", cluster_options->passes, "Times every chain is read")->capture_default_str();
  cluster->add_option("--pipeline", cluster_options->pipeline, "The baseline's redis-benchmark -P")->capture_default_str();
  cluster->add_option("--failover-command", cluster_options->failover_command,
                      "Shell command run 1 s into a phase of reads, e.g. 'kill -9 <pid of a master>' (default: no such phase)");
  cluster->add_option("--failover-seconds", cluster_options->failover_seconds, "Seconds of reads around the failover command")
      ->capture_default_str();
  cluster->add_flag("--json", cluster_options->json_flag, "Print JSON (the only format)");
  OnRun(cluster, cluster_options, &bench::RunClusterBenchmark, exit_code);
}

}  // namespace kvtier::cli
