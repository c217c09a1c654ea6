#!/usr/bin/env python3
"""End to end against the peers: replay multi-turn sessions on a vLLM CPU engine, one
KV-cache system at a time (docs/e2e.md).

    PY=~/.cache/kvtier/venv-vllm-f9334bb415f34b3f/bin/python
    $PY tools/e2e/bench.py --systems none,kvtier,lmcache,mooncake --reps 2 --out /tmp/e2e-run

Systems: none (vLLM alone), kvtier (`kvtier serve`, DRAM tier, KvtierConnector), lmcache
(`lmcache server`, multi-process mode, LMCacheMPConnector, lmcache_driven shared-memory
transfer), mooncake (`mooncake_master` + vLLM's MooncakeStoreConnector over TCP). The cache
process runs in its own process; the engine runs in a subprocess of this script (AsyncLLM,
random weights via load_format="dummy") so each system starts from a fresh engine. Systems
are interleaved across repetitions (rep r starts at system r mod n).

Writes <out>/requests.jsonl (one line per request), <out>/runs.jsonl (one line per system
run) and prints a markdown table.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(REPO, "tools", "vllm"))

LMCACHE_PEERS = os.environ.get("KVTIER_E2E_LMCACHE", "/work/e2e-peers")
MOONCAKE_PEERS = os.environ.get("KVTIER_E2E_MOONCAKE", "/work/e2e-peers-mooncake")


# ------------------------------------------------------------------ engine subprocess
class _Stats:
    """A vLLM stat logger that sums the local and the connector's prefix-cache counters."""
    totals = {"local_queries": 0, "local_hits": 0, "ext_queries": 0, "ext_hits": 0, "preempted": 0}
    # request id -> (seconds queued before its first step, seconds from then to its first
    # token, times it was preempted)
    phases: dict = {}

    def __init__(self, vllm_config, engine_index=0):
        pass

    def record(self, scheduler_stats, iteration_stats, mm_cache_stats=None, engine_idx=0):
        for f in getattr(iteration_stats, "finished_requests", None) or []:
            rid = getattr(f, "request_id", None)
            if rid is not None:
                _Stats.phases[rid] = (round(f.queued_time, 4), round(f.prefill_time, 4),
                                      getattr(f, "num_preemptions", None))
        if scheduler_stats is None:
            return
        t = _Stats.totals
        pc = scheduler_stats.prefix_cache_stats
        if pc is not None:
            t["local_queries"] += pc.queries
            t["local_hits"] += pc.hits
            t["preempted"] += pc.preempted_requests
        cc = getattr(scheduler_stats, "connector_prefix_cache_stats", None)
        if cc is not None:
            t["ext_queries"] += cc.queries
            t["ext_hits"] += cc.hits

    def log_engine_initialized(self):
        pass

    def log(self):
        pass

    def record_sleep_state(self, *a, **k):
        pass


# The engine's records go to a file of their own (spec["results_path"]), one line each: on
# its stdout, which vLLM's engine-core process shares, a long record (the phases) was once
# cut by another process's output written into it, and its run lost.
_results_path = None


def _emit(rec: dict) -> None:
    with open(_results_path, "a") as f:
        f.write(json.dumps(rec) + "\n")


