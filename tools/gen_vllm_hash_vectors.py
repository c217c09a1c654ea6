#!/usr/bin/env python3
"""Generate vLLM prefix-caching block-hash test vectors (sha256_cbor mode).

Usage:
    python3 tools/gen_vllm_hash_vectors.py <extracted-wheel-root-or-vllm-dir> \
        [-o tests/fixtures/vllm_hash_vectors.json]

The hashes are computed by vLLM's OWN code, loaded at run time from an
extracted vLLM wheel (``pip download --no-deps vllm`` + unzip).  No vLLM
source is copied into this repository:

  * ``vllm/utils/hashing.py`` is loaded as a module with importlib (it only
    needs ``cbor2``).
  * ``vllm/v1/core/kv_cache_utils.py`` is imported normally when the whole
    ``vllm`` package imports (needs torch etc.).  Otherwise the needed
    top-level functions/constants are taken from that file's AST at run time
    and executed in a small namespace (``hash_block_tokens``,
    ``init_none_hash``, ``get_request_block_hasher``,
    ``generate_block_hash_extra_keys`` and helpers).  The same is done for
    ``get_mm_features_in_window`` from ``vllm/multimodal/utils.py``.

Requests are stand-in objects carrying only the attributes vLLM's block
hasher reads (all_token_ids, num_tokens, block_hashes, mm_features,
lora_request, cache_salt, prompt_embeds).

Each block records the Python object that vLLM passed to the hash function,
its canonical-CBOR encoding (hex) and the digest that vLLM returned; the
script asserts sha256(cbor_hex) == digest and also re-derives every chain with
an independent minimal implementation.
"""

from __future__ import annotations

import __future__ as _future
import argparse
import ast
import bisect
import hashlib
import importlib.util
import json
import logging
import os
import sys
import types
from pathlib import Path
from types import SimpleNamespace

import cbor2

HASH_ALGO = "sha256_cbor"
KV_UTILS_REL = "vllm/v1/core/kv_cache_utils.py"
HASHING_REL = "vllm/utils/hashing.py"
MM_UTILS_REL = "vllm/multimodal/utils.py"

# Top-level names taken from kv_cache_utils.py in AST mode.
KV_UTILS_NAMES = [
    "BlockHash",
    "DEFAULT_NONE_HASH_SEED",
    "_NON_CRYPTO_HASH_FUNCTIONS",
    "_NONE_HASH_SEED",
    "resolve_none_hash_seed",
    "init_none_hash",
    "hash_block_tokens",
    "_gen_mm_extra_hash_keys",
    "_gen_lora_extra_hash_keys",
    "_gen_prompt_embeds_extra_hash_keys",
    "generate_block_hash_extra_keys",
    "generate_lookahead_block_hash_extra_keys",
    "get_request_block_hasher",
]


# --------------------------------------------------------------------------
# Loading vLLM code
# --------------------------------------------------------------------------

def find_root(arg: str) -> Path:
    p = Path(arg).resolve()
    for cand in (p, p.parent):
        if (cand / KV_UTILS_REL).is_file() and (cand / HASHING_REL).is_file():
            return cand
    sys.exit(f"error: {arg} does not contain {KV_UTILS_REL} (pass the "
             "extracted wheel root or its vllm/ directory)")


def read_version(root: Path) -> dict:
    info = {"version": None, "commit_id": None}
    vf = root / "vllm" / "_version.py"
    if vf.is_file():
        ns: dict = {}
        try:
            exec(compile(vf.read_text(), str(vf), "exec"), ns)
            info["version"] = ns.get("__version__")
            info["commit_id"] = ns.get("__commit_id__")
        except Exception:  # pragma: no cover
            pass
    if info["version"] is None:
        for d in root.glob("vllm-*.dist-info"):
            info["version"] = d.name[len("vllm-"):-len(".dist-info")]
    return info


def load_module_from_file(name: str, path: Path) -> types.ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


