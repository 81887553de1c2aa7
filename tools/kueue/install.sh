#!/usr/bin/env bash
# tools/kueue/install.sh - Kueue (sigs.k8s.io/kueue, built by build.sh) on the
# local control plane of tools/localcluster/cluster.sh, run out of cluster.
#
#   install.sh [up] --dir DIR   install the CRDs, RBAC (a ServiceAccount whose
#                               token the manager uses), and start the kueue
#                               manager as a host process with the `pod`
#                               integration and TrainingJob.v1alpha1.ctrain.dev
#                               as an external framework (ctrain-controller
#                               writes its Workloads); register its webhooks
#                               by URL
#   install.sh down --dir DIR   remove all of it (process, webhooks, CRDs and
#                               every Kueue object, RBAC, namespace, DIR/kueue)
#   install.sh status --dir DIR
#
# DIR is the cluster's directory (cluster.sh up --dir DIR). Kueue's files are
# in DIR/kueue: config.yaml, certs/ (a CA and a serving cert for 127.0.0.1,
# made with openssl), kubeconfig, kueue.log, pid, ports.
#
# Wiring: the apiserver runs on this host, so the webhooks are registered with
# `clientConfig.url: https://127.0.0.1:<port>/<path>` and the CA's caBundle;
# only the webhooks of the kueue.x-k8s.io objects and of pods are registered,
# and the pod webhooks only for namespaces labelled ctrain.dev/kueue=enabled
# (the same selector is Kueue's managedJobsNamespaceSelector): nothing else on
# the cluster goes through Kueue. Kueue's internal cert management is off. Its
# metrics server reads a cert from the fixed path /etc/kueue/metrics/certs:
# the manager runs in a private mount namespace (unshare -m) where /etc is an
# overlay holding that path, so the host's /etc is never touched.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
# shellcheck source=versions.sh
. "$here/versions.sh"
# shellcheck source=../localcluster/versions.sh
. "$root/tools/localcluster/versions.sh"

# shellcheck source=../localcluster/args.sh
. "$root/tools/localcluster/args.sh"

cmd=up
case "${1:-}" in up | down | status) cmd=$1 && shift ;; esac
dir_args kueue/install.sh "$@"
K=$DIR/kueue
NS=kueue-system
LABEL_KEY=ctrain.dev/kueue
LABEL_VALUE=enabled
WEBHOOK_CONFIG=ctrain-kueue

log() { printf 'kueue: %s\n' "$*" >&2; }
die() {
  log "error: $*"
  exit 1
}
kubectl() { KUBECONFIG=$DIR/kubeconfig "$K8S_BIN_DIR/kubectl" "$@"; }
free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'
}
alive() { [ -f "$K/pid" ] && kill -0 "$(cat "$K/pid")" 2>/dev/null; }

gen_certs() {
  mkdir -p "$K/certs"
  (
    cd "$K/certs"
    umask 077
    openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.crt -days 3650 \
      -subj "/CN=ctrain-kueue-ca" 2>/dev/null
    printf 'basicConstraints=CA:FALSE\nkeyUsage=digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth\nsubjectAltName=IP:127.0.0.1,DNS:localhost\n' >server.ext
    openssl req -newkey rsa:2048 -nodes -keyout tls.key -out tls.csr -subj "/CN=127.0.0.1" 2>/dev/null
    openssl x509 -req -in tls.csr -CA ca.crt -CAkey ca.key -CAcreateserial -out tls.crt \
      -days 3650 -extfile server.ext 2>/dev/null
    rm -f tls.csr
  )
}

