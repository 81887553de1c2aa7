#!/usr/bin/env bash
# bench/kube_client: list + watch throughput and memory of the C client for N
# pods (default 10000) against `kubectl get pods -A -o json` (list) and
# `kubectl get pods -A --watch -o json` (watch) in the same run, on a fresh
# local control plane; prints the ratios. Creating 10000 pods takes ~6 min
# on 2 cores.
#   bash bench/kube_client.sh [N]
set -euo pipefail
cd "$(dirname "$0")/.."
CTRAIN_KUBE_BENCH_PODS=${1:-10000} exec python3 -m pytest -s -q -p no:cacheprovider \
  tests/integration/test_kube_bench.py