def extract_toplevel(path: Path, names: list[str], ns: dict) -> None:
    """Execute only the named top-level defs/assignments of a source file."""
    tree = ast.parse(path.read_text(), filename=str(path))
    wanted = set(names)
    picked = []
    found = set()
    for node in tree.body:
        node_names = []
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            node_names = [node.name]
        elif isinstance(node, ast.Assign):
            node_names = [t.id for t in node.targets if isinstance(t, ast.Name)]
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            node_names = [node.target.id]
            if node.value is None:  # bare annotation, e.g. "NONE_HASH: BlockHash"
                continue
        hit = wanted.intersection(node_names)
        if hit:
            picked.append(node)
            found |= hit
    missing = wanted - found
    if missing:
        raise RuntimeError(f"{path}: definitions not found: {sorted(missing)}")
    mod = ast.Module(body=picked, type_ignores=[])
    code = compile(mod, str(path), "exec",
                   flags=_future.annotations.compiler_flag, dont_inherit=True)
    exec(code, ns)


class VllmCode:
    """Handles to vLLM's functions; `kv` is a dict-like view of the globals of
    kv_cache_utils so that NONE_HASH can be read after init_none_hash()."""

    def __init__(self, root: Path, mode: str):
        self.root = root
        self.mode_used = None
        if mode in ("auto", "import"):
            try:
                sys.path.insert(0, str(root))
                import vllm.utils.hashing as hashing  # type: ignore
                import vllm.v1.core.kv_cache_utils as kvu  # type: ignore
                self.hashing = hashing
                self.kv = kvu.__dict__
                self.mode_used = "import (full vllm package)"
            except Exception as e:  # torch etc. missing
                for m in [m for m in sys.modules if m == "vllm" or m.startswith("vllm.")]:
                    del sys.modules[m]
                if sys.path and sys.path[0] == str(root):
                    sys.path.pop(0)
                if mode == "import":
                    raise
                self.import_error = f"{type(e).__name__}: {e}"
        if self.mode_used is None:
            self.hashing = load_module_from_file(
                "_wheel_vllm_utils_hashing", root / HASHING_REL)
            mm_ns: dict = {"bisect": bisect, "__name__": "_wheel_vllm_mm_utils"}
            extract_toplevel(root / MM_UTILS_REL, ["get_mm_features_in_window"], mm_ns)
            from collections.abc import Callable, Iterable, Iterator, Sequence
            from typing import Any, NewType
            ns: dict = {
                "__name__": "_wheel_vllm_kv_cache_utils",
                "os": os,
                "hashlib": hashlib,
                "Any": Any,
                "Callable": Callable,
                "Iterable": Iterable,
                "Iterator": Iterator,
                "Sequence": Sequence,
                "NewType": NewType,
                "logger": logging.getLogger("vllm.v1.core.kv_cache_utils"),
                "xxhash": self.hashing.xxhash,
                "xxhash_cbor": self.hashing.xxhash_cbor,
                "get_mm_features_in_window": mm_ns["get_mm_features_in_window"],
                "tensor_data": None,  # only used for prompt embeds (not generated)
            }
            extract_toplevel(root / KV_UTILS_REL, KV_UTILS_NAMES, ns)
            self.kv = ns
            self.mode_used = ("ast-extract (functions taken from the wheel's "
                              "kv_cache_utils.py at run time; hashing.py loaded "
                              "via importlib)")
        self.hash_fn = self.hashing.get_hash_fn_by_name(HASH_ALGO)

    def init_none_hash(self, seed: str | None) -> bytes:
        old = os.environ.get("PYTHONHASHSEED")
        try:
            if seed is None:
                os.environ.pop("PYTHONHASHSEED", None)
            else:
                os.environ["PYTHONHASHSEED"] = seed
            self.kv["init_none_hash"](self.hash_fn)
        finally:
            if old is None:
                os.environ.pop("PYTHONHASHSEED", None)
            else:
                os.environ["PYTHONHASHSEED"] = old
        return bytes(self.kv["NONE_HASH"])


# --------------------------------------------------------------------------
# Recording + independent check
# --------------------------------------------------------------------------