# The module's webhooks, rewritten for an out-of-cluster server: only the
# kueue.x-k8s.io ones and the pod ones (the other integrations are off: their
# paths are not served), `url` + caBundle, pods only in labelled namespaces.
webhooks() { # manifests.yaml port ca.crt
  python3 - "$1" "$2" "$3" "$WEBHOOK_CONFIG" "$LABEL_KEY" "$LABEL_VALUE" <<'PY'
import base64, json, sys, yaml
src, port, ca, name, key, value = sys.argv[1:]
ca_b64 = base64.b64encode(open(ca, "rb").read()).decode()
out = []
for doc in yaml.safe_load_all(open(src)):
    if not doc:
        continue
    keep = []
    for w in doc["webhooks"]:
        groups = {g for r in w["rules"] for g in r["apiGroups"]}
        resources = {x for r in w["rules"] for x in r["resources"]}
        is_pod = groups == {""} and resources == {"pods"}
        if not (is_pod or groups == {"kueue.x-k8s.io"}):
            continue
        path = w["clientConfig"]["service"]["path"]
        w["clientConfig"] = {"url": f"https://127.0.0.1:{port}{path}", "caBundle": ca_b64}
        if is_pod:
            w["namespaceSelector"] = {"matchLabels": {key: value}}
        w["timeoutSeconds"] = 10
        keep.append(w)
    suffix = "mutating" if doc["kind"].startswith("Mutating") else "validating"
    doc["metadata"] = {"name": f"{name}-{suffix}", "labels": {"app.kubernetes.io/part-of": name}}
    doc["webhooks"] = keep
    out.append(doc)
print(json.dumps({"apiVersion": "v1", "kind": "List", "items": out}))
PY
}

rbac() { # the module's manager ClusterRole and its secrets Role (rbac/), bound to our ServiceAccount
  python3 - "$1" "$NS" <<'PY'
import json, os, sys, yaml
src, ns = sys.argv[1:]
role = yaml.safe_load(open(os.path.join(src, "role.yaml")))
role["metadata"] = {"name": "ctrain-kueue-manager"}
secrets = yaml.safe_load(open(os.path.join(src, "manager_secrets_role.yaml")))
secrets["metadata"] = {"name": "kueue-manager-secrets", "namespace": ns}
def binding(kind, name, role_kind, role, namespace=None):
    """A (Cluster)RoleBinding of `role` to the manager's ServiceAccount."""
    md = {"name": name, **({"namespace": namespace} if namespace else {})}
    return {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": kind, "metadata": md,
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": role_kind, "name": role},
            "subjects": [{"kind": "ServiceAccount", "name": "kueue-controller-manager",
                          "namespace": ns}]}


items = [
    secrets,
    binding("RoleBinding", "kueue-manager-secrets", "Role", "kueue-manager-secrets", ns),
    {"apiVersion": "v1", "kind": "ServiceAccount",
     "metadata": {"name": "kueue-controller-manager", "namespace": ns}},
    role,
    binding("ClusterRoleBinding", "ctrain-kueue-manager", "ClusterRole", "ctrain-kueue-manager"),
    # The metrics server's authn/authz filter (TokenReview, SubjectAccessReview).
    binding("ClusterRoleBinding", "ctrain-kueue-auth-delegator", "ClusterRole",
            "system:auth-delegator"),
]
print(json.dumps({"apiVersion": "v1", "kind": "List", "items": items}))
PY
}

up_failed() { # rc: the EXIT trap of `up`: a failed `up` removes what it installed
  (($1 == 0)) && return 0
  log "up failed; removing what it installed"
  cmd_down >/dev/null 2>&1 || true
}

