#!/usr/bin/env bash
# Venv for kvtier's SGLang HiCache storage backend tests (docs/sglang.md).
#   tools/sglang/setup_venv.sh [VENV_DIR]      # default /work/venv-sglang
# sglang==0.5.23 with --no-deps, torch==2.13.0+cpu from the local wheel dir
# (find-links /opt/wheels; sglang declares torch==2.14.1, pip check complains),
# and only what `import sglang.srt.mem_cache.hicache_storage` and
# `...storage.backend_factory` need (requirements-lock.txt, all --no-deps).
# NOT installed: torchvision (PyPI's is a CUDA build: "operator torchvision::nms
# does not exist"); so sglang.srt.mem_cache.memory_pool / pool_host do not import
# on CPU and the host-pool tests skip.
set -euo pipefail
VENV="${1:-/work/venv-sglang}"
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
WHEEL_DIR="${KVTIER_TORCH_WHEEL_DIR:-/opt/wheels}"
PY="${PYTHON:-python3.11}"
verify() {
  (cd / && "$VENV/bin/python" -c "
import torch, sglang, pytest
import sglang.srt.mem_cache.hicache_storage, sglang.srt.mem_cache.storage.backend_factory
assert sglang.__version__ == '0.5.23', sglang.__version__
print('kvtier-sglang venv OK: sglang', sglang.__version__, 'torch', torch.__version__)")
}
if [[ -x "$VENV/bin/python" ]] && verify 2>/dev/null; then exit 0; fi
"$PY" -m venv "$VENV"
export PIP_DISABLE_PIP_VERSION_CHECK=1
"$VENV/bin/python" -m pip install -q --no-deps --find-links "$WHEEL_DIR" -r "$HERE/requirements-lock.txt" 2>&1 \
  | grep -v "is ignored: it is neither a file nor a directory" || true
"$VENV/bin/python" -m pip uninstall -y -q torchvision 2>/dev/null || true
verify
