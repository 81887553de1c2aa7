#!/usr/bin/env bash
# bench/allreduce.sh - ctrain's TCP all-reduce against Gloo (ring-chunked,
# TCP transport) and Open MPI (MPI_Allreduce, TCP btl) on loopback, side by
# side in the same run, 2 and 4 ranks, 4 KiB .. 64 MiB.
#
#   bench/allreduce.sh [--rounds N] [--max-mib M] [--before BUILD_DIR] [--no-install]
#
# Installs the baselines when missing (Debian: libgloo-dev, openmpi-bin,
# libopenmpi-dev; the tests never need them), compiles bench/baselines/ into
# $CTRAIN_BUILD_DIR/bench/baselines, then runs every program once per round,
# in a rotating order, and prints one table: per rank count and size the
# median over the rounds of busbw (nccl-tests: size/time x 2(n-1)/n, time the
# mean of the repetitions) and of the median latency, with the ratios
# ctrain/Gloo and ctrain/MPI. --before BUILD_DIR adds an older ctrain build
# (its build/bench/bench_allreduce) as a fourth column, and ctrain/before.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${CTRAIN_BUILD_DIR:-$PWD/build}
ROUNDS=3
MAX_MIB=64
BEFORE=""
INSTALL=1
while (($#)); do
  case "$1" in
  --rounds) ROUNDS=$2; shift 2 ;;
  --max-mib) MAX_MIB=$2; shift 2 ;;
  --before) BEFORE=$2; shift 2 ;;
  --no-install) INSTALL=0; shift ;;
  *) echo "usage: $0 [--rounds N] [--max-mib M] [--before BUILD_DIR] [--no-install]" >&2; exit 2 ;;
  esac
done

need=()
for p in libgloo-dev openmpi-bin libopenmpi-dev; do
  dpkg -s "$p" >/dev/null 2>&1 || need+=("$p")
done
if ((${#need[@]})); then
  if ((!INSTALL)); then
    echo "allreduce.sh: missing ${need[*]} (run without --no-install)" >&2
    exit 1
  fi
  echo "allreduce.sh: installing ${need[*]}" >&2
  DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${need[@]}" >&2 ||
    { apt-get update >&2 && DEBIAN_FRONTEND=noninteractive apt-get install -y \
      --no-install-recommends "${need[@]}" >&2; }
fi

OUT=$BUILD/bench/baselines
mkdir -p "$OUT"
[ -x "$BUILD/bench/bench_allreduce" ] || ninja -C "$BUILD" -j2 bench_allreduce >&2
g++ -O2 -std=c++17 -Wall -o "$OUT/gloo_allreduce" bench/baselines/gloo_allreduce.cc -lgloo -lpthread
mpicc -O2 -std=c11 -Wall -o "$OUT/mpi_allreduce" bench/baselines/mpi_allreduce.c
if [ -n "$BEFORE" ] && [ ! -x "$BEFORE/bench/bench_allreduce" ]; then
  echo "allreduce.sh: no $BEFORE/bench/bench_allreduce" >&2
  exit 1
fi

LOG=$(mktemp -d)
trap 'rm -rf "$LOG"' EXIT

run_ctrain() { # $1: label, $2: build dir
  echo "IMPL $1"
  "$2/bench/bench_allreduce" "$MAX_MIB"
}

run_gloo() {
  for w in 2 4; do
    store=$(mktemp -d "$LOG/store.XXXXXX")
    pids=()
    for ((r = 0; r < w; r++)); do
      "$OUT/gloo_allreduce" "$r" "$w" "$store" "$MAX_MIB" &
      pids+=($!)
    done
    for p in "${pids[@]}"; do wait "$p"; done
  done
}

run_mpi() {
  for w in 2 4; do
    mpirun --mca btl tcp,self --allow-run-as-root --oversubscribe -np "$w" \
      "$OUT/mpi_allreduce" "$MAX_MIB"
  done
}

impls=(ctrain gloo mpi)
[ -n "$BEFORE" ] && impls+=(before)
for ((round = 0; round < ROUNDS; round++)); do
  echo "round $((round + 1))/$ROUNDS, load: $(cut -d' ' -f1-3 /proc/loadavg)" >&2
  n=${#impls[@]}
  for ((k = 0; k < n; k++)); do
    impl=${impls[$(((k + round) % n))]}
    case $impl in
    ctrain) run_ctrain ctrain "$BUILD" ;;
    before) run_ctrain before "$BEFORE" ;;
    gloo) run_gloo ;;
    mpi) run_mpi ;;
    esac >>"$LOG/round$round.txt"
  done
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)" >&2
python3 bench/baselines/allreduce_table.py "$LOG"/round*.txt
