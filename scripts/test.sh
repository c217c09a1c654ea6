#!/usr/bin/env bash
# Sets up, builds and runs all tests of one preset (default: release; also debug, asan, tsan).
# Each step prints a `ci-stage` line with its wall time (scripts/stage.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/stage.sh
preset="${1:-release}"
# .ci/run sets up once for all presets and says so with KVTIER_SETUP_DONE=1.
[ -n "${KVTIER_SETUP_DONE:-}" ] || ci_stage setup bash scripts/setup.sh
ci_stage "$preset.configure" cmake --preset "$preset" --log-level=WARNING
ci_stage "$preset.build" cmake --build --preset "$preset"
ci_stage "$preset.test" ctest --preset "$preset"
