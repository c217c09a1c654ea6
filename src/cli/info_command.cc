// `kvtier info`: what this build contains and which GPUs it sees.
#include <iostream>

#include "cli/commands.h"
#include "port/cuda_device.h"

namespace kvtier::cli {

void AddInfoCommand(CLI::App& app, int& exit_code) {
  CLI::App* info = app.add_subcommand("info", "Show build features and visible GPUs");
  info->callback([&exit_code]() {
    std::cout << "kvtier " << KVTIER_VERSION << "\n";
    std::cout << "cuda: " << (port::BuiltWithCuda() ? "built with the CUDA runtime" : "not built") << "\n";
    Result<std::vector<port::GpuDevice>> gpus = port::ListGpus();
    if (!gpus.ok()) {
      std::cout << "gpus: none (" << gpus.status().message() << ")\n";
      exit_code = 0;  // no GPU is a normal state, not an error
      return;
    }
    std::cout << "gpus: " << gpus->size() << "\n";
    for (const port::GpuDevice& gpu : *gpus) {
      std::cout << "  [" << gpu.index << "] " << gpu.name << ", sm_" << gpu.compute_capability_major
                << gpu.compute_capability_minor << ", " << gpu.total_bytes / (1024 * 1024) << " MiB ("
                << gpu.free_bytes / (1024 * 1024) << " MiB free)\n";
    }
  });
}

}  // namespace kvtier::cli