def run_engine(spec_path: str) -> int:
    global _results_path
    with open(spec_path) as f:
        spec = json.load(f)
    _results_path = spec["results_path"]
    import smoke_generate as sg
    from vllm import SamplingParams
    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.inputs import TokensPrompt
    from vllm.sampling_params import RequestOutputKind
    from vllm.v1.engine.async_llm import AsyncLLM
    from vllm.v1.metrics.loggers import StatLoggerBase

    StatLoggerBase.register(_Stats)
    m = spec["model"]
    cfg = sg.llama_config(argparse.Namespace(**m))
    if m.get("sliding_window"):
        # vLLM keeps the two KV cache groups where the connector supports them (SupportsHMA);
        # for the others it turns its hybrid allocator off.
        cfg = sg.with_sliding_layers(cfg, m["sliding_window"])
    with open(os.path.join(spec["model_dir"], "config.json"), "w") as f:
        json.dump(cfg, f, indent=1)
    kwargs = dict(model=spec["model_dir"], load_format="dummy", skip_tokenizer_init=True,
                  enable_prefix_caching=spec["prefix_caching"], prefix_caching_hash_algo="sha256_cbor",
                  max_model_len=m["max_model_len"], dtype=m["dtype"], enforce_eager=True, seed=0,
                  num_gpu_blocks_override=spec["gpu_blocks"], disable_log_stats=False,
                  max_num_batched_tokens=spec["max_batched"])
    if spec.get("kv_transfer_config"):
        kwargs["kv_transfer_config"] = spec["kv_transfer_config"]
    t0 = time.perf_counter()
    engine = AsyncLLM.from_engine_args(AsyncEngineArgs(**kwargs), stat_loggers=[_Stats])
    _emit({"event": "engine_init", "seconds": round(time.perf_counter() - t0, 2)})
    sessions = spec["sessions"]
    max_tokens = spec["max_tokens"]

    async def one(rid: str, ids: list, rec: dict) -> None:
        sp = SamplingParams(max_tokens=max_tokens, temperature=0.0, detokenize=False, ignore_eos=True,
                            output_kind=RequestOutputKind.DELTA)
        t_sub = time.perf_counter()
        first = None
        ntok = 0
        cached = None
        async for out in engine.generate(TokensPrompt(prompt_token_ids=ids), sp, rid):
            n = len(out.outputs[0].token_ids)
            if n and first is None:
                first = time.perf_counter()
            ntok += n
            if out.num_cached_tokens is not None:
                cached = out.num_cached_tokens
        t_end = time.perf_counter()
        rec.update({"submit_s": round(t_sub - t_start, 4), "ttft_s": round(first - t_sub, 4),
                    "latency_s": round(t_end - t_sub, 4), "out_tokens": ntok, "num_cached_tokens": cached})

    async def session(si: int, s: dict) -> None:
        await asyncio.sleep(max(0.0, s["start_s"] - (time.perf_counter() - t_start)))
        for k, turn in enumerate(s["turns"]):
            rid = f"s{si}t{k}"
            rec = {"event": "request", "rid": rid, "session": s["name"], "turn": k, "prompt_tokens": len(turn["prompt"])}
            await one(rid, turn["prompt"], rec)
            _emit(rec)
            await asyncio.sleep(turn["think_s"])

    async def main() -> None:
        nonlocal t_start
        # Warm-up (not counted): one prompt no session shares, to take first-call costs out.
        t_start = time.perf_counter()
        for n in (300, 2048):  # two lengths: the first long prefill is slow once
            w = {}
            await one(f"warmup{n}", [7 + (i * 31 + n) % 1000 for i in range(n)], w)
            _emit({"event": "warmup", "len": n, **w})
        base = dict(_Stats.totals)
        t_start = time.perf_counter()
        await asyncio.gather(*(session(i, s) for i, s in enumerate(sessions)))
        wall = time.perf_counter() - t_start
        tot = {k: _Stats.totals[k] - base[k] for k in base}
        _emit({"event": "done", "wall_s": round(wall, 3), **tot})
        _emit({"event": "phases", "by_request": _Stats.phases})
        if spec["hit_probe_len"]:
            try:
                await hit_probe(spec["hit_probe_len"])
            except Exception as e:  # the replay's results stand without it
                _emit({"event": "hit_probe", "error": repr(e)})

    async def hit_probe(n: int) -> None:
        # One prompt no session or warm-up shares: computed and saved once, then, with vLLM's own
        # prefix cache emptied (the external cache kept), sent again: its TTFT is a load from the
        # external cache, in the same engine for every system (Mooncake's segment lives in it).
        ids = [11 + (i * 37 + 5) % 997 for i in range(n)]
        miss = {}
        await one("probe-miss", ids, miss)
        await asyncio.sleep(spec["hit_probe_settle_s"])  # saves that land in the background
        reset = await engine.reset_prefix_cache()
        hit = {}
        await one("probe-hit", ids, hit)
        _emit({"event": "hit_probe", "len": n, "reset": reset, "miss_ttft_s": miss["ttft_s"],
               "hit_ttft_s": hit["ttft_s"], "hit_cached_tokens": hit["num_cached_tokens"]})

    t_start = 0.0
    try:
        asyncio.run(main())
    finally:
        engine.shutdown()
    return 0


