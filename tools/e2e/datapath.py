#!/usr/bin/env python3
"""The data path outside vLLM: put then get of N blocks of 1 MiB, 1 and 4 client processes,
against kvtier serve, Mooncake Store, LMCache's server and Redis (docs/e2e.md).

    PY=~/.cache/kvtier/venv-vllm-f9334bb415f34b3f/bin/python
    $PY tools/e2e/datapath.py --reps 3 --out /tmp/datapath

Each client process makes its own N random blocks (distinct keys), puts them all in batches
of --batch, then gets them all back and checks every byte (the check is not timed). GB/s =
all clients' bytes / (last client's end - first client's start) of the phase; the clients
start each phase together. Systems (one server per system and repetition, 1 client then 4):

  memcpy        numpy copies of the same 1 MiB blocks (put: source to a second buffer, get:
                back to a third), no server: the baseline
  kvtier        `kvtier serve`, one cpu_dram tier; kvtier.Client over the Unix socket, the
                blocks in the client's shared-memory segment (put and get pass references)
  kvtier-nocheck  as kvtier, with checksums=False (protocol version 1: no xxh3 of the
                blocks on either side); not in the default --systems
  kvtier-copy   the same server; the blocks in private memory, copied into and out of the
                segment per batch (what the vLLM connector does with its KV pages)
  mooncake      mooncake_master + mooncake_client (the "real client" holding the segment);
                MooncakeDistributedStore.setup_dummy, blocks in alloc_from_mem_pool memory,
                batch_put_from / batch_get_into
  lmcache       `lmcache server` (multi-process mode, --shm-name: engine-driven SHM
                transfer); LMCache's SDK (lmcache.sdk.context) store() / retrieve() of a
                [2, 1, tokens, 1024] float16 tensor, 256 tokens = one 1 MiB chunk
  redis         redis-server (no persistence) on a Unix socket; redis-py with hiredis,
                pipelines of SET / GET of bytes
  redis-bench   redis-benchmark -t set,get -d 1048576 on the same socket (no Python, no
                verification, values of 'x', one key, no pipeline)

Writes <out>/results.jsonl (one line per system, rep and client count) and <out>/table.md
(medians over reps) and prints the table.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import bench  # noqa: E402  (its peers' start-up: cache_system, free_ports, wait_port)

SYSTEMS = "memcpy,kvtier,kvtier-copy,mooncake,lmcache,redis,redis-bench"
MIB = 1 << 20
LMCACHE_CHUNK = 256  # tokens: the server's --chunk-size default


# ------------------------------------------------------------------ client side
class Memcpy:
    def __init__(self, spec):
        self.dst = np.empty_like(spec["src"])
        self.back = np.empty_like(spec["src"])
        self.dst.fill(0)
        self.back.fill(0)

    def put(self, src, lo, hi, keys):
        for i in range(lo, hi):
            np.copyto(self.dst[i], src[i])

    def get(self, lo, hi, keys):
        for i in range(lo, hi):
            np.copyto(self.back[i], self.dst[i])

    def clear(self):
        self.back.fill(0)

    def result(self, i):
        return self.back[i]


class Kvtier:
    """Blocks in the segment (copy=False: the source is the segment's first half, the
    destination its second) or copied through a segment of one batch each way."""

    def __init__(self, spec):
        import kvtier
        n, bs, batch = spec["blocks"], spec["block_bytes"], spec["batch"]
        self.copy = spec["system"] == "kvtier-copy"
        shm_bytes = (2 * batch if self.copy else 2 * n) * bs
        self.c = kvtier.Client.connect_unix(spec["socket"], tenant="datapath", shared_memory_bytes=shm_bytes,
                                            checksums=spec["system"] != "kvtier-nocheck")
        seg = np.frombuffer(self.c.shared_memory, dtype=np.uint8)
        half = (batch if self.copy else n)
        self.src_seg = seg[:half * bs].reshape(half, bs)
        self.dst_seg = seg[half * bs:2 * half * bs].reshape(half, bs)
        self.mv = self.c.shared_memory
        self.half, self.bs = half, bs
        self.out = np.zeros_like(spec["src"]) if self.copy else self.dst_seg
        if not self.copy:
            np.copyto(self.src_seg, spec["src"])  # the blocks live in the segment
            spec["src"] = self.src_seg
        self.dst_seg.fill(0)

    def _views(self, base, lo, hi):
        off = (lo % self.half) if self.copy else lo
        return [self.mv[base + (off + j) * self.bs: base + (off + j + 1) * self.bs] for j in range(hi - lo)]

    def put(self, src, lo, hi, keys):
        if self.copy:
            np.copyto(self.src_seg[:hi - lo], src[lo:hi])
            views = self._views(0, 0, hi - lo)
        else:
            views = self._views(0, lo, hi)
        r = self.c.put(keys, views)
        if r.refused_blocks:
            raise RuntimeError(f"kvtier refused {r.refused_blocks} blocks")

    def get(self, lo, hi, keys):
        base = self.half * self.bs
        views = self._views(base, 0, hi - lo) if self.copy else self._views(base, lo, hi)
        sizes = self.c.get(keys, views)
        if any(s != self.bs for s in sizes):
            raise RuntimeError(f"kvtier get sizes {sizes}")
        if self.copy:
            np.copyto(self.out[lo:hi], self.dst_seg[:hi - lo])

    def clear(self):
        self.out.fill(0)

    def result(self, i):
        return self.out[i]


class Mooncake:
    def __init__(self, spec):
        from mooncake.store import MooncakeDistributedStore
        n, bs = spec["blocks"], spec["block_bytes"]
        self.s = MooncakeDistributedStore()
        rc = self.s.setup_dummy(2 * n * bs + (64 << 20), 64 << 20, spec["real_client"])
        if rc != 0:
            raise RuntimeError(f"setup_dummy rc {rc}")

        def pool(nbytes):
            p = self.s.alloc_from_mem_pool(nbytes)
            if not p or self.s.register_buffer(p, nbytes) != 0:
                raise RuntimeError("alloc_from_mem_pool/register_buffer failed")
            return p, np.ctypeslib.as_array((ctypes.c_uint8 * nbytes).from_address(p)).reshape(n, bs)

        self.sp, src = pool(n * bs)
        self.dp, self.dst = pool(n * bs)
        np.copyto(src, spec["src"])
        spec["src"] = src
        self.dst.fill(0)
        self.bs = bs

    def put(self, src, lo, hi, keys):
        r = self.s.batch_put_from(keys, [self.sp + i * self.bs for i in range(lo, hi)], [self.bs] * (hi - lo))
        if any(x != 0 for x in r):
            raise RuntimeError(f"batch_put_from returned {r}")

    def get(self, lo, hi, keys):
        r = self.s.batch_get_into(keys, [self.dp + i * self.bs for i in range(lo, hi)], [self.bs] * (hi - lo))
        if any(x != self.bs for x in r):
            raise RuntimeError(f"batch_get_into returned {r}")

    def clear(self):
        self.dst.fill(0)

    def result(self, i):
        return self.dst[i]


class LMCache:
    """LMCache's SDK context, with the geometry given here: its register_caches() reads the
    geometry a vLLM instance registered, and no vLLM runs here."""

    def __init__(self, spec):
        import torch
        from lmcache.sdk.context import LMCacheSDKContext
        from lmcache.sdk.wrapper.contiguous import ContiguousTransferWrapper
        from lmcache.v1.gpu_connector.utils import LayoutHints
        from lmcache.v1.multiprocess.transfer_context.worker_transfer import (
            EngineDrivenTransferContext, create_transfer_context)

        nh, bs_tok, hs = 8, 16, 128  # float16: 2 x 8 x 128 x 2 bytes = 4 KiB a token, 1 MiB a chunk

        class Ctx(LMCacheSDKContext):
            def register_caches(self):
                self._world_size, self._num_kv_readers = 1, 1
                self._kv_caches = {"layer.0": torch.zeros((1, 2, nh, bs_tok, hs), dtype=torch.float16)}
                tc = create_transfer_context(self._kv_caches, instance_id=self.instance_id,
                                             req_client=self._req_client)
                self.blocks_in_chunk = self._chunk_size // bs_tok
                tc.register(self._kv_caches, self._model_name, 1, self.blocks_in_chunk, self._mq_timeout,
                            layout_hints=LayoutHints(kv_layout="HND", num_kv_heads=nh, tokens_per_block=bs_tok,
                                                     head_dim=hs))
                if not isinstance(tc, EngineDrivenTransferContext):
                    raise RuntimeError(f"not engine-driven: {type(tc).__name__}")
                self._transfer_ctx = ContiguousTransferWrapper(tc.engine_driven_context, self._chunk_size)

        self.torch = torch
        self.ctx = Ctx(url=f"tcp://127.0.0.1:{spec['port']}", http_url=f"http://127.0.0.1:{spec['http']}",
                       model_name="datapath")
        self.ctx.register_caches()
        self.mode = type(self.ctx.transfer_ctx._context).__name__
        if self.ctx.chunk_size != LMCACHE_CHUNK or LMCACHE_CHUNK * 2 * nh * hs * 2 != spec["block_bytes"]:
            raise RuntimeError(f"chunk of {self.ctx.chunk_size} tokens is not one block")
        self.chunk = self.ctx.chunk_size
        self.out = {}

    def _kv(self, src, lo, hi):
        # The batch's bytes as a [2, 1, tokens, 1024] tensor: chunk j's bytes are not one run
        # of the source but every byte round-trips, which is what is checked.
        return self.torch.from_numpy(src[lo:hi].reshape(-1)).view(self.torch.float16).view(2, 1, (hi - lo) * self.chunk, 1024)

    def put(self, src, lo, hi, keys):
        if not self.ctx.store(self._kv(src, lo, hi), keys):
            raise RuntimeError("LMCache store returned False")

    def get(self, lo, hi, keys):
        t = self.ctx.retrieve(keys)
        if t is None or t.shape[2] != (hi - lo) * self.chunk:
            raise RuntimeError(f"LMCache retrieve returned {None if t is None else tuple(t.shape)}")
        self.out[lo] = t

    def clear(self):
        self.out = {}

    def check(self, src):
        for lo, t in self.out.items():
            hi = lo + t.shape[2] // self.chunk
            if not self.torch.equal(t.contiguous().view(self.torch.uint8).reshape(-1),
                                    self._kv(src, lo, hi).view(self.torch.uint8).reshape(-1)):
                return lo
        return None


class Redis:
    def __init__(self, spec):
        import redis
        from redis.utils import HIREDIS_AVAILABLE
        self.hiredis = HIREDIS_AVAILABLE
        self.r = redis.Redis(unix_socket_path=spec["socket"])
        self.values = [bytes(b) for b in spec["src"]]
        self.out = [None] * len(self.values)

    def put(self, src, lo, hi, keys):
        p = self.r.pipeline(transaction=False)
        for k, i in zip(keys, range(lo, hi)):
            p.set(k, self.values[i])
        if not all(p.execute()):
            raise RuntimeError("redis SET failed")

    def get(self, lo, hi, keys):
        p = self.r.pipeline(transaction=False)
        for k in keys:
            p.get(k)
        self.out[lo:hi] = p.execute()

    def clear(self):
        self.out = [None] * len(self.values)

    def result(self, i):
        return np.frombuffer(self.out[i], dtype=np.uint8) if self.out[i] is not None else None


CLIENTS = {"memcpy": Memcpy, "kvtier": Kvtier, "kvtier-copy": Kvtier, "kvtier-nocheck": Kvtier, "mooncake": Mooncake, "lmcache": LMCache,
           "redis": Redis}


def keys_for(spec, lo, hi, tag):
    """The keys of blocks lo..hi; for LMCache the batch's token ids (its keys are hashes of
    the token prefix, LMCACHE_CHUNK tokens a block): random, so distinct."""
    pre = f"dp{spec['rep']}c{spec['clients']}w{spec['worker']}{tag}"
    if spec["system"] == "lmcache":
        rng = np.random.default_rng([spec["seed"], len(tag), lo])
        return rng.integers(0, 1 << 30, (hi - lo) * LMCACHE_CHUNK).tolist()
    if spec["system"].startswith("kvtier"):
        import hashlib
        return [hashlib.sha256(f"{pre}b{i}".encode()).digest()[:16] for i in range(lo, hi)]
    return [f"{pre}b{i}" for i in range(lo, hi)]


def run_worker(spec_json: str) -> int:
    """One client process: set up (and, unless --no-warm, put and get every block once under
    other keys, untimed: first touches of mappings and pools out of the measurement), READY;
    on 'put' put, report; on 'get' get, report; then check every byte and report."""
    spec = json.loads(spec_json)
    n, bs, batch = spec["blocks"], spec["block_bytes"], spec["batch"]
    rng = np.random.default_rng(spec["seed"])
    spec["src"] = rng.integers(0, 256, n * bs, dtype=np.uint8).reshape(n, bs)
    c = CLIENTS[spec["system"]](spec)
    src = spec["src"]
    ranges = [(lo, min(n, lo + batch)) for lo in range(0, n, batch)]
    keys = {lo: keys_for(spec, lo, hi, "") for lo, hi in ranges}
    out = {"worker": spec["worker"], "mode": getattr(c, "mode", None)}
    if spec["warm"]:
        for lo, hi in ranges:
            c.put(src, lo, hi, keys_for(spec, lo, hi, "warm"))
        for lo, hi in ranges:
            c.get(lo, hi, keys_for(spec, lo, hi, "warm"))
    c.clear()  # the warm gets left the same bytes in the destination: the check must not see them
    print("READY", flush=True)
    for phase in ("put", "get"):
        if sys.stdin.readline().strip() != phase:
            return 2
        t0 = time.monotonic()
        for lo, hi in ranges:
            if phase == "put":
                c.put(src, lo, hi, keys[lo])
            else:
                c.get(lo, hi, keys[lo])
        out[phase] = [t0, time.monotonic()]
        print("DONE", flush=True)
    if hasattr(c, "check"):
        bad = c.check(src)
    else:
        bad = next((i for i in range(n) if c.result(i) is None or not np.array_equal(c.result(i), src[i])), None)
    out["verified"] = bad is None
    out["first_bad_block"] = bad
    print("RESULT " + json.dumps(out), flush=True)
    return 0


# ------------------------------------------------------------------ servers
@contextlib.contextmanager
def server(system: str, tmp: str, a: argparse.Namespace, log_path: str):
    """Starts the system's server; yields (client env additions, spec additions, pid)."""
    if system == "memcpy":
        yield {}, {}, None
    elif system.startswith("kvtier"):
        with bench.cache_system("kvtier", tmp, a, log_path) as (env, ktc, pid):
            yield env, {"socket": ktc["kv_connector_extra_config"]["socket_path"]}, pid
    elif system == "lmcache":
        a.lmcache_http_port = bench.free_ports(1)[0]
        a.lmcache_args = ["--shm-name", f"kvtier_datapath_{os.getpid()}"]
        with bench.cache_system("lmcache", tmp, a, log_path) as (env, ktc, pid):
            wait_http(a.lmcache_http_port)
            yield env, {"port": ktc["kv_connector_extra_config"]["lmcache.mp.port"], "http": a.lmcache_http_port}, pid
    elif system == "mooncake":
        # bench.py's mooncake_master; its config names the master and the metadata server.
        with bench.cache_system("mooncake", tmp, a, log_path) as (env, _, pid):
            with open(env["MOONCAKE_CONFIG_PATH"]) as f:
                cfg = json.load(f)
            port = bench.free_ports(1)[0]
            binp = os.path.join(bench.MOONCAKE_PEERS, "mooncake", "mooncake_client")
            with open(log_path + ".client", "w") as log, spawn(
                    [binp, "--host=127.0.0.1", f"--port={port}", f"--global_segment_size={a.cache_gib} GB",
                     f"--master_server_address={cfg['master_server_address']}",
                     f"--metadata_server={cfg['metadata_server']}", "--protocol=tcp", f"--threads={a.mooncake_threads}"],
                    log, env) as proc:
                bench.wait_port(port, proc, "mooncake_client")
                yield {"PYTHONPATH": env["PYTHONPATH"]}, {"real_client": f"127.0.0.1:{port}"}, proc.pid
    elif system.startswith("redis"):
        sock = os.path.join(tmp, "redis.sock")
        with open(log_path, "w") as log, spawn(
                ["redis-server", "--port", "0", "--unixsocket", sock, "--save", "", "--appendonly", "no",
                 "--dir", tmp], log, {}) as proc:
            for _ in range(200):
                if subprocess.run(["redis-cli", "-s", sock, "PING"], capture_output=True, text=True).stdout.strip() == "PONG":
                    break
                time.sleep(0.05)
            else:
                raise RuntimeError("redis-server did not answer PING")
            yield {"PYTHONPATH": a.redis_peers}, {"socket": sock}, proc.pid
    else:
        raise SystemExit(f"unknown system {system}")


