#!/usr/bin/env bash
# tools/gpu-check.sh - the GPU path on a machine with a GPU, in one go (< 8 min):
# builds the CUDA path with the machine's own toolkit (sm_90), runs the GPU unit
# tests (kernels and whole steps vs the CPU reference, the CNN kernels and CNN
# steps too, replicas, 1-rank NCCL, devinfo), one epoch of Fashion-MNIST
# through dmodel on CPU and GPU (test accuracy compared), then ctrain-worker
# itself: `--device gpu` (1 worker x every visible GPU) and, with 2+ GPUs, 2
# workers on loopback splitting them (CUDA_VISIBLE_DEVICES, --collective nccl;
# both must end with the same weights), and the step benchmark (samples/s GPU
# vs CPU in the same run).
# Everything is logged under $OUT (default ./gpu-check-out). Needs no network.
#
#   bash tools/gpu-check.sh --prepare   HERE (the dev machine): copies what the
#        device machine may lack into .gpu-carry/ (ignored by git): the
#        Fashion-MNIST files and cJSON/zlib/OpenSSL headers and libraries
#        (Debian builds; glibc-compatible with newer distributions).
#   bash tools/gpu-check.sh             THERE: carry .gpu-carry.
#
# Build: with cmake when pkg-config finds libcjson, yaml-0.1, openblas and
# libcurl is present (the whole project); otherwise a direct nvcc/cc build of
# the worker, its GPU tests and the bench from .gpu-carry/deps, with a naive
# cblas_sgemm when OpenBLAS is missing (the CPU reference stays right, its
# samples/s then understate OpenBLAS: the log says so).
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
CARRY=$ROOT/.gpu-carry