# ------------------------------------------------------------------ cache processes
def free_ports(n: int) -> list:
    """n distinct free loopback ports (all bound at once: one at a time, the kernel can hand
    out the same port twice, and mooncake_master then fails to bind its RPC port)."""
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def wait_port(port: int, proc: subprocess.Popen, what: str, timeout: float = 120) -> None:
    t0 = time.time()
    while time.time() - t0 < timeout:
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited with rc {proc.returncode}")
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.2)
    raise RuntimeError(f"{what} did not listen on port {port} in {timeout} s")


def tree_pids(pid: int) -> list:
    out = [pid]
    try:
        kids = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True).stdout.split()
    except OSError:
        kids = []
    for k in kids:
        out += tree_pids(int(k))
    return out


def vm_hwm_kib(pid: int) -> int:
    """Peak RSS (VmHWM) of pid and its descendants, summed (KiB)."""
    total = 0
    for p in tree_pids(pid):
        try:
            with open(f"/proc/{p}/status") as f:
                for line in f:
                    if line.startswith("VmHWM:"):
                        total += int(line.split()[1])
        except OSError:
            pass
    return total


@contextlib.contextmanager
def cache_system(system: str, tmp: str, a: argparse.Namespace, log_path: str):
    """Starts the system's cache process; yields (engine env additions, kv_transfer_config, pid)."""
    log = open(log_path, "w")
    proc = None
    try:
        if system == "none":
            yield {}, None, None
            return
        if system == "kvtier":
            data = os.path.join(tmp, "kvtier-data")
            os.makedirs(data)
            cfg = os.path.join(tmp, "kvtier.yaml")
            with open(cfg, "w") as f:
                from e2e_connector import serve_yaml
                f.write(serve_yaml(data, "dram_only", dram_gib=a.cache_gib))
            proc = subprocess.Popen([a.kvtier_bin, "serve", "--config", cfg], stdout=log, stderr=log,
                                    start_new_session=True)
            sock = os.path.join(data, "kvtier.sock")
            for _ in range(600):
                if os.path.exists(sock) or proc.poll() is not None:
                    break
                time.sleep(0.1)
            if not os.path.exists(sock):
                raise RuntimeError(f"kvtier serve did not create {sock} (rc {proc.poll()})")
            env = {"PYTHONPATH": a.kvtier_pkg}
            ktc = {"kv_connector": "KvtierConnector", "kv_connector_module_path": "kvtier.vllm.connector",
                   "kv_role": "kv_both", "kv_load_failure_policy": "recompute",
                   "kv_connector_extra_config": {"socket_path": sock, "tenant": "e2e",
                                                 # the connector's per-request load and save timings
                                                 "events_path": log_path.replace(".cache.log", ".events.jsonl"),
                                                 **json.loads(a.kvtier_extra)}}
            yield env, ktc, proc.pid
            return
        if system == "lmcache":
            port, http = 5555, getattr(a, "lmcache_http_port", None) or free_ports(1)[0]
            env = {"PYTHONPATH": LMCACHE_PEERS, "LMCACHE_TRACK_USAGE": "false"}
            proc = subprocess.Popen(
                [sys.executable, "-m", "lmcache.cli.main", "server", "--host", "127.0.0.1", "--port", str(port),
                 "--l1-size-gb", str(a.cache_gib), "--eviction-policy", "LRU", "--max-workers", "1",
                 "--supported-transfer-mode", "auto", "--http-port", str(http),
                 # its OpenTelemetry metrics need opentelemetry-exporter-prometheus, not installed
                 "--disable-metrics"] + getattr(a, "lmcache_args", []),
                stdout=log, stderr=log, env={**os.environ, **env}, start_new_session=True)
            wait_port(port, proc, "lmcache server")
            ktc = {"kv_connector": "LMCacheMPConnector", "kv_role": "kv_both",
                   "kv_connector_extra_config": {"lmcache.mp.host": "tcp://127.0.0.1", "lmcache.mp.port": port,
                                                 "lmcache.mp.mp_transfer_mode": "lmcache_driven"}}
            yield env, ktc, proc.pid
            return
        if system == "mooncake":
            port, http, metrics = free_ports(3)
            binp = os.path.join(MOONCAKE_PEERS, "mooncake", "mooncake_master")
            env = {"PYTHONPATH": MOONCAKE_PEERS}
            proc = subprocess.Popen(
                [binp, "--rpc_address=127.0.0.1", f"--rpc_port={port}", "--enable_http_metadata_server=true",
                 "--http_metadata_server_host=127.0.0.1", f"--http_metadata_server_port={http}",
                 "--metrics_host=127.0.0.1", f"--metrics_port={metrics}"],
                stdout=log, stderr=log, env={**os.environ, **env}, start_new_session=True)
            wait_port(port, proc, "mooncake_master")
            cfg = os.path.join(tmp, "mooncake.json")
            with open(cfg, "w") as f:
                json.dump({"local_hostname": "127.0.0.1", "metadata_server": f"http://127.0.0.1:{http}/metadata",
                           "master_server_address": f"127.0.0.1:{port}", "protocol": "tcp", "device_name": "",
                           "global_segment_size": f"{a.cache_gib}GB", "local_buffer_size": "512MB"}, f)
            env.update({"MOONCAKE_CONFIG_PATH": cfg, "VLLM_HOST_IP": "127.0.0.1"})
            ktc = {"kv_connector": "MooncakeStoreConnector", "kv_role": "kv_both"}
            yield env, ktc, proc.pid
            return
        raise SystemExit(f"unknown system {system}")
    finally:
        if proc is not None:
            stop_process_group(proc)
        log.close()


