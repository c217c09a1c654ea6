# Sourced by scripts/test.sh, .ci/run and tools/vllm/ci_e2e.sh: `ci_stage NAME CMD...` runs CMD
# and prints one line with its wall time, which `grep '^ci-stage'` finds in a CI log:
#   ci-stage release.build                  412 s  ok
# A failing CMD prints its exit status on that line and returns it.
ci_stage() {
  local name="$1"
  shift
  local start=$SECONDS rc=0
  "$@" || rc=$?
  if [ "$rc" -eq 0 ]; then
    printf 'ci-stage %-32s %6d s  ok\n' "$name" "$((SECONDS - start))"
  else
    printf 'ci-stage %-32s %6d s  FAILED (exit %d)\n' "$name" "$((SECONDS - start))" "$rc"
  fi
  return "$rc"
}
