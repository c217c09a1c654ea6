#!/usr/bin/env python3
"""Replay speed against libCacheSim's LRU on the same access sequence, in the same run.

`kvtier replay` times each policy's replay loop itself (`accesses_per_s`) and, with
`--dump-accesses`, writes the block-access sequence it counts (every prompt block of every
request, in arrival order) as a libCacheSim oracleGeneral trace. This script runs kvtier's
replay, the same through TieredStore (`--through-store`, the replay before its model) and
libCacheSim's LRU (its C loop, `process_trace`) in turn, `--repeat` times, and prints JSON:
the best and the median accesses per second of each (on a shared machine the best run is the
one least disturbed by other work), their ratios (best to best), and whether the model's
results equal the store's (everything but the speed).

The two do not do the same work: libCacheSim's LRU looks each block up on its own and admits
every miss; kvtier's replay keeps the prefix rule (a hit ends at the first miss), pins the
hit while the request stores its blocks, evicts leaf-first, stores generated blocks and counts
tokens and projected TTFT. The ratio is what kvtier's replay costs per access next to a bare
cache simulator, not a contest between equal jobs.

Needs libcachesim (PyPI, 0.3.5): python3 -m venv .venv-lcs && .venv-lcs/bin/pip install libcachesim
Usage: .venv-lcs/bin/python tools/replay_speed.py --trace T --format F [--capacity-frac 0.01] [--repeat 5]
"""
import argparse
import json
import math
import os
import statistics
import subprocess
import tempfile
import time

import libcachesim as lcs


def run_kvtier(args, extra):
    command = [args.kvtier, "replay", "--trace", args.trace, "--format", args.format,
               "--capacity-frac", str(args.capacity_frac), "--policies", args.policies, "--json"] + extra
    return json.loads(subprocess.run(command, check=True, capture_output=True, text=True).stdout)


def without_speed(report):
    return [{k: v for k, v in r.items() if k != "accesses_per_s"} for r in report["results"]]


def run_libcachesim(dump_path, capacity_blocks, hashpower):
    reader = lcs.TraceReader(trace=dump_path, trace_type=lcs.TraceType.ORACLE_GENERAL_TRACE)
    # The hash table is allocated before the clock starts; sized to the trace's blocks, as
    # kvtier's tables are (libCacheSim's default, 2^24 buckets, is 3-10x slower here).
    cache = lcs.LRU(cache_size=capacity_blocks, hashpower=hashpower)
    start = time.perf_counter()
    miss_ratio, _ = cache.process_trace(reader)
    return time.perf_counter() - start, miss_ratio


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kvtier", default="build/release/kvtier")
    parser.add_argument("--trace", required=True)
    parser.add_argument("--format", required=True)
    parser.add_argument("--capacity-frac", type=float, default=0.01)
    parser.add_argument("--policies", default="lru,ema,s3fifo,arc,bayes,predictive")
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        dump_path = os.path.join(tmp, "accesses.oracleGeneral.bin")
        speeds, store_speeds, lcs_seconds = {}, {}, []
        report = None
        results_equal = True
        for i in range(args.repeat):
            report = run_kvtier(args, ["--dump-accesses", dump_path] if i == 0 else [])
            store = run_kvtier(args, ["--through-store"])
            results_equal = results_equal and without_speed(report) == without_speed(store)
            for r, t in zip(report["results"], store["results"]):
                if r["accesses_per_s"] > 0:
                    speeds.setdefault(r["policy"], []).append(r["accesses_per_s"])
                    store_speeds.setdefault(t["policy"], []).append(t["accesses_per_s"])
            hashpower = max(16, math.ceil(math.log2(report["unique_blocks"])))
            seconds, miss_ratio = run_libcachesim(dump_path, report["capacity_blocks"], hashpower)
            lcs_seconds.append(seconds)

    accesses = report["accesses"]
    baseline = accesses / min(lcs_seconds)
    hit_rates = {r["policy"]: r["block_hit_rate"] for r in report["results"]}
    print(json.dumps({
        "trace": args.trace,
        "format": args.format,
        "accesses": accesses,
        "capacity_blocks": report["capacity_blocks"],
        "repeat": args.repeat,
        "libcachesim_lru": {"version": "0.3.5 (PyPI)", "accesses_per_s": baseline,
                            "median_accesses_per_s": accesses / statistics.median(lcs_seconds),
                            "hit_rate": 1 - miss_ratio, "hashpower": hashpower},
        "results_equal_through_store": results_equal,
        "kvtier": [{"policy": p, "accesses_per_s": max(v), "median_accesses_per_s": statistics.median(v),
                    "block_hit_rate": hit_rates[p], "vs_libcachesim_lru": max(v) / baseline,
                    "through_store_accesses_per_s": max(store_speeds[p]),
                    "vs_through_store": max(v) / max(store_speeds[p])}
                   for p, v in speeds.items()],
    }, indent=2))


if __name__ == "__main__":
    main()
