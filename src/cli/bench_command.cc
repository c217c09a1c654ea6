// `kvtier bench <name>`: named, scriptable benchmarks with a baseline measured in the same run.
#include <iostream>
#include <memory>

#include "cli/commands.h"
#include "index_benchmark.h"

namespace kvtier::cli {

void AddBenchCommand(CLI::App& app, int& exit_code) {
  CLI::App* bench = app.add_subcommand("bench", "Run a benchmark (JSON on stdout)");
  bench->require_subcommand(1);
  auto options = std::make_shared<bench::IndexBenchmarkOptions>();
  CLI::App* index = bench->add_subcommand("index", "Prefix index vs std::unordered_map, and hash throughput");
  index->add_option("--blocks", options->blocks, "Blocks indexed")->capture_default_str();
  index->add_option("--chain-length", options->chain_length, "Blocks per request")->capture_default_str();
  index->add_option("--lookups", options->lookups, "Longest-prefix lookups")->capture_default_str();
  index->add_option("--hash-blocks", options->hash_blocks, "Blocks hashed per algorithm")->capture_default_str();
  index->add_option("--seed", options->seed, "Workload seed")->capture_default_str();
  index->add_flag("--json", options->json_flag, "Print JSON (the only format; accepted for symmetry)");
  index->callback([options, &exit_code]() {
    Result<std::string> result = bench::RunIndexBenchmark(*options);
    if (!result.ok()) {
      std::cerr << "kvtier bench index: error: " << result.status().message() << "\n";
      exit_code = kExitError;
      return;
    }
    std::cout << *result;
  });
}

}  // namespace kvtier::cli
