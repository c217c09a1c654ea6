#!/usr/bin/env bash
# Sets up, builds and runs all tests of one preset (default: release; also debug, asan, tsan).
set -euo pipefail
cd "$(dirname "$0")/.."
preset="${1:-release}"
bash scripts/setup.sh
cmake --preset "$preset" >/dev/null
cmake --build --preset "$preset"
ctest --preset "$preset"
