#!/usr/bin/env bash
# tools/demo.sh - the demo: a TrainingJob on the local cluster, end to end.
#
#   bash tools/demo.sh [--nodes N] [--cnn] [--verbose]
#                             install what is missing, build, start the local
#                             control plane and N real nodes (default 1; each
#                             containerd, kubelet, kube-proxy; CoreDNS on the
#                             first; node.sh names them ctrain-node,
#                             ctrain-node-2, ...), build the ctrain image from
#                             the Dockerfile, install the controller with
#                             `kubectl apply --server-side -k manifests/crds` and
#                             `-k manifests/`, apply
#                             examples/fashion-mnist.yaml and follow the chief's
#                             `kubectl logs` to the end; --cnn: the CNN from
#                             Keras JSON instead (examples/fashion-mnist-cnn.yaml,
#                             10 epochs: test accuracy 0.9322 in 156 s
#                             from the command on a warm cluster, 2 cores
#                             with AVX-512, 2026-12-03)
#   bash tools/demo.sh down   stop the node and the cluster, undo their host changes
#
# What it prints: one line per step, what it does and how long it took
# ("[2/9] building Kubernetes ... done in 612 s"), then the chief's epochs, the
# test accuracy, `kubectl get tj` and the model's path. The steps' own output (apt,
# mmdebstrap, go, buildah, kubectl) goes to a log file, named once at the start:
# $CTRAIN_DEMO_LOG, default ${CTRAIN_CACHE:-~/.cache/ctrain}/logs/demo-<date>.log (the
# newest 10 are kept). A failed step prints its name, its exit status and the last 30
# lines of the log. --verbose (or CTRAIN_DEMO_VERBOSE=1) streams everything as well.
#
# Root is needed: the node runs containerd, runc, the CNI bridge and iptables.
# A second run reuses the builds, the image and the cluster.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=lib/steps.sh
. tools/lib/steps.sh
# shellcheck source=localcluster/versions.sh
. tools/localcluster/versions.sh

DIR=${CTRAIN_DEMO_DIR:-/tmp/ctrain-demo}
CLUSTER=$DIR/cluster
CKPT=$DIR/checkpoints # examples/local-pv.yaml's hostPath
t0=$SECONDS

usage() { sed -n '2,30p' "$0" | sed 's/^# \{0,1\}//'; }
NODES=1 VERBOSE=${CTRAIN_DEMO_VERBOSE:-0} CMD=up
EXAMPLE=examples/fashion-mnist.yaml JOB=fashion-mnist OUT=model WAIT=1800
while (($#)); do
  case "$1" in
  --nodes)
    (($# > 1)) || { echo "demo: --nodes takes a number" >&2; exit 64; }
    NODES=$2
    shift 2
    ;;
  --cnn)
    EXAMPLE=examples/fashion-mnist-cnn.yaml JOB=fashion-mnist-cnn OUT=cnn WAIT=7200
    shift
    ;;
  -v | --verbose)
    VERBOSE=1
    shift
    ;;
  down)
    CMD=down
    shift
    ;;
  -h | --help)
    usage
    exit 0
    ;;
  *)
    echo "demo: unknown argument '$1' (see: bash tools/demo.sh --help)" >&2
    exit 64
    ;;
  esac
done
[[ $NODES =~ ^[1-9]$ ]] || { echo "demo: --nodes takes 1 to 9, not '$NODES'" >&2; exit 64; }
[[ $VERBOSE == 1 ]] || VERBOSE=0

if [ "$CMD" = down ]; then
  bash tools/localcluster/cluster.sh down --dir "$CLUSTER"
  rm -rf "$DIR"
  exit 0
fi
[ "$(id -u)" -eq 0 ] || { echo "demo: run as root (the node runs containerd, runc and iptables)" >&2; exit 1; }
[ "$DIR" = /tmp/ctrain-demo ] || echo "demo: note: examples/local-pv.yaml points at /tmp/ctrain-demo/checkpoints" >&2
mkdir -p "$DIR"
EPOCHS=$(grep -o -- '--epochs=[0-9]*' "$EXAMPLE" | head -1 | cut -d= -f2)

