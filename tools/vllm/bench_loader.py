#!/usr/bin/env python3
"""Benchmark of the vLLM connector's load and save paths outside vLLM (docs/vllm.md "Worker side").

    /work/venv-vllm/bin/python tools/vllm/bench_loader.py [--blocks 127] [--layers 8] [--page-kib 256]

A `kvtier serve` daemon (in this process, the round trip's DRAM-over-disk tiers) holds a chain of blocks shaped like the
TTFT model's (8 layers x 256 KiB pages = 2 MiB per block; 127 blocks = a 16k-token prompt).
The blocks are loaded into per-layer KV tensors the way KvtierConnector does it: a get into
the shared segment, then one kvtier.copy_rows call for every layer and run of consecutive
block ids. Baseline, in the same run: one torch copy of the same bytes (memcpy). Prints
seconds, GB/s and the ratio to the baseline, best of --repeat, for: get alone, unpack alone,
both on the calling thread, and both on the loader thread (layer-pipelined and not), and the
loader beside a thread running Python (vLLM's step loop, while a request waits for an
asynchronous load); the same with one torch copy per layer and run (the connector before
copy_rows: each copy then waits for the GIL), on a loader that lives only for those rows,
since its torch copies start an OpenMP pool; memcpy and both on the calling thread while no
loader thread is alive (libgomp spins less once a second thread has its OpenMP pool:
docs/vllm.md); every repeat times every row; the loader's hand-off; and small torch ops on the
calling thread (a forward's shape) with and without the loaders alive. Then the save path: the
step's cost of saving the same blocks (packed from the KV tensors) with the put on the calling
thread (the connector before the saver) and with kvtier.vllm.saver.BlockSaver (the copy into
its staging; the put lands later), and the saver's submit-to-landed time. Every save puts new keys.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import threading
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
    p.add_argument("--save-blocks", type=int, default=32, help="blocks per save (32: one 4096-token chunk)")
    p.add_argument("--scattered", action="store_true", help="every other block id (no runs to merge)")
    p.add_argument("--ops-rounds", type=int, default=50,
                   help="rounds of small torch ops on the calling thread, with and without a loader alive (0: none)")
    a = p.parse_args()
    tmp = tempfile.mkdtemp(prefix="kvtier-bench-loader-")
    pkg = make_pkg(tmp)
    if pkg:
        sys.path.insert(0, pkg)
    import torch

    import kvtier
    from kvtier.vllm.layout import contiguous_runs
    from kvtier.vllm.loader import BlockLoader, LoadJob
    from kvtier.vllm.saver import BlockSaver, SaveJob

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
        cache_rows = [c.numpy() for c in caches]
        seg_table = seg[:n * bb].view(n, bb).numpy()
        seg_columns = [seg_table[:, lay * page:(lay + 1) * page] for lay in range(layers)]
        keys = kvtier.chain_keys(list(range(n * 16)), 16, "sha256_cbor")
        seg[:n * bb].random_(0, 255)
        expected = seg[:n * bb].clone().view(n, bb)
        r = client.put(keys, [shm[j * bb:(j + 1) * bb] for j in range(n)], tokens=16)
        assert r.new_blocks == n, r

        marks: dict = {}  # when the last get began and the last copy ended: the loader's hand-off

        def fetch(ks, first):
            marks["get"] = time.perf_counter()
            sizes = client.get(ks, [shm[(first + j) * bb:(first + j + 1) * bb] for j in range(len(ks))])
            return sum(1 for s in sizes if s == bb)

        def unpack(layer, block_ids, first):  # as KvtierConnector._unpack
            runs = [(b, first + i, k) for i, b, k in contiguous_runs(block_ids)]
            kvtier.copy_rows([(cache_rows[lay], seg_columns[lay], runs)
                              for lay in (range(layers) if layer is None else [layer])])
            marks["copied"] = time.perf_counter()

        def unpack_torch(layer, block_ids, first):  # the connector before copy_rows
            src = seg[first * bb:(first + len(block_ids)) * bb].view(len(block_ids), bb)
            runs = contiguous_runs(block_ids)
            for lay in (range(layers) if layer is None else [layer]):
                for i, b, k in runs:
                    caches[lay][b:b + k].copy_(src[i:i + k, lay * page:(lay + 1) * page])
            marks["copied"] = time.perf_counter()

        def best(fn):
            times = []
            for _ in range(a.repeat):
                t0 = time.perf_counter()
                fn()
                times.append(time.perf_counter() - t0)
            return min(times)

        scratch = torch.empty(n * bb, dtype=torch.uint8)

        def memcpy():
            scratch.copy_(seg[:n * bb])

        def inline():
            fetch(keys, 0)
            unpack(None, ids, 0)

        handoff: dict = {}  # loader row -> [(submit to its get, last copy to the wait's return)]

        def beside_python(fn):
            """fn while another thread runs Python: vLLM's step loop, while a request waits for
            its asynchronous load."""
            stop = threading.Event()

            def spin():
                while not stop.is_set():
                    sum(range(100))

            t = threading.Thread(target=spin)
            t.start()
            try:
                fn()
            finally:
                stop.set()
                t.join()

        def on_loader(loader, row=None):
            t0 = time.perf_counter()
            loader.submit([LoadJob("r", list(zip(ids, keys)))], [])
            for lay in range(layers):
                loader.wait_layer(lay)
            assert loader.wait_step() == []
            if row:
                handoff.setdefault(row, []).append((marks["get"] - t0, time.perf_counter() - marks["copied"]))

        # Each thread that runs torch copies owns an OpenMP pool, and libgomp cuts every pool's
        # spin-wait short once the process holds more pool threads than CPUs, so a row timed
        # while a loader thread is alive and one timed while none is differ by more than the
        # hand-off (docs/vllm.md). The main rows are all timed with both loaders alive; the
        # "no loader thread alive" rows show what that state is worth. Every repeat times every
        # row, the two states in turn, so that a change in the machine's other load reaches all
        # rows alike; the first repeat warms up (each new loader's first copy starts its pool).
        times: dict = {}

        def timed(rep, name, fn):
            t0 = time.perf_counter()
            fn()
            if rep:
                times.setdefault(name, []).append(time.perf_counter() - t0)

        mm_a, mm_b, vec = torch.randn(256, 1024), torch.randn(1024, 1024), torch.randn(1 << 19)
        ops: dict = {}

        def small_ops(rep, state):
            """A forward's shape: many short parallel regions (a loader, when alive, idles)."""
            t0 = time.perf_counter()
            for _ in range(a.ops_rounds):
                torch.mm(mm_a, mm_b)
                vec.add_(1.0)
                vec.mul_(0.5)
            if rep and a.ops_rounds:
                ops.setdefault(state, []).append(time.perf_counter() - t0)

        for rep in range(a.repeat + 1):
            timed(rep, "memcpy, no loader thread alive", memcpy)
            timed(rep, "get + unpack, calling thread, no loader thread alive", inline)
            small_ops(rep, "no loader alive")
            loaders = {pipelined: BlockLoader(fetch, unpack, layers, n, pipelined) for pipelined in (True, False)}
            for loader in loaders.values():
                on_loader(loader)
            timed(rep, "memcpy (baseline)", memcpy)
            timed(rep, "get into the segment", lambda: fetch(keys, 0))
            timed(rep, "unpack into the KV tensors", lambda: unpack(None, ids, 0))
            timed(rep, "unpack into the KV tensors, torch copies", lambda: unpack_torch(None, ids, 0))
            timed(rep, "get + unpack, calling thread", inline)
            for pipelined in (True, False):
                row = f"loader thread, {'layer-pipelined' if pipelined else 'all layers at once'}"
                timed(rep, row, lambda: on_loader(loaders[pipelined], row if rep else None))
            timed(rep, "loader thread, all layers at once, beside a thread running Python",
                  lambda: beside_python(lambda: on_loader(loaders[False])))
            small_ops(rep, "the loaders alive")
            for loader in loaders.values():
                loader.close()
            # The connector before copy_rows: its loader's torch copies start an OpenMP pool, so
            # it lives only for its own rows.
            torch_loader = BlockLoader(fetch, unpack_torch, layers, n, False)
            on_loader(torch_loader)
            timed(rep, "loader thread, all layers at once, torch copies", lambda: on_loader(torch_loader))
            timed(rep, "loader thread, all layers at once, torch copies, beside a thread running Python",
                  lambda: beside_python(lambda: on_loader(torch_loader)))
            torch_loader.close()
            time.sleep(0.1)  # a loader's OpenMP pool ends just after its thread, past the join
        for name in sorted(times, key=lambda name: name.endswith("no loader thread alive")):
            results[name] = min(times[name])
        for lay in range(layers):  # what the KV tensors hold is what was put
            assert torch.equal(caches[lay][ids], expected[:, lay * page:(lay + 1) * page])

        # Saves: the pages just loaded go back under new keys each time.
        save_client = kvtier.Client.connect_unix(daemon.socket_path, shared_memory_bytes=n * bb)
        sshm = save_client.shared_memory
        stage = torch.frombuffer(sshm, dtype=torch.uint8)
        rounds = iter(range(1, 1000))

        stage_table = stage[:n * bb].view(n, bb).numpy()
        stage_columns = [stage_table[:, lay * page:(lay + 1) * page] for lay in range(layers)]

        def pack(block_ids, first):  # as KvtierConnector._pack
            runs = [(first + i, b, k) for i, b, k in contiguous_runs(block_ids)]
            kvtier.copy_rows([(stage_columns[lay], cache_rows[lay], runs) for lay in range(layers)])

        def put(parent, ks, first, tokens=0):  # kvtier.vllm.saver.Put
            r = save_client.put(ks, [sshm[(first + j) * bb:(first + j + 1) * bb] for j in range(len(ks))],
                                parent=parent, tokens=tokens or 16)
            return r.new_blocks, r.refused_blocks

        sn, sids = a.save_blocks, ids[:a.save_blocks]

        def new_keys():
            base = next(rounds) * 1_000_000
            return kvtier.chain_keys(list(range(base, base + sn * 16)), 16, "sha256_cbor")

        def save_inline():
            ks = new_keys()
            pack(sids, 0)
            assert put(None, ks, 0) == (sn, 0)

        results["save, calling thread: pack + put (before)"] = best(save_inline)
        saver = BlockSaver(put, n, max_chunk_slots=sn)
        step, landed = [], []
        for _ in range(a.repeat):
            job = SaveJob("r", None, list(zip(sids, new_keys())))
            t0 = time.perf_counter()
            saver.submit(job, lambda blocks, first: pack([b for b, _ in blocks], first))
            step.append(time.perf_counter() - t0)
            assert saver.flush(60)
            landed.append(time.perf_counter() - t0)
        results["save, the step's part with the saver: pack into staging"] = min(step)
        results["save with the saver, submit to landed"] = min(landed)
        saver.close()
        assert saver.stats_snapshot()["saved_blocks"] == sn * a.repeat
        save_client.close()
        client.close()
    mib = n * bb / 2**20
    base = results["memcpy (baseline)"]
    print(f"{n} blocks x {layers} layers x {a.page_kib} KiB = {mib:.0f} MiB, block ids "
          f"{'scattered' if a.scattered else 'consecutive'}; best of {a.repeat}")
    print("| path | seconds | GB/s | vs memcpy |\n|---|---|---|---|")
    for name, sec in results.items():
        size = (a.save_blocks if name.startswith("save") else n) * bb
        sec_base = base * size / (n * bb)
        print(f"| {name}{f' ({a.save_blocks} blocks)' if name.startswith('save') else ''} | {sec:.4f} | "
              f"{size / sec / 1e9:.2f} | {sec_base / sec:.2f} |")
    for row, pairs in handoff.items():
        to_get, back = (statistics.median(x) * 1e3 for x in zip(*pairs))
        print(f"{row}: hand-off {to_get:.2f} ms from submit to its get, {back:.2f} ms from its last copy "
              f"to the wait's return (medians of {len(pairs)})")
    if ops:
        print(f"{a.ops_rounds} rounds of small torch ops on the calling thread: " + ", ".join(
            f"{min(t):.3f} s (median {statistics.median(t):.3f}) with {state}" for state, t in ops.items()))
    os.system(f"rm -rf {tmp}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
