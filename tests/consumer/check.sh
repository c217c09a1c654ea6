#!/usr/bin/env bash
# Installs a kvtier build tree into a fresh prefix, builds tests/consumer against it with
# find_package(kvtier), runs it, and runs the installed CLI: what another project sees.
#   tests/consumer/check.sh build/plain
set -euo pipefail
cd "$(dirname "$0")/../.."
build="${1:?usage: tests/consumer/check.sh BUILD_DIR}"
prefix="$build-install"
rm -rf "$prefix" "$build-consumer"
cmake --install "$build" --prefix "$prefix" >/dev/null
cmake -S tests/consumer -B "$build-consumer" -G Ninja -DCMAKE_PREFIX_PATH="$PWD/$prefix" --log-level=WARNING
cmake --build "$build-consumer"
"$build-consumer/kvtier_consumer"
"$prefix/bin/kvtier" --version
