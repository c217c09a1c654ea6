#!/usr/bin/env bash
# Builds kvtier with CUDA on a GPU machine and runs what only a GPU can check: the GPU tests
# (GPU HBM tier, pinned DRAM, CUDA device queries), the tier conformance suite (which includes
# the GPU tier) and the tier benchmark. A few minutes. Outputs go to $1 (default
# ./gpu-check-out); exits non-zero when a build step or a test fails.
#   usage: scripts/gpu_check.sh [OUT_DIR]
set -uo pipefail
cd "$(dirname "$0")/.."
out="$(mkdir -p "${1:-gpu-check-out}" && cd "${1:-gpu-check-out}" && pwd)"
build=build/gpu
failed=()

# Runs one step with its output in $out/<name>.log (and on the terminal); records failures.
step() {
  local name="$1"
  shift
  echo "== $name: $*"
  if "$@" 2>&1 | tee "$out/$name.log"; then
    echo "== $name: ok"
  else
    echo "== $name: FAILED (see $out/$name.log)"
    failed+=("$name")
  fi
}

{ nvidia-smi || true; } >"$out/nvidia-smi.txt" 2>&1
# Installing packages needs a package mirror, which a GPU machine may not reach: when setup
# fails, go on (the configure step names anything that is really missing).
if ! bash scripts/setup.sh >"$out/setup.log" 2>&1; then
  echo "== setup: FAILED (see $out/setup.log); trying to build with what is installed"
fi
step configure cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DKVTIER_WITH_CUDA=ON
step build cmake --build "$build" -j"$(nproc)"
if [ ${#failed[@]} -ne 0 ]; then
  echo "gpu_check: ${failed[*]} failed; outputs in $out"
  exit 1
fi
step info "$build/kvtier" info
step gpu_tests ctest --test-dir "$build" -R 'Gpu|Cuda' --output-on-failure --timeout 300
# Here a skipped GPU test means the GPU was not seen: that is a failure of this check.
if grep -q 'Skipped' "$out/gpu_tests.log"; then
  echo "== gpu_tests: some GPU tests were skipped (no GPU seen?); see $out/gpu_tests.log"
  failed+=(gpu_tests_skipped)
fi
step conformance ctest --test-dir "$build" -R 'TierConformance' --output-on-failure --timeout 300
# The benchmark's JSON alone in its own file, for tools; its stderr in the log.
echo "== bench: $build/kvtier bench tiers --json"
if "$build/kvtier" bench tiers --json >"$out/bench-tiers.json" 2>"$out/bench.log"; then
  echo "== bench: ok"
else
  echo "== bench: FAILED (see $out/bench.log)"
  failed+=(bench)
fi

if [ ${#failed[@]} -ne 0 ]; then
  echo "gpu_check: ${failed[*]} failed; outputs in $out"
  exit 1
fi
echo "gpu_check: all passed; outputs in $out"
