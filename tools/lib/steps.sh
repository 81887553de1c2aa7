# shellcheck shell=bash
# tools/lib/steps.sh - a long script told as a short story (sourced by tools/demo.sh):
# one line per step on stdout,
#
#   [2/9] building Kubernetes v1.35.4 (first run only, ~10-15 min on 2 cores) ... done in 612 s
#
# while each step's own output (apt, mmdebstrap, go, buildah, kubectl) goes to one log file.
#
#   steps_begin NAME TOTAL LOG [VERBOSE]
#       numbers the steps out of TOTAL and starts LOG (its directory made, the file
#       truncated); NAME prefixes the helpers' own messages ("demo: ..."). VERBOSE 1:
#       every step's output streams to stdout as well (stderr merged), and each step
#       gets a line of its own before it and after it.
#   step WHAT COMMAND [ARG]...
#       runs COMMAND (a function too) in a subshell under `set -e`, stdin from
#       /dev/null, its stdout and stderr appended to LOG, and says
#       "[n/TOTAL] WHAT ... done in N s". The subshell cannot set the caller's
#       variables: a step that finds something writes it to a file. On failure:
#       "FAILED", then on stderr the step's name, its exit status and the last
#       STEPS_TAIL (30) lines of LOG, and the script exits with that status.
#   steps_note TEXT
#       a line of its own under the steps ("      TEXT"), for what a step found.
#   steps_fail TEXT
#       TEXT and the last STEPS_TAIL lines of LOG on stderr, then exit 1: a failure
#       outside a step (the script's own checks).
#
# The step lines are what a newcomer reads; the log is what a bug report attaches.

STEPS_NAME=steps STEPS_TOTAL=0 STEPS_N=0 STEPS_LOG=/dev/null STEPS_VERBOSE=0
STEPS_TAIL=${STEPS_TAIL:-30}

steps_begin() {
  STEPS_NAME=$1 STEPS_TOTAL=$2 STEPS_LOG=$3 STEPS_VERBOSE=${4:-0} STEPS_N=0
  mkdir -p "$(dirname "$STEPS_LOG")"
  printf '%s: started %s, %d steps\n' "$STEPS_NAME" "$(date -Is)" "$STEPS_TOTAL" >"$STEPS_LOG"
}

# The last STEPS_TAIL lines of the log, on stderr.
steps_tail() {
  printf '%s: the last %d lines of %s:\n' "$STEPS_NAME" "$STEPS_TAIL" "$STEPS_LOG" >&2
  tail -n "$STEPS_TAIL" "$STEPS_LOG" | sed 's/^/  | /' >&2
}

step() {
  local what=$1 rc=0 t0=$SECONDS errexit=0
  shift
  STEPS_N=$((STEPS_N + 1))
  local tag="[$STEPS_N/$STEPS_TOTAL]"
  printf '\n%s: %s %s (%s)\n' "$STEPS_NAME" "$tag" "$what" "$(date -Is)" >>"$STEPS_LOG"
  # Not `if "$@"` nor `"$@" || rc=$?`: either would turn `set -e` off inside the
  # command, and a step would go on past its first failure.
  [[ $- == *e* ]] && errexit=1
  set +e
  if ((STEPS_VERBOSE)); then
    printf '%s %s\n' "$tag" "$what"
    (
      set -e
      "$@"
    ) 2>&1 </dev/null | tee -a "$STEPS_LOG"
    rc=${PIPESTATUS[0]}
  else
    printf '%s %s ... ' "$tag" "$what"
    (
      set -e
      "$@"
    ) >>"$STEPS_LOG" 2>&1 </dev/null
    rc=$?
  fi
  ((errexit)) && set -e
  local took=$((SECONDS - t0))
  if ((rc)); then
    printf '%s: %s FAILED (exit %d) after %d s\n' "$STEPS_NAME" "$tag" "$rc" "$took" >>"$STEPS_LOG"
    if ((STEPS_VERBOSE)); then
      printf '%s FAILED (exit %d) after %d s\n' "$tag" "$rc" "$took"
    else
      printf 'FAILED (exit %d) after %d s\n' "$rc" "$took"
    fi
    printf '%s: step %d/%d failed: %s (exit status %d)\n' "$STEPS_NAME" "$STEPS_N" \
      "$STEPS_TOTAL" "$what" "$rc" >&2
    steps_tail
    printf '%s: the whole log: %s\n' "$STEPS_NAME" "$STEPS_LOG" >&2
    exit "$rc"
  fi
  printf '%s: %s done in %d s\n' "$STEPS_NAME" "$tag" "$took" >>"$STEPS_LOG"
  if ((STEPS_VERBOSE)); then
    printf '%s done in %d s\n' "$tag" "$took"
  else
    printf 'done in %d s\n' "$took"
  fi
}

steps_note() {
  printf '      %s\n' "$*"
  printf '%s: %s\n' "$STEPS_NAME" "$*" >>"$STEPS_LOG"
}

steps_fail() {
  printf '%s: %s\n' "$STEPS_NAME" "$*" >&2
  steps_tail
  printf '%s: the whole log: %s\n' "$STEPS_NAME" "$STEPS_LOG" >&2
  exit 1
}