class Recorder:
    """Wraps vLLM's sha256_cbor, remembering every (input, digest)."""

    def __init__(self, fn):
        self.fn = fn
        self.calls: list[tuple[object, bytes]] = []

    def __call__(self, obj):
        out = self.fn(obj)
        self.calls.append((obj, bytes(out)))
        return out


def to_json(obj):
    if obj is None or isinstance(obj, (str, int, bool)):
        return obj
    if isinstance(obj, (tuple, list)):
        return [to_json(x) for x in obj]
    if isinstance(obj, (bytes, bytearray)):
        return {"bytes_hex": bytes(obj).hex()}
    raise TypeError(f"unsupported type in extra_keys: {type(obj)}")


def independent_hash(obj) -> bytes:
    return hashlib.sha256(cbor2.dumps(obj, canonical=True)).digest()


def from_json(obj):
    """Inverse of to_json for extra_keys (lists become tuples)."""
    if isinstance(obj, list):
        return tuple(from_json(x) for x in obj)
    if isinstance(obj, dict):
        return bytes.fromhex(obj["bytes_hex"])
    return obj


# --------------------------------------------------------------------------
# Cases
# --------------------------------------------------------------------------

def mk_request(tokens, lora=None, cache_salt=None, mm=()):
    return SimpleNamespace(
        request_id="req",
        all_token_ids=list(tokens),
        num_tokens=len(tokens),
        block_hashes=[],
        mm_features=[
            SimpleNamespace(identifier=ident, modality="image", mm_hash=ident,
                            mm_position=SimpleNamespace(offset=off, length=ln))
            for (ident, off, ln) in mm
        ],
        lora_request=(None if lora is None else
                      SimpleNamespace(lora_name=lora[0], lora_path=lora[1],
                                      lora_int_id=1)),
        cache_salt=cache_salt,
        prompt_embeds=None,
        _prompt_embeds_per_block_hashes={},
    )


MM_HASH_A = hashlib.sha256(b"kvtier test image A").hexdigest()
MM_HASH_B = hashlib.sha256(b"kvtier test image B").hexdigest()

# (name, description, block_size, tokens, request kwargs, lookahead)
REQUEST_CASES = [
    ("plain_0_47_bs16", "3 full blocks, token ids 0..47", 16,
     list(range(48)), {}, 0),
    ("plain_large_ids_bs16", "token ids 151000..151047 (Qwen-size vocab)", 16,
     list(range(151000, 151048)), {}, 0),
    ("plain_partial_tail_bs16",
     "40 tokens: only the 2 full blocks are hashed, the 8-token tail is not", 16,
     list(range(40)), {}, 0),
    ("plain_short_no_full_block_bs16",
     "10 tokens < block_size: vLLM produces no block hash at all", 16,
     list(range(10)), {}, 0),
    ("plain_0_63_bs32", "block_size 32, 2 full blocks, token ids 0..63", 32,
     list(range(64)), {}, 0),
    ("plain_bs1", "block_size 1 (single-token blocks), tokens 7,8,9", 1,
     [7, 8, 9], {}, 0),
    ("lora_bs16", "LoRA request: every block gets ('lora', name, path)", 16,
     list(range(48)), {"lora": ("lora-a", "/adapters/lora-a")}, 0),
    ("cache_salt_bs16", "cache_salt: only the first block (start_token_idx 0)", 16,
     list(range(48)), {"cache_salt": "salt-123"}, 0),
    ("mm_single_bs16",
     "one image at offset 4 length 24: block0 ('mm',h,4), block1 ('mm',h,-12), "
     "block2 none", 16,
     list(range(48)), {"mm": [(MM_HASH_A, 4, 24)]}, 0),
    ("mm_two_items_bs16",
     "image A at [2,8), image B at [10,30): block0 has both, block1 has B", 16,
     list(range(48)), {"mm": [(MM_HASH_A, 2, 6), (MM_HASH_B, 10, 20)]}, 0),
    ("combo_lora_mm_salt_bs16",
     "LoRA + image + cache_salt; order is lora, mm..., cache_salt", 16,
     list(range(48)),
     {"lora": ("lora-a", "/adapters/lora-a"), "cache_salt": "salt-123",
      "mm": [(MM_HASH_A, 4, 24)]}, 0),
    ("lookahead1_bs16",
     "num_hash_lookahead_tokens=1 (EAGLE): extra_keys=(E, next_token); "
     "block 3 not hashed until token 48 exists", 16,
     list(range(48)), {}, 1),
]

