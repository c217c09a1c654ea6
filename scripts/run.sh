#!/usr/bin/env bash
# Sets up, builds (release) and runs the main job on its bundled default: the sizing
# report for every model of the built-in catalog. Extra arguments go to `kvtier size`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
cmake --preset release >/dev/null
cmake --build --preset release
./build/release/kvtier size --all "$@"
