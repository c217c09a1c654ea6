#!/usr/bin/env bash
# The replay table of the issue: every trace in ../shared/data/traces at 1%, 5% and 20% of its
# unique blocks, every policy with OPT and the ceiling (one tier, metadata mode). Writes
# JSON and SVG plots into the folder given as $1 (default: replay-tables) and prints a
# markdown table.
set -euo pipefail
cd "$(dirname "$0")/.."
out="${1:-replay-tables}"
traces="${TRACES:-../shared/data/traces}"
mkdir -p "$out"
kvtier=./build/release/kvtier
run() {  # name format path
  "$kvtier" replay --trace "$3" --format "$2" --sweep 0.01 0.05 0.2 --svg "$out/$1.svg" --json > "$out/$1.json"
}
run mooncake mooncake "$traces/mooncake-synthetic/synthetic_trace.jsonl"
run sharegpt sharegpt "$traces/sharegpt-1000"
run taubench taubench "$traces/taubench-airline-gpt4o"
run sweagent sweagent "$traces/sweagent-demos"
run toolbench toolbench "$traces/toolbench-dfs-examples"
python3 - "$out" <<'PY'
import json, sys, os
out = sys.argv[1]
print("| trace | capacity | " + " | ".join(["lru", "ema", "s3fifo", "arc", "bayes", "opt", "ceiling"]) + " |")
print("|---|---|" + "---|" * 7)
for name in ["mooncake", "sharegpt", "taubench", "sweagent", "toolbench"]:
    doc = json.load(open(os.path.join(out, name + ".json")))
    for run in doc["sweep"]:
        rates = {r["policy"]: r["block_hit_rate"] for r in run["results"]}
        cells = " | ".join("%.1f%%" % (100 * rates[p]) for p in ["lru", "ema", "s3fifo", "arc", "bayes", "opt", "ceiling"])
        print("| %s | %g%% (%d blocks) | %s |" % (name, 100 * run["capacity_fraction"], run["capacity_blocks"], cells))
PY