cmd_up() {
  [ -f "$DIR/kubeconfig" ] || die "no cluster in $DIR (tools/localcluster/cluster.sh up --dir $DIR)"
  if alive; then
    log "already running (pid $(cat "$K/pid"))"
    return 0
  fi
  local kdir
  kdir=$("$here/build.sh")
  rm -rf "$K"
  mkdir -p "$K"
  trap 'up_failed $?' EXIT

  log "installing Kueue $KUEUE_VERSION CRDs"
  kubectl apply --server-side --force-conflicts -f "$kdir/config/crd/bases" >"$K/crds.log" 2>&1 ||
    {
      cat "$K/crds.log" >&2
      die "CRDs failed"
    }
  kubectl wait --for=condition=Established --timeout=60s -f "$kdir/config/crd/bases" >/dev/null
  kubectl create namespace "$NS" --dry-run=client -o yaml | kubectl apply -f - >/dev/null
  rbac "$kdir/config/rbac" | kubectl apply -f - >/dev/null
  # Kueue reads TrainingJobs (its pod webhook looks up a pod's owner of an
  # external framework): ctrain's manifest for it.
  kubectl apply -f "$root/manifests/kueue/rbac.yaml" >/dev/null
  local token server
  token=$(kubectl -n "$NS" create token kueue-controller-manager --duration=48h)
  server=$(kubectl config view --minify -o jsonpath='{.clusters[0].cluster.server}')
  (
    umask 077
    cat >"$K/kubeconfig" <<KC
apiVersion: v1
kind: Config
clusters:
- name: local
  cluster: {server: "$server", certificate-authority: "$DIR/pki/ca.crt"}
users:
- name: kueue
  user: {token: "$token"}
contexts:
- name: local
  context: {cluster: local, user: kueue}
current-context: local
KC
  )

  gen_certs
  local wh_port hp_port m_port v_port
  wh_port=$(free_port)
  hp_port=$(free_port)
  m_port=$(free_port)
  v_port=$(free_port)
  printf 'WEBHOOK_PORT=%s\nHEALTH_PORT=%s\nMETRICS_PORT=%s\n' "$wh_port" "$hp_port" "$m_port" >"$K/ports"
  cat >"$K/config.yaml" <<CFG
apiVersion: config.kueue.x-k8s.io/v1beta2
kind: Configuration
namespace: $NS
health:
  healthProbeBindAddress: 127.0.0.1:$hp_port
metrics:
  bindAddress: 127.0.0.1:$m_port
webhook:
  host: 127.0.0.1
  port: $wh_port
  certDir: $K/certs
internalCertManagement:
  enable: false
leaderElection:
  leaderElect: false
manageJobsWithoutQueueName: false
managedJobsNamespaceSelector:
  matchLabels:
    $LABEL_KEY: $LABEL_VALUE
controller:
  groupKindConcurrency:
    Pod: 5
    Workload.kueue.x-k8s.io: 5
    LocalQueue.kueue.x-k8s.io: 1
    Cohort.kueue.x-k8s.io: 1
    ClusterQueue.kueue.x-k8s.io: 1
    ResourceFlavor.kueue.x-k8s.io: 1
clientConnection:
  qps: 50
  burst: 100
integrations:
  frameworks:
  - "pod"
CFG
  # Kinds whose Workloads an outside controller writes: ctrain-controller
  # creates one Workload per TrainingJob labelled kueue.x-k8s.io/queue-name
  # and creates its pods only once Kueue admits it (controller/kueue.h).
  # Kueue only reads TrainingJobs (manifests/kueue/rbac.yaml): its pod
  # webhook looks up a pod's owner of a known kind. The comma-separated
  # CTRAIN_KUEUE_EXTERNAL_FRAMEWORKS replaces the list; empty: none.
  local frameworks=${CTRAIN_KUEUE_EXTERNAL_FRAMEWORKS-TrainingJob.v1alpha1.ctrain.dev}
  if [ -n "$frameworks" ]; then
    echo "  externalFrameworks:" >>"$K/config.yaml"
    local f
    for f in ${frameworks//,/ }; do echo "  - \"$f\"" >>"$K/config.yaml"; done
  fi

  log "starting kueue manager (webhook https://127.0.0.1:$wh_port, health 127.0.0.1:$hp_port)"
  # Private mount namespace: /etc gets an overlay holding the metrics cert at
  # the path Kueue reads it from; the host's /etc is unchanged.
  mkdir -p "$K/etc-upper/kueue/metrics/certs" "$K/etc-work"
  cp "$K/certs/tls.crt" "$K/certs/tls.key" "$K/etc-upper/kueue/metrics/certs/"
  setsid unshare -m --propagation private sh -c '
    mount -t overlay overlay -o "lowerdir=/etc,upperdir=$1/etc-upper,workdir=$1/etc-work" /etc || exit 111
    exec env KUBECONFIG="$1/kubeconfig" "$2" --config="$1/config.yaml" \
      --feature-gates=VisibilityOnDemand=false --visibility-server-port="$3" --zap-log-level=2
  ' sh "$K" "$kdir/bin/kueue" "$v_port" >"$K/kueue.log" 2>&1 </dev/null &
  echo $! >"$K/pid"
  local deadline=$((SECONDS + 120))
  until curl -sf --max-time 2 "http://127.0.0.1:$hp_port/readyz" >/dev/null 2>&1; do
    alive || {
      tail -30 "$K/kueue.log" >&2
      die "kueue exited"
    }
    ((SECONDS < deadline)) || {
      tail -30 "$K/kueue.log" >&2
      die "kueue not ready after 120 s"
    }
    sleep 0.5
  done
  # The webhook server answers TLS with our cert before the apiserver uses it.
  deadline=$((SECONDS + 60))
  until curl -s --max-time 2 --cacert "$K/certs/ca.crt" -o /dev/null "https://127.0.0.1:$wh_port/"; do
    ((SECONDS < deadline)) || {
      tail -30 "$K/kueue.log" >&2
      die "webhook server not answering on 127.0.0.1:$wh_port"
    }
    sleep 0.5
  done
  webhooks "$kdir/config/webhook/manifests.yaml" "$wh_port" "$K/certs/ca.crt" | kubectl apply -f - >/dev/null
  trap - EXIT
  log "up: pid $(cat "$K/pid"); label a namespace $LABEL_KEY=$LABEL_VALUE to let Kueue gate its pods"
}

cmd_down() {
  local pid crds=()
  if [ -f "$DIR/kubeconfig" ]; then
    # Webhooks first: nothing may call a server that is going away.
    kubectl delete mutatingwebhookconfiguration "$WEBHOOK_CONFIG-mutating" --ignore-not-found >/dev/null 2>&1 || true
    kubectl delete validatingwebhookconfiguration "$WEBHOOK_CONFIG-validating" --ignore-not-found >/dev/null 2>&1 || true
  fi
  # The manager goes after the webhooks but before the CRDs: its finalizers
  # on pods and workloads are removed below with it gone.
  if [ -f "$K/pid" ]; then
    pid=$(cat "$K/pid")
    kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL -- "-$pid" 2>/dev/null || kill -KILL "$pid" 2>/dev/null || true
  fi
  if [ -f "$DIR/kubeconfig" ]; then
    # Kueue's finalizers on pods (kueue.x-k8s.io/managed) and on its own
    # objects would hold their deletion forever without the manager.
    local ns p
    for ns in $(kubectl get ns -l "$LABEL_KEY=$LABEL_VALUE" -o name 2>/dev/null | cut -d/ -f2); do
      for p in $(kubectl get pods -n "$ns" -o name 2>/dev/null); do
        kubectl patch -n "$ns" "$p" --type=json \
          -p='[{"op":"remove","path":"/metadata/finalizers"}]' >/dev/null 2>&1 || true
      done
    done
    local kind
    for kind in workloads localqueues clusterqueues resourceflavors cohorts admissionchecks topologies; do
      kubectl get "$kind.kueue.x-k8s.io" -A -o name >/dev/null 2>&1 || continue
      kubectl get "$kind.kueue.x-k8s.io" -A -o jsonpath='{range .items[*]}{.metadata.namespace}{" "}{.metadata.name}{"\n"}{end}' 2>/dev/null |
        while read -r a b; do
          if [ -n "$b" ]; then
            kubectl patch -n "$a" "$kind.kueue.x-k8s.io" "$b" --type=merge -p '{"metadata":{"finalizers":null}}' >/dev/null 2>&1 || true
          elif [ -n "$a" ]; then
            kubectl patch "$kind.kueue.x-k8s.io" "$a" --type=merge -p '{"metadata":{"finalizers":null}}' >/dev/null 2>&1 || true
          fi
        done
    done
    mapfile -t crds < <(kubectl get crd -o name 2>/dev/null | grep '\.kueue\.x-k8s\.io$' || true)
    ((${#crds[@]} == 0)) || kubectl delete "${crds[@]}" --wait=true --timeout=120s >/dev/null 2>&1 || true
    kubectl delete clusterrolebinding ctrain-kueue-manager ctrain-kueue-auth-delegator --ignore-not-found >/dev/null 2>&1 || true
    kubectl delete clusterrole ctrain-kueue-manager --ignore-not-found >/dev/null 2>&1 || true
    kubectl delete -f "$root/manifests/kueue/rbac.yaml" --ignore-not-found >/dev/null 2>&1 || true
    kubectl delete namespace "$NS" --ignore-not-found --wait=false >/dev/null 2>&1 || true
  fi
  rm -rf "$K"
  log "down: Kueue removed from $DIR"
}

cmd_status() {
  if alive; then echo "kueue running (pid $(cat "$K/pid"))"; else echo "kueue not running"; fi
}

case "$cmd" in
up) cmd_up ;;
down) cmd_down ;;
status) cmd_status ;;
esac