@contextlib.contextmanager
def spawn(argv: list, log, env_add: dict):
    proc = subprocess.Popen(argv, stdout=log, stderr=log, env={**os.environ, **env_add}, start_new_session=True)
    try:
        yield proc
    finally:
        bench.stop_process_group(proc)


def wait_http(port: int, timeout: float = 60) -> None:
    import urllib.request
    t0 = time.time()
    while time.time() - t0 < timeout:
        with contextlib.suppress(OSError):
            urllib.request.urlopen(f"http://127.0.0.1:{port}/config", timeout=2).read()
            return
        time.sleep(0.2)
    raise RuntimeError(f"no HTTP on port {port} in {timeout} s")


# ------------------------------------------------------------------ orchestration
def run_clients(system: str, nclients: int, rep: int, env_add: dict, extra: dict, a, log_path: str) -> dict:
    env = dict(os.environ)
    if env_add.get("PYTHONPATH"):
        env["PYTHONPATH"] = env_add["PYTHONPATH"]
    else:
        env.pop("PYTHONPATH", None)
    env.update({k: v for k, v in env_add.items() if k != "PYTHONPATH"})
    env["LMCACHE_TRACK_USAGE"] = "false"
    # torch's intra-op threads (LMCache's client): with the default 2 on this loaded 2-core
    # machine its store/retrieve ran 5-10 times slower than with 1.
    env["OMP_NUM_THREADS"] = "1"
    procs = []
    with open(log_path, "a") as log:
        for w in range(nclients):
            spec = {"system": system, "blocks": a.blocks, "block_bytes": a.block_mib * MIB, "batch": a.batch,
                    "rep": rep, "clients": nclients, "worker": w, "seed": 1000 * rep + 10 * nclients + w,
                    "warm": not a.no_warm, **extra}
            procs.append(subprocess.Popen([sys.executable, os.path.abspath(__file__), "--worker", json.dumps(spec)],
                                          stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log, text=True,
                                          env=env))
        try:
            for phase in ("ready", "put", "get"):
                for p in procs:
                    line = p.stdout.readline()
                    while line and not line.startswith(("READY", "DONE")):
                        line = p.stdout.readline()
                    if not line:
                        p.wait()
                        raise RuntimeError(f"client exited with rc {p.returncode} before {phase} (log {log_path})")
                if phase == "get":
                    break
                nxt = "put" if phase == "ready" else "get"
                for p in procs:
                    p.stdin.write(nxt + "\n")
                    p.stdin.flush()
            outs = []
            for p in procs:
                for line in p.stdout:
                    if line.startswith("RESULT "):
                        outs.append(json.loads(line[7:]))
                p.wait(timeout=60)
        finally:
            for p in procs:
                if p.poll() is None:
                    p.kill()
                    p.wait()
    total = nclients * a.blocks * a.block_mib * MIB
    rec = {"verified": all(o["verified"] for o in outs) and len(outs) == nclients,
           "mode": outs[0].get("mode") if outs else None}
    for ph in ("put", "get"):
        t0, t1 = min(o[ph][0] for o in outs), max(o[ph][1] for o in outs)
        rec[f"{ph}_s"] = round(t1 - t0, 4)
        rec[f"{ph}_gbps"] = round(total / (t1 - t0) / 1e9, 3)
    if not rec["verified"]:
        rec["bad"] = [(o["worker"], o["first_bad_block"]) for o in outs if not o["verified"]]
    return rec