SEEDS = ["0", "12345", None]  # None = PYTHONHASHSEED unset


def run_request_case(vc: VllmCode, rec: Recorder, root: bytes, case):
    name, desc, bs, tokens, kw, lookahead = case
    req = mk_request(tokens, **kw)
    rec.calls.clear()
    hasher = vc.kv["get_request_block_hasher"](bs, rec, lookahead)
    hashes = [bytes(h) for h in hasher(req)]
    assert len(rec.calls) == len(hashes)
    blocks = []
    for i, ((obj, digest), h) in enumerate(zip(rec.calls, hashes)):
        assert digest == h
        parent, toks, extra = obj
        assert bytes(parent) == (root if i == 0 else hashes[i - 1])
        cb = cbor2.dumps(obj, canonical=True)
        assert hashlib.sha256(cb).digest() == h, f"{name}: CBOR mismatch"
        blocks.append({
            "index": i,
            "token_ids": list(toks),
            "extra_keys": to_json(extra),
            "parent_hash": bytes(parent).hex(),
            "cbor_hex": cb.hex(),
            "hash": h.hex(),
        })
    return {
        "name": name,
        "description": desc,
        "source": "get_request_block_hasher",
        "block_size": bs,
        "num_hash_lookahead_tokens": lookahead,
        "request": {
            "all_token_ids": tokens,
            "lora": (None if "lora" not in kw else
                     {"lora_name": kw["lora"][0], "lora_path": kw["lora"][1]}),
            "cache_salt": kw.get("cache_salt"),
            "mm_features": [
                {"identifier": i, "offset": o, "length": ln}
                for (i, o, ln) in kw.get("mm", [])
            ],
        },
        "blocks": blocks,
    }


# Direct hash_block_tokens chains (token values beyond real vocabularies).
DIRECT_CASES = [
    ("direct_wide_ints_bs16",
     "hash_block_tokens directly; ids crossing every CBOR int width "
     "(1/2/3/5/9-byte heads). vLLM does not range-check ids.", 16,
     [0, 23, 24, 255, 256, 65535, 65536, 151000, 4294967295, 4294967296,
      2**53, 2**63 - 1, 2**63, 2**64 - 1, 1, 2,
      100000, 200000, 300000, 400000, 500000, 600000, 700000, 800000,
      2**32 + 1, 2**40, 2**48, 2**56, 17, 18, 19, 20],
     [None, None]),
    ("direct_single_token_block",
     "hash_block_tokens on a 1-token block with extra_keys None", 1,
     [42], [None]),
    ("direct_lora_name_only",
     "hash_block_tokens with extra_keys ('lora-a',) (old-style bare-name key, "
     "NOT what this vLLM version builds; kept for contrast)", 16,
     list(range(16)), [("lora-a",)]),
]


def run_direct_case(vc: VllmCode, rec: Recorder, root: bytes, case):
    name, desc, bs, tokens, extras = case
    rec.calls.clear()
    blocks = []
    parent = None
    for i, extra in enumerate(extras):
        toks = tokens[i * bs:(i + 1) * bs]
        h = bytes(vc.kv["hash_block_tokens"](rec, parent, toks, extra))
        obj, digest = rec.calls[-1]
        assert digest == h
        cb = cbor2.dumps(obj, canonical=True)
        assert hashlib.sha256(cb).digest() == h
        blocks.append({
            "index": i,
            "token_ids": list(toks),
            "extra_keys": to_json(extra),
            "parent_hash": bytes(obj[0]).hex(),
            "cbor_hex": cb.hex(),
            "hash": h.hex(),
        })
        parent = h
    return {
        "name": name,
        "description": desc,
        "source": "hash_block_tokens",
        "block_size": bs,
        "num_hash_lookahead_tokens": 0,
        "blocks": blocks,
    }


