#!/usr/bin/env bash
# Run python/tests/test_sglang_storage.py in the SGLang venv against a built kvtier.
#   tools/sglang/run_tests.sh [BUILD_PYTHON]   # default /work/main/build/release/python
# The build's kvtier package lacks the sglang subpackage: lay out <tmp>/kvtier with
# symlinks to the build's files plus this checkout's python/kvtier/sglang.
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
BUILD="${1:-${KVTIER_BUILD_PYTHON:-/work/main/build/release/python}}"
VENV="${VENV:-/work/venv-sglang}"
TMP="$(mktemp -d)"; trap 'rm -rf "$TMP"' EXIT
mkdir -p "$TMP/kvtier"
for f in "$BUILD"/kvtier/*; do
  n="$(basename "$f")"; [[ "$n" == __pycache__ || "$n" == sglang ]] || ln -s "$f" "$TMP/kvtier/$n"
done
ln -s "$REPO/python/kvtier/sglang" "$TMP/kvtier/sglang"
cd "$REPO" && PYTHONPATH="$TMP" "$VENV/bin/python" -m pytest -q -rs -p no:cacheprovider python/tests/test_sglang_storage.py "${@:2}"