LOGS=${CTRAIN_CACHE:-$HOME/.cache/ctrain}/logs
LOG=${CTRAIN_DEMO_LOG:-$LOGS/demo-$(date +%Y%m%d-%H%M%S).log}
if [ -z "${CTRAIN_DEMO_LOG:-}" ] && [ -d "$LOGS" ]; then # keep the newest 10 (with this one)
  find "$LOGS" -maxdepth 1 -name 'demo-*.log' -printf '%T@ %p\n' | sort -rn | tail -n +10 |
    cut -d' ' -f2- | while IFS= read -r old; do rm -f -- "$old"; done
fi
steps_begin demo 9 "$LOG" "$VERBOSE"
echo "demo: a TrainingJob on a local Kubernetes cluster, in 9 steps."
echo "demo: the steps' output (apt, mmdebstrap, go, buildah, kubectl) goes to $LOG"
((VERBOSE)) || echo "demo: (--verbose shows it here as well)"

# What is cached already: the long builds say so instead of their first-run time.
cached() { # marker...: every marker exists
  local m
  for m in "$@"; do [ -e "$m" ] || return 1; done
}
first_run() { # "first run only, ..." or "cached", by the markers after the first argument
  local when=$1
  shift
  if cached "$@"; then echo cached; else echo "first run only, $when"; fi
}
K8S_WHEN=$(first_run "~10-15 min on 2 cores" "$K8S_BIN_DIR/.complete")
NODE_WHEN=$(first_run "a few minutes" "$CTRAIN_CACHE/coredns-$COREDNS_VERSION/bin/.complete" \
  "$CTRAIN_CACHE/cri-tools-$CRICTL_VERSION/bin/.complete" \
  "$CTRAIN_CACHE/kube-router-$KUBE_ROUTER_VERSION/bin/.complete")

# The steps. Each runs in a subshell with its output in the log: what a later
# step needs is written to a file in $DIR.
build_images() {
  bash tools/image/build.sh ctrain | tail -1 >"$DIR/image.path"
  bash tools/image/build.sh pause >/dev/null
  [ -s "$DIR/image.path" ]
}
nodes_up() {
  bash tools/localcluster/node.sh up --dir "$CLUSTER" --nodes "$NODES" --image "$(<"$DIR/image.path")"
  kubectl get nodes -o wide
}
install_controller() {
  kubectl apply --server-side -k manifests/crds
  # Established before the first TrainingJob: the apiserver serves the kind then. A
  # quiet poll: `kubectl wait --for=condition=Established` fails at once on a new CRD
  # whose status.conditions is still null, and a jsonpath filter on it prints an error.
  local deadline=$((SECONDS + 120)) crd=crd/trainingjobs.ctrain.dev
  until [[ $(kubectl get "$crd" -o 'jsonpath={.status.conditions[?(@.type=="Established")].status}' \
    2>/dev/null) == True ]]; do
    if ((SECONDS > deadline)); then
      kubectl get "$crd" -o jsonpath='{.status}'
      echo "demo: $crd is not Established after 120 s"
      return 1
    fi
    sleep 0.5
  done
  echo "$crd established"
  kubectl apply --server-side -k manifests/
  kubectl rollout status deployment/ctrain-controller -n ctrain-system --timeout=300s
  kubectl get pods -n ctrain-system -o wide
}
apply_example() {
  kubectl delete tj "$JOB" --ignore-not-found --wait=true
  kubectl delete pvc ctrain-checkpoints --ignore-not-found --wait=true
  kubectl delete pv ctrain-local-checkpoints --ignore-not-found --wait=true
  rm -rf "$CKPT"
  mkdir -p "$CKPT"
  chown 65532:65532 "$CKPT"
  kubectl apply -f examples/local-pv.yaml
  kubectl apply -f "$EXAMPLE"
  # The chief's container runs once `kubectl logs` answers; a job that ends
  # first (Failed) is told after the training step.
  local deadline=$((SECONDS + 600))
  until kubectl logs "$JOB-worker-0" >/dev/null 2>&1; do
    if kubectl get tj "$JOB" --no-headers 2>/dev/null | grep -qE ' (Failed|Succeeded) '; then
      break
    fi
    if ((SECONDS > deadline)); then
      kubectl get tj,pods -o wide
      kubectl describe pods -l "ctrain.dev/job-name=$JOB"
      echo "demo: the chief's container did not start in 600 s"
      return 1
    fi
    sleep 1
  done
  kubectl get tj "$JOB"
  kubectl get pods -o wide
}

