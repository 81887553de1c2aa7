#!/usr/bin/env bash
# tools/test.sh - the test command: installs what is missing, builds, and runs
# every test suite. This is what CI runs (.ci/run).
#
#   bash tools/test.sh              everything
#   bash tools/test.sh --unit       setup, format check, builds and unit tests only
#
# Steps: tools/setup.sh (Debian packages, CUDA toolkit wheels) -> clang-format
# check -> CPU build + unit tests (ctest) -> ASan/UBSan build + unit tests ->
# CUDA build (compile and link; GPU tests skip without a GPU) -> local control
# plane and node builds (cached by version) -> images (ctrain from the
# Dockerfile, pause; cached by input hash) -> integration tests (pytest, real
# kube-apiserver) and e2e tests (a real node: containerd, kubelet, kube-proxy,
# CoreDNS; the controller as its Deployment). Build trees: build/,
# build-asan/, build-cuda/.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
only_unit=0
[ "${1:-}" = "--unit" ] && only_unit=1

step() { printf '\n==> %s\n' "$*"; }
t0=$(date +%s)
JOBS=${CTRAIN_JOBS:-$(nproc)}

step "setup"
bash tools/setup.sh

step "format check"
bash tools/format.sh --check

step "Dockerfile lint (hadolint)"
hadolint Dockerfile && echo "hadolint: Dockerfile clean"

step "CPU build (RelWithDebInfo, -Werror)"
cmake -S . -B build -G Ninja -DCTRAIN_CUDA=OFF >/dev/null
ninja -C build -j"$JOBS"

step "unit tests"
(cd build && ctest --output-on-failure -j"$JOBS")

step "sanitizer build (ASan+UBSan) and unit tests"
cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=Sanitize -DCTRAIN_CUDA=OFF >/dev/null
ninja -C build-asan -j"$JOBS"
(cd build-asan && ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 \
  ctest --output-on-failure -j"$JOBS")

step "CUDA build (compile and link the GPU path)"
cmake -S . -B build-cuda -G Ninja -DCTRAIN_CUDA=ON >/dev/null
ninja -C build-cuda -j"$JOBS"
(cd build-cuda && ctest --output-on-failure -R 'devinfo|cuda|nccl|kernels' -j"$JOBS")

if ((only_unit)); then
  echo "unit-only run done in $(($(date +%s) - t0)) s"
  exit 0
fi

step "local control plane and node (Kubernetes, CoreDNS, crictl from Go modules, cached)"
bash tools/localcluster/build.sh
bash tools/localcluster/build-node.sh

step "images (ctrain from the Dockerfile, the pause image; cached by input hash)"
bash tools/image/build.sh pause
bash tools/image/build.sh ctrain

step "integration and e2e tests (real kube-apiserver, real node)"
export CTRAIN_BUILD_DIR=$ROOT/build
set +e
python3 -m pytest -v -p no:cacheprovider tests/integration tests/e2e
rc=$?
set -e
echo "tools/test.sh: total $(($(date +%s) - t0)) s"
exit $rc
