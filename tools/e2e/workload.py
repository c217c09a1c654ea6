"""Multi-turn sessions from real traces, turned into token-id prompts (docs/e2e.md).

Each trace gives conversations as role-tagged messages with their text. A turn is one LLM
call: the prompt is every message before an assistant message, the output is that
assistant message. Text becomes token counts at 4 characters per token, and every message
becomes that many random token ids, seeded by the SHA-256 of the message's text (so equal
text, such as tau-bench's shared system policy, gives equal tokens across sessions). Turn
k+1's prompt is therefore turn k's prompt + turn k's (trace) answer + the next messages:
the prefix is reused. A session longer than --max-prompt tokens at its last kept turn is
scaled down, every message by the same factor.

The answer the engine generates (max_tokens, random weights) is discarded: the next prompt
holds the trace's answer, so every system replays the same token ids.
"""

from __future__ import annotations

import glob
import hashlib
import json
import math
import os
import random

TRACES = "/work/shared/data/traces"
CHARS_PER_TOKEN = 4


def _sharegpt(root: str) -> list:
    out = []
    with open(os.path.join(root, "sharegpt-1000", "sharegpt_sampled_1000.jsonl")) as f:
        for line in f:
            d = json.loads(line)
            msgs = [("assistant" if m["from"] == "gpt" else "user", m["value"]) for m in d["conversations"]
                    if m.get("from") in ("human", "gpt")]
            while msgs and msgs[0][0] == "assistant":
                msgs.pop(0)
            out.append(("sharegpt", d["id"], msgs))
    return out


def _taubench(root: str) -> list:
    with open(os.path.join(root, "taubench-airline-gpt4o", "gpt-4o-airline.tasks00-24.json")) as f:
        data = json.load(f)
    out = []
    for d in data:
        msgs = []
        for m in d["traj"]:
            text = m.get("content") or ""
            if m.get("tool_calls"):
                text += json.dumps(m["tool_calls"], sort_keys=True)
            msgs.append(("assistant" if m["role"] == "assistant" else m["role"], text))
        out.append(("taubench", f"task{d['task_id']}-trial{d['trial']}", msgs))
    return out


def _sweagent(root: str) -> list:
    out = []
    for path in sorted(glob.glob(os.path.join(root, "sweagent-demos", "*.traj"))):
        with open(path) as f:
            d = json.load(f)
        msgs = [(m.get("role", "user"), m["content"] if isinstance(m.get("content"), str) else json.dumps(m.get("content")))
                for m in d.get("history", []) if m.get("agent", "primary") == "primary"]
        out.append(("sweagent", os.path.basename(path)[:-5], msgs))
    return out


def _tokens(text: str, n: int, vocab: int) -> list:
    r = random.Random(hashlib.sha256(text.encode()).digest())
    return [r.randrange(10, vocab - 10) for _ in range(n)]


def load_sessions(root: str = TRACES) -> dict:
    return {"sharegpt": _sharegpt(root), "taubench": _taubench(root), "sweagent": _sweagent(root)}


def build(mix: dict, turns: int, max_prompt: int, min_prompt: int, vocab: int, seed: int,
          arrival_mean_s: float, think_mean_s: float, root: str = TRACES) -> list:
    """Sessions: [{name, source, start_s, turns: [{prompt: [ids], think_s}]}], seeded."""
    rng = random.Random(seed)
    pools = load_sessions(root)
    sessions = []
    for source, count in mix.items():
        cands = []
        for src, sid, msgs in pools[source]:
            idx = [i for i, (role, _) in enumerate(msgs) if role == "assistant" and i > 0]
            if len(idx) < turns:
                continue
            cands.append((sid, msgs, idx[:turns]))
        for sid, msgs, idx in rng.sample(cands, count):
            toks = [max(1, math.ceil(len(t) / CHARS_PER_TOKEN)) for _, t in msgs]
            last = sum(toks[:idx[-1]])
            if last < min_prompt:  # too short to matter on blocks of 128: skip, seeded
                continue
            scale = min(1.0, max_prompt / last)
            ids = [_tokens(f"{source}\0{text}", max(1, int(n * scale)), vocab) for (_, text), n in zip(msgs, toks)]
            trn = []
            for i in idx:
                prompt = [t for m in ids[:i] for t in m]
                trn.append({"prompt": prompt, "think_s": round(rng.expovariate(1 / think_mean_s), 3)})
            sessions.append({"name": f"{source}/{sid}", "source": source, "scale": round(scale, 3), "turns": trn})
    rng.shuffle(sessions)
    t = 0.0
    for s in sessions:
        s["start_s"] = round(t, 3)
        t += rng.expovariate(1 / arrival_mean_s)
    return sessions


if __name__ == "__main__":
    import argparse

    p = argparse.ArgumentParser(description="print the workload's shape")
    p.add_argument("--seed", type=int, default=1)
    a = p.parse_args()
    ss = build({"sharegpt": 3, "taubench": 2, "sweagent": 2}, 3, 2000, 600, 32000, a.seed, 3.0, 3.0)  # bench.py defaults
    for s in ss:
        print(s["name"], s["start_s"], s["scale"], [len(t["prompt"]) for t in s["turns"]], [t["think_s"] for t in s["turns"]])
    print("requests", sum(len(s["turns"]) for s in ss), "prompt tokens", sum(len(t["prompt"]) for s in ss for t in s["turns"]))
