#!/usr/bin/env bash
# The replay tables: every trace in ../shared/data/traces at 1%, 5% and 20% of its unique
# blocks, every policy with OPT and the ceiling (one tier, metadata mode); then the gap
# analysis (docs/gap_analysis.md) at 1% and 5%: how much of OPT - LRU each oracle closes.
# Writes JSON and SVG plots into the folder given as $1 (default: replay-tables) and prints
# markdown tables.
set -euo pipefail
cd "$(dirname "$0")/.."
out="${1:-replay-tables}"
traces="${TRACES:-../shared/data/traces}"
mkdir -p "$out"
kvtier=./build/release/kvtier
run() {  # name format path
  "$kvtier" replay --trace "$3" --format "$2" --sweep 0.01 0.05 0.2 --svg "$out/$1.svg" --json > "$out/$1.json"
  "$kvtier" replay --trace "$3" --format "$2" --sweep 0.01 0.05 --analyze gap --json > "$out/$1.gap.json"
}
run mooncake mooncake "$traces/mooncake-synthetic/synthetic_trace.jsonl"
run sharegpt sharegpt "$traces/sharegpt-1000"
run taubench taubench "$traces/taubench-airline-gpt4o"
run sweagent sweagent "$traces/sweagent-demos"
run toolbench toolbench "$traces/toolbench-dfs-examples"
python3 - "$out" <<'PY'
import json, sys, os
out = sys.argv[1]
print("| trace | capacity | " + " | ".join(["lru", "ema", "s3fifo", "arc", "bayes", "predictive", "opt", "ceiling"]) + " |")
print("|---|---|" + "---|" * 8)
for name in ["mooncake", "sharegpt", "taubench", "sweagent", "toolbench"]:
    doc = json.load(open(os.path.join(out, name + ".json")))
    for run in doc["sweep"]:
        rates = {r["policy"]: r["block_hit_rate"] for r in run["results"]}
        cells = " | ".join("%.1f%%" % (100 * rates[p]) for p in ["lru", "ema", "s3fifo", "arc", "bayes", "predictive", "opt", "ceiling"])
        print("| %s | %g%% (%d blocks) | %s |" % (name, 100 * run["capacity_fraction"], run["capacity_blocks"], cells))
print()
oracles = [o["oracle"] for o in json.load(open(os.path.join(out, "mooncake.gap.json")))["sweep"][0]["oracles"]]
print("Block hit rate of each oracle, and (in brackets) the share of OPT - LRU (model) it closes.")
print()
print("| trace | capacity | LRU (store) | LRU (model) | OPT | " + " | ".join(oracles) + " |")
print("|---|---|---|---|---|" + "---|" * len(oracles))
for name in ["mooncake", "sharegpt", "taubench", "sweagent", "toolbench"]:
    doc = json.load(open(os.path.join(out, name + ".gap.json")))
    for run in doc["sweep"]:
        cells = " | ".join("%.1f%% (%.0f%%)" % (100 * o["block_hit_rate"], 100 * o["gap_closed"]) for o in run["oracles"])
        print("| %s | %g%% | %.1f%% | %.1f%% | %.1f%% | %s |" % (
            name, 100 * run["capacity_fraction"], 100 * run["store_lru"]["block_hit_rate"],
            100 * run["lru"]["block_hit_rate"], 100 * run["opt"]["block_hit_rate"], cells))
PY
