#!/usr/bin/env bash
# prom_screenshot.sh - docs/img/prometheus-restart.png: Prometheus' graph page, in Debian's
# headless Chromium, of a TrainingJob's loss and samples/s (the leader's per-job series,
# docs/operations.md "Per-job series") across a forced gang restart. A developer tool, not
# part of CI.
#
#   flock /tmp/ctrain-cluster.lock bash tools/prom_screenshot.sh [OUT.png]
#                                   # default docs/img/prometheus-restart.png
#
# What it does, one line per step (the steps' own output goes to a log file, named at the
# start): on the local cluster (below), installs the CRD and the controller (`kubectl apply
# --server-side -k manifests/crds`, `-k manifests/`); starts Prometheus on 127.0.0.1,
# scraping the leader's /metrics every 2 s; runs examples/fashion-mnist.yaml with
# --epochs=$EPOCHS (default 150: about 3 minutes on 2 cores; the controller polls the chief
# every 10 s) in a namespace of its own ($NS, default ctrain-prom-shot; its checkpoint claim
# bound to a hostPath PV made here); deletes the pod fashion-mnist-worker-1 once the job's
# status.progress shows epoch EPOCHS*2/5 (a disruption: the controller restarts the gang,
# which resumes from its newest backup); waits for Succeeded; checks through the HTTP API
# that Prometheus holds the job's loss and its disruption; then screenshots /graph with
# three graphs over the job's whole run: ctrain_job_loss, ctrain_job_samples_per_second, and
# ctrain_job_disruptions_total with ctrain_job_phase{phase="Restarting"}.
#
# The cluster: the one in $CTRAIN_PROMSHOT_CLUSTER (a cluster.sh directory, e.g.
# /tmp/ctrain-demo/cluster after `tools/demo.sh`) when that is set and up, used as it is
# (its ctrain image; the controller applied over it) and left up, only this tool's namespace
# and PV removed at the end. Otherwise one of its own in $DIR/cluster (cluster.sh up,
# node.sh up --nodes 1 with the image of tools/image/build.sh ctrain), taken down at the end
# (cluster.sh down: the node first, what it did to the host undone). Either way the exit
# (success, failure or ^C) stops Prometheus and removes $DIR (CTRAIN_PROMSHOT_DIR, default
# /tmp/ctrain-prom-shot); KEEP=1 leaves all of it up and in place instead (take it down
# later with `bash tools/localcluster/cluster.sh down --dir $DIR/cluster; rm -rf $DIR`; under
# flock, the processes left up hold the lock until then).
# The machine's one local cluster is shared: run it under `flock /tmp/ctrain-cluster.lock`.
#
# Prometheus: Debian's package (apt-get install prometheus, 2.42), for its graph page (the
# classic UI ships in the package; tools/prometheus/build.sh builds the Go module without the
# web UI's assets). Debian's has no Kubernetes discovery, so the target is the leader's pod
# IP (the endpoint of the Service ctrain-controller-metrics, routed from this host as the
# e2e test's Prometheus reaches it), with the shipped job's job label and honor_labels.
# Needs root, chromium (apt-get install chromium) and what tools/demo.sh installs and
# builds (its first run).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
# shellcheck source=lib/steps.sh
. tools/lib/steps.sh