def redis_benchmark(sock: str, nclients: int, a) -> dict:
    """redis-benchmark's SET and GET of 1 MiB values: requests/s times the value size. One
    key (no -r: with random keys most GETs miss and return nothing) and no pipeline (-P 16
    made its SETs 25 times slower here: 37 against 945 per second)."""
    n = nclients * a.blocks
    out = subprocess.run(["redis-benchmark", "-s", sock, "-t", "set,get", "-n", str(n), "-c", str(nclients),
                          "-d", str(a.block_mib * MIB), "--csv"], capture_output=True, text=True, timeout=300)
    rec = {"verified": None, "mode": "one key, no pipeline"}
    for line in out.stdout.splitlines():
        f = [x.strip('"') for x in line.split(",")]
        if f[0] in ("SET", "GET"):
            rps = float(f[1])
            rec[f"{'put' if f[0] == 'SET' else 'get'}_gbps"] = round(rps * a.block_mib * MIB / 1e9, 3)
    if "put_gbps" not in rec:
        raise RuntimeError(f"redis-benchmark: {out.stdout[-500:]} {out.stderr[-500:]}")
    return rec


def run_system(system: str, rep: int, a, out: str) -> list:
    tmp = tempfile.mkdtemp(prefix=f"dp-{system}-")
    log_path = os.path.join(out, f"{system}.r{rep}.log")
    recs = []
    try:
        with server(system, tmp, a, log_path + ".server") as (env_add, extra, pid):
            for nc in a.clients:
                rec = {"system": system, "rep": rep, "clients": nc, "blocks_per_client": a.blocks,
                       "block_mib": a.block_mib, "batch": a.batch, "utc": time.strftime("%H:%M:%S", time.gmtime()),
                       "loadavg": open("/proc/loadavg").read().split()[:3]}
                try:
                    if system == "redis-bench":
                        rec.update(redis_benchmark(extra["socket"], nc, a))
                    else:
                        rec.update(run_clients(system, nc, rep, env_add, extra, a, log_path))
                except Exception as e:  # recorded, the others go on
                    rec["error"] = repr(e)
                recs.append(rec)
    except Exception as e:
        recs.append({"system": system, "rep": rep, "error": repr(e)})
    for r in recs:
        print(json.dumps(r), flush=True)
        with open(os.path.join(out, "results.jsonl"), "a") as f:
            f.write(json.dumps(r) + "\n")
    shutil.rmtree(tmp, ignore_errors=True)
    return recs


