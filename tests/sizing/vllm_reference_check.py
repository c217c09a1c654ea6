#!/usr/bin/env python3
"""Checks `kvtier size` against an independent implementation of vLLM's KV-cache specs.

This file re-derives, in Python and from the raw config.json, what vLLM (v1) allocates per
layer: `FullAttentionSpec` / `SlidingWindowSpec` pages of 2 x block x kv_heads x head_size
x dtype, `MLAAttentionSpec` pages of block x (kv_lora_rank + qk_rope_head_dim) x dtype
(one latent, replicated on every TP rank), and `MambaSpec` pages summed over the
MambaStateShapeCalculator shapes (Gated DeltaNet here). KV heads per rank follow
ModelConfig.get_num_kv_heads: max(1, total // tp). It shares no code with kvtier.

Usage: vllm_reference_check.py KVTIER_BINARY MODELS_DIR
"""
import json
import math
import pathlib
import subprocess
import sys

DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "float32": 4, "fp8": 1}


def text_config(cfg):
    for key in ("text_config", "llm_config", "language_config"):
        if "num_hidden_layers" not in cfg and isinstance(cfg.get(key), dict):
            return cfg[key]
    return cfg


def layer_kinds(cfg, n_layers):
    """'full', 'sliding' or 'linear' per layer, following transformers' config classes."""
    if cfg.get("layer_types"):
        return [{"full_attention": "full", "sliding_attention": "sliding",
                 "linear_attention": "linear"}[t] for t in cfg["layer_types"]]
    if cfg.get("full_attention_interval") and cfg.get("linear_num_value_heads"):
        k = cfg["full_attention_interval"]
        return ["full" if (i + 1) % k == 0 else "linear" for i in range(n_layers)]
    window = cfg.get("sliding_window") or cfg.get("sliding_window_size")
    if not window or cfg.get("use_sliding_window") is False:
        return ["full"] * n_layers
    if cfg.get("model_type") == "gemma2":
        return ["sliding" if (i + 1) % 2 else "full" for i in range(n_layers)]
    return ["sliding"] * n_layers


def reference(cfg, tp, kv_dtype, block):
    """Returns (attention bytes per block summed over layers, mamba bytes per sequence) or None."""
    cfg = text_config(cfg)
    model_dtype = cfg.get("torch_dtype", "bfloat16")
    dsize = DTYPE_BYTES[model_dtype if kv_dtype == "auto" else kv_dtype]
    n_layers = cfg.get("num_hidden_layers") or cfg.get("n_layer")
    heads = cfg.get("num_attention_heads") or cfg.get("n_head")
    if heads % tp:
        return None
    kinds = layer_kinds(cfg, n_layers)
    if cfg.get("kv_lora_rank"):
        attn_page = block * (cfg["kv_lora_rank"] + cfg["qk_rope_head_dim"]) * dsize
    else:
        kv = cfg.get("num_key_value_heads") or cfg.get("n_head_kv") or (1 if cfg.get("multi_query") else heads)
        if (kv >= tp and kv % tp) or (kv < tp and tp % kv):
            return None
        head = cfg.get("head_dim") or cfg["hidden_size"] // heads
        attn_page = 2 * block * max(1, kv // tp) * head * dsize
    attention = sum(attn_page for k in kinds if k in ("full", "sliding"))
    mamba = 0
    if "linear" in kinds:
        nk, nv = cfg["linear_num_key_heads"], cfg["linear_num_value_heads"]
        dk, dv = cfg["linear_key_head_dim"], cfg["linear_value_head_dim"]
        if nv % tp:
            return None
        conv_dim = dk * nk * 2 + dv * nv
        conv_shape = (conv_dim // tp, cfg["linear_conv_kernel_dim"] - 1)
        temporal_shape = (nv // tp, dk, dv)
        state_dsize = DTYPE_BYTES[model_dtype]  # vLLM's mamba_cache_dtype / mamba_ssm_cache_dtype "auto"
        page = math.prod(conv_shape) * state_dsize + math.prod(temporal_shape) * state_dsize
        mamba = page * kinds.count("linear")
    return attention, mamba


def main():
    binary, models_dir = sys.argv[1], pathlib.Path(sys.argv[2])
    passed = failed = 0
    for path in sorted(models_dir.glob("*.json")):
        cfg = json.loads(path.read_text())
        for tp in (1, 2, 4, 8):
            for kv_dtype in ("auto", "fp8", "float32"):
                block = 16
                expected = reference(cfg, tp, kv_dtype, block)
                run = subprocess.run([binary, "size", "--config", str(path), "--tp", str(tp), "--kv-dtype", kv_dtype,
                                      "--block-size", str(block), "--json"], capture_output=True, text=True)
                case = f"{path.name} tp={tp} kv={kv_dtype}"
                if run.returncode < 0:
                    print(f"FAIL {case}: crashed with signal {-run.returncode}")
                    failed += 1
                    continue
                if expected is None:
                    ok = run.returncode == 1 and "tensor parallel" in run.stderr
                    detail = f"expected a TP error, got rc={run.returncode} {run.stderr.strip()}"
                else:
                    if run.returncode != 0:
                        ok, detail = False, f"rc={run.returncode}: {run.stderr.strip()}"
                    else:
                        got = json.loads(run.stdout)
                        actual = (got["kv_bytes_per_block"], got["state_bytes_per_sequence"])
                        ok = actual == expected
                        detail = f"kvtier {actual} vs vLLM formulas {expected}"
                if ok:
                    passed += 1
                else:
                    failed += 1
                    print(f"FAIL {case}: {detail}")
    print(f"{passed} passed, {failed} failed")
    return 1 if failed or passed == 0 else 0


if __name__ == "__main__":
    sys.exit(main())
