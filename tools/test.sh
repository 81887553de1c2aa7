#!/usr/bin/env bash
# tools/test.sh - the test command: installs what is missing, builds, and runs
# every test suite. This is what CI runs (.ci/run).
#
#   bash tools/test.sh              everything
#   bash tools/test.sh --unit       setup, format check, builds and unit tests only
#
# Steps: tools/setup.sh (Debian packages, CUDA toolkit wheels) -> CPU build ->
# local control plane and node builds (cached by version) -> images (ctrain
# from the Dockerfile, pause; cached by input hash) -> the TensorFlow venv of
# the Keras re-score tests (bench/train.py tf_venv(), cached) -> the e2e tests (two real
# nodes: containerd, kubelet, kube-proxy, CoreDNS; the controller as its
# Deployment), and beside them a side lane: the static checks (clang-format,
# ruff and shellcheck in tools/lint.sh, layering, self-containment, hadolint),
# the unit tests (ctest), the CUDA build (compile and link; GPU tests skip
# without a GPU), the integration tests (pytest, real kube-apiserver), then the
# ASan/UBSan build + unit tests (leak detection on), clang UBSan
# (float-cast-overflow, implicit truncation) + the tests labelled parsers and
# the fuzz replays, TSan + the tests labelled threads, and libFuzzer on each
# target in tests/fuzz/ for CTRAIN_FUZZ_SECONDS (10) after replaying its
# corpus. --unit runs the side lane's checks, builds and unit tests in line
# and stops before the cluster. Every C build goes through ccache (cache in
# ~/.cache/ctrain/ccache). Build trees: build/, build-asan/, build-ubsan/,
# build-tsan/, build-cuda/, build-fuzz/. Each build lane is a workflow preset
# of CMakePresets.json (`cmake --workflow --preset tsan` runs the TSan lane
# alone: configure, build what its tests need, run the tests of its labels);
# this script sets only the parallelism (CTRAIN_JOBS, default nproc).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
only_unit=0
[ "${1:-}" = "--unit" ] && only_unit=1

step() { printf "\n==> %s  (at %d s)\n" "$*" "$(($(date +%s) - t0))"; }
t0=$(date +%s)
JOBS=${CTRAIN_JOBS:-$(nproc)}
# The presets' builds and tests run this wide (cmake --build and ctest read them).
export CMAKE_BUILD_PARALLEL_LEVEL=$JOBS CTEST_PARALLEL_LEVEL=$JOBS

# The sanitizer lanes and fuzzing: builds (ccache) and CPU-bound tests that
# need no cluster. A full run starts them once the integration tests are done,
# beside the rest of the e2e tests (which mostly wait on pods and nodes);
# --unit runs them in line.
# The static checks: formatting, linters, layering, self-containment.
checks() {
  step "format check"
  bash tools/format.sh --check

  step "lint (ruff on Python, shellcheck on shell)"
  bash tools/lint.sh

  step "layering check (common < kube < controller; common < worker)"
  bash tools/layering.sh

  step "self-contained: nothing refers to a file outside the repository"
  # The patterns are spelled so that this line does not match them itself.
  if git grep -n -e '\.\.[/]shared' -e '/work[/]shared'; then
    echo "these lines refer outside the repository (the contract is docs/design.md)" >&2
    exit 1
  fi
  echo "self-contained: clean"

  step "Dockerfile lint (hadolint)"
  hadolint Dockerfile && echo "hadolint: Dockerfile clean"
}

# The unit tests of the CPU build (its test preset: every test of build/), and
# the CUDA lane (the tests labelled gpu; they skip without a GPU).
unit_tests() {
  step "unit tests"
  ctest --preset default

  step "CUDA build (compile and link the GPU path) and its tests"
  cmake --workflow --preset cuda
}

# The sanitizer lanes, each CMakePresets.json's workflow preset of that name:
# its configure preset's flags, its build preset's targets (the lane's tests:
# ctrain_lane_<label>, CMakeLists.txt), its test preset's labels and
# sanitizer options.
sanitizers() {
  step "sanitizer build (ASan+UBSan) and unit tests"
  cmake --workflow --preset asan

  step "clang UBSan build (float-cast-overflow, implicit truncation) and the parsers' unit tests"
  # gcc's UBSan above lacks these checks: a double from JSON cast to int out of
  # range (float-cast-overflow) and an implicit narrowing that changes a value
  # (implicit-integer-truncation). Kept fast: the tests labelled parsers (the
  # modules that turn foreign bytes into numbers: common, kube, controller, the
  # worker's parsers and progress port) and the fuzz corpora replays.
  cmake --workflow --preset clang-ubsan

  step "ThreadSanitizer build and the unit tests that run threads"
  cmake --workflow --preset tsan

  step "fuzzing: libFuzzer, each corpus replayed, then every target ${CTRAIN_FUZZ_SECONDS:-10} s"
  cmake --workflow --preset fuzz
  bash tools/fuzz.sh "${CTRAIN_FUZZ_SECONDS:-10}"
  if command -v ccache >/dev/null; then ccache --show-stats | grep -iE '^ *(hits|misses)' || true; fi
}