def table(recs: list) -> str:
    """Medians over reps per system and client count."""
    lines = ["| system | clients | put GB/s (median) | get GB/s (median) | put GB/s, every rep | get GB/s, every rep | "
             "verified |", "|---|---|---|---|---|---|---|"]
    seen = []
    for r in recs:
        if (r["system"], r.get("clients")) not in seen:
            seen.append((r["system"], r.get("clients")))
    for s, nc in seen:
        rs = [r for r in recs if r["system"] == s and r.get("clients") == nc]
        ok = [r for r in rs if "error" not in r and r.get("verified") is not False]
        if not ok:
            err = next((r.get("error") or f"verification failed {r.get('bad')}" for r in rs), "")
            lines.append(f"| {s} | {nc if nc is not None else '-'} | FAILED: {err[-120:]} | | | | |")
            continue
        j = lambda k: "/".join(f"{r[k]:.2f}" for r in ok)
        ver = "n/a" if ok[0].get("verified") is None else f"{len(ok)} of {len(rs)}"
        lines.append(f"| {s} | {nc} | {statistics.median(r['put_gbps'] for r in ok):.2f} | "
                     f"{statistics.median(r['get_gbps'] for r in ok):.2f} | {j('put_gbps')} | {j('get_gbps')} | {ver} |")
    return "\n".join(lines)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--worker", help=argparse.SUPPRESS)
    p.add_argument("--table", metavar="RESULTS_JSONL", help="only print the table of a results.jsonl")
    p.add_argument("--systems", default=SYSTEMS)
    p.add_argument("--clients", default="1,4")
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--blocks", type=int, default=256, help="blocks per client")
    p.add_argument("--block-mib", type=int, default=1)
    p.add_argument("--batch", type=int, default=16, help="blocks per put/get call (pipeline for Redis)")
    p.add_argument("--cache-gib", type=int, default=3, help="every server's capacity")
    p.add_argument("--no-warm", action="store_true", help="no untimed put+get pass before the timed one")
    p.add_argument("--mooncake-threads", type=int, default=4, help="mooncake_client --threads")
    p.add_argument("--out", default=None)
    p.add_argument("--kvtier-bin", default=os.path.join(bench.REPO, "build", "release", "kvtier"))
    p.add_argument("--redis-peers", default=os.environ.get("KVTIER_E2E_REDIS", "/work/e2e-peers-redis"),
                   help="folder with redis-py (and hiredis), put on PYTHONPATH for the redis clients")
    a = p.parse_args()
    if a.worker:
        return run_worker(a.worker)
    if a.table:
        with open(a.table) as f:
            print(table([json.loads(l) for l in f]))
        return 0
    from e2e_connector import make_pkg
    a.clients = [int(x) for x in a.clients.split(",")]
    out = a.out or tempfile.mkdtemp(prefix="kvtier-datapath-")
    os.makedirs(out, exist_ok=True)
    pkgtmp = tempfile.mkdtemp(prefix="dp-pkg-")
    a.kvtier_pkg = make_pkg(pkgtmp) or ""
    need = a.cache_gib * (1 << 30)
    if need < (1 if a.no_warm else 2) * sum(a.clients) * a.blocks * a.block_mib * MIB:
        raise SystemExit("--cache-gib too small for every run's blocks (warm pass included)")
    print(f"# out {out}; loadavg {open('/proc/loadavg').read().split()[:3]}", flush=True)
    systems = a.systems.split(",")
    recs = []
    for rep in range(a.reps):
        order = systems[rep % len(systems):] + systems[:rep % len(systems)]
        for s in order:
            recs += run_system(s, rep, a, out)
    print(f"# loadavg at the end {open('/proc/loadavg').read().split()[:3]}", flush=True)
    md = table(sorted(recs, key=lambda r: systems.index(r["system"])))
    with open(os.path.join(out, "table.md"), "w") as f:
        f.write(md + "\n")
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
