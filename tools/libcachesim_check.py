#!/usr/bin/env python3
"""Cross-checks kvtier's replay against an independent simulator, libCacheSim
(`pip install libcachesim`): LRU and the offline optimum on a Mooncake trace, at a few
capacities. libCacheSim sees the trace's block accesses as a flat sequence of unit-size
objects and counts every hit; kvtier counts a request's longest cached prefix (the prefix
rule) and its LRU evicts leaves first. The optimum is the same under both rules
(docs/optimal_bound.md), so kvtier's OPT must equal libCacheSim's Belady within --tolerance
points. The LRUs differ by design: a plain LRU evicts a parent before the child it was just
used with, which a prefix cache cannot use; kvtier's leaf-first LRU keeps the parent. Its hit
rate must therefore be at least plain LRU's, less the tolerance; the difference is printed.

usage: tools/libcachesim_check.py [--kvtier build/release/kvtier] [--trace FILE] [--tolerance 0.5]
"""
import argparse
import json
import subprocess
import sys

import libcachesim as lcs


def blocks_of(trace):
    sequence = []
    with open(trace) as f:
        for line in f:
            if line.strip():
                sequence.extend(json.loads(line)["hash_ids"])
    return sequence


def simulate(cache, sequence, next_use=None):
    hits = 0
    req = lcs.Request()
    req.obj_size = 1
    for i, block in enumerate(sequence):
        req.obj_id = block
        req.clock_time = i
        if next_use is not None:
            req.next_access_vtime = next_use[i]
        if cache.get(req):
            hits += 1
    return hits / len(sequence)


def kvtier_rates(kvtier, trace, capacity):
    out = subprocess.run([kvtier, "replay", "--trace", trace, "--format", "mooncake", "--capacity-blocks",
                          str(capacity), "--policies", "lru", "--json"], check=True, capture_output=True, text=True)
    results = {r["policy"]: r["block_hit_rate"] for r in json.loads(out.stdout)["results"]}
    return results["lru"], results["opt"]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--kvtier", default="build/release/kvtier")
    parser.add_argument("--trace", default="data/traces/mooncake-synthetic/synthetic_trace.jsonl")
    parser.add_argument("--tolerance", type=float, default=0.5, help="points of hit rate")
    args = parser.parse_args()
    sequence = blocks_of(args.trace)
    unique = len(set(sequence))

    # libCacheSim's Belady reads each request's next access time (INT64_MAX: never again).
    never = 2**63 - 1
    next_use, upcoming = [0] * len(sequence), {}
    for i in range(len(sequence) - 1, -1, -1):
        next_use[i] = upcoming.get(sequence[i], never)
        upcoming[sequence[i]] = i
    worst_opt, lru_deficit, lru_gain = 0.0, 0.0, 0.0
    print("capacity  LRU kvtier  LRU libCacheSim  OPT kvtier  Belady libCacheSim")
    for fraction in (0.01, 0.05, 0.2):
        capacity = max(1, round(fraction * unique))
        lru, opt = kvtier_rates(args.kvtier, args.trace, capacity)
        lcs_lru = simulate(lcs.LRU(capacity), sequence)
        lcs_opt = simulate(lcs.Belady(capacity), sequence, next_use)
        print(f"{capacity:8d}  {100 * lru:9.2f}%  {100 * lcs_lru:14.2f}%  {100 * opt:9.2f}%  {100 * lcs_opt:17.2f}%")
        worst_opt = max(worst_opt, abs(opt - lcs_opt) * 100)
        lru_deficit = max(lru_deficit, (lcs_lru - lru) * 100)
        lru_gain = max(lru_gain, (lru - lcs_lru) * 100)
    print(f"OPT vs Belady: largest difference {worst_opt:.2f} points (tolerance {args.tolerance})")
    print(f"leaf-first LRU vs plain LRU: up to {lru_gain:.2f} points better, {max(0.0, lru_deficit):.2f} worse")
    return 0 if worst_opt <= args.tolerance and lru_deficit <= args.tolerance else 1


if __name__ == "__main__":
    sys.exit(main())