if [ "${1:-}" = "--prepare" ]; then
  set -e
  grep -qx '/.gpu-carry/' .git/info/exclude 2>/dev/null || echo '/.gpu-carry/' >>.git/info/exclude
  rm -rf "$CARRY" && mkdir -p "$CARRY/data" "$CARRY/deps/include" "$CARRY/deps/lib"
  cp /usr/share/datasets/fashion-mnist/*.gz "$CARRY/data/"
  cp -r /usr/include/cjson /usr/include/openssl /usr/include/zlib.h /usr/include/zconf.h \
    "$CARRY/deps/include/"
  cp /usr/include/x86_64-linux-gnu/openssl/*.h "$CARRY/deps/include/openssl/" 2>/dev/null || true
  L=/usr/lib/x86_64-linux-gnu
  for so in libcjson.so.1 libz.so.1 libcrypto.so.3; do
    cp -L "$L/$so" "$CARRY/deps/lib/$so"
    ln -sf "$so" "$CARRY/deps/lib/${so%%.so*}.so"
  done
  du -sh "$CARRY"
  exit 0
fi

OUT=${OUT:-$ROOT/gpu-check-out}
mkdir -p "$OUT"
LOG=$OUT/gpu-check.log
exec > >(tee "$LOG") 2>&1
t0=$(date +%s)
step() { printf '\n==> [%ss] %s\n' "$(($(date +%s) - t0))" "$*"; }
fails=()
run() { # name, command...: runs with a timeout, records failure
  local name=$1
  shift
  step "$name"
  timeout 240 "$@"
  local rc=$?
  ((rc == 0)) || fails+=("$name (exit $rc)")
  return 0
}
JOBS=$(nproc)
CPU_STEPS=3
CPU_WIDE=1

step "machine"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv || true
CUDA_ROOT=${CTRAIN_CUDA_ROOT:-}
[ -z "$CUDA_ROOT" ] && command -v nvcc >/dev/null && CUDA_ROOT=$(dirname "$(dirname "$(readlink -f "$(command -v nvcc)")")")
[ -z "$CUDA_ROOT" ] && [ -x /usr/local/cuda/bin/nvcc ] && CUDA_ROOT=/usr/local/cuda
[ -n "$CUDA_ROOT" ] || { echo "gpu-check: no nvcc found"; exit 1; }
export PATH=$CUDA_ROOT/bin:$PATH
nvcc --version | tail -2
cmake --version | head -1 || true
echo "CUDA toolkit: $CUDA_ROOT"

# NCCL: the toolkit's, the system's, or the nvidia-nccl wheel next to PyTorch.
NCCL_INC="" NCCL_LIB=""
for d in "$CUDA_ROOT" /usr /usr/local $(python3 -c 'import nvidia.nccl;print(list(nvidia.nccl.__path__)[0])' 2>/dev/null); do
  [ -f "$d/include/nccl.h" ] || continue
  for l in "$d/lib" "$d/lib64" "$d/lib/x86_64-linux-gnu" /usr/lib/x86_64-linux-gnu; do
    if ls "$l"/libnccl.so* >/dev/null 2>&1; then NCCL_INC=$d/include NCCL_LIB=$l; break 2; fi
  done
done
[ -n "$NCCL_INC" ] || { echo "gpu-check: nccl.h / libnccl not found"; exit 1; }
B=$ROOT/build-gpu
SHIM=$B/shim
mkdir -p "$SHIM"
# A wheel ships only libnccl.so.2: give the linker an unversioned name.
ln -sf "$(ls "$NCCL_LIB"/libnccl.so* | head -1)" "$SHIM/libnccl.so"
echo "NCCL: $NCCL_INC, $NCCL_LIB"

have_all=1
for p in libcjson yaml-0.1 openblas libcurl; do
  if pkg-config --exists "$p" 2>/dev/null; then echo "pkg-config $p: $(pkg-config --modversion $p)"; else
    echo "pkg-config $p: MISSING"
    have_all=0
  fi
done

export LD_LIBRARY_PATH=$SHIM:$NCCL_LIB:$CUDA_ROOT/lib64:$CUDA_ROOT/lib:$CARRY/deps/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
if ((have_all)); then
  step "cmake build (-DCTRAIN_CUDA=ON, sm_90)"
  cmake -S . -B "$B" -G Ninja -DCTRAIN_CUDA=ON -DCTRAIN_CUDA_ROOT="$CUDA_ROOT" \
    -DCMAKE_CUDA_ARCHITECTURES=90 -DNCCL_INCLUDE_DIR="$NCCL_INC" -DNCCL_LIBRARY="$SHIM/libnccl.so" &&
    ninja -C "$B" -j"$JOBS" ctrain-worker test_kernels test_kernels_cnn test_nccl test_devinfo \
      test_model test_optim test_replicas bench_gpu_step || { echo "gpu-check: build failed"; exit 1; }
  BIN=$B/worker TST=$B/tests/unit BEN=$B/bench
else
  step "direct build (missing packages above; deps from .gpu-carry/deps)"
  [ -d "$CARRY/deps" ] || echo "gpu-check: .gpu-carry/deps missing (run --prepare here, carry .gpu-carry)"
  mkdir -p "$B/obj" "$B/bin"
  CFLAGS=(-std=c17 -O2 -g -Wall -Wextra -D_GNU_SOURCE -DCTRAIN_HAVE_CUDA=1 -DCTRAIN_VERSION=\"gpu-check\"
    "-DCTRAIN_SOURCE_DIR=\"$ROOT\"" "-DCTRAIN_BINARY_DIR=\"$B\"" -I. -Iinclude/common -Itests/unit
    -I"$CUDA_ROOT/include" -I"$NCCL_INC" -I"$CARRY/deps/include")
  BLAS=(-lopenblas)
  if ! pkg-config --exists openblas 2>/dev/null; then
    echo "NOTE: OpenBLAS missing: the CPU reference uses tools/gpu-check/cblas_naive.c;" \
      "CPU samples/s below understate an OpenBLAS CPU"
    cc -O3 -march=native -c tools/gpu-check/cblas_naive.c -o "$B/obj/cblas_naive.o" || exit 1
    BLAS=("$B/obj/cblas_naive.o")
    CPU_STEPS=1
    CPU_WIDE=0
    mkdir -p "$B/inc" && printf '%s\n' '#include <stddef.h>' \
      'enum CBLAS_ORDER { CblasRowMajor = 101, CblasColMajor = 102 };' \
      'enum CBLAS_TRANSPOSE { CblasNoTrans = 111, CblasTrans = 112 };' \
      'void cblas_sgemm(enum CBLAS_ORDER, enum CBLAS_TRANSPOSE, enum CBLAS_TRANSPOSE, int, int, int, float, const float *, int, const float *, int, float, float *, int);' \
      >"$B/inc/cblas.h"
    CFLAGS+=(-I"$B/inc")
  else
    read -ra extra <<<"$(pkg-config --cflags openblas)"
    CFLAGS+=("${extra[@]}")
    read -ra BLAS <<<"$(pkg-config --libs openblas)"
  fi
  objs=()
  for f in common/*.c worker/*.c worker/*/*.c; do
    [ "$f" = worker/main.c ] && continue
    o=$B/obj/$(echo "$f" | tr / _).o
    cc "${CFLAGS[@]}" -c "$f" -o "$o" || { echo "gpu-check: compile $f failed"; exit 1; }
    objs+=("$o")
  done
  for f in worker/*/*.cu; do
    o=$B/obj/$(echo "$f" | tr / _).o
    nvcc -O2 -std=c++17 -arch=sm_90 -DCTRAIN_HAVE_CUDA=1 -I. -Iinclude/common -c "$f" -o "$o" ||
      { echo "gpu-check: nvcc $f failed"; exit 1; }
    objs+=("$o")
  done
  LIBS=("${BLAS[@]}" -L"$CARRY/deps/lib" -L"$SHIM" -L"$CUDA_ROOT/lib64" -L"$CUDA_ROOT/lib" -lcjson -lz -lcrypto
    -lcublas -lcudart -lnccl -lstdc++ -lpthread -lm "-Wl,-rpath,$CARRY/deps/lib")
  link() { cc "${CFLAGS[@]}" "$1" "${objs[@]}" "${LIBS[@]}" -o "$2" || { echo "gpu-check: link $2 failed"; exit 1; }; }
  link worker/main.c "$B/bin/ctrain-worker"
  for t in test_kernels test_kernels_cnn test_nccl test_devinfo test_model test_optim test_replicas; do
    link "tests/unit/$t.c" "$B/bin/$t"
  done
  link bench/bench_gpu_step.c "$B/bin/bench_gpu_step"
  BIN=$B/bin TST=$B/bin BEN=$B/bin
fi

# A test that skips exits 77 (tests/unit/test.h), which counts as a failure
# here: on a GPU machine no GPU case may skip.
for t in test_devinfo test_kernels test_kernels_cnn test_nccl test_model test_optim test_replicas; do
  run "unit: $t" "$TST/$t"
done
NGPU=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
echo "visible GPUs: $NGPU"

# The last val_accuracy of a metrics file (0 when none).
val_acc() { grep -o '"val_accuracy":[0-9.]*' "$1" 2>/dev/null | tail -1 | cut -d: -f2 || true; }

# ctrain-worker train on every visible GPU of one worker: exit 0, "replicas
# in sync: NGPU", test accuracy > 0.80 after one epoch.
fmnist_one_worker() {
  local d=$OUT/fmnist-1w
  rm -rf "$d" && mkdir -p "$d"
  env -u TF_CONFIG "$BIN/ctrain-worker" train --model examples/fashion-mnist-model.json \
    --data "$DATA/train" --test-data "$DATA/t10k" --epochs 1 --batch 128 --optimizer adam \
    --device gpu --output "$d/out" --metrics "$d/m.jsonl" --log-level debug 2>&1 | tee "$d/log"
  local rc=${PIPESTATUS[0]} acc
  acc=$(val_acc "$d/m.jsonl")
  echo "exit $rc, val_accuracy ${acc:-none}"
  ((rc == 0)) && grep -q "replicas in sync: $NGPU (workers 1 x replicas $NGPU, GPU" "$d/log" &&
    awk -v a="${acc:-0}" 'BEGIN { exit !(a > 0.80) }'
}

# Two workers on loopback, each with half the GPUs, NCCL across them: both
# exit 0 with bitwise equal weights and test accuracy > 0.80.
fmnist_two_workers() {
  local d=$OUT/fmnist-2w half=$((NGPU / 2)) p0 p1 rc0 rc1 acc pids=()
  rm -rf "$d" && mkdir -p "$d"
  p0=$((20000 + RANDOM % 20000)) p1=$((p0 + 1))
  local cluster="{\"cluster\":{\"worker\":[\"127.0.0.1:$p0\",\"127.0.0.1:$p1\"]},"
  local vis0 vis1
  vis0=$(seq -s, 0 $((half - 1))) vis1=$(seq -s, "$half" $((2 * half - 1)))
  for r in 0 1; do
    local vis=$vis0
    ((r == 1)) && vis=$vis1
    CUDA_VISIBLE_DEVICES=$vis TF_CONFIG="$cluster\"task\":{\"type\":\"worker\",\"index\":$r}}" \
      CTRAIN_JOB_TOKEN=gpu-check CTRAIN_JOB_NAME=gpu-check CTRAIN_ATTEMPT=0 \
      "$BIN/ctrain-worker" train --model examples/fashion-mnist-model.json \
      --data "$DATA/train" --test-data "$DATA/t10k" --epochs 1 --batch 128 --optimizer adam \
      --device gpu --collective nccl --output "$d/out" --metrics "$d/m$r.jsonl" \
      --rendezvous-timeout 60 --peer-timeout 30 >"$d/log$r" 2>&1 &
    pids[r]=$!
  done
  wait "${pids[0]}"; rc0=$?
  wait "${pids[1]}"; rc1=$?
  cat "$d/log0"
  acc=$(val_acc "$d/m0.jsonl")
  echo "exits $rc0 $rc1, val_accuracy ${acc:-none}"
  ((rc0 == 0 && rc1 == 0)) || { cat "$d/log1"; return 1; }
  grep -q "replicas in sync: $((2 * half)) (workers 2 x replicas $half, GPU" "$d/log0" &&
    cmp "$d/out/model.safetensors" "$d/out/.worker-1/model.safetensors" &&
    awk -v a="${acc:-0}" 'BEGIN { exit !(a > 0.80) }'
}

DATA=$CARRY/data
[ -f "$DATA/train-images-idx3-ubyte.gz" ] || DATA=/usr/share/datasets/fashion-mnist
if [ -f "$DATA/train-images-idx3-ubyte.gz" ]; then
  run "Fashion-MNIST 1 epoch through dmodel, GPU vs CPU (test accuracy)" \
    "$BEN/bench_gpu_step" --fmnist "$DATA" --skip-steps
  run "bench: training-step samples/s, GPU vs CPU" "$BEN/bench_gpu_step" --gpu-steps 100 \
    --cpu-steps "$CPU_STEPS" --cpu-wide "$CPU_WIDE"
  export -f fmnist_one_worker fmnist_two_workers val_acc
  export BIN DATA OUT NGPU
  run "ctrain-worker --device gpu: Fashion-MNIST, 1 worker x $NGPU GPU(s)" \
    bash -c fmnist_one_worker
  if ((NGPU >= 2)); then
    run "ctrain-worker: Fashion-MNIST, 2 workers x $((NGPU / 2)) GPU(s), --collective nccl" \
      bash -c fmnist_two_workers
  else
    step "2 workers splitting the GPUs: skipped ($NGPU GPU visible)"
  fi
else
  echo "gpu-check: no Fashion-MNIST files (run --prepare here and carry .gpu-carry)"
  run "bench: steps only" "$BEN/bench_gpu_step" --gpu-steps 100 --cpu-steps "$CPU_STEPS" \
    --cpu-wide "$CPU_WIDE"
fi

step "summary"
if ((${#fails[@]})); then
  printf 'FAILED: %s\n' "${fails[@]}"
  echo "gpu-check: $(($(date +%s) - t0)) s, ${#fails[@]} failure(s); log $LOG"
  exit 1
fi
echo "gpu-check: all passed in $(($(date +%s) - t0)) s; log $LOG"
