#!/usr/bin/env bash
# Installs every Debian package kvtier's build and tests need. Idempotent: installs only
# what is missing, and runs apt-get update only when something is.
set -euo pipefail

packages=(
  g++ cmake ninja-build pkg-config python3
  ccache                      # compiler cache, one folder outside the clone (cmake/Ccache.cmake)
  nlohmann-json3-dev libcli11-dev libyaml-cpp-dev
  libgtest-dev libgmock-dev libxxhash-dev libnuma-dev
  libssl-dev openssl          # TLS of `kvtier serve`; the Python TLS test makes certificates with the CLI
  liburing-dev                # io_uring for the NVMe tier
  libhiredis-dev redis-server redis-tools  # the remote-pool tier; the Redis servers, redis-cli and redis-benchmark its tests start
  iproute2                    # `ip`: the multi-node test bed's network namespaces (tools/cluster)
  libbenchmark-dev fio        # Google Benchmark targets; fio, the NVMe tier's baseline
  libicu-dev                  # Unicode classes for the BPE pre-tokenizer (trace replay)
  libcpp-httplib-dev          # the service's /metrics and /healthz endpoints
  clang-14 libclang-rt-14-dev   # libFuzzer for the fuzz preset
  pybind11-dev python3-pytest python3-numpy  # the Python package (python/) and its tests
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all ${#packages[@]} packages present"
  exit 0
fi

sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
echo "setup: installing ${missing[*]}"
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
