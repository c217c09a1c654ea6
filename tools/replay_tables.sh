#!/usr/bin/env bash
# The replay tables: every trace in ../shared/data/traces at 1%, 5% and 20% of its unique
# blocks, every policy with OPT and the ceiling (one tier, metadata mode); then the gap
# analysis (docs/gap_analysis.md) at 1% and 5%: how much of OPT - LRU each oracle closes; then
# LRU against the predictive policy through the engine model (docs/replay.md), whose waiting
# queue is what the predictive policy acts on.
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
engine() {  # name format path engines
  "$kvtier" replay --trace "$3" --format "$2" --sweep 0.01 0.05 --policies lru,predictive --engines "$4" --json \
    > "$out/$1.engines$4.json"
}
engine mooncake mooncake "$traces/mooncake-synthetic/synthetic_trace.jsonl" 3
engine mooncake mooncake "$traces/mooncake-synthetic/synthetic_trace.jsonl" 4
engine sharegpt sharegpt "$traces/sharegpt-1000" 1
engine taubench taubench "$traces/taubench-airline-gpt4o" 1
engine sweagent sweagent "$traces/sweagent-demos" 1
engine toolbench toolbench "$traces/toolbench-dfs-examples" 1
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
print()
print("Through the engine model: block hit rate, TTFT P50 / P99 (s), requests waiting when a prefill starts.")
print()
print("| trace | engines | capacity | lru | predictive | OPT | lru TTFT P50 / P99 | predictive TTFT P50 / P99 | waiting (lru, predictive) |")
print("|---|---|---|---|---|---|---|---|---|")
for name, engines in [("mooncake", 3), ("mooncake", 4), ("sharegpt", 1), ("taubench", 1), ("sweagent", 1), ("toolbench", 1)]:
    doc = json.load(open(os.path.join(out, "%s.engines%d.json" % (name, engines))))
    for run in doc["sweep"]:
        r = {x["policy"]: x for x in run["results"]}
        lru, pred = r["lru"], r["predictive"]
        print("| %s | %d | %g%% | %.1f%% | %.1f%% | %.1f%% | %.3f / %.3f | %.3f / %.3f | %.2f, %.2f |" % (
            name, engines, 100 * run["capacity_fraction"], 100 * lru["block_hit_rate"], 100 * pred["block_hit_rate"],
            100 * r["opt"]["block_hit_rate"], lru["engine"]["ttft_p50_s"], lru["engine"]["ttft_p99_s"],
            pred["engine"]["ttft_p50_s"], pred["engine"]["ttft_p99_s"], lru["engine"]["waiting_mean"],
            pred["engine"]["waiting_mean"]))
PY
