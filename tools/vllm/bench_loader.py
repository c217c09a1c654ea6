#!/usr/bin/env python3
"""Benchmark of the vLLM connector's load path outside vLLM (docs/vllm.md "Worker side").

    /work/venv-vllm/bin/python tools/vllm/bench_loader.py [--blocks 127] [--layers 8] [--page-kib 256]

A `kvtier serve` daemon (in this process, the round trip's DRAM-over-disk tiers) holds a chain of blocks shaped like the
TTFT model's (8 layers x 256 KiB pages = 2 MiB per block; 127 blocks = a 16k-token prompt).
The blocks are loaded into per-layer KV tensors the way KvtierConnector does it: a get into
the shared segment, then one copy per run of consecutive block ids and layer. Baseline, in
the same run: one torch copy of the same bytes (memcpy). Prints seconds, GB/s and the ratio
to the baseline, best of --repeat, for: get alone, unpack alone, both on the calling thread,
and both on the loader thread (layer-pipelined and not).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from e2e_connector import make_pkg, serve_yaml  # noqa: E402  (make_pkg: the built kvtier on sys.path)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--blocks", type=int, default=127)
    p.add_argument("--layers", type=int, default=8)
    p.add_argument("--page-kib", type=int, default=256)
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--scattered", action="store_true", help="every other block id (no runs to merge)")
    a = p.parse_args()
    tmp = tempfile.mkdtemp(prefix="kvtier-bench-loader-")
    pkg = make_pkg(tmp)
    if pkg:
        sys.path.insert(0, pkg)
    import torch

    import kvtier
    from kvtier.vllm.layout import contiguous_runs
    from kvtier.vllm.loader import BlockLoader, LoadJob

    n, layers, page = a.blocks, a.layers, a.page_kib << 10
    bb = layers * page
    step = 2 if a.scattered else 1
    ids = [16 + step * i for i in range(n)]
    caches = [torch.zeros((ids[-1] + 16, page), dtype=torch.uint8) for _ in range(layers)]
    cfg = serve_yaml(os.path.join(tmp, "srv"), "dram")  # 2 GiB of DRAM: every block stays there
    results = {}
    with kvtier.serve(config_text=cfg) as daemon:
        client = kvtier.Client.connect_unix(daemon.socket_path, shared_memory_bytes=n * bb)
        shm = client.shared_memory
        seg = torch.frombuffer(shm, dtype=torch.uint8)
        keys = kvtier.chain_keys(list(range(n * 16)), 16, "sha256_cbor")
        seg[:n * bb].random_(0, 255)
        expected = seg[:n * bb].clone().view(n, bb)
        r = client.put(keys, [shm[j * bb:(j + 1) * bb] for j in range(n)], tokens=16)
        assert r.new_blocks == n, r

        def fetch(ks, first):
            sizes = client.get(ks, [shm[(first + j) * bb:(first + j + 1) * bb] for j in range(len(ks))])
            return sum(1 for s in sizes if s == bb)

        def unpack(layer, block_ids, first):
            src = seg[first * bb:(first + len(block_ids)) * bb].view(len(block_ids), bb)
            runs = contiguous_runs(block_ids)
            for lay in (range(layers) if layer is None else [layer]):
                for i, b, k in runs:
                    caches[lay][b:b + k].copy_(src[i:i + k, lay * page:(lay + 1) * page])

        def best(fn):
            times = []
            for _ in range(a.repeat):
                t0 = time.perf_counter()
                fn()
                times.append(time.perf_counter() - t0)
            return min(times)

        scratch = torch.empty(n * bb, dtype=torch.uint8)
        results["memcpy (baseline)"] = best(lambda: scratch.copy_(seg[:n * bb]))
        results["get into the segment"] = best(lambda: fetch(keys, 0))
        results["unpack into the KV tensors"] = best(lambda: unpack(None, ids, 0))
        results["get + unpack, calling thread"] = best(lambda: (fetch(keys, 0), unpack(None, ids, 0)))
        for pipelined in (True, False):
            loader = BlockLoader(fetch, unpack, layers, n, pipelined)

            def run():
                loader.submit([LoadJob("r", list(zip(ids, keys)))], [])
                for lay in range(layers):
                    loader.wait_layer(lay)
                assert loader.wait_step() == []

            results[f"loader thread, {'layer-pipelined' if pipelined else 'all layers at once'}"] = best(run)
            loader.close()
        for lay in range(layers):  # what the KV tensors hold is what was put
            assert torch.equal(caches[lay][ids], expected[:, lay * page:(lay + 1) * page])
        client.close()
    mib = n * bb / 2**20
    base = results["memcpy (baseline)"]
    print(f"{n} blocks x {layers} layers x {a.page_kib} KiB = {mib:.0f} MiB, block ids "
          f"{'scattered' if a.scattered else 'consecutive'}; best of {a.repeat}")
    print("| path | seconds | GB/s | vs memcpy |\n|---|---|---|---|")
    for name, sec in results.items():
        print(f"| {name} | {sec:.4f} | {n * bb / sec / 1e9:.2f} | {base / sec:.2f} |")
    os.system(f"rm -rf {tmp}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
