#include "dedup_benchmark.h"

#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <random>

#include <nlohmann/json.hpp>

#include "kvtier/block.h"
#include "kvtier/checkpoint.h"
#include "kvtier/model_catalog.h"
#include "kvtier/payload_store.h"
#include "kvtier/prefix_index.h"
#include "kvtier/sizing.h"

namespace kvtier::bench {
namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

// KV bytes depend on the tokens, not on the tenant: derive them from the unsalted key.
std::vector<std::byte> PayloadFor(const BlockKey& content, std::size_t size) {
  std::vector<std::byte> bytes(size);
  std::mt19937_64 rng(content.lo ^ content.hi);
  for (std::size_t i = 0; i < size; i += 8) {
    const uint64_t word = rng();
    for (std::size_t j = 0; j < 8 && i + j < size; ++j) bytes[i + j] = static_cast<std::byte>(word >> (8 * j));
  }
  return bytes;
}

}  // namespace

Status DedupBenchmarkOptions::Validate() const {
  for (int64_t value : {tensor_parallel, tenants, system_prompts, requests_per_tenant, prompt_blocks, user_blocks}) {
    if (value < 1 || value > 100'000) return Status::InvalidArgument("dedup benchmark sizes must be 1 to 100000");
  }
  return Status::Ok();
}

Result<std::string> RunDedupBenchmark(const DedupBenchmarkOptions& options) {
  KVTIER_RETURN_IF_ERROR(options.Validate());
  KVTIER_ASSIGN_OR_RETURN(ModelSpec model, LoadCatalogModel(options.model));
  SizingOptions sizing_options;
  sizing_options.parallel.tensor_parallel = options.tensor_parallel;
  KVTIER_ASSIGN_OR_RETURN(KvSizing sizing, ComputeKvSizing(model, sizing_options));
  const auto payload_size = static_cast<std::size_t>(sizing.kv_bytes_per_block);
  const int64_t total_blocks = options.tenants * options.requests_per_tenant * (options.prompt_blocks + options.user_blocks);
  if (static_cast<double>(payload_size) * static_cast<double>(total_blocks) > 8e9) {
    return Status::InvalidArgument("the workload would hold over 8 GB of payloads in memory; use fewer or smaller requests");
  }

  KVTIER_ASSIGN_OR_RETURN(BlockHasher hasher, BlockHasher::Create({.block_size = sizing.block_size}));
  const auto block = static_cast<std::size_t>(sizing.block_size);
  std::mt19937_64 rng(options.seed);
  auto random_tokens = [&](int64_t blocks) {
    std::vector<TokenId> tokens(static_cast<std::size_t>(blocks) * block);
    for (TokenId& t : tokens) t = static_cast<TokenId>(rng() % 128000);
    return tokens;
  };
  std::vector<std::vector<TokenId>> prompts;
  for (int64_t i = 0; i < options.system_prompts; ++i) prompts.push_back(random_tokens(options.prompt_blocks));

  PrefixIndex index;
  KVTIER_ASSIGN_OR_RETURN(std::unique_ptr<PayloadStore> store, PayloadStore::Create({}));
  for (int64_t tenant = 0; tenant < options.tenants; ++tenant) {
    const RequestExtras extras{.cache_salt = "tenant-" + std::to_string(tenant)};
    for (int64_t r = 0; r < options.requests_per_tenant; ++r) {
      std::vector<TokenId> tokens = prompts[rng() % prompts.size()];
      const std::vector<TokenId> own = random_tokens(options.user_blocks);
      tokens.insert(tokens.end(), own.begin(), own.end());
      const std::vector<BlockKey> keys = hasher.ChainKeys(tokens, extras);
      const std::vector<BlockKey> content = hasher.ChainKeys(tokens);
      std::vector<BlockMeta> meta(keys.size(), BlockMeta{.size_bytes = static_cast<uint32_t>(payload_size)});
      KVTIER_RETURN_IF_ERROR(index.Insert(keys, meta, 0).status());
      for (std::size_t i = 0; i < keys.size(); ++i) {
        if (store->PayloadSize(keys[i]).has_value()) continue;
        KVTIER_RETURN_IF_ERROR(store->Put(keys[i], PayloadFor(content[i], payload_size)));
      }
    }
  }

  const bool temporary = options.directory.empty();
  const std::string dir = temporary ? (std::filesystem::temp_directory_path() /
                                       ("kvtier-dedup-bench-" + std::to_string(::getpid()))).string()
                                    : options.directory;
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return Status::IoError(dir + ": cannot create (" + ec.message() + ")");
  auto start = Clock::now();
  Result<CheckpointStats> written = WriteCheckpoint(dir, index, *store);
  const double write_s = Seconds(start);
  PrefixIndex restored_index;
  KVTIER_ASSIGN_OR_RETURN(std::unique_ptr<PayloadStore> restored_store, PayloadStore::Create({}));
  start = Clock::now();
  Result<CheckpointStats> restored =
      written.ok() ? RestoreCheckpoint(dir, &restored_index, restored_store.get()) : Result<CheckpointStats>(written.status());
  const double restore_s = Seconds(start);
  if (temporary) std::filesystem::remove_all(dir, ec);
  if (!written.ok()) return written.status();
  if (!restored.ok()) return restored.status();
  if (restored_index.size() != index.size()) return Status::Internal("restored index differs in size");

  const PayloadStore::Stats stats = store->GetStats();
  nlohmann::json out = {
      {"model", model.name},
      {"tensor_parallel", options.tensor_parallel},
      {"payload_bytes_per_block", payload_size},
      {"tenants", options.tenants},
      {"system_prompts", options.system_prompts},
      {"requests", options.tenants * options.requests_per_tenant},
      {"blocks", written->blocks},
      {"unique_payloads", written->unique_payloads},
      {"raw_bytes", written->raw_bytes},
      {"deduplicated_bytes", written->deduplicated_bytes},
      {"saving", written->saving},
      {"store_logical_bytes", stats.logical_bytes},
      {"store_stored_bytes", stats.stored_bytes},
      {"checkpoint_write_s", write_s},
      {"checkpoint_restore_s", restore_s},
      {"write_mb_per_s", static_cast<double>(written->deduplicated_bytes) / 1e6 / write_s},
  };
  return out.dump(2) + "\n";
}

}  // namespace kvtier::bench
