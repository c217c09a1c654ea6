#!/usr/bin/env python3
"""The markdown tables of a bench.py output folder: per run, per system over all reps, and each
system against a reference request by request.

    python3 tools/e2e/report.py [--reference kvtier] /tmp/e2e-run [/tmp/e2e-run-more ...]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys


def pct(xs: list, q: float) -> float:
    xs = sorted(xs)
    i = min(len(xs) - 1, max(0, int(round(q / 100 * (len(xs) - 1)))))
    return xs[i]


def paired(reqs: list, systems: list, reference: str) -> None:
    """Each system against `reference` on the same requests (one workload: a request id names the
    same prompt in every run; pairs are (rep, request), or (folder, rep, request) when two
    folders hold the same system's rep: number reps apart with bench.py --first-rep to pair
    systems measured in different batches). A percentile of a few dozen
    requests whose TTFTs fall in two clusters (hits and short prompts against long misses)
    jumps between the clusters with small shifts; the differences of paired requests do not.
    The 95% interval of the median difference is a bootstrap over the pairs (2,000 resamples,
    seeded, so a report is reproducible)."""
    seen = {}
    for q in reqs:
        seen.setdefault((q["system"], q["rep"], q["rid"]), set()).add(q.get("folder"))
    apart = all(len(folders) == 1 for folders in seen.values())
    by = {}
    for q in reqs:
        key = (q["rep"], q["rid"]) if apart else (q.get("folder"), q["rep"], q["rid"])
        by.setdefault(key, {})[q["system"]] = q
    print()
    print(f"| system - {reference}, TTFT of the same request | turns | pairs | median difference (s) | "
          f"95% interval (s) | mean difference (s) | {reference} faster in |")
    print("|---|---|---|---|---|---|---|")
    rng = random.Random(0)
    for s in systems:
        if s == reference:
            continue
        for name, pick in (("first", lambda t: t == 0), ("later", lambda t: t > 0), ("all", lambda t: True)):
            d = [m[s]["ttft_s"] - m[reference]["ttft_s"] for m in by.values()
                 if s in m and reference in m and pick(m[reference]["turn"])]
            if not d:
                continue
            boot = sorted(statistics.median(rng.choices(d, k=len(d))) for _ in range(2000))
            faster = sum(x > 0 for x in d)
            print(f"| {s} | {name} | {len(d)} | {statistics.median(d):+.3f} | {boot[49]:+.3f} to {boot[1949]:+.3f} | "
                  f"{statistics.mean(d):+.3f} | {faster} of {len(d)} |")


def main(outs: list, reference: str = "kvtier") -> int:
    """Several folders of the same workload are pooled."""
    runs, reqs, totals = [], [], set()
    for out in outs:
        with open(os.path.join(out, "workload.json")) as f:
            totals.add(json.load(f)["prompt_tokens"])
        with open(os.path.join(out, "runs.jsonl")) as f:
            runs += [json.loads(l) for l in f]
        with open(os.path.join(out, "requests.jsonl")) as f:
            reqs += [dict(json.loads(l), folder=out) for l in f]
    if len(totals) != 1:
        raise SystemExit(f"different workloads: {totals}")
    total = totals.pop()
    systems = []
    j = lambda xs: "/".join(str(x) for x in xs)
    for r in runs:
        if r["system"] not in systems:
            systems.append(r["system"])
    print("| system | runs | requests | TTFT P50 (s) | TTFT P99 (s) | mean TTFT (s) | TTFT of turns 2-3 P50 (s) | "
          "req/s | prompt tokens from external cache (per run) | from vLLM's prefix cache (per run) | "
          "cache process peak RSS (MiB) | probe: 2048-token miss TTFT (s, per run) |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for s in systems:
        rs = [r for r in runs if r["system"] == s]
        ok = [r for r in rs if r["rc"] == 0 and r.get("requests")]
        t = [q["ttft_s"] for q in reqs if q["system"] == s]
        if not ok or not t:
            print(f"| {s} | {len(rs)} | FAILED | | | | | | | | | |")
            continue
        later = [q["ttft_s"] for q in reqs if q["system"] == s and q["turn"] > 0]
        rps = [r["requests"] / r["wall_s"] for r in ok]
        ext = [r.get("ext_hits", 0) for r in ok]
        loc = [r.get("local_hits", 0) for r in ok]
        rss = [r["cache_peak_rss_mib"] for r in ok if r.get("cache_peak_rss_mib") is not None]
        print(f"| {s} | {len(ok)} of {len(rs)} | {len(t)} | {pct(t, 50):.2f} | {pct(t, 99):.2f} | {statistics.mean(t):.2f} | "
              f"{pct(later, 50):.2f} | {statistics.mean(rps):.3f} | {j(ext)} of {total} | {j(loc)} | "
              f"{j(rss) if rss else '-'} | {j(r['warmup_ttft_s'][-1] for r in ok)} |")
    split = [q for q in reqs if "queued_s" in q]
    if split:
        # Where each TTFT went: before the engine's scheduler saw the request (it arrived
        # during a step, which runs to its end first), queued in the scheduler (behind other
        # requests), and from its first step to its first token (its prefill and loads, chunks
        # shared with other requests). Percentiles of each column separately.
        for q in split:
            q["unseen_s"] = max(0.0, q["ttft_s"] - q["queued_s"] - q["prefill_s"])
        print()
        print("| system | turns | requests | TTFT P50 / P90 (s) | before the scheduler P50 / P90 (s) | "
              "queued P50 / P90 (s) | prefill P50 / P90 (s) |")
        print("|---|---|---|---|---|---|---|")
        for s in systems:
            for name, pick in (("first", lambda q: q["turn"] == 0), ("later", lambda q: q["turn"] > 0)):
                qs = [q for q in split if q["system"] == s and pick(q)]
                if not qs:
                    continue
                cols = [[q[k] for q in qs] for k in ("ttft_s", "unseen_s", "queued_s", "prefill_s")]
                cells = " | ".join(f"{pct(c, 50):.2f} / {pct(c, 90):.2f}" for c in cols)
                print(f"| {s} | {name} | {len(qs)} | {cells} |")
    # A probe whose reset failed hit vLLM's own cache: not a load from the external one.
    probed = [r for r in runs if r.get("hit_probe") and r["hit_probe"].get("reset")]
    if probed:
        print()
        print("| system | runs | probe tokens | miss TTFT (s, per run) | hit TTFT (s, per run) | hit TTFT median (s) | "
              "tokens cached at the hit (per run) |")
        print("|---|---|---|---|---|---|---|")
        for s in systems:
            ps = [r["hit_probe"] for r in probed if r["system"] == s]
            if not ps:
                continue
            hits = [p["hit_ttft_s"] for p in ps]
            print(f"| {s} | {len(ps)} | {j(sorted({p['len'] for p in ps}))} | {j(p['miss_ttft_s'] for p in ps)} | "
                  f"{j(hits)} | {statistics.median(hits):.3f} | {j(p['hit_cached_tokens'] for p in ps)} |")
    if reference in systems:
        paired(reqs, systems, reference)
    return 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reference", default="kvtier", help="the system the others are paired against")
    parser.add_argument("outs", nargs="+", help="bench.py output folders of one workload")
    a = parser.parse_args()
    sys.exit(main(a.outs, a.reference))
