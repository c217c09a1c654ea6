#include "index_benchmark.h"

#include <malloc.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <random>
#include <thread>
#include <unordered_map>

#include <nlohmann/json.hpp>

#include "kvtier/block.h"
#include "kvtier/prefix_index.h"

namespace kvtier::bench {
namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

// Bytes the allocator has handed out, including large blocks it serves with mmap.
uint64_t HeapBytes() {
  const struct mallinfo2 info = mallinfo2();
  return info.uordblks + info.hblkhd;
}

constexpr int64_t kBlockTokens = 16;

// Requests as an agentic / chat workload makes them: each starts with one of a few shared
// system prompts (8 blocks), then its own tokens. Keys come from the real hasher.
std::vector<std::vector<BlockKey>> MakeChains(const IndexBenchmarkOptions& options) {
  BlockHasher hasher = *BlockHasher::Create({});
  std::mt19937_64 rng(options.seed);
  constexpr int kSystemPrompts = 100;
  constexpr int64_t kPromptBlocks = 8;
  std::vector<std::vector<TokenId>> prompts(kSystemPrompts);
  for (auto& prompt : prompts) {
    prompt.resize(static_cast<std::size_t>(kPromptBlocks * kBlockTokens));
    for (TokenId& t : prompt) t = static_cast<TokenId>(rng() % 128000);
  }
  // Enough requests that the distinct blocks (shared prompts counted once) reach `blocks`.
  const int64_t own_blocks = options.chain_length - kPromptBlocks;
  const int64_t chains = std::max<int64_t>(1, (options.blocks - kSystemPrompts * kPromptBlocks + own_blocks - 1) / own_blocks);
  std::vector<std::vector<BlockKey>> out(static_cast<std::size_t>(chains));
  std::vector<TokenId> tokens;
  for (auto& chain : out) {
    tokens = prompts[rng() % kSystemPrompts];
    tokens.resize(static_cast<std::size_t>(options.chain_length * kBlockTokens));
    for (std::size_t i = static_cast<std::size_t>(kPromptBlocks * kBlockTokens); i < tokens.size(); ++i) {
      tokens[i] = static_cast<TokenId>(rng() % 128000);
    }
    chain = hasher.ChainKeys(tokens);
  }
  return out;
}

}  // namespace