def stop_process_group(proc: subprocess.Popen) -> None:
    """SIGTERM to the process group a cache process leads, SIGKILL after 20 s."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


# ------------------------------------------------------------------ orchestration
def _read(p: subprocess.Popen, log, pid, hwm: list) -> None:
    for line in p.stdout:
        log.write(line)
        log.flush()
        if pid:
            hwm[0] = max(hwm[0], vm_hwm_kib(pid))


def run_system(system: str, rep: int, sessions: list, a: argparse.Namespace, out_dir: str) -> dict:
    tmp = tempfile.mkdtemp(prefix=f"e2e-{system}-")
    model_dir = os.path.join(tmp, "model")
    os.makedirs(model_dir)
    tag = f"{system}.r{rep}"
    run = {"event": "run", "system": system, "rep": rep, "start_utc": time.strftime("%H:%M:%S", time.gmtime()),
           "loadavg_start": open("/proc/loadavg").read().split()[:3]}
    t0 = time.time()
    try:
        with cache_system(system, tmp, a, os.path.join(out_dir, f"{tag}.cache.log")) as (env_add, ktc, pid):
            spec = {"model": model_args(a), "model_dir": model_dir, "prefix_caching": not a.no_prefix_caching,
                    "gpu_blocks": a.gpu_blocks, "max_batched": a.max_batched, "max_tokens": a.max_tokens,
                    "kv_transfer_config": ktc, "sessions": sessions,
                    "hit_probe_len": a.hit_probe_len, "hit_probe_settle_s": a.hit_probe_settle,
                    "results_path": os.path.join(tmp, "results.jsonl")}
            spec_path = os.path.join(tmp, "spec.json")
            with open(spec_path, "w") as f:
                json.dump(spec, f)
            env = dict(os.environ)
            env.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
            env.setdefault("VLLM_CPU_OMP_THREADS_BIND", "nobind")
            env["PYTHONHASHSEED"] = "0"
            for k, v in env_add.items():
                env[k] = v + (os.pathsep + env[k] if k == "PYTHONPATH" and env.get(k) else "")
            env["PYTHONPATH"] = os.pathsep.join([HERE, os.path.join(REPO, "tools", "vllm")] +
                                                ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
            hwm = [0]
            with open(os.path.join(out_dir, f"{tag}.engine.log"), "w") as log:
                p = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--engine", spec_path],
                                     env=env, stdout=subprocess.PIPE, stderr=log, text=True)
                try:
                    _read(p, log, pid, hwm)
                except BaseException:  # interrupted: the engine and its children go too
                    for q in reversed(tree_pids(p.pid)):
                        with contextlib.suppress(ProcessLookupError):
                            os.kill(q, signal.SIGKILL)
                    raise
                try:
                    p.wait(timeout=a.timeout)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
            if pid:
                hwm[0] = max(hwm[0], vm_hwm_kib(pid))
            res = []
            if os.path.exists(spec["results_path"]):  # an engine that failed early wrote none
                with open(spec["results_path"]) as f:
                    res = [json.loads(l) for l in f]
            run["rc"] = p.returncode
            run["cache_peak_rss_mib"] = round(hwm[0] / 1024, 1) if pid else None
    except Exception as e:  # a peer that fails to start: recorded, the others go on
        run["rc"] = -1
        run["error"] = repr(e)
        res = []
    run["seconds"] = round(time.time() - t0, 1)
    run["loadavg_end"] = open("/proc/loadavg").read().split()[:3]
    reqs = [r for r in res if r["event"] == "request"]
    # vLLM's own split of each TTFT: queued (waiting to be scheduled) and prefill (from its
    # first step to its first token, chunks and preemptions included); absent where vLLM's
    # stats do not name the request.
    phases = next((r["by_request"] for r in res if r["event"] == "phases"), {})
    for r in reqs:
        if r.get("rid") in phases:
            r["queued_s"], r["prefill_s"], r["preemptions"] = phases[r["rid"]]
    run["warmup_ttft_s"] = [r.get("ttft_s") for r in res if r["event"] == "warmup"]
    done = next((r for r in res if r["event"] == "done"), None)
    init = next((r for r in res if r["event"] == "engine_init"), None)
    probe = next((r for r in res if r["event"] == "hit_probe"), None)
    if probe:
        run["hit_probe"] = probe if "error" in probe else {
            k: probe[k] for k in ("len", "reset", "miss_ttft_s", "hit_ttft_s", "hit_cached_tokens")}
    run["engine_init_s"] = init["seconds"] if init else None
    run["requests"] = len(reqs)
    if done:
        run.update({k: done[k] for k in ("wall_s", "local_queries", "local_hits", "ext_queries", "ext_hits", "preempted")})
    if run["rc"] != 0 and "error" not in run:
        log_path = os.path.join(out_dir, f"{tag}.engine.log")
        with open(log_path) as f:
            tail = f.read()[-3000:]
        run["error"] = tail
    with open(os.path.join(out_dir, "requests.jsonl"), "a") as f:
        for r in reqs:
            f.write(json.dumps({"system": system, "rep": rep, **r}) + "\n")
    with open(os.path.join(out_dir, "runs.jsonl"), "a") as f:
        f.write(json.dumps(run) + "\n")
    shutil.rmtree(tmp, ignore_errors=True)
    return {**run, "reqs": reqs}


def model_args(a: argparse.Namespace) -> dict:
    return {"layers": a.layers, "hidden": a.hidden, "heads": a.heads, "kv_heads": a.kv_heads, "vocab": a.vocab,
            "max_model_len": a.max_model_len, "dtype": a.dtype, "sliding_window": a.sliding_window}


def pct(xs: list, q: float) -> float:
    xs = sorted(xs)
    if not xs:
        return float("nan")
    i = min(len(xs) - 1, max(0, int(round(q / 100 * (len(xs) - 1)))))
    return xs[i]


def table(runs: list, total_prompt: int) -> str:
    lines = ["| system | rep | requests | TTFT P50 (s) | TTFT P99 (s) | mean TTFT (s) | req/s | "
             "prompt tokens from external cache | from vLLM's prefix cache | cache process peak RSS (MiB) |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in runs:
        t = [q["ttft_s"] for q in r["reqs"]]
        if not t:
            lines.append(f"| {r['system']} | {r['rep']} | FAILED ({(r.get('error') or '')[-80:].strip()!r}) | | | | | | | |")
            continue
        ext = r.get("ext_hits")
        lines.append(f"| {r['system']} | {r['rep']} | {len(t)} | {pct(t, 50):.2f} | {pct(t, 99):.2f} | "
                     f"{statistics.mean(t):.2f} | {len(t) / r['wall_s']:.3f} | "
                     f"{ext if ext is not None else '-'} of {total_prompt} | {r.get('local_hits', '-')} | "
                     f"{r['cache_peak_rss_mib'] if r.get('cache_peak_rss_mib') is not None else '-'} |")
    return "\n".join(lines)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--engine", help=argparse.SUPPRESS)
    p.add_argument("--systems", default="none,kvtier,lmcache,mooncake")
    p.add_argument("--reps", type=int, default=1)
    p.add_argument("--first-rep", type=int, default=0, help="number of the first rep (continues the rotation)")
    p.add_argument("--out", default=None)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--mix", default="sharegpt:3,taubench:2,sweagent:2", help="sessions per trace")
    p.add_argument("--turns", type=int, default=3)
    p.add_argument("--max-prompt", type=int, default=2000)
    p.add_argument("--min-prompt", type=int, default=600)
    p.add_argument("--arrival-mean", type=float, default=3.0, help="mean seconds between session starts")
    p.add_argument("--think-mean", type=float, default=3.0, help="mean think time after an answer")
    p.add_argument("--max-tokens", type=int, default=8)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--hidden", type=int, default=1024)
    p.add_argument("--heads", type=int, default=16)
    p.add_argument("--kv-heads", type=int, default=8)
    p.add_argument("--vocab", type=int, default=32000)
    p.add_argument("--dtype", default="float32",
                   help="float32: bf16 matmuls run at 0.24 GFLOPS on this CPU (no AVX512-BF16), fp32 at 45")
    p.add_argument("--max-model-len", type=int, default=4096)
    p.add_argument("--gpu-blocks", type=int, default=48, help="vLLM's own KV cache, blocks of 128 tokens")
    p.add_argument("--max-batched", type=int, default=4096)
    p.add_argument("--sliding-window", type=int, default=0,
                   help="a hybrid model: even layers attend to this many tokens (0: every layer full attention)")
    p.add_argument("--no-prefix-caching", action="store_true")
    p.add_argument("--cache-gib", type=int, default=2, help="every external cache's capacity")
    p.add_argument("--timeout", type=int, default=1200)
    p.add_argument("--hit-probe-len", type=int, default=2048,
                   help="after the replay: a prompt of this many tokens, computed, then sent again with vLLM's "
                        "own prefix cache reset (0: no probe)")
    p.add_argument("--hit-probe-settle", type=float, default=2.0,
                   help="seconds between the probe's miss and its hit, for saves that land in the background")
    p.add_argument("--kvtier-bin", default=os.path.join(REPO, "build", "release", "kvtier"))
    p.add_argument("--kvtier-extra", default="{}",
                   help="JSON merged into KvtierConnector's kv_connector_extra_config (docs/vllm.md)")
    a = p.parse_args()
    if a.engine:
        return run_engine(a.engine)

    import workload
    from e2e_connector import make_pkg

    mix = {k: int(v) for k, v in (x.split(":") for x in a.mix.split(","))}
    sessions = workload.build(mix, a.turns, a.max_prompt, a.min_prompt, a.vocab, a.seed, a.arrival_mean, a.think_mean)
    total_prompt = sum(len(t["prompt"]) for s in sessions for t in s["turns"])
    out = a.out or tempfile.mkdtemp(prefix="kvtier-e2e-bench-")
    os.makedirs(out, exist_ok=True)
    pkgtmp = tempfile.mkdtemp(prefix="e2e-pkg-")
    a.kvtier_pkg = make_pkg(pkgtmp) or ""
    wl = {"event": "workload", "sessions": [{k: v for k, v in s.items() if k != "turns"} |
                                            {"prompt_lens": [len(t["prompt"]) for t in s["turns"]],
                                             "think_s": [t["think_s"] for t in s["turns"]]} for s in sessions],
          "requests": sum(len(s["turns"]) for s in sessions), "prompt_tokens": total_prompt, "args": vars(a)}
    with open(os.path.join(out, "workload.json"), "w") as f:
        json.dump(wl, f, indent=1)
    print(f"# out {out}; {wl['requests']} requests, {total_prompt} prompt tokens, {len(sessions)} sessions", flush=True)
    systems = a.systems.split(",")
    runs = []
    for rep in range(a.first_rep, a.first_rep + a.reps):
        order = systems[rep % len(systems):] + systems[:rep % len(systems)]
        for s in order:
            r = run_system(s, rep, sessions, a, out)
            print(f"# {s} rep {rep}: rc {r['rc']}, {r['seconds']} s, {r['requests']} requests"
                  + (f", error: {r['error'][-300:]}" if r.get("error") else ""), flush=True)
            runs.append(r)
    runs.sort(key=lambda r: (systems.index(r["system"]), r["rep"]))
    md = table(runs, total_prompt)
    with open(os.path.join(out, "table.md"), "w") as f:
        f.write(md + "\n")
    print(md)
    shutil.rmtree(pkgtmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