step "setup"
bash tools/setup.sh

# Every C/CUDA build below goes through ccache, its cache outside the repo
# (keyed by the preprocessed source, compiler and flags; paths relative to the
# clone, so a fresh clone hits what the last run compiled).
if command -v ccache >/dev/null; then
  export CCACHE_DIR=${CTRAIN_CACHE:-$HOME/.cache/ctrain}/ccache CCACHE_BASEDIR=$ROOT \
    CCACHE_NOHASHDIR=true CCACHE_MAXSIZE=${CCACHE_MAXSIZE:-4G}
  export CMAKE_C_COMPILER_LAUNCHER=ccache CMAKE_CUDA_COMPILER_LAUNCHER=ccache
  ccache --zero-stats >/dev/null
fi

step "CPU build (RelWithDebInfo, -Werror)"
cmake --preset default >/dev/null
cmake --build --preset default

if ((only_unit)); then
  checks
  unit_tests
  sanitizers
  echo "unit-only run done in $(($(date +%s) - t0)) s"
  exit 0
fi

step "local control plane and node (Kubernetes, CoreDNS, crictl, kube-router from Go modules, cached)"
bash tools/localcluster/build.sh
bash tools/localcluster/build-node.sh

step "S3-compatible server for test_s3 (versitygw from its Go module, cached by version)"
GOFLAGS=-p="$JOBS" bash tools/s3/server.sh build >/dev/null

step "Kueue for the gang-admission e2e test (from its Go module, cached by version)"
GOFLAGS=-p="$JOBS" bash tools/kueue/build.sh >/dev/null

step "KWOK, the fake nodes of the scale smoke test_scale (from its Go module, cached by version)"
KWOK_GO_P="$JOBS" bash tools/kwok/build.sh >/dev/null

step "Helm for the chart tests (from its Go module, cached by version)"
CTRAIN_GO_P="$JOBS" bash tools/helm/build.sh >/dev/null

step "Prometheus and promtool for the monitoring tests (from their Go module, cached by version)"
CTRAIN_GO_P="$JOBS" bash tools/prometheus/build.sh >/dev/null
CTRAIN_GO_P="$JOBS" bash tools/prometheus/build.sh promtool >/dev/null

step "images (ctrain from the Dockerfile, the pause image; cached by input hash)"
bash tools/image/build.sh pause
bash tools/image/build.sh ctrain

step "TensorFlow 2.21 venv for the Keras re-score tests (tf-keras, Keras 3; pinned wheels by hash; cached by version)"
# bench/train.py's tf_venv(): test_worker_keras.py's test_keras_rescores_our_weights
# builds our model with real Keras from the same JSON and scores our weights;
# without the venv it would skip.
python3 -c 'import sys; sys.path.insert(0, "bench"); import train; print(train.tf_venv())'

step "e2e tests (two real nodes), and beside them: static checks, unit tests, integration tests (real kube-apiserver), sanitizers, fuzzing"
# The e2e tests are the long pole and mostly wait on pods and nodes, so
# everything else runs beside them in one side lane, in this order: the static
# checks, the unit tests and the CUDA build, the integration tests (their own control plane:
# cluster.sh picks free ports; they run no node and change nothing on the
# host), then the sanitizer builds with their unit tests, and fuzzing. Its
# log is printed when both lanes are done.
export CTRAIN_BUILD_DIR=$ROOT/build
tmp=$(mktemp -d /tmp/ctrain-test.XXXXXX)
set +e
(
  set +e
  (set -e; checks; unit_tests)
  echo "$?" >"$tmp/unit.rc"
  python3 -m pytest -v -p no:cacheprovider --durations=15 --basetemp="$tmp/it" tests/integration \
    python/ctrain_keras/tests/test_server.py
  echo "$?" >"$tmp/it.rc"
  (set -e; sanitizers)
  echo "$?" >"$tmp/san.rc"
) >"$tmp/side.log" 2>&1 &
side_pid=$!
python3 -m pytest -v -p no:cacheprovider --durations=15 --basetemp="$tmp/e2e" tests/e2e
e2e_rc=$?
wait "$side_pid"
unit_rc=$(cat "$tmp/unit.rc" 2>/dev/null || echo 1)
it_rc=$(cat "$tmp/it.rc" 2>/dev/null || echo 1)
san_rc=$(cat "$tmp/san.rc" 2>/dev/null || echo 1)
set -e
step "the side lane's output: static checks, unit tests, integration tests, sanitizers, fuzzing (beside the e2e tests)"
cat "$tmp/side.log"
rm -rf "$tmp"
echo "tools/test.sh: checks and unit rc=$unit_rc, integration rc=$it_rc, sanitizers and fuzzing rc=$san_rc," \
  "e2e rc=$e2e_rc;" \
  "total $(($(date +%s) - t0)) s"
((unit_rc == 0 && it_rc == 0 && san_rc == 0 && e2e_rc == 0))
