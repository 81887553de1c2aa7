#!/usr/bin/env bash
# tools/kwok/run.sh - fake Nodes and a fake kubelet (KWOK) on a control plane from
# tools/localcluster/cluster.sh up, so pods schedule, run and end without
# containers: the controller at the scale of a real cluster.
#
#   run.sh up      --kubeconfig K [--nodes 1000] [--zones 4] [--dir D] [--lease-seconds 40]
#       creates Nodes kwok-0..kwok-(N-1) (label type=kwok, kubernetes.io/hostname,
#       topology.kubernetes.io/zone=zone-<i mod Z>, ctrain.dev/kwok-heartbeat=on;
#       annotation kwok.x-k8s.io/node=fake; no taint, so no toleration is needed
#       on a cluster with no other node) and starts kwok with stages.yaml, which
#       makes a bound pod Running (kwok.yaml: its parallelism) and, for a pod annotated ctrain.dev/sim-exit:
#       "<code>" (ctrain.dev/sim-after: "30s"), Succeeded (0) or Failed with that
#       exit code in its containerStatuses. kwok's log and pid go to D (default:
#       the kubeconfig's directory, kwok/). kwok renews each node's Lease every
#       quarter of --lease-seconds (40: 100 PUTs/s for 1000 nodes, as real kubelets);
#       on a starved 2-core machine renewals fall behind and kube-controller-manager
#       marks nodes NotReady (so their pods not ready): give it a node grace
#       (cluster.sh's CTRAIN_NODE_MONITOR_GRACE) well above the lease, as
#       bench/scale.py does (--lease-seconds 120, grace 300s).
#   run.sh down    --kubeconfig K [--dir D]
#       stops kwok and deletes the fake Nodes.
#   run.sh lose    --kubeconfig K --nodes-list "kwok-1 kwok-2 ..." | --count M
#       nodes lost in bulk: removes ctrain.dev/kwok-heartbeat from them (the first
#       M by default), so kwok stops renewing their Leases and touching their pods;
#       kube-controller-manager marks them NotReady after its grace period
#       (CTRAIN_NODE_MONITOR_GRACE of cluster.sh, 50 s by default).
#   run.sh restore --kubeconfig K [--nodes-list ... | --count M]
#       puts the label back: kwok heartbeats them again.
# Needs kwok (tools/kwok/build.sh, cached) and kubectl (PATH, or cluster.sh's).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)

cmd=${1:-}
shift || true
kc="" nodes=1000 zones=4 dir="" list="" count="" lease=40
while [ $# -gt 0 ]; do
  case $1 in
    --kubeconfig) kc=$2; shift 2 ;;
    --nodes) nodes=$2; shift 2 ;;
    --zones) zones=$2; shift 2 ;;
    --dir) dir=$2; shift 2 ;;
    --nodes-list) list=$2; shift 2 ;;
    --count) count=$2; shift 2 ;;
    --lease-seconds) lease=$2; shift 2 ;;
    *) echo "run.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
[ -n "$kc" ] || { echo "usage: run.sh up|down|lose|restore --kubeconfig K [...]" >&2; exit 2; }
dir=${dir:-$(dirname "$kc")/kwok}
mkdir -p "$dir"
kubectl=${KUBECTL:-$(command -v kubectl || true)}
if [ -z "$kubectl" ]; then
  kubectl="$(bash "$here/../localcluster/build.sh")/kubectl"
fi
k() { "$kubectl" --kubeconfig "$kc" "$@"; }

node_yaml() { # i zones
  cat <<NODE
---
apiVersion: v1
kind: Node
metadata:
  name: kwok-$1
  annotations:
    kwok.x-k8s.io/node: fake
    node.alpha.kubernetes.io/ttl: "0"
  labels:
    type: kwok
    kubernetes.io/hostname: kwok-$1
    kubernetes.io/os: linux
    kubernetes.io/arch: amd64
    topology.kubernetes.io/zone: zone-$(($1 % $2))
    ctrain.dev/kwok-heartbeat: "on"
NODE
}

pick() { # the nodes to lose/restore
  if [ -n "$list" ]; then
    echo "$list"
  else
    k get nodes -l type=kwok -o name | sed 's|^node/||' | sort -t- -k2 -n | head -n "${count:-1}"
  fi
}

case $cmd in
  up)
    bin=$(bash "$here/build.sh")
    if [ -f "$dir/kwok.pid" ] && kill -0 "$(cat "$dir/kwok.pid")" 2>/dev/null; then
      echo "run.sh: kwok already runs (pid $(cat "$dir/kwok.pid"))" >&2
    else
      # 10.128.0.0/10: pod IPs for 4M pods; kwok's default /24 runs out at 254.
      nohup "$bin" --kubeconfig "$kc" --config "$here/kwok.yaml" --config "$here/stages.yaml" \
        --manage-nodes-with-label-selector=ctrain.dev/kwok-heartbeat=on \
        --node-lease-duration-seconds="$lease" --cidr=10.128.0.0/10 \
        --server-address=127.0.0.1:0 >"$dir/kwok.log" 2>&1 &
      echo $! >"$dir/kwok.pid"
    fi
    have=$(k get nodes -l type=kwok -o name | wc -l)
    if [ "$have" -lt "$nodes" ]; then
      for ((i = have; i < nodes; i++)); do node_yaml "$i" "$zones"; done |
        k apply --server-side -f - >/dev/null
    fi
    # Ready: every fake node (kwok marks them; slow only when kwok is not running).
    deadline=$((SECONDS + 300))
    while :; do
      ready=$(k get nodes -l type=kwok --no-headers 2>/dev/null | awk '$2 == "Ready"' | wc -l)
      [ "$ready" -ge "$nodes" ] && break
      kill -0 "$(cat "$dir/kwok.pid")" 2>/dev/null ||
        { echo "run.sh: kwok exited; see $dir/kwok.log" >&2; tail -20 "$dir/kwok.log" >&2; exit 1; }
      ((SECONDS < deadline)) || { echo "run.sh: $ready of $nodes fake nodes Ready after 300 s" >&2; exit 1; }
      sleep 1
    done
    echo "run.sh: $nodes fake nodes Ready over $zones zones; kwok pid $(cat "$dir/kwok.pid"), log $dir/kwok.log" >&2
    ;;
  down)
    if [ -f "$dir/kwok.pid" ]; then
      pid=$(cat "$dir/kwok.pid")
      kill "$pid" 2>/dev/null || true
      for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
      kill -9 "$pid" 2>/dev/null || true
      rm -f "$dir/kwok.pid"
    fi
    k delete nodes -l type=kwok --wait=false >/dev/null 2>&1 || true
    ;;
  lose)
    # shellcheck disable=SC2046
    k label nodes $(pick) ctrain.dev/kwok-heartbeat- >/dev/null
    ;;
  restore)
    if [ -z "$list" ]; then
      list=$(k get nodes -l 'type=kwok,!ctrain.dev/kwok-heartbeat' -o name | sed 's|^node/||' |
        sort -t- -k2 -n | head -n "${count:-100000}")
    fi
    # shellcheck disable=SC2086
    k label --overwrite nodes $list ctrain.dev/kwok-heartbeat=on >/dev/null
    ;;
  *)
    echo "usage: run.sh up|down|lose|restore --kubeconfig K [...]" >&2
    exit 2
    ;;
esac
