#!/usr/bin/env bash
# tools/fuzz.sh - coverage-guided fuzzing of every parser with libFuzzer.
#
#   bash tools/fuzz.sh [SECONDS]     build tests/fuzz/fuzz_*.c with clang
#                                    (-fsanitize=fuzzer,address,undefined, the
#                                    libraries instrumented too) into build-fuzz/,
#                                    replay each checked-in corpus, then fuzz each
#                                    target for SECONDS (default $CTRAIN_FUZZ_SECONDS
#                                    or 30), as many targets at once as there are
#                                    cores (CTRAIN_FUZZ_JOBS)
#
# Prints one line per target: runs, seconds, new corpus units, crashes. A crash,
# leak or timeout fails the script and leaves the input under
# build-fuzz/artifacts/<target>/ (add it to tests/fuzz/corpus/<target>/ once
# fixed: the replay test under ctest then keeps it fixed). The corpus found while
# fuzzing stays in build-fuzz/corpus/ (not committed).
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-${CTRAIN_FUZZ_SECONDS:-30}}
B=build-fuzz
command -v clang >/dev/null || { echo "fuzz.sh: clang is required (bash tools/setup.sh installs it)" >&2; exit 1; }

cmake --preset fuzz >/dev/null # CMakePresets.json: clang, libFuzzer, ASan and UBSan into build-fuzz
mapfile -t targets < <(cd tests/fuzz && ls fuzz_*.c | sed 's/\.c$//')
ninja -C "$B" "${targets[@]}" >/dev/null

export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1

# One target: replay its seeds, fuzz it for $secs, print its line; 1 on a finding.
fuzz_one() {
  local t=$1 seeds=tests/fuzz/corpus/$1 work=$B/corpus/$1 art=$B/artifacts/$1/ log=$B/$1.log
  mkdir -p "$work" "$art"
  # -timeout: one input running longer than this is a hang (a finding, like a crash).
  if "$B/tests/fuzz/$t" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
    -artifact_prefix="$art" "$work" "$seeds" >"$log" 2>&1; then
    runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
    new=$(sed -n 's/^stat::new_units_added: *//p' "$log" | tail -1)
    printf 'fuzz: %-22s %8s runs in %s s, %s new corpus units, 0 crashes\n' "$t" "${runs:-?}" "$secs" "${new:-?}"
    return 0
  fi
  printf 'fuzz: %-22s FOUND A CRASH, LEAK OR HANG: %s\n' "$t" "$(ls "$art" | head -3 | tr '\n' ' ')"
  grep -E 'ERROR|SUMMARY|==[0-9]+==' "$log" | head -20 >&2 || tail -30 "$log" >&2
  return 1
}

# As many targets at once as there are cores (CTRAIN_FUZZ_JOBS): each is
# one process, so the wall time is the targets' total over the cores.
par=${CTRAIN_FUZZ_JOBS:-$(nproc)}
fail=0
running=()
for t in "${targets[@]}"; do
  fuzz_one "$t" &
  running+=($!)
  if ((${#running[@]} >= par)); then
    wait "${running[0]}" || fail=1
    running=("${running[@]:1}")
  fi
done
for p in "${running[@]}"; do
  wait "$p" || fail=1
done
exit $fail
