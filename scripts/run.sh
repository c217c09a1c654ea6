#!/usr/bin/env bash
# Sets up, builds (release) and runs the main job on its bundled defaults: the sizing report
# for every model of the built-in catalog, then the bundled Mooncake trace
# (data/traces/mooncake-synthetic) replayed through one cache tier at 1%, 5% and 20% of its
# unique blocks with every policy, the exact offline optimum and the infinite-cache ceiling
# (plot: replay-mooncake.svg), then the gap analysis at 5%: what each piece of knowledge of
# the future is worth (docs/gap_analysis.md).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
cmake --preset release >/dev/null
cmake --build --preset release
./build/release/kvtier size --all
trace=data/traces/mooncake-synthetic/synthetic_trace.jsonl
echo
echo "Replay: $trace, one cache tier of 1%, 5% and 20% of the trace's unique blocks (llama-3-8b KV, H100 prefill)"
./build/release/kvtier replay --trace "$trace" --format mooncake --sweep 0.01 0.05 0.2 --svg replay-mooncake.svg
cat <<'TXT'
How to read it: each row is a policy's share of looked-up blocks found in the cache (block hit)
and the time to first token it projects. "opt" is the exact offline optimum at that capacity
(it knows the future), "ceiling" an infinite cache. The distance from lru to opt is what
predicting reuse can win; the gap analysis below prices each piece of knowledge of the future.
"predictive" equals lru here: it keeps the blocks of requests waiting in an engine's queue, and
served on arrival nothing waits; add --engines 3 to queue the requests on three engines.
TXT
echo
echo "Gap analysis at 5%:"
./build/release/kvtier replay --trace "$trace" --format mooncake --capacity-frac 0.05 --analyze gap