step "installing Debian packages and tools (tools/setup.sh; apt-get on the first run)" \
  bash tools/setup.sh --no-cuda
step "building Kubernetes $K8S_VERSION and etcd $ETCD_VERSION from their Go modules ($K8S_WHEN)" \
  bash tools/localcluster/build.sh
step "building the node's CoreDNS, crictl and kube-router from their Go modules ($NODE_WHEN)" \
  bash tools/localcluster/build-node.sh
step "building the ctrain image from the Dockerfile with buildah (first run a few minutes, then cached)" \
  build_images
step "starting the control plane: etcd, kube-apiserver, kube-controller-manager, kube-scheduler" \
  bash tools/localcluster/cluster.sh up --dir "$CLUSTER"
# shellcheck disable=SC1091
. "$CLUSTER/env"
step "starting $NODES node(s): containerd, kubelet, kube-proxy, CoreDNS; importing the image" \
  nodes_up
k8s=$(kubectl version -o json 2>>"$LOG" |
  python3 -c 'import json,sys; print(json.load(sys.stdin)["serverVersion"]["gitVersion"])' 2>>"$LOG" || true)
nodes=$(kubectl get nodes --no-headers 2>>"$LOG" | awk '{printf "%s%s %s", n++ ? ", " : "", $1, $2}' || true)
steps_note "kube-apiserver ${k8s:-?}; nodes: ${nodes:-?}"
step "installing the CRD and the controller: kubectl apply --server-side -k manifests/crds, -k manifests/" \
  install_controller
step "applying $EXAMPLE (2 workers, a shared checkpoint claim); waiting for the chief to start" \
  apply_example

# The point of the demo: the chief's epochs, on stdout as they come; after a gang
# restart, the new chief's (it resumes from the newest backup).
chief=$JOB-worker-0
job_state() { kubectl get tj "$JOB" -o jsonpath='{.status.conditions[-1:].type}' 2>>"$LOG" || true; }
echo "[9/9] training $EPOCHS epochs on 2 workers: kubectl logs -f $chief (the epochs, then the test accuracy)"
printf '\ndemo: [9/9] training: kubectl logs -f %s (%s)\n' "$chief" "$(date -Is)" >>"$LOG"
t1=$SECONDS followed="" state=""
while ((SECONDS - t1 < WAIT)); do
  state=$(job_state)
  [[ $state == Succeeded || $state == Failed ]] && break
  uid=$(kubectl get pod "$chief" -o jsonpath='{.metadata.uid}' 2>>"$LOG" || true)
  if [ -n "$uid" ] && [ "$uid" != "$followed" ] && kubectl logs "$chief" >/dev/null 2>&1; then
    followed=$uid
    kubectl logs -f "$chief" 2>>"$LOG" |
      grep --line-buffered -E '^Epoch|[0-9]+/[0-9]+ - |test accuracy|backup: resuming' || true
    continue
  fi
  sleep 1
done
trained=$((SECONDS - t1))
{
  kubectl get tj "$JOB" -o yaml || true
  kubectl get pods -o wide || true
  kubectl logs "$chief" || true
  kubectl describe tj "$JOB" || true
} >>"$LOG" 2>&1
if [ "$state" != Succeeded ]; then
  why=$(kubectl get tj "$JOB" -o jsonpath='{.status.conditions[-1:].reason}: {.status.conditions[-1:].message}' 2>>"$LOG" || true)
  [[ $state == Failed ]] || why="not done after ${WAIT} s (state: ${state:-none})"
  steps_fail "step 9/9 failed: the job $JOB did not succeed: $why"
fi
acc=$(kubectl logs "$chief" 2>>"$LOG" | grep -o 'test accuracy: [0-9.]*' | tail -1 || true)
echo
echo "demo: done in $((SECONDS - t0)) s (training $trained s)${acc:+: $acc}"
kubectl get tj "$JOB"
echo "demo: the model is in $CKPT/$OUT/ (model.safetensors, model.json)"
echo "demo: the cluster keeps running (export KUBECONFIG=$KUBECONFIG); stop everything with: bash tools/demo.sh down"
echo "demo: the log of this run: $LOG"
