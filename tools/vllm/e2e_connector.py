#!/usr/bin/env python3
"""End-to-end proof of kvtier.vllm.KvtierConnector on a real vLLM CPU engine (docs/vllm.md).

    PY=/work/venv-vllm/bin/python
    $PY tools/vllm/e2e_connector.py roundtrip                 # tiny Llama GQA, 1000-token prompt
    $PY tools/vllm/e2e_connector.py roundtrip --arch deepseek # DeepSeek-V2 MLA
    $PY tools/vllm/e2e_connector.py roundtrip --arch hybrid   # sliding-window and full layers: two KV cache groups
    $PY tools/vllm/e2e_connector.py roundtrip --tiers disk    # blocks on disk: asynchronous loads
    $PY tools/vllm/e2e_connector.py roundtrip --tiers shared  # two daemons, one shared Redis pool
    $PY tools/vllm/e2e_connector.py ttft                      # 8 layers, hidden 1024: 2k/4k/8k
    $PY tools/vllm/e2e_connector.py groups                    # which KV cache groups the connector takes (no engine)

`kvtier serve` runs in this process (kvtier.serve, DRAM over a small disk tier, no
persistence; with --tiers shared, two daemons, each DRAM over one shared remote pool, a
redis-server this script starts, and engine B talks to the other daemon than engine A, as on
two nodes: docs/cluster.md); every engine runs in its own subprocess (this script with --engine), so
engine A is fully shut down before engine B starts. The connector writes events.jsonl and,
with debug_dump_dir, save-<key>.bin (the pages engine A saved, packed as kvtier stores
them) and load-<key>.bin (the pages engine B holds after loading, read back from its KV
cache tensors). Prints RESULT {json} lines and a final verdict; exits 1 on a failed check.

kvtier must be importable with its vllm subpackage. If it is not, the script lays out
<tmp>/pkg/kvtier from $KVTIER_BUILD_PYTHON (default build/release/python of this checkout,
the built extension) plus this checkout's python/kvtier/vllm.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import socket
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))


def engine_env(pkg_dir: str | None) -> dict:
    env = dict(os.environ)
    env.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    env.setdefault("VLLM_CPU_OMP_THREADS_BIND", "nobind")
    env["PYTHONHASHSEED"] = env.get("PYTHONHASHSEED", "0")  # NONE_HASH = H(seed): fixed
    paths = [HERE] + ([pkg_dir] if pkg_dir else []) + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    env["PYTHONPATH"] = os.pathsep.join(paths)
    return env


def make_pkg(tmp: str) -> str | None:
    try:
        import kvtier.vllm.layout  # noqa: F401
        return None
    except ImportError:
        pass
    # Absolute: the package is made of symlinks, and a relative target would resolve from the
    # link's own folder (a package of dangling links that imports as an empty namespace).
    build = os.path.abspath(os.environ.get("KVTIER_BUILD_PYTHON", os.path.join(REPO, "build", "release", "python")))
    src = os.path.join(build, "kvtier")
    if not os.path.isfile(os.path.join(src, "__init__.py")):
        sys.exit(f"no built kvtier package in {build} (KVTIER_BUILD_PYTHON): build the release preset first")
    dst = os.path.join(tmp, "pkg", "kvtier")
    os.makedirs(dst)
    for name in os.listdir(src):
        if name not in ("vllm", "__pycache__"):
            os.symlink(os.path.join(src, name), os.path.join(dst, name))
    os.symlink(os.path.join(REPO, "python", "kvtier", "vllm"), os.path.join(dst, "vllm"))
    return os.path.join(tmp, "pkg")


def serve_yaml(data_dir: str, tiers: str, redis_endpoint: str = "", dram_gib: int = 2) -> str:
    """dram: DRAM over a disk tier, blocks stay in DRAM (synchronous loads); disk: only a
    disk tier (the connector loads asynchronously); shared: DRAM over a shared remote pool;
    dram_only: the DRAM tier alone (tools/e2e's cache of `dram_gib`)."""
    dram = f"""
  - kind: cpu_dram
    capacity: {dram_gib}GiB
    lock_memory: false""" if tiers in ("dram", "shared", "dram_only") else ""
    below = "" if tiers == "dram_only" else f"""
  - kind: remote_pool
    topology: hash_ring
    endpoints: [{redis_endpoint}]
    capacity: 2GiB
    shared: true""" if tiers == "shared" else """
  - kind: nvme
    name: disk
    files: [disk/slab.0]
    capacity: 2GiB"""
    return f"""
data_dir: {data_dir}
tiers:{dram}{below}
store:
  policy: bayes
  persistence: none
listen:
  unix_socket: kvtier.sock
  tcp: false
  metrics_port: -1
"""


@contextlib.contextmanager
def redis_server(tmp: str):
    """A standalone redis-server on a free loopback port, for --tiers shared: its endpoint."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen(["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                             "--appendonly", "no", "--dir", tmp], stdout=subprocess.DEVNULL)
    try:
        for _ in range(200):
            if subprocess.run(["redis-cli", "-p", str(port), "PING"], capture_output=True, text=True).stdout.strip() == "PONG":
                break
            time.sleep(0.05)
        else:
            raise SystemExit("redis-server did not answer PING")
        yield f"127.0.0.1:{port}"
    finally:
        proc.kill()
        proc.wait()


def prompt(n: int, salt: int, vocab: int) -> list:
    return [(i * 7 + 3 + salt * 131) % (vocab - 10) + 5 for i in range(n)]


# ------------------------------------------------------------------ engine subprocess
def run_engine(a: argparse.Namespace) -> int:
    import smoke_generate as sg
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt

    spec = json.loads(a.engine)
    ns = argparse.Namespace(**spec["model"])
    cfg = sg.deepseek_v2_config(ns) if spec["arch"] == "deepseek" else sg.llama_config(ns)
    if spec["arch"] == "hybrid":
        cfg = sg.with_sliding_layers(cfg, ns.sliding_window)
    cfg_path = os.path.join(spec["model_dir"], "config.json")
    if not os.path.exists(cfg_path):
        with open(cfg_path, "w") as f:
            json.dump(cfg, f, indent=1)
    extra = {"socket_path": spec["socket"], "tenant": "e2e"}
    if spec.get("dump_dir"):
        extra["debug_dump_dir"] = spec["dump_dir"]
    if spec.get("events_path"):
        extra["events_path"] = spec["events_path"]
    if spec.get("scramble"):
        extra["debug_scramble_load"] = True
    if spec.get("fail_loads"):
        extra["debug_fail_loads"] = True
    extra.update(spec.get("extra", {}))
    kwargs = dict(model=spec["model_dir"], load_format="dummy", skip_tokenizer_init=True,
                  enable_prefix_caching=False, prefix_caching_hash_algo="sha256_cbor",
                  max_model_len=spec["max_model_len"], dtype="bfloat16", enforce_eager=True, seed=0,
                  tensor_parallel_size=spec.get("tp", 1))
    if spec.get("max_batched"):
        kwargs["max_num_batched_tokens"] = spec["max_batched"]  # prompts longer than it prefill in chunks
    if spec.get("connector", True):
        kwargs["kv_transfer_config"] = {
            "kv_connector": "KvtierConnector", "kv_connector_module_path": "kvtier.vllm.connector",
            "kv_role": "kv_both", "kv_load_failure_policy": "recompute",
            "kv_connector_extra_config": extra}
    t0 = time.perf_counter()
    llm = LLM(**kwargs)
    print("RESULT " + json.dumps({"event": "engine_init", "name": spec["name"],
                                  "seconds": round(time.perf_counter() - t0, 2)}), flush=True)
    for job in spec["jobs"]:
        sp = SamplingParams(max_tokens=job["max_tokens"], temperature=0.0, detokenize=False, ignore_eos=True,
                            logprobs=job.get("logprobs"))
        ids = prompt(job["len"], job["salt"], spec["model"]["vocab"])
        t0 = time.perf_counter()
        out = llm.generate([TokensPrompt(prompt_token_ids=ids)], sp, use_tqdm=False)[0]
        dt = time.perf_counter() - t0
        rec = {"event": "generate", "name": spec["name"], "tag": job["tag"], "len": job["len"],
               "seconds": round(dt, 4), "out": list(out.outputs[0].token_ids),
               "num_cached_tokens": getattr(out, "num_cached_tokens", None)}
        if job.get("logprobs"):
            steps = out.outputs[0].logprobs or []
            rec["logprobs"] = [float(st[t].logprob) for st, t in zip(steps, out.outputs[0].token_ids)]
            rec["top0"] = {str(t): float(v.logprob) for t, v in (steps[0].items() if steps else [])}
        m = getattr(out, "metrics", None)
        if m is not None and getattr(m, "first_token_latency", None) is not None:
            rec["first_token_latency"] = round(m.first_token_latency, 4)
        print("RESULT " + json.dumps(rec), flush=True)
    return 0


def spawn(spec: dict, env: dict, log_path: str) -> list:
    cmd = [sys.executable, os.path.abspath(__file__), "--engine", json.dumps(spec)]
    t0 = time.perf_counter()
    with open(log_path, "w") as log:
        p = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=log, text=True)
    results = [json.loads(l[7:]) for l in p.stdout.splitlines() if l.startswith("RESULT ")]
    print(f"# engine {spec['name']}: rc {p.returncode}, {time.perf_counter() - t0:.1f} s, log {log_path}", flush=True)
    if p.returncode != 0:
        os.system(f"tail -30 {log_path}")
        raise SystemExit(f"engine {spec['name']} failed (rc {p.returncode})")
    return results


def events(dump_dir: str) -> list:
    path = os.path.join(dump_dir, "events.jsonl")
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [json.loads(l) for l in f]


def model_args(a: argparse.Namespace) -> dict:
    return {"layers": a.layers, "hidden": a.hidden, "heads": a.heads, "kv_heads": a.kv_heads,
            "vocab": a.vocab, "max_model_len": a.max_model_len, "dtype": "bfloat16",
            "kv_lora_rank": 512, "qk_rope_head_dim": 64, "qk_nope_head_dim": 64, "v_head_dim": 64,
            "sliding_window": a.sliding_window}


# ------------------------------------------------------------------ roundtrip
def roundtrip(a, tmp, env, socket_a, socket_b) -> bool:
    """Engine A saves through the daemon at socket_a; engines B (and C) load through socket_b."""
    model_dir = os.path.join(tmp, "model")
    os.makedirs(model_dir)
    base = {"arch": a.arch, "model": model_args(a), "model_dir": model_dir, "socket": socket_a,
            "max_model_len": a.max_model_len, "extra": connector_extra(a), "tp": a.tp,
            "max_batched": a.max_batched}
    dump_a, dump_b = os.path.join(tmp, "dumpA"), os.path.join(tmp, "dumpB")
    # A sends P again once it finished, in the same engine (vLLM's prefix cache is off): the
    # repeat loads P from kvtier, and its step carries the workers' report that P's puts landed.
    A = spawn({**base, "name": "A", "dump_dir": dump_a, "jobs": [
        {"tag": "P", "len": a.prompt_len, "salt": 0, "max_tokens": 8, "logprobs": 5},
        {"tag": "P again", "len": a.prompt_len, "salt": 0, "max_tokens": 8}]}, env, os.path.join(tmp, "A.log"))
    base["socket"] = socket_b
    B = spawn({**base, "name": "B", "dump_dir": dump_b, "jobs": [
        {"tag": "P", "len": a.prompt_len, "salt": 0, "max_tokens": 8, "logprobs": 5},
        {"tag": "Q", "len": a.prompt_len, "salt": 1, "max_tokens": 8, "logprobs": 5}]}, env, os.path.join(tmp, "B.log"))
    # Negative control (--scramble-control): engine C loads the same blocks but puts each
    # block's pages into its neighbour's page. With dummy weights its output barely changes
    # (see the INFO line), so it is informational and off by default.
    C = spawn({**base, "name": "C", "dump_dir": os.path.join(tmp, "dumpC"), "scramble": True, "jobs": [
        {"tag": "P", "len": a.prompt_len, "salt": 0, "max_tokens": 8, "logprobs": 5}]}, env,
        os.path.join(tmp, "C.log")) if a.scramble_control else A
    # Failure control (--failed-load-control): engine D finds P as B did, but every get of its
    # loads fails. vLLM must recompute P and answer as A did, and the connector must say so.
    dump_d = os.path.join(tmp, "dumpD")
    D = spawn({**base, "name": "D", "dump_dir": dump_d, "fail_loads": True, "jobs": [
        {"tag": "P", "len": a.prompt_len, "salt": 0, "max_tokens": 8}]}, env,
        os.path.join(tmp, "D.log")) if a.failed_load_control else []
    for r in A + B + C + D:
        print("RESULT " + json.dumps(r))
    ev_a, ev_b = events(dump_a), events(dump_b)
    reg = [e for e in ev_b if e["event"] == "register"]
    # [num_blocks, heads, block_size, ...]: the CPU platform picks the block size (MLA: 16, or
    # 128 under tensor parallelism; GQA: 128).
    bs = reg[0]["shape"][2] if reg else 128
    lk_b = [e for e in ev_b if e["event"] == "lookup"]
    lk_a = [e for e in ev_a if e["event"] == "lookup"]
    landed_a = [r for e in ev_a if e["event"] == "landed" for r, n in e["reports"].items() for _ in range(n)]
    # The saves' pages were copied after their steps while the scheduler held their blocks
    # (kvtier.vllm.pins): every save job reported by every rank, no block held at the end.
    copied_a = [e for e in ev_a if e["event"] == "copied"]
    save_jobs_a = [e for e in ev_a if e["event"] == "save"]
    reports_a = sum(n for e in copied_a for n in e["reports"].values())
    saves_a = {f[5:-4] for f in os.listdir(dump_a) if f.startswith("save-") and f.endswith(".bin")}
    loads_b = sorted(f[5:-4] for f in os.listdir(dump_b) if f.startswith("load-") and f.endswith(".bin"))
    same = differ = 0
    skipped = []  # per block whose pages the load left out in some layers: the bytes left out
    for k in loads_b:  # <key> or, from tensor-parallel rank r > 0, <key>.r<r>
        saved = os.path.join(dump_a, f"save-{k}.bin")
        if not os.path.exists(saved):  # MLA under TP: rank 0 saved the copy every rank loads
            saved = os.path.join(dump_a, f"save-{k.split('.')[0]}.bin")
        with open(saved, "rb") as fa, open(os.path.join(dump_b, f"load-{k}.bin"), "rb") as fb:
            want, got = bytearray(fa.read()), bytearray(fb.read())
        left_out = os.path.join(dump_b, f"load-{k}.skipped")
        if os.path.exists(left_out):
            # A sliding-window layer's page of a block its window has passed: vLLM gave it the
            # null block, so the load wrote nothing there. Every other byte must be equal.
            with open(left_out) as f:
                ranges = json.load(f)
            for off, n in ranges:
                want[off:off + n] = got[off:off + n] = bytes(n)
            skipped.append(sum(n for _, n in ranges))
        if want == got:
            same += 1
        else:
            differ += 1
    from kvtier.vllm.layout import DEFAULT_TAIL_GRANULARITY, matched_tokens  # importable once main() set the path up

    # Every full block of P, the one holding its last token too (vLLM recomputes that token),
    # then the tail: the tokens of P's last, partial block, rounded down to the granularity.
    full = a.prompt_len // bs
    expect_blocks, expect = matched_tokens(full, a.prompt_len, bs, 0, full)
    tail = a.prompt_len - full * bs
    tail -= tail % DEFAULT_TAIL_GRANULARITY
    if full >= 1 and tail > 0:
        expect_blocks, expect = expect_blocks + 1, full * bs + min(tail, a.prompt_len - 1 - full * bs)
    if a.arch == "hybrid":
        # vLLM keeps a sliding group's blocks from the first token the window still covers at
        # the first computed position (SlidingWindowManager: num_computed - window + 1 skipped).
        expect_skipped = max(0, expect - a.sliding_window + 1) // bs
        block_bytes = reg[0]["block_bytes"] if reg else 0
    out_a = next(r["out"] for r in A if r.get("tag") == "P")
    out_bp = next(r["out"] for r in B if r.get("tag") == "P")

    def lp(rs):
        r = next(r for r in rs if r.get("tag") == "P")
        return r["logprobs"], r["top0"]

    (lp_a, top_a), (lp_b, top_b), (lp_c, top_c) = lp(A), lp(B), lp(C)

    def dist(x, y):  # max |difference| of the chosen tokens' and the first step's top-5 logprobs
        d = max(abs(u - v) for u, v in zip(x[0], y[0]))
        common = set(x[1]) & set(y[1])
        d0 = max((abs(x[1][t] - y[1][t]) for t in common), default=float("inf"))
        return max(d, d0) if len(common) == len(x[1]) else float("inf")

    d_ab, d_ac = dist((lp_a, top_a), (lp_b, top_b)), dist((lp_a, top_a), (lp_c, top_c))
    checks = {
        "A saved the prompt's full blocks and its tail": len(saves_a) >= expect_blocks,
        f"B matched {expect} tokens for P": len(lk_b) >= 1 and lk_b[0]["matched_tokens"] == expect,
        f"B loaded every matched block (on {a.tp} rank(s))": len(loads_b) == a.tp * expect_blocks,
        "B's pages after load == A's saved pages (bytes)": same == a.tp * expect_blocks and differ == 0 and same > 0,
        "outputs A == B": out_a == out_bp,
        f"A's repeat of P matched {expect} tokens": len(lk_a) >= 2 and lk_a[-1]["matched_tokens"] == expect,
        f"every rank ({a.tp}) reported P's puts landed, once": bool(lk_a) and landed_a.count(lk_a[0]["req_id"]) == a.tp,
        "different prompt Q misses (0 matched)": len(lk_b) >= 2 and lk_b[1]["matched_tokens"] == 0,
        "no load errors": all(e.get("failed", 0) == 0 for e in ev_b if e["event"] == "load"),
        "A's saves were copied after their steps, their blocks held until then and all given back":
            bool(save_jobs_a) and all(e.get("after_step") for e in save_jobs_a) and bool(copied_a)
            and reports_a == a.tp * len({int(p) for e in copied_a for p in e["reports"]})
            and copied_a[-1]["held_blocks"] == 0,
    }
    if a.failed_load_control:
        ev_d = events(dump_d)
        lk_d = [e for e in ev_d if e["event"] == "lookup"]
        ld_d = [e for e in ev_d if e["event"] == "load"]
        checks[f"D found P ({expect} tokens), every block of its load failed, and it answered as A"] = (
            bool(lk_d) and lk_d[0]["matched_tokens"] == expect and bool(ld_d)
            and all(e["failed"] == e["blocks"] > 0 for e in ld_d)
            and next(r["out"] for r in D if r.get("tag") == "P") == out_a)
        if a.arch == "hybrid":
            # Several groups: vLLM takes the failure per request and looks P up again.
            checks["D's lookup after the failed load was a miss (vLLM recomputed P)"] = (
                len(lk_d) >= 2 and lk_d[1].get("after_failed_load") is True and lk_d[1]["matched_tokens"] == 0)
    if a.arch == "hybrid":
        checks["the engines ran two KV cache groups (vLLM's hybrid allocator on)"] = bool(reg) and reg[0].get("groups") == 2
        checks[f"B's loads left out the sliding layers (half of each block) of the {expect_skipped} blocks "
               f"the {a.sliding_window}-token window passed, and only those"] = (
            expect_skipped > 0 and len(skipped) == a.tp * expect_skipped and all(2 * n == block_bytes for n in skipped))
    loads_ev = [e for e in ev_b if e["event"] == "load"]
    # Several KV cache groups (--arch hybrid) always load asynchronously (docs/vllm.md, "Hybrid models").
    want_async = a.async_load == "always" or a.arch == "hybrid" or (
        a.async_load == "auto" and a.tiers in ("disk", "shared"))
    checks[f"B's loads were {'asynchronous' if want_async else 'synchronous'} ({a.tiers} tiers, "
           f"async_load {a.async_load})"] = bool(loads_ev) and all(
               e.get("asynchronous") == want_async for e in loads_ev)
    summary = {"event": "roundtrip", "arch": a.arch, "tp": a.tp, "prompt_len": a.prompt_len, "block_size": bs,
               "block_bytes": reg[0]["block_bytes"] if reg else None, "kv_shape": reg[0]["shape"] if reg else None,
               "A_saved_blocks": len(saves_a), "A_lookups": [(e["req_id"], e["matched_tokens"]) for e in lk_a], "A_landed": landed_a,
               "B_lookups": [(e["req_id"], e["matched_tokens"]) for e in lk_b],
               "B_loaded_blocks": len(loads_b), "pages_equal": same, "pages_differ": differ,
               "B_blocks_with_layers_left_out": len(skipped),
               "out_A": out_a, "out_B": out_bp, "logprob_maxdiff_A_B": d_ab, "logprob_maxdiff_A_C_scrambled": d_ac if a.scramble_control else None,
               "logprobs_A": lp_a, "logprobs_B": lp_b, "logprobs_C": lp_c if a.scramble_control else None, "top0_A": top_a, "top0_B": top_b,
               "load_events_B": [e for e in ev_b if e["event"] in ("load", "worker_stats")]}
    print("RESULT " + json.dumps(summary))
    for name, ok in checks.items():
        print(f"CHECK {'PASS' if ok else 'FAIL'}: {name}")
    # Informational: dummy weights (uniform in +-1e-3) give near-zero logits, so the output
    # (about -ln(vocab) for every token) barely depends on the KV: the scrambled control C
    # usually matches too, and token/logprob equality alone proves little. The byte equality
    # of the pages is the proof.
    control = f", A-C(scrambled) {d_ac:.3g}" if a.scramble_control else ""
    print(f"INFO: max logprob diff A-B {d_ab:.3g}{control}; "
          f"first-step logprob {lp_a[0]:.4f} vs -ln(vocab) {-__import__('math').log(a.vocab):.4f}")
    return all(checks.values())


# ------------------------------------------------------------------ ttft
def ttft(a, tmp, env, socket, _=None) -> bool:
    model_dir = os.path.join(tmp, "model")
    os.makedirs(model_dir)
    lens = [int(x) for x in a.lens.split(",")]
    jobs = [{"tag": "warmup", "len": 300, "salt": 99, "max_tokens": 1}]
    for n in lens:
        for rep in range(a.repeat):
            jobs.append({"tag": "miss", "len": n, "salt": 10 * n + rep, "max_tokens": 1})
            jobs.append({"tag": "hit", "len": n, "salt": 10 * n + rep, "max_tokens": 1})
    base = {"arch": a.arch, "model": model_args(a), "model_dir": model_dir, "socket": socket,
            "max_model_len": a.max_model_len, "extra": connector_extra(a)}
    ev_path = os.path.join(tmp, "T-events.jsonl")
    base_res = []

    def run_baseline():
        bjobs = [j for j in jobs if j["tag"] != "hit"]
        return spawn({**base, "name": "N", "connector": False, "jobs": bjobs}, env, os.path.join(tmp, "N.log"))

    if a.baseline and a.baseline_first:  # alternate the order on a shared machine whose load drifts
        base_res = run_baseline()
    res = spawn({**base, "name": "T", "events_path": ev_path, "jobs": jobs}, env, os.path.join(tmp, "T.log"))
    if a.baseline and not a.baseline_first:
        base_res = run_baseline()
    for r in res + base_res:
        print("RESULT " + json.dumps(r))
    print(f"\nTTFT (s, generate with max_tokens=1), {a.layers} layers, hidden {a.hidden}, "
          f"{a.heads} heads / {a.kv_heads} kv heads, bf16, block 128; {a.tiers} tiers, "
          f"async_load {a.async_load}, pipeline_layers {not a.no_pipeline}")
    hdr = "| prompt | no connector | kvtier miss (compute + save) | kvtier hit (load) | speedup hit vs miss |"
    print(hdr + "\n|---|---|---|---|---|")
    ok = True
    for n in lens:
        def pick(rs, name, tag):
            return [r["seconds"] for r in rs if r.get("name") == name and r.get("tag") == tag and r.get("len") == n]
        miss, hit, nocon = pick(res, "T", "miss"), pick(res, "T", "hit"), pick(base_res, "N", "miss")
        hits_cached = [r.get("num_cached_tokens") for r in res if r.get("tag") == "hit" and r.get("len") == n]
        f = lambda xs: ", ".join(f"{x:.2f}" for x in xs) if xs else "-"
        sp = (sum(miss) / len(miss)) / (sum(hit) / len(hit)) if miss and hit else 0
        print(f"| {n} | {f(nocon)} | {f(miss)} | {f(hit)} (cached {hits_cached}) | {sp:.1f}x |")
        ok = ok and sp > 1
    with open(ev_path) as f:
        evs = [json.loads(l) for l in f]
    def save_time(e: dict) -> str:
        copy = "copied after the step in" if e.get("after_step") else "the step's part"
        return f"{e['event']} {e['blocks']} blocks {e['seconds']} ({copy} {e.get('step_seconds', e['seconds'])})"

    print("\nconnector time inside the engine (s): " + ", ".join(save_time(e) for e in evs if e["event"] == "save"))
    print("worker stats: " + json.dumps([e for e in evs if e["event"] == "worker_stats"]))
    print("loads (s): " + ", ".join(
        f"{e['blocks']} blocks: copy {e.get('copy_seconds')}, forward waited {e.get('forward_waited_seconds', '-')}"
        f"{' (async)' if e.get('asynchronous') else ''}" for e in evs if e["event"] == "load"))
    return ok


# ------------------------------------------------------------------ groups
def groups() -> bool:
    """The KV cache groups the connector stores and those it refuses, from vLLM's own specs."""
    import torch
    from kvtier.vllm.connector import _layout_description, _transfer_groups
    from vllm.v1.kv_cache_interface import (FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec, MambaSpec,
                                            SlidingWindowSpec)

    attn = dict(num_kv_heads=2, head_size=64, dtype=torch.bfloat16)
    full = KVCacheGroupSpec(["layers.1", "layers.3"], FullAttentionSpec(block_size=128, **attn))
    window = KVCacheGroupSpec(["layers.0", "layers.2"], SlidingWindowSpec(block_size=128, sliding_window=256, **attn))
    draft = KVCacheGroupSpec(["draft.0"], FullAttentionSpec(block_size=128, **attn), enable_kv_transfer=False)
    mamba = KVCacheGroupSpec(["mixer.0"], MambaSpec(block_size=128, shapes=((4, 8),), dtypes=(torch.bfloat16,)))
    small = KVCacheGroupSpec(["layers.0"], SlidingWindowSpec(block_size=16, sliding_window=256, **attn))

    def config(*gs):
        return KVCacheConfig(num_blocks=8, kv_cache_tensors=[], kv_cache_groups=list(gs))

    def refusal(*gs) -> str:
        try:
            _transfer_groups(config(*gs))
        except NotImplementedError as e:
            return str(e)
        return ""

    # The namespace of a one-group model: the description that stop 44's connector fingerprinted
    # (its dict written out here), so blocks stored before hybrid models were supported stay found.
    one_group = _layout_description(config(full), _transfer_groups(config(full)),
                                    argparse.Namespace(cache_dtype="auto"), "sha256_cbor", 1)
    spec = full.kv_cache_spec
    before = {"connector": 1, "layout": "None", "spec": "FullAttentionSpec", "block_size": 128, "num_kv_heads": 2,
              "head_size": 64, "head_size_v": spec.head_size_v, "dtype": "torch.bfloat16",
              "page_size_bytes": spec.page_size_bytes, "layers": ["layers.1", "layers.3"], "cache_dtype": "auto",
              "hash_algo": "sha256_cbor", "tp": 1}
    checks = {
        "a one-group model's layout is described as before (the same namespace)": one_group == before,
        "one full-attention group is taken": [i for i, _ in _transfer_groups(config(full))] == [0],
        "sliding-window and full groups are taken, in vLLM's order":
            [i for i, _ in _transfer_groups(config(full, window))] == [0, 1],
        "a group vLLM does not transfer is left out": [i for i, _ in _transfer_groups(config(full, draft, window))] == [0, 2],
        "a Mamba group is refused, by name": "group 1 (MambaSpec" in refusal(full, mamba),
        "groups of different block sizes are refused": "different block sizes" in refusal(full, small),
    }
    for name, ok in checks.items():
        print(f"CHECK {'PASS' if ok else 'FAIL'}: {name}")
    return all(checks.values())


def connector_extra(a: argparse.Namespace) -> dict:
    return {"async_load": a.async_load, "pipeline_layers": not a.no_pipeline}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("mode", nargs="?", choices=["roundtrip", "ttft", "groups"], default="roundtrip")
    p.add_argument("--engine", help=argparse.SUPPRESS)
    p.add_argument("--arch", choices=["llama", "deepseek", "hybrid"], default="llama")
    p.add_argument("--sliding-window", type=int, default=256, help="--arch hybrid: the sliding layers' window")
    p.add_argument("--layers", type=int)
    p.add_argument("--hidden", type=int)
    p.add_argument("--heads", type=int)
    p.add_argument("--kv-heads", type=int)
    p.add_argument("--vocab", type=int)
    p.add_argument("--prompt-len", type=int, default=1000)
    p.add_argument("--max-model-len", type=int)
    p.add_argument("--lens", default="2048,4096,8192")
    p.add_argument("--repeat", type=int, default=1)
    p.add_argument("--baseline", action="store_true", help="ttft: also an engine without the connector")
    p.add_argument("--baseline-first", action="store_true", help="ttft: run that engine before the connector's")
    p.add_argument("--tiers", choices=["dram", "disk", "shared"], default="dram",
                   help="the daemon's tiers: DRAM over disk, disk only (blocks load asynchronously), or two "
                        "daemons over one shared Redis pool (engine B on the other daemon)")
    p.add_argument("--async-load", choices=["auto", "always", "never"], default="auto")
    p.add_argument("--tp", type=int, default=1, help="roundtrip: tensor-parallel size of every engine")
    p.add_argument("--max-batched", type=int, help="roundtrip: vLLM's max_num_batched_tokens (default: vLLM's)")
    p.add_argument("--no-pipeline", action="store_true", help="synchronous loads copy every layer up front")
    p.add_argument("--scramble-control", action="store_true", help="roundtrip: also run the scrambled-load control")
    p.add_argument("--failed-load-control", action="store_true",
                   help="roundtrip: also run an engine whose loads all fail (vLLM must recompute)")
    p.add_argument("--keep", action="store_true", help="keep the temp dir")
    a = p.parse_args()
    if a.engine:
        return run_engine(a)
    small = a.mode == "roundtrip"
    a.layers = a.layers or (2 if small else 8)
    a.hidden = a.hidden or (256 if small else 1024)
    a.heads = a.heads or (4 if small else 16)
    a.kv_heads = a.kv_heads or (2 if small else 8)
    a.vocab = a.vocab or (1024 if small else 32000)
    a.max_model_len = a.max_model_len or (2048 if small else 8300)

    tmp = tempfile.mkdtemp(prefix="kvtier-e2e-")
    pkg = make_pkg(tmp)
    if pkg:
        sys.path.insert(0, pkg)
    import kvtier as kt
    if a.mode == "groups":
        ok = groups()
        subprocess.run(["rm", "-rf", tmp])
        print("ALL CHECKS PASS" if ok else "SOME CHECKS FAILED")
        return 0 if ok else 1
    env = engine_env(pkg)
    print(f"# tmp {tmp}; PYTHONHASHSEED={env['PYTHONHASHSEED']}", flush=True)
    t0 = time.perf_counter()
    with contextlib.ExitStack() as stack:
        endpoint = stack.enter_context(redis_server(tmp)) if a.tiers == "shared" else ""
        daemons = [stack.enter_context(kt.serve(config_text=serve_yaml(os.path.join(tmp, f"srv{i}"), a.tiers, endpoint)))
                   for i in range(2 if a.tiers == "shared" else 1)]
        sockets = [d.socket_path for d in daemons]
        ok = (roundtrip if a.mode == "roundtrip" else ttft)(a, tmp, env, sockets[0], sockets[-1])
        for d in daemons:
            st = d.store_stats()
            print("RESULT " + json.dumps({"event": "store", "blocks": [t.get("blocks") for t in st.get("tiers", [])],
                                          "bytes": [t.get("bytes") for t in st.get("tiers", [])],
                                          "shared_found_blocks": st.get("shared_found_blocks")}))
    print(f"# total {time.perf_counter() - t0:.1f} s; {'ALL CHECKS PASS' if ok else 'SOME CHECKS FAILED'}")
    if not a.keep:
        subprocess.run(["rm", "-rf", tmp])
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
