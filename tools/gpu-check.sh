#!/usr/bin/env bash
# tools/gpu-check.sh - the GPU path on a machine with a GPU, in one go (< 8 min):
# builds the CUDA path with the machine's own toolkit (sm_90), runs the GPU unit
# tests (kernels vs the CPU reference, 1-rank NCCL, devinfo), one epoch of
# Fashion-MNIST through dmodel on CPU and GPU (test accuracy compared), the
# step benchmark (samples/s GPU vs CPU in the same run), and records how
# ctrain-worker resolves --device. Everything is logged under $OUT (default
# ./gpu-check-out). Needs no network.
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
    ninja -C "$B" -j"$JOBS" ctrain-worker test_kernels test_nccl test_devinfo test_model \
      test_optim bench_gpu_step || { echo "gpu-check: build failed"; exit 1; }
  BIN=$B/worker TST=$B/tests/unit BEN=$B/bench
else
  step "direct build (missing packages above; deps from .gpu-carry/deps)"
  [ -d "$CARRY/deps" ] || echo "gpu-check: .gpu-carry/deps missing (run --prepare here, carry .gpu-carry)"
  mkdir -p "$B/obj" "$B/bin"
  CFLAGS=(-std=c17 -O2 -g -Wall -Wextra -D_GNU_SOURCE -DCTRAIN_HAVE_CUDA=1 -DCTRAIN_VERSION=\"gpu-check\"
    -DCTRAIN_SOURCE_DIR=\"$ROOT\" -DCTRAIN_BINARY_DIR=\"$B\" -Iinclude -Itests/unit
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
    CFLAGS+=($(pkg-config --cflags openblas))
    BLAS=($(pkg-config --libs openblas))
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
    nvcc -O2 -std=c++17 -arch=sm_90 -DCTRAIN_HAVE_CUDA=1 -Iinclude -c "$f" -o "$o" ||
      { echo "gpu-check: nvcc $f failed"; exit 1; }
    objs+=("$o")
  done
  LIBS=("${BLAS[@]}" -L"$CARRY/deps/lib" -L"$SHIM" -L"$CUDA_ROOT/lib64" -L"$CUDA_ROOT/lib" -lcjson -lz -lcrypto
    -lcublas -lcudart -lnccl -lstdc++ -lpthread -lm -Wl,-rpath,"$CARRY/deps/lib")
  link() { cc "${CFLAGS[@]}" "$1" "${objs[@]}" "${LIBS[@]}" -o "$2" || { echo "gpu-check: link $2 failed"; exit 1; }; }
  link worker/main.c "$B/bin/ctrain-worker"
  for t in test_kernels test_nccl test_devinfo test_model test_optim; do link "tests/unit/$t.c" "$B/bin/$t"; done
  link bench/bench_gpu_step.c "$B/bin/bench_gpu_step"
  BIN=$B/bin TST=$B/bin BEN=$B/bin
fi

for t in test_devinfo test_kernels test_nccl test_model test_optim; do run "unit: $t" "$TST/$t"; done

DATA=$CARRY/data
[ -f "$DATA/train-images-idx3-ubyte.gz" ] || DATA=/usr/share/datasets/fashion-mnist
if [ -f "$DATA/train-images-idx3-ubyte.gz" ]; then
  run "Fashion-MNIST 1 epoch through dmodel, GPU vs CPU (test accuracy)" \
    "$BEN/bench_gpu_step" --fmnist "$DATA" --skip-steps
  run "bench: training-step samples/s, GPU vs CPU" "$BEN/bench_gpu_step" --gpu-steps 100 \
    --cpu-steps "$CPU_STEPS" --cpu-wide "$CPU_WIDE"
  step "ctrain-worker --device resolution"
  for dev in gpu auto; do
    echo "\$ ctrain-worker train --device $dev ... (1 epoch)"
    timeout 240 "$BIN/ctrain-worker" train --model examples/fashion-mnist-model.json \
      --data "$DATA/train" --test-data "$DATA/t10k" --epochs 1 --batch 128 --optimizer adam \
      --lr 0.001 --device "$dev" --log-level debug
    echo "exit $?"
  done
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