OUT=${1:-$ROOT/docs/img/prometheus-restart.png}
case $OUT in /*) ;; *) OUT=$PWD/$OUT ;; esac
DIR=${CTRAIN_PROMSHOT_DIR:-/tmp/ctrain-prom-shot}
NS=${NS:-ctrain-prom-shot}
EPOCHS=${EPOCHS:-150}
JOB=fashion-mnist
PV=$NS-checkpoints
SCRAPE=2s
WAIT=${WAIT:-1800} # seconds for the job, from its start to Succeeded
t0=$SECONDS

die() {
  echo "prom_screenshot: $*" >&2
  exit 1
}
if ! [[ $EPOCHS =~ ^[0-9]+$ ]] || ((EPOCHS < 5)); then die "EPOCHS takes a number >= 5, not '$EPOCHS'"; fi
[ "$(id -u)" -eq 0 ] || die "run as root (the node runs containerd, runc and iptables)"
command -v chromium >/dev/null || die "chromium is missing (apt-get install chromium)"
if ! [ -x /usr/bin/prometheus ] || ! [ -d /usr/share/prometheus/web ]; then
  die "Debian's prometheus is missing (apt-get install --no-install-recommends prometheus)"
fi
if flock -n /tmp/ctrain-cluster.lock true 2>/dev/null; then
  echo "prom_screenshot: note: /tmp/ctrain-cluster.lock is not held; others may be using the" \
    "local cluster (run: flock /tmp/ctrain-cluster.lock bash $0)" >&2
fi

OWN=1
CLUSTER=$DIR/cluster
if [[ -n ${CTRAIN_PROMSHOT_CLUSTER:-} ]]; then
  [[ -f $CTRAIN_PROMSHOT_CLUSTER/env ]] || die "no cluster in $CTRAIN_PROMSHOT_CLUSTER"
  CLUSTER=$CTRAIN_PROMSHOT_CLUSTER OWN=0
fi
[[ $CLUSTER != "$DIR"/* ]] || [[ ! -e $DIR ]] ||
  die "$DIR exists (a KEEP=1 run's? bash tools/localcluster/cluster.sh down --dir $DIR/cluster; rm -rf $DIR)"
mkdir -p "$DIR"

LOGS=${CTRAIN_CACHE:-$HOME/.cache/ctrain}/logs
LOG=$LOGS/prom-shot-$(date +%Y%m%d-%H%M%S).log
if ((OWN)); then TOTAL=9; else TOTAL=6; fi
steps_begin prom_screenshot "$TOTAL" "$LOG" "${VERBOSE:-0}"
echo "prom_screenshot: the steps' output goes to $LOG"

PROM_PID="" STARTED=0
cleanup() {
  local rc=$?
  set +e
  if [[ -n ${KEEP:-} ]]; then
    echo "prom_screenshot: KEEP: left up: the cluster in $CLUSTER, Prometheus (pid $PROM_PID," \
      "http://127.0.0.1:${PROM_PORT:-?}), $DIR"
    exit "$rc"
  fi
  echo "prom_screenshot: cleaning up (log: $LOG)"
  {
    if [[ -n $PROM_PID ]]; then
      kill "$PROM_PID" 2>/dev/null
      wait "$PROM_PID" 2>/dev/null
    fi
    if ((OWN)); then
      ((STARTED)) && bash tools/localcluster/cluster.sh down --dir "$CLUSTER"
    elif [[ -n ${KUBECONFIG:-} ]]; then
      kubectl delete namespace "$NS" --ignore-not-found --wait=true --timeout=120s
      kubectl delete pv "$PV" --ignore-not-found --wait=true --timeout=60s
    fi
    rm -rf "$DIR"
  } >>"$LOG" 2>&1
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

build_images() {
  bash tools/image/build.sh ctrain | tail -1 >"$DIR/image.path"
  bash tools/image/build.sh pause >/dev/null
  [ -s "$DIR/image.path" ]
}
install_controller() {
  kubectl apply --server-side -k manifests/crds
  local deadline=$((SECONDS + 120)) crd=crd/trainingjobs.ctrain.dev
  until [[ $(kubectl get "$crd" -o 'jsonpath={.status.conditions[?(@.type=="Established")].status}' \
    2>/dev/null) == True ]]; do
    ((SECONDS < deadline)) || { echo "$crd is not Established after 120 s"; return 1; }
    sleep 0.5
  done
  kubectl apply --server-side -k manifests/
  kubectl rollout status deployment/ctrain-controller -n ctrain-system --timeout=300s
  # The leader labels its pod; the Service's endpoint is that pod.
  deadline=$((SECONDS + 120))
  local ep=""
  until [[ $ep == *:* ]]; do
    ((SECONDS < deadline)) || { echo "no endpoint for ctrain-controller-metrics after 120 s"; return 1; }
    sleep 1
    ep=$(kubectl get endpointslices -n ctrain-system -l kubernetes.io/service-name=ctrain-controller-metrics \
      -o jsonpath='{.items[0].endpoints[0].addresses[0]}:{.items[0].ports[0].port}' 2>/dev/null || true)
  done
  echo "$ep" >"$DIR/target"
  kubectl get pods -n ctrain-system -o wide
}
apply_job() {
  kubectl create namespace "$NS"
  mkdir -p "$DIR/checkpoints"
  chown 65532:65532 "$DIR/checkpoints"
  # examples/local-pv.yaml's PV, for this namespace's claim and this run's directory.
  kubectl apply -f - <<EOF
apiVersion: v1
kind: PersistentVolume
metadata:
  name: $PV
spec:
  capacity:
    storage: 10Gi
  accessModes: [ReadWriteMany, ReadWriteOnce]
  persistentVolumeReclaimPolicy: Retain
  claimRef:
    namespace: $NS
    name: ctrain-checkpoints
  hostPath:
    path: $DIR/checkpoints
    type: Directory
EOF
  sed "s/--epochs=5\$/--epochs=$EPOCHS/" examples/fashion-mnist.yaml >"$DIR/job.yaml"
  grep -q -- "--epochs=$EPOCHS\$" "$DIR/job.yaml"
  kubectl apply -n "$NS" -f "$DIR/job.yaml"
  local deadline=$((SECONDS + 600)) epoch=""
  until [[ -n $epoch ]]; do # the controller's first poll of the chief's /progress
    ((SECONDS < deadline)) || { kubectl get tj,pods -n "$NS" -o wide; return 1; }
    sleep 1
    epoch=$(kubectl get tj "$JOB" -n "$NS" -o jsonpath='{.status.progress.epoch}')
  done
  kubectl get tj,pods -n "$NS" -o wide
}
job_field() { kubectl get tj "$JOB" -n "$NS" -o jsonpath="{$1}" 2>/dev/null || true; }
job_state() { job_field '.status.conditions[-1:].type'; }
wait_epoch_and_restart() {
  local at=$((EPOCHS * 2 / 5)) deadline=$((SECONDS + WAIT)) epoch=0
  while ((epoch < at)); do
    ((SECONDS < deadline)) || { echo "epoch $epoch of $at after $WAIT s"; return 1; }
    [[ $(job_state) != Failed && $(job_state) != Succeeded ]] || { echo "ended: $(job_state)"; return 1; }
    sleep 1
    epoch=$(job_field .status.progress.epoch)
    epoch=${epoch:-0}
  done
  date +%s >"$DIR/restart.at"
  kubectl delete pod "$JOB-worker-1" -n "$NS" --wait=false
  until [[ $(job_field .status.disruptions) == 1 ]]; do
    ((SECONDS < deadline)) || { echo "no disruption counted"; return 1; }
    sleep 1
  done
  kubectl get tj "$JOB" -n "$NS" -o wide
}
wait_succeeded() {
  local deadline=$((SECONDS + WAIT)) state=""
  while [[ $state != Succeeded ]]; do
    [[ $state != Failed ]] || { kubectl get tj "$JOB" -n "$NS" -o yaml; return 1; }
    ((SECONDS < deadline)) || { echo "not Succeeded after $WAIT s"; return 1; }
    sleep 2
    state=$(job_state)
  done
  kubectl get tj "$JOB" -n "$NS" -o wide
  kubectl logs "$JOB-worker-0" -n "$NS" | grep -E 'backup: resuming|test accuracy'
  sleep 12 # the final values in a few more scrapes
}

PROM_PORT=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
start_prometheus() {
  cat >"$DIR/prometheus.yml" <<EOF
global:
  scrape_interval: $SCRAPE
  scrape_timeout: $SCRAPE
scrape_configs:
- job_name: ctrain-controller-metrics
  honor_labels: true
  static_configs:
  - targets: ['$(<"$DIR/target")']
EOF
  cat "$DIR/prometheus.yml"
}
prom_query() { # PROMQL: the first result's value, empty for none
  curl -sfG "http://127.0.0.1:$PROM_PORT/api/v1/query" --data-urlencode "query=$1" |
    python3 -c 'import json, sys; r = json.load(sys.stdin)["data"]["result"]; print(r[0]["value"][1] if r else "")'
}
wait_up() {
  local deadline=$((SECONDS + 60))
  until [[ $(prom_query 'up{job="ctrain-controller-metrics"}' 2>/dev/null) == 1 ]]; do
    kill -0 "$PROM_PID" 2>/dev/null || { tail -20 "$DIR/prometheus.log"; return 1; }
    ((SECONDS < deadline)) || { tail -20 "$DIR/prometheus.log"; return 1; }
    sleep 1
  done
  echo "up: the leader at $(<"$DIR/target")"
}

if ((OWN)); then
  step "building the ctrain and pause images (tools/image/build.sh; cached after the first run)" build_images
  STARTED=1
  step "starting the control plane (tools/localcluster/cluster.sh up --dir $CLUSTER)" \
    bash tools/localcluster/cluster.sh up --dir "$CLUSTER"
  # shellcheck disable=SC1091
  . "$CLUSTER/env"
  step "starting a node, importing the image (tools/localcluster/node.sh up)" \
    bash tools/localcluster/node.sh up --dir "$CLUSTER" --nodes 1 --image "$(<"$DIR/image.path")"
else
  # shellcheck disable=SC1091
  . "$CLUSTER/env"
  kubectl get nodes >>"$LOG" 2>&1 || die "the cluster in $CLUSTER does not answer"
fi
step "installing the CRD and the controller (kubectl apply --server-side -k manifests/crds, -k manifests/)" \
  install_controller
start_prometheus >>"$LOG" 2>&1
prometheus --config.file="$DIR/prometheus.yml" --storage.tsdb.path="$DIR/prometheus" \
  --web.listen-address="127.0.0.1:$PROM_PORT" >"$DIR/prometheus.log" 2>&1 &
PROM_PID=$!
step "starting Prometheus (Debian's) on 127.0.0.1:$PROM_PORT, scraping the leader every $SCRAPE" wait_up
t_job=$(date +%s)
step "applying examples/fashion-mnist.yaml with --epochs=$EPOCHS in namespace $NS; waiting for its first progress" \
  apply_job
step "training; once the status shows epoch $((EPOCHS * 2 / 5)), deleting pod $JOB-worker-1 (a disruption: gang restart from the backup)" \
  wait_epoch_and_restart
step "training to the end (Succeeded)" wait_succeeded
t_end=$(date +%s)
steps_note "$(kubectl get tj "$JOB" -n "$NS" --no-headers -o wide 2>>"$LOG" | tr -s ' ')"

shoot() {
  # One job in this Prometheus: its name selects it (the legends show every label).
  local sel="job_name=\"$JOB\"" range=$(($(date +%s) - t_job + 20)) n d r
  n=$(prom_query "count_over_time(ctrain_job_loss{$sel}[${range}s])")
  d=$(prom_query "max_over_time(ctrain_job_disruptions_total{$sel}[${range}s])")
  r=$(prom_query "count_over_time((ctrain_job_phase{$sel,phase=\"Restarting\"} == 1)[${range}s:2s])")
  echo "Prometheus: $n samples of the loss, disruptions $d, ${r:-no} 2-s points Restarting" |
    tee "$DIR/prom.txt"
  if [[ -z $n ]] || ((n < 10)); then echo "too few loss samples: '$n'"; return 1; fi
  [[ $d == 1 ]] || { echo "no disruption in Prometheus: '$d'"; return 1; }
  # Three graphs over the job's run (end: now), a point every 2 s.
  local exprs=("ctrain_job_loss{$sel}" "ctrain_job_samples_per_second{$sel}"
    "ctrain_job_disruptions_total{$sel} or ctrain_job_phase{$sel,phase=\"Restarting\"}")
  local q="" i
  for i in "${!exprs[@]}"; do
    q+="${q:+&}g$i.expr=$(python3 -c 'import sys, urllib.parse; print(urllib.parse.quote(sys.argv[1], safe=""))' \
      "${exprs[$i]}")&g$i.tab=0&g$i.range_input=${range}s&g$i.step_input=2"
  done
  echo "http://127.0.0.1:$PROM_PORT/graph?$q" | tee "$DIR/url"
  local sandbox=()
  if [[ $EUID -eq 0 ]]; then sandbox=(--no-sandbox); fi # Chromium refuses root with its sandbox
  # --virtual-time-budget: the page's queries and the graphs' drawing finish before the shot.
  timeout 120 chromium --headless "${sandbox[@]}" --disable-gpu --hide-scrollbars \
    --window-size=1400,2260 --virtual-time-budget=20000 --screenshot="$DIR/shot.png" \
    "$(<"$DIR/url")"
  [[ -s $DIR/shot.png ]]
  mkdir -p "$(dirname "$OUT")"
  cp "$DIR/shot.png" "$OUT"
}
step "screenshot of Prometheus' /graph in headless Chromium -> ${OUT#"$ROOT"/}" shoot
steps_note "$(<"$DIR/prom.txt")"
echo "prom_screenshot: $OUT ($(du -k "$OUT" | cut -f1) KiB) in $((SECONDS - t0)) s; the restart at" \
  "$(date -u -d "@$(<"$DIR/restart.at")" +%H:%M:%S) UTC, the job $(date -u -d "@$t_job" +%H:%M:%S)-$(date -u -d "@$t_end" +%H:%M:%S)"
