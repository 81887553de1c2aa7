#!/usr/bin/env bash
# tools/demo.sh - the demo: a TrainingJob on the local cluster, end to end.
#
#   bash tools/demo.sh        install what is missing, build, start the local
#                             control plane, the controller and a node, apply
#                             examples/fashion-mnist.yaml, follow it to the end
#   bash tools/demo.sh down   stop the controller, the node and the cluster
#
# The controller runs with a ServiceAccount token holding only the RBAC in
# manifests/. ctrain-localnode (root: network and mount namespaces) runs the
# pods as processes. A second run reuses the build and the cluster.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
DIR=${CTRAIN_DEMO_DIR:-/tmp/ctrain-demo}
CLUSTER=$DIR/cluster
say() { printf '\ndemo: %s\n' "$*"; }

stop_bg() { # name
  local f=$DIR/$1.pid
  [ -f "$f" ] || return 0
  local pid
  pid=$(cat "$f")
  if kill -0 "$pid" 2>/dev/null; then
    kill -TERM "$pid"
    for _ in $(seq 1 150); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
    kill -KILL "$pid" 2>/dev/null || true
  fi
  rm -f "$f"
}

if [ "${1:-}" = "down" ]; then
  stop_bg controller
  stop_bg localnode
  bash tools/localcluster/cluster.sh down --dir "$CLUSTER"
  rm -rf "$DIR"
  exit 0
fi
[ "$(id -u)" -eq 0 ] || { echo "demo: run as root (ctrain-localnode needs network and mount namespaces)" >&2; exit 1; }
mkdir -p "$DIR"

say "installing and building what is missing"
bash tools/setup.sh --no-cuda
cmake -S . -B build -G Ninja -DCTRAIN_CUDA=OFF >/dev/null
ninja -C build ctrain-controller ctrain-worker ctrain-localnode

say "starting the local control plane (Kubernetes built from its Go modules, cached)"
bash tools/localcluster/cluster.sh up --dir "$CLUSTER" >/dev/null
# shellcheck disable=SC1091
. "$CLUSTER/env"
kubectl version -o json | python3 -c 'import json,sys; print("demo: kube-apiserver", json.load(sys.stdin)["serverVersion"]["gitVersion"])'

say "installing the CRD and the controller's RBAC from manifests/"
for m in crd base/namespace base/serviceaccount base/leader-election rbac; do
  kubectl apply --server-side --force-conflicts -f "manifests/$m.yaml" >/dev/null
done
kubectl wait --for=condition=Established --timeout=60s crd/trainingjobs.ctrain.dev >/dev/null

# A kubeconfig with only the controller ServiceAccount's token (TokenRequest).
token=$(kubectl create token ctrain-controller -n ctrain-system --duration=12h)
server=$(kubectl config view --minify -o jsonpath='{.clusters[0].cluster.server}')
ca=$(kubectl config view --minify -o jsonpath='{.clusters[0].cluster.certificate-authority}')
umask 077
cat >"$DIR/controller.kubeconfig" <<KC
apiVersion: v1
kind: Config
clusters:
- name: local
  cluster: {server: "$server", certificate-authority: "$ca"}
users:
- name: ctrain-controller
  user: {token: "$token"}
contexts:
- name: local
  context: {cluster: local, user: ctrain-controller}
current-context: local
KC
umask 022

if ! { [ -f "$DIR/controller.pid" ] && kill -0 "$(cat "$DIR/controller.pid")" 2>/dev/null; }; then
  say "starting ctrain-controller (log: $DIR/controller.log)"
  setsid build/controller/ctrain-controller --kubeconfig "$DIR/controller.kubeconfig" \
    --leader-elect=true --leader-elect-namespace=ctrain-system --metrics-bind-address=127.0.0.1:0 \
    --log-format=text >>"$DIR/controller.log" 2>&1 </dev/null &
  echo $! >"$DIR/controller.pid"
fi
if ! { [ -f "$DIR/localnode.pid" ] && kill -0 "$(cat "$DIR/localnode.pid")" 2>/dev/null; }; then
  say "starting ctrain-localnode (log: $DIR/localnode.log)"
  setsid build/localnode/ctrain-localnode --kubeconfig "$KUBECONFIG" --node-name ctrain-demo-node \
    --state-dir "$DIR/node" --bin-dir "$ROOT/build/worker" >>"$DIR/localnode.log" 2>&1 </dev/null &
  echo $! >"$DIR/localnode.pid"
fi
for _ in $(seq 1 120); do kubectl get node ctrain-demo-node >/dev/null 2>&1 && break; sleep 0.5; done
kubectl wait --for=condition=Ready node/ctrain-demo-node --timeout=60s >/dev/null
echo "demo: node ctrain-demo-node Ready"

say "applying examples/fashion-mnist.yaml (2 workers, shared checkpoint claim)"
kubectl delete tj fashion-mnist --ignore-not-found --wait=true >/dev/null
kubectl delete pvc ctrain-checkpoints --ignore-not-found --wait=true >/dev/null
kubectl delete pv ctrain-local-checkpoints --ignore-not-found --wait=true >/dev/null
rm -rf "$DIR/node/pvc/default/ctrain-checkpoints"
kubectl apply -f examples/local-pv.yaml
kubectl apply -f examples/fashion-mnist.yaml

log=$DIR/node/logs/default_fashion-mnist-worker-0_worker.log
shown=0
state=""
deadline=$((SECONDS + 1800))
while ((SECONDS < deadline)); do
  new=$(kubectl get tj fashion-mnist -o jsonpath='{.status.conditions[-1:].type}' 2>/dev/null || true)
  if [ "$new" != "$state" ]; then
    state=$new
    kubectl get tj fashion-mnist
  fi
  if [ -f "$log" ]; then
    n=$(wc -l <"$log")
    if ((n > shown)); then
      sed -n "$((shown + 1)),${n}p" "$log" | grep -E '^Epoch|[0-9]+/[0-9]+ - |test accuracy|backup: resuming' || true
      shown=$n
    fi
  fi
  case "$state" in Succeeded | Failed) break ;; esac
  sleep 1
done
kubectl get tj fashion-mnist
kubectl get pods -o wide
if [ "$state" != Succeeded ]; then
  echo "demo: the job did not succeed (state: ${state:-none}); see $DIR/*.log and $DIR/node/logs/" >&2
  exit 1
fi
acc=$(grep -o 'test accuracy: [0-9.]*' "$log" | tail -1)
say "done: $acc"
echo "demo: the model is in $DIR/node/pvc/default/ctrain-checkpoints/model/ (model.safetensors, model.json)"
echo "demo: the cluster keeps running (KUBECONFIG=$KUBECONFIG); stop everything with: bash tools/demo.sh down"
