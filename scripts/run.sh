#!/usr/bin/env bash
# Sets up, builds (release) and runs the main job on its bundled defaults: the sizing report
# for every model of the built-in catalog, then a replay of the bundled Mooncake trace
# (data/traces/mooncake-synthetic) through the default tiers (4 GiB DRAM, 16 GiB NVMe; sizes
# only) with every policy, the offline optimum and the ceiling.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
cmake --preset release >/dev/null
cmake --build --preset release
./build/release/kvtier size --all
echo
echo "Replay: data/traces/mooncake-synthetic through the default tiers (llama-3-8b KV, H100 prefill)"
./build/release/kvtier replay --trace data/traces/mooncake-synthetic/synthetic_trace.jsonl --format mooncake \
  --tier-config default
