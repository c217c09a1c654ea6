#!/usr/bin/env python3
"""Run a real vLLM engine on CPU with a tiny random-weight model.

No model weights, tokenizer or network are needed: a HF ``config.json`` is
written into a temp dir and vLLM is started with ``load_format="dummy"`` and
``skip_tokenizer_init=True``; prompts are passed as token ids.

Run with the venv made by tools/vllm/setup_venv.sh, e.g.:

    /work/venv-vllm/bin/python tools/vllm/smoke_generate.py --arch llama
    /work/venv-vllm/bin/python tools/vllm/smoke_generate.py --arch deepseek
    /work/venv-vllm/bin/python tools/vllm/smoke_generate.py --arch llama \
        --probe-connector            # loads tools/vllm/probe_connector.py
    /work/venv-vllm/bin/python tools/vllm/smoke_generate.py --arch llama \
        --layers 8 --hidden 1024 --heads 16 --kv-heads 8 \
        --prompt-lens 2048,8192 --max-model-len 8300   # TTFT feasibility

Prints one JSON line per timed generate (``RESULT {...}``).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def llama_config(a: argparse.Namespace) -> dict:
    head_dim = a.hidden // a.heads
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": a.hidden,
        "intermediate_size": a.hidden * 2,
        "num_hidden_layers": a.layers,
        "num_attention_heads": a.heads,
        "num_key_value_heads": a.kv_heads,
        "head_dim": head_dim,
        "vocab_size": a.vocab,
        "max_position_embeddings": max(4096, a.max_model_len),
        "hidden_act": "silu",
        "rms_norm_eps": 1e-5,
        "rope_theta": 10000.0,
        "tie_word_embeddings": False,
        "bos_token_id": 1,
        "eos_token_id": 2,
        "torch_dtype": a.dtype,
    }


def with_sliding_layers(cfg: dict, window: int) -> dict:
    """A Llama config made hybrid: its even layers attend to `window` tokens (as Gemma-2 and
    gpt-oss alternate), so vLLM's hybrid allocator gives them a KV cache group of their own
    whose block table holds the null block where the window has passed."""
    cfg["sliding_window"] = window
    cfg["layer_types"] = ["sliding_attention" if i % 2 == 0 else "full_attention"
                          for i in range(cfg["num_hidden_layers"])]
    return cfg


def deepseek_v2_config(a: argparse.Namespace) -> dict:
    # Field set of data/models/DeepSeek-V2-Lite.json, shrunk.
    return {
        "architectures": ["DeepseekV2ForCausalLM"],
        "model_type": "deepseek_v2",
        "attention_bias": False,
        "bos_token_id": 1,
        "eos_token_id": 2,
        "first_k_dense_replace": 1,
        "hidden_act": "silu",
        "hidden_size": a.hidden,
        "initializer_range": 0.02,
        "intermediate_size": a.hidden * 2,
        "kv_lora_rank": a.kv_lora_rank,
        "max_position_embeddings": max(4096, a.max_model_len),
        "moe_intermediate_size": a.hidden // 2,
        "moe_layer_freq": 1,
        "n_group": 1,
        "n_routed_experts": 4,
        "n_shared_experts": 1,
        "norm_topk_prob": False,
        "num_attention_heads": a.heads,
        "num_experts_per_tok": 2,
        "num_hidden_layers": a.layers,
        "num_key_value_heads": a.heads,
        "pretraining_tp": 1,
        "q_lora_rank": None,  # V2-Lite has no q_lora
        "qk_nope_head_dim": a.qk_nope_head_dim,
        "qk_rope_head_dim": a.qk_rope_head_dim,
        "rms_norm_eps": 1e-6,
        "rope_scaling": None,
        "rope_theta": 10000,
        "routed_scaling_factor": 1.0,
        "scoring_func": "softmax",
        "topk_group": 1,
        "topk_method": "greedy",
        "torch_dtype": a.dtype,
        "use_cache": True,
        "v_head_dim": a.v_head_dim,
        "vocab_size": a.vocab,
        "tie_word_embeddings": False,
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--arch", choices=["llama", "deepseek"], default="llama")
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--kv-heads", type=int, default=2)
    p.add_argument("--vocab", type=int, default=1024)
    # CPU_MLA (reference backend, no AMX) only supports latent head size
    # kv_lora_rank + qk_rope_head_dim == 576 (DeepSeek-V2/V3 values), and
    # block_size 16 (forced by the CPU platform).
    p.add_argument("--kv-lora-rank", type=int, default=512)
    p.add_argument("--qk-rope-head-dim", type=int, default=64)
    p.add_argument("--qk-nope-head-dim", type=int, default=64)
    p.add_argument("--v-head-dim", type=int, default=64)
    p.add_argument("--dtype", default="bfloat16",
                   help="bfloat16 | float32 | float16")
    p.add_argument("--max-model-len", type=int, default=1024)
    p.add_argument("--prompt-lens", default="40,100",
                   help="comma list; one timed generate per entry")
    p.add_argument("--max-tokens", type=int, default=4)
    p.add_argument("--block-size", type=int, default=None)
    p.add_argument("--prefix-caching", action="store_true",
                   help="enable_prefix_caching=True (default False)")
    p.add_argument("--probe-connector", action="store_true",
                   help="load tools/vllm/probe_connector.py:ProbeConnector "
                        "via kv_connector_module_path")
    p.add_argument("--repeat", type=int, default=1,
                   help="generate each prompt this many times")
    p.add_argument("--kv-space-gib", default=None,
                   help="sets VLLM_CPU_KVCACHE_SPACE (GiB) if not set")
    a = p.parse_args()

    # CPU backend env. Must be set before vllm is imported/engine starts.
    if a.kv_space_gib is not None:
        os.environ["VLLM_CPU_KVCACHE_SPACE"] = str(a.kv_space_gib)
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    # Accepted values: "auto" (default: binds to a NUMA node's cores minus
    # reserved ones; reserves 1 core for the scheduler and 1 more when a KV
    # connector is configured -> nothing left on a 2-core VM), "nobind", or
    # an id list like "0-1". "nobind" is robust on this shared 2-core VM.
    os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", "nobind")
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "INFO")
    if a.probe_connector:
        # The engine core / worker run in spawned processes: they import the
        # connector module by name, so its directory must be on PYTHONPATH.
        os.environ["PYTHONPATH"] = HERE + os.pathsep + os.environ.get("PYTHONPATH", "")
        sys.path.insert(0, HERE)

    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt

    cfg = llama_config(a) if a.arch == "llama" else deepseek_v2_config(a)
    tmp = tempfile.mkdtemp(prefix=f"kvtier-{a.arch}-")
    with open(os.path.join(tmp, "config.json"), "w") as f:
        json.dump(cfg, f, indent=1)

    kwargs = dict(
        model=tmp,
        load_format="dummy",
        skip_tokenizer_init=True,
        enable_prefix_caching=a.prefix_caching,
        max_model_len=a.max_model_len,
        dtype=a.dtype,
        enforce_eager=True,
        seed=0,
    )
    if a.block_size:
        kwargs["block_size"] = a.block_size
    if a.probe_connector:
        from vllm.config import KVTransferConfig
        kwargs["kv_transfer_config"] = KVTransferConfig(
            kv_connector="ProbeConnector",
            kv_connector_module_path="probe_connector",
            kv_role="kv_both",
            kv_connector_extra_config={"log_file": os.environ.get(
                "PROBE_LOG", "/tmp/kvtier_probe_connector.log")},
        )

    t0 = time.perf_counter()
    llm = LLM(**kwargs)
    t_init = time.perf_counter() - t0
    print(f"RESULT {json.dumps({'event': 'engine_init', 'arch': a.arch, 'seconds': round(t_init, 2)})}",
          flush=True)

    sp = SamplingParams(max_tokens=a.max_tokens, temperature=0.0,
                        detokenize=False, ignore_eos=True)
    for n in [int(x) for x in a.prompt_lens.split(",") if x]:
        ids = [(i * 7 + 3) % (a.vocab - 10) + 5 for i in range(n)]
        for r in range(a.repeat):
            t0 = time.perf_counter()
            out = llm.generate([TokensPrompt(prompt_token_ids=ids)], sp,
                               use_tqdm=False)
            dt = time.perf_counter() - t0
            o = out[0]
            rec = {
                "event": "generate", "arch": a.arch, "layers": a.layers,
                "hidden": a.hidden, "dtype": a.dtype, "prompt_len": n,
                "repeat": r, "max_tokens": a.max_tokens,
                "seconds": round(dt, 3),
                "out_token_ids": list(o.outputs[0].token_ids),
                "num_cached_tokens": getattr(o, "num_cached_tokens", None),
            }
            m = getattr(o, "metrics", None)
            if m is not None:
                for k in ("first_token_latency", "first_token_ts",
                          "scheduled_ts", "queued_ts", "last_token_ts"):
                    v = getattr(m, k, None)
                    if v is not None:
                        rec[k] = v
            print("RESULT " + json.dumps(rec), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
