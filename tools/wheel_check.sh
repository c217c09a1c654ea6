#!/usr/bin/env bash
# The wheel a user gets from `pip wheel .` (pyproject.toml, scikit-build-core) installs into a
# fresh venv and works there: builds it, installs it with no network and no source tree in
# reach, imports kvtier and calls the sizing engine and the block hasher.
#
#   tools/wheel_check.sh [WORK_DIR]          # default build/wheel-check; CI's `wheel` stage
#
# Slow (it compiles the extension and the library: minutes on 2 cores without a warm cache), so
# it is a CI stage of its own, not a ctest test. The CMake build folder is build/wheel, under
# the clone, so ccache (cmake/Ccache.cmake, paths hashed relative to the clone) answers what an
# earlier wheel build compiled, in any clone; pip's default, a fresh temporary folder per
# build, would miss every time. Build requirements (scikit-build-core, pybind11) come from
# pip's index, in an isolated build environment as for any user.
set -euo pipefail
cd "$(dirname "$0")/.."
work="${1:-build/wheel-check}"
python="${PYTHON:-python3}"
rm -rf "$work/dist" "$work/venv" "$work/build-requires"
mkdir -p "$work"

# The build requirements come from pip's index. Without one, this machine cannot build any
# wheel, which is no fault of the package: say so and skip (as tools/vllm/ci_e2e.sh does).
mapfile -t requires < <("$python" -c 'import tomllib; print("\n".join(tomllib.load(open("pyproject.toml", "rb"))["build-system"]["requires"]))')
if ! "$python" -m pip download -q --no-deps -d "$work/build-requires" "${requires[@]}" >"$work/download.log" 2>&1; then
  cat "$work/download.log"
  echo "wheel_check: SKIPPED: the build requirements (${requires[*]}) cannot be downloaded"
  exit 0
fi

"$python" -m pip wheel . --no-deps -w "$work/dist" --config-settings=build-dir=build/wheel
wheels=("$work"/dist/kvtier-*.whl)
[ ${#wheels[@]} -eq 1 ] && [ -f "${wheels[0]}" ] || { echo "wheel_check: expected one kvtier wheel in $work/dist" >&2; exit 1; }
echo "wheel_check: built ${wheels[0]} ($(du -k "${wheels[0]}" | cut -f1) KiB)"

"$python" -m venv "$work/venv"
"$work/venv/bin/python" -m pip install --no-index --no-deps -q "${wheels[0]}"

# Outside the clone, with a clean environment, so that neither python/kvtier nor
# build/release/python can stand in for the installed package.
venv_python="$(cd "$work/venv/bin" && pwd)/python"
(cd / && env -i PATH=/usr/bin:/bin HOME=/nonexistent "$venv_python" - <<'PY'
import pathlib, sys
import kvtier
where = pathlib.Path(kvtier.__file__).resolve()
assert "site-packages" in where.parts, f"kvtier imported from {where}, not from the venv"
sizing = kvtier.kv_sizing(kvtier.load_model("llama-3-70b"))
# 80 layers x 8 KV heads x 128 x (K, V) x 2 bytes (bf16).
assert sizing.kv_bytes_per_token == 80 * 8 * 128 * 2 * 2, sizing
keys = kvtier.chain_keys(list(range(64)), 16, "sha256_cbor")
assert len(keys) == 4, keys
print("wheel_check: kvtier from", where.parent, "->", sizing)
PY
) || { echo "wheel_check: the installed wheel failed" >&2; exit 1; }