def independent_check(seed_entry: dict) -> None:
    """Re-derive everything from the JSON alone with cbor2 + hashlib."""
    seed = seed_entry["none_hash_seed"]
    root = independent_hash(seed)
    assert root.hex() == seed_entry["none_hash"], "NONE_HASH mismatch"
    assert cbor2.dumps(seed, canonical=True).hex() == seed_entry["none_hash_cbor_hex"]
    for case in seed_entry["cases"]:
        parent = root
        for b in case["blocks"]:
            obj = (parent, tuple(b["token_ids"]), from_json(b["extra_keys"]))
            cb = cbor2.dumps(obj, canonical=True)
            assert cb.hex() == b["cbor_hex"], (case["name"], b["index"])
            h = hashlib.sha256(cb).digest()
            assert h.hex() == b["hash"], (case["name"], b["index"])
            parent = h


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("vllm_dir", help="extracted wheel root (or its vllm/ dir)")
    ap.add_argument("-o", "--output",
                    default=str(Path(__file__).resolve().parent.parent /
                                "tests/fixtures/vllm_hash_vectors.json"))
    ap.add_argument("--mode", choices=["auto", "import", "ast"], default="auto")
    args = ap.parse_args()

    root_dir = find_root(args.vllm_dir)
    ver = read_version(root_dir)
    vc = VllmCode(root_dir, args.mode)
    rec = Recorder(vc.hash_fn)

    seeds_out = []
    for seed in SEEDS:
        none_hash = vc.init_none_hash(seed)
        resolved = vc.kv["_NONE_HASH_SEED"]
        entry = {
            "pythonhashseed": seed,
            "none_hash_seed": resolved,
            "none_hash_cbor_hex": cbor2.dumps(resolved, canonical=True).hex(),
            "none_hash": none_hash.hex(),
            "cases": [run_request_case(vc, rec, none_hash, c) for c in REQUEST_CASES]
                     + [run_direct_case(vc, rec, none_hash, c) for c in DIRECT_CASES],
        }
        independent_check(entry)
        seeds_out.append(entry)

    doc = {
        "generator": "tools/gen_vllm_hash_vectors.py",
        "vllm_version": ver["version"],
        "vllm_commit_id": ver["commit_id"],
        "hash_algo": HASH_ALGO,
        "cbor2_version": importlib.metadata.version("cbor2"),
        "load_mode": vc.mode_used,
        "source_files": [KV_UTILS_REL, HASHING_REL, MM_UTILS_REL],
        "vllm_functions": ["vllm.utils.hashing.sha256_cbor",
                           "vllm.utils.hashing.get_hash_fn_by_name"]
                          + ["vllm.v1.core.kv_cache_utils." + n for n in
                             ("init_none_hash", "resolve_none_hash_seed",
                              "hash_block_tokens", "get_request_block_hasher",
                              "generate_block_hash_extra_keys")],
        "format": {
            "hashed_object": "CBOR (canonical) of the 3-array "
                             "[parent_hash: bstr(32), token_ids: array of int, "
                             "extra_keys: null | array]; block hash = "
                             "SHA-256 of those bytes",
            "root": "parent_hash of block 0 = none_hash = "
                    "SHA-256(canonical CBOR of text string none_hash_seed)",
            "none_hash_seed": "PYTHONHASHSEED if set, else "
                              "'vllm-none-hash' (sha256/sha256_cbor only)",
            "extra_keys_json": "JSON arrays stand for CBOR arrays (Python "
                               "tuples), null for None; {'bytes_hex': ..} for "
                               "bytes (not used here)",
        },
        "seeds": seeds_out,
    }
    out = Path(args.output)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(doc, indent=1) + "\n")
    n = sum(len(c["blocks"]) for s in seeds_out for c in s["cases"])
    print(f"vllm {ver['version']} ({vc.mode_used.split(' ')[0]}): wrote "
          f"{len(seeds_out)} seeds, {n} block hashes -> {out}")


if __name__ == "__main__":
    import importlib.metadata  # noqa: F401
    main()