Status IndexBenchmarkOptions::Validate() const {
  if (chain_length < 9 || chain_length > 100'000) return Status::InvalidArgument("--chain-length must be 9 to 100000 blocks");
  if (blocks < 1000 || blocks > 1'000'000'000) return Status::InvalidArgument("--blocks must be 1000 to 1e9");
  if (lookups < 1) return Status::InvalidArgument("--lookups must be >= 1");
  if (hash_blocks < 1) return Status::InvalidArgument("--hash-blocks must be >= 1");
  KVTIER_RETURN_IF_ERROR(PrefixIndexOptions{.shards = shards}.Validate().WithContext("--shards"));
  if (threads < 1 || threads > 256) return Status::InvalidArgument("--threads must be 1 to 256");
  return Status::Ok();
}

Result<std::string> RunIndexBenchmark(const IndexBenchmarkOptions& options) {
  KVTIER_RETURN_IF_ERROR(options.Validate());
  nlohmann::json out;
  const auto chains = MakeChains(options);
  std::mt19937_64 rng(options.seed + 1);
  std::vector<std::size_t> order(static_cast<std::size_t>(options.lookups));
  for (std::size_t& i : order) i = rng() % chains.size();

  // kvtier's index (its tables are mmap'd huge pages, so MemoryBytes() measures it).
  const PrefixIndexOptions index_options{.expected_blocks = static_cast<std::size_t>(options.blocks), .shards = options.shards};
  auto index = std::make_unique<PrefixIndex>(index_options);
  const std::vector<BlockMeta> meta(static_cast<std::size_t>(options.chain_length), BlockMeta{.size_bytes = 1});
  auto start = Clock::now();
  for (const auto& chain : chains) KVTIER_RETURN_IF_ERROR(index->Insert(chain, meta, 0).status());
  const double index_insert_s = Seconds(start);
  const std::size_t indexed = index->size();
  out["index_bytes_per_block"] = static_cast<double>(index->MemoryBytes()) / static_cast<double>(indexed);

  start = Clock::now();
  uint64_t found = 0;
  for (std::size_t i : order) found += index->LongestPrefix(chains[i]);
  const double index_lookup_s = Seconds(start);
  // The read path's walk (FindRun: a snapshot of every block of the run, as the store's lookups
  // and Gets take it), over the same lookups.
  start = Clock::now();
  uint64_t run_found = 0;
  std::vector<BlockInfo> run;
  for (std::size_t i : order) {
    index->FindRun(chains[i], PrefixIndex::RunStart::kChainStart, run);
    run_found += run.size();
  }
  const double index_run_s = Seconds(start);
  if (run_found != found) {
    return Status::Internal("FindRun found " + std::to_string(run_found) + " blocks, LongestPrefix " + std::to_string(found));
  }
  // The walk the store's lookups and read plans take now: sizes and tiers only.
  start = Clock::now();
  uint64_t placement_found = 0;
  std::vector<PrefixIndex::RunPlacement> placement;
  for (std::size_t i : order) {
    index->FindRunPlacement(chains[i], PrefixIndex::RunStart::kChainStart, placement);
    placement_found += placement.size();
  }
  const double index_placement_s = Seconds(start);
  if (placement_found != found) {
    return Status::Internal("FindRunPlacement found " + std::to_string(placement_found) + " blocks, LongestPrefix " +
                            std::to_string(found));
  }
  // The same lookups followed by Touch of the hit blocks, as a scheduler that runs them does.
  start = Clock::now();
  for (std::size_t i : order) index->Touch(std::span(chains[i]).first(index->LongestPrefix(chains[i])), 2);
  const double index_lookup_touch_s = Seconds(start);

  // The baseline: one hash map from block hash to block, probed key by key until a miss.
  const uint64_t heap_before = HeapBytes();
  std::unordered_map<BlockKey, uint32_t, BlockKeyHash> baseline;
  start = Clock::now();
  uint32_t next = 0;
  for (const auto& chain : chains) {
    for (const BlockKey& key : chain) baseline.try_emplace(key, next++);
  }
  const double baseline_insert_s = Seconds(start);
  out["baseline_heap_bytes_per_block"] = static_cast<double>(HeapBytes() - heap_before) / static_cast<double>(baseline.size());

  start = Clock::now();
  uint64_t baseline_found = 0;
  for (std::size_t i : order) {
    for (const BlockKey& key : chains[i]) {
      if (baseline.find(key) == baseline.end()) break;
      ++baseline_found;
    }
  }
  const double baseline_lookup_s = Seconds(start);
  if (found != baseline_found) {
    return Status::Internal("index found " + std::to_string(found) + " blocks, the baseline " + std::to_string(baseline_found));
  }

  out["blocks"] = indexed;
  out["chain_length"] = options.chain_length;
  out["lookups"] = options.lookups;
  out["lookup_blocks_per_s"] = static_cast<double>(found) / index_lookup_s;
  out["baseline_blocks_per_s"] = static_cast<double>(baseline_found) / baseline_lookup_s;
  out["lookup_speedup"] = baseline_lookup_s / index_lookup_s;
  out["find_run_blocks_per_s"] = static_cast<double>(run_found) / index_run_s;
  out["find_run_speedup"] = baseline_lookup_s / index_run_s;
  out["find_run_placement_blocks_per_s"] = static_cast<double>(placement_found) / index_placement_s;
  out["find_run_placement_speedup"] = baseline_lookup_s / index_placement_s;
  out["lookup_and_touch_blocks_per_s"] = static_cast<double>(found) / index_lookup_touch_s;
  out["insert_blocks_per_s"] = static_cast<double>(options.blocks) / index_insert_s;
  out["baseline_insert_blocks_per_s"] = static_cast<double>(baseline.size()) / baseline_insert_s;

  // Inserts from `threads` threads at once, each its own share of the chains, into a new index
  // (the first one freed): side by side only as far as their blocks fall in different shards.
  index.reset();
  baseline = {};
  index = std::make_unique<PrefixIndex>(index_options);
  start = Clock::now();
  std::vector<std::thread> inserters;
  std::atomic<bool> failed{false};
  for (int t = 0; t < options.threads; ++t) {
    inserters.emplace_back([&, t] {
      for (std::size_t c = static_cast<std::size_t>(t); c < chains.size(); c += static_cast<std::size_t>(options.threads)) {
        if (!index->Insert(chains[c], meta, 0).ok()) failed = true;
      }
    });
  }
  for (std::thread& inserter : inserters) inserter.join();
  const double parallel_insert_s = Seconds(start);
  if (failed || index->size() != indexed) {
    return Status::Internal("the parallel inserts indexed " + std::to_string(index->size()) + " blocks, one thread " +
                            std::to_string(indexed));
  }
  const PrefixIndex::Stats index_stats = index->GetStats();
  double busiest_hold_s = 0;
  for (const LockProfile& lock : index_stats.shard_locks) busiest_hold_s = std::max(busiest_hold_s, lock.exclusive_hold_seconds);
  out["shards"] = options.shards;
  out["threads"] = options.threads;
  out["parallel_insert_blocks_per_s"] = static_cast<double>(indexed) / parallel_insert_s;
  out["parallel_insert_speedup"] = index_insert_s / parallel_insert_s;
  out["parallel_insert_lock_wait_s"] = index_stats.lock.exclusive_wait_seconds;
  out["parallel_insert_busiest_shard_hold_s"] = busiest_hold_s;


  // Hash throughput: chains of 16-token blocks, as a request is hashed.
  std::vector<TokenId> tokens(static_cast<std::size_t>(options.hash_blocks * kBlockTokens));
  for (TokenId& t : tokens) t = static_cast<TokenId>(rng() % 128000);
  nlohmann::json hash_rates;
  for (BlockHashAlgorithm algorithm :
       {BlockHashAlgorithm::kXxh3_128, BlockHashAlgorithm::kSha256, BlockHashAlgorithm::kVllmSha256Cbor}) {
    KVTIER_ASSIGN_OR_RETURN(BlockHasher hasher, BlockHasher::Create({.algorithm = algorithm}));
    start = Clock::now();
    const std::size_t hashed = hasher.HashChain(tokens).size();
    hash_rates[std::string(BlockHashAlgorithmName(algorithm))] = static_cast<double>(hashed) / Seconds(start);
  }
  out["hash_blocks_per_s"] = hash_rates;
  out["block_tokens"] = kBlockTokens;
  return out.dump(2) + "\n";
}

}  // namespace kvtier::bench
