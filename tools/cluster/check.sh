#!/usr/bin/env bash
# The fleet, for real (docs/cluster.md): builds the topology (topology.py), runs check.py's
# fault checks and `kvtier bench cluster` in the client namespace, and prints check.py's JSON
# (the bench's under "bench"). Exits as check.py does: 0 passed, 1 a check failed, 77 this
# machine cannot build the topology (not root, no redis-server).
#
#   tools/cluster/check.sh [build/release/kvtier]
#
# check.py's Topology kills what it started and deletes its namespaces at exit, SIGINT and
# SIGTERM. This script covers what that cannot: check.py killed outright. On any exit it stops
# check.py, then kills the processes left in namespaces named after check.py's pid
# (kvt<pid>-*) and deletes those namespaces. (A script started with `&` from another script
# inherits SIGINT ignored and cannot trap it: stop that one with SIGTERM.)
set -u
here=$(cd "$(dirname "$0")" && pwd)
kvtier=$(realpath "${1:-build/release/kvtier}")
if [[ ! -x $kvtier ]]; then
  echo "check.sh: no kvtier binary at $kvtier (build the release preset, or pass its path)" >&2
  exit 2
fi
export PYTHONPATH="$(dirname "$kvtier")/python${PYTHONPATH:+:$PYTHONPATH}"

python3 "$here/check.py" "$kvtier" &
checker=$!

cleanup() {
  trap - EXIT INT TERM
  if kill -0 "$checker" 2>/dev/null; then
    kill -TERM "$checker" 2>/dev/null
    for _ in $(seq 50); do kill -0 "$checker" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$checker" 2>/dev/null
  fi
  wait "$checker" 2>/dev/null
  for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep "^kvt${checker}-"); do
    for pid in $(ip netns pids "$ns" 2>/dev/null); do kill -KILL "$pid" 2>/dev/null; done
    ip netns del "$ns" 2>/dev/null
  done
}
trap cleanup EXIT
trap 'cleanup; exit 130' INT
trap 'cleanup; exit 143' TERM

wait "$checker"
exit $?
