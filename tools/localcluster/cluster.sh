#!/usr/bin/env bash
# tools/localcluster/cluster.sh - a real Kubernetes control plane on loopback.
#
#   cluster.sh up   [--dir DIR]   build (once) and start etcd, kube-apiserver,
#                                 kube-controller-manager, kube-scheduler;
#                                 wait for /readyz; write DIR/kubeconfig
#   cluster.sh down [--dir DIR]   stop exactly what `up` started (pid files), remove DIR
#   cluster.sh env  [--dir DIR]   print `export KUBECONFIG=... PATH=...` for a shell
#   cluster.sh status [--dir DIR]
#
# A real node (containerd, kubelet, kube-proxy, CoreDNS) joins with
# node.sh up --dir DIR; `down` here takes it down first.
#
# DIR defaults to $CTRAIN_CLUSTER_DIR or /tmp/ctrain-localcluster. Ports are
# chosen free at start, so two clusters in two DIRs run side by side. The PKI
# is generated with openssl for this cluster alone and deleted by `down`.
# Files in DIR: kubeconfig (admin, system:masters), env, pki/, logs/, pids/,
# ports, controller-manager.kubeconfig, scheduler.kubeconfig.
# Node loss: kube-controller-manager marks a node NotReady (Ready=Unknown, taints
# unreachable:NoSchedule and NoExecute) when its kubelet has not reported for
# CTRAIN_NODE_MONITOR_GRACE (--node-monitor-grace-period, default 50s as
# upstream), checked every CTRAIN_NODE_MONITOR_PERIOD (--node-monitor-period,
# default 5s as upstream); pods without their own tolerations are evicted 300 s
# after that (the DefaultTolerationSeconds admission plugin). The test session
# shortens the grace period to 20s (tests/conftest.py); the kubelets report
# every 4 s.
# CTRAIN_APISERVER_PROFILING=true serves kube-apiserver's /debug/pprof (for
# bench/controller.py --apiserver-profile); off by default.
# CTRAIN_APISERVER_AUDIT_POLICY=FILE turns on kube-apiserver's audit log with that
# policy, as JSON lines in DIR/logs/audit.log (bench/scale.py counts each
# controller's requests by verb and resource from it); off by default.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=versions.sh
. "$here/versions.sh"

# shellcheck source=args.sh
. "$here/args.sh"

cmd=${1:-}
shift || true
dir_args cluster.sh "$@"

log() { printf 'localcluster: %s\n' "$*" >&2; }
die() {
  log "error: $*"
  exit 1
}

# The address pods reach the apiserver (and the kubelet) at: the host's
# primary IPv4 (the source of its default route). Loopback cannot serve as an
# endpoint of the `kubernetes` Service nor as a node IP.
host_ip() {
  ip -4 route get 1.1.1.1 2>/dev/null | sed -n 's/.* src \([0-9.]*\).*/\1/p' | head -1
}

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'
}

# ---------------------------------------------------------------------------
# PKI: one CA signs the serving cert and each client cert; a separate RSA key
# pair signs and verifies service-account tokens.
# ---------------------------------------------------------------------------
gen_pki() {
  local p=$DIR/pki
  mkdir -p "$p"
  (
    cd "$p"
    umask 077
    openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.crt -days 3650 \
      -subj "/CN=ctrain-localcluster-ca" 2>/dev/null
    cat >apiserver.ext <<EXT
basicConstraints=CA:FALSE
keyUsage=digitalSignature,keyEncipherment
extendedKeyUsage=serverAuth
subjectAltName=IP:127.0.0.1,IP:10.0.0.1,IP:$HOST_IP,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local
EXT
    cat >client.ext <<EXT
basicConstraints=CA:FALSE
keyUsage=digitalSignature,keyEncipherment
extendedKeyUsage=clientAuth
EXT
    sign() { # name subject extfile
      openssl req -newkey rsa:2048 -nodes -keyout "$1.key" -out "$1.csr" -subj "$2" 2>/dev/null
      openssl x509 -req -in "$1.csr" -CA ca.crt -CAkey ca.key -CAcreateserial -out "$1.crt" \
        -days 3650 -extfile "$3" 2>/dev/null
      rm -f "$1.csr"
    }
    sign apiserver "/CN=kube-apiserver" apiserver.ext
    sign admin "/O=system:masters/CN=ctrain-admin" client.ext
    sign controller-manager "/CN=system:kube-controller-manager" client.ext
    sign scheduler "/CN=system:kube-scheduler" client.ext
    # The front-proxy CA lets aggregated API servers and the controllers'
    # delegated authentication read request headers, as kubeadm sets it up.
    openssl req -x509 -newkey rsa:2048 -nodes -keyout front-proxy-ca.key -out front-proxy-ca.crt \
      -days 3650 -subj "/CN=ctrain-localcluster-front-proxy-ca" 2>/dev/null
    openssl req -newkey rsa:2048 -nodes -keyout front-proxy-client.key -out front-proxy-client.csr \
      -subj "/CN=front-proxy-client" 2>/dev/null
    openssl x509 -req -in front-proxy-client.csr -CA front-proxy-ca.crt -CAkey front-proxy-ca.key \
      -CAcreateserial -out front-proxy-client.crt -days 3650 -extfile client.ext 2>/dev/null
    rm -f front-proxy-client.csr
    sign apiserver-kubelet-client "/O=system:masters/CN=kube-apiserver-kubelet-client" client.ext
    openssl genrsa -out sa.key 2048 2>/dev/null
    openssl rsa -in sa.key -pubout -out sa.pub 2>/dev/null
  )
}

write_kubeconfig() { # file user cert key
  local server="https://127.0.0.1:$API_PORT"
  cat >"$1" <<EOF2
apiVersion: v1
kind: Config
clusters:
- name: ctrain-local
  cluster:
    server: $server
    certificate-authority: $DIR/pki/ca.crt
users:
- name: $2
  user:
    client-certificate: $3
    client-key: $4
contexts:
- name: ctrain-local
  context:
    cluster: ctrain-local
    user: $2
current-context: ctrain-local
EOF2
  chmod 600 "$1"
}

start() { # name args...
  local name=$1
  shift
  setsid "$@" >"$DIR/logs/$name.log" 2>&1 </dev/null &
  echo $! >"$DIR/pids/$name"
}

alive() { [ -f "$DIR/pids/$1" ] && kill -0 "$(cat "$DIR/pids/$1")" 2>/dev/null; }

wait_for() { # name url timeout [curl args...]
  local name=$1 url=$2 timeout=$3
  shift 3
  local deadline=$((SECONDS + timeout))
  until curl -sf --max-time 2 "$@" "$url" >/dev/null 2>&1; do
    if ! alive "$name"; then
      log "$name exited; last lines of $DIR/logs/$name.log:"
      tail -20 "$DIR/logs/$name.log" >&2 || true
      return 1
    fi
    if ((SECONDS > deadline)); then
      log "$name not ready at $url after ${timeout}s; last lines of $DIR/logs/$name.log:"
      tail -20 "$DIR/logs/$name.log" >&2 || true
      return 1
    fi
    sleep 0.5
  done
}

up_failed() { # rc: the EXIT trap of `up`: a failed `up` leaves nothing running
  (($1 == 0)) && return 0
  log "up failed; stopping what started"
  cmd_down >/dev/null 2>&1 || true
}

cmd_up() {
  if [ -f "$DIR/kubeconfig" ] && alive kube-apiserver; then
    log "already up in $DIR"
    cat "$DIR/env"
    return 0
  fi
  local bin
  bin=$("$here/build.sh")
  rm -rf "$DIR"
  mkdir -p "$DIR/logs" "$DIR/pids" "$DIR/etcd" "$DIR/apiserver-certs"
  # Whatever happens next, a failed `up` leaves nothing running.
  trap 'up_failed $?' EXIT

  NODE_MONITOR_GRACE=${CTRAIN_NODE_MONITOR_GRACE:-50s}
  NODE_MONITOR_PERIOD=${CTRAIN_NODE_MONITOR_PERIOD:-5s}
  HOST_IP=$(host_ip)
  [ -n "$HOST_IP" ] || die "no IPv4 default route: cannot pick an address pods can reach the apiserver at"
  ETCD_PORT=$(free_port)
  ETCD_PEER_PORT=$(free_port)
  API_PORT=$(free_port)
  KCM_PORT=$(free_port)
  SCHED_PORT=$(free_port)
  printf 'ETCD_PORT=%s\nETCD_PEER_PORT=%s\nAPI_PORT=%s\nKCM_PORT=%s\nSCHED_PORT=%s\nHOST_IP=%s\n' \
    "$ETCD_PORT" "$ETCD_PEER_PORT" "$API_PORT" "$KCM_PORT" "$SCHED_PORT" "$HOST_IP" >"$DIR/ports"

  gen_pki
  local p=$DIR/pki
  write_kubeconfig "$DIR/kubeconfig" ctrain-admin "$p/admin.crt" "$p/admin.key"
  write_kubeconfig "$DIR/controller-manager.kubeconfig" system:kube-controller-manager \
    "$p/controller-manager.crt" "$p/controller-manager.key"
  write_kubeconfig "$DIR/scheduler.kubeconfig" system:kube-scheduler "$p/scheduler.crt" "$p/scheduler.key"

  log "starting etcd $ETCD_VERSION on 127.0.0.1:$ETCD_PORT"
  start etcd "$bin/etcd" --name=ctrain-local --data-dir="$DIR/etcd" \
    --listen-client-urls="http://127.0.0.1:$ETCD_PORT" --advertise-client-urls="http://127.0.0.1:$ETCD_PORT" \
    --listen-peer-urls="http://127.0.0.1:$ETCD_PEER_PORT" \
    --initial-advertise-peer-urls="http://127.0.0.1:$ETCD_PEER_PORT" \
    --initial-cluster="ctrain-local=http://127.0.0.1:$ETCD_PEER_PORT" \
    --unsafe-no-fsync --quota-backend-bytes=2147483648 --log-level=warn
  wait_for etcd "http://127.0.0.1:$ETCD_PORT/health" 60

  log "starting kube-apiserver $K8S_VERSION on https://127.0.0.1:$API_PORT"
  start kube-apiserver "$bin/kube-apiserver" \
    --etcd-servers="http://127.0.0.1:$ETCD_PORT" \
    --bind-address=0.0.0.0 --secure-port="$API_PORT" --advertise-address="$HOST_IP" \
    --cert-dir="$DIR/apiserver-certs" \
    --tls-cert-file="$p/apiserver.crt" --tls-private-key-file="$p/apiserver.key" \
    --client-ca-file="$p/ca.crt" \
    --kubelet-client-certificate="$p/apiserver-kubelet-client.crt" \
    --kubelet-client-key="$p/apiserver-kubelet-client.key" \
    --kubelet-certificate-authority="$p/ca.crt" --kubelet-preferred-address-types=InternalIP,Hostname \
    --requestheader-client-ca-file="$p/front-proxy-ca.crt" \
    --requestheader-allowed-names=front-proxy-client \
    --requestheader-username-headers=X-Remote-User --requestheader-group-headers=X-Remote-Group \
    --requestheader-extra-headers-prefix=X-Remote-Extra- \
    --proxy-client-cert-file="$p/front-proxy-client.crt" --proxy-client-key-file="$p/front-proxy-client.key" \
    --authorization-mode=Node,RBAC \
    --enable-admission-plugins=NodeRestriction \
    --service-account-issuer=https://kubernetes.default.svc.cluster.local \
    --service-account-key-file="$p/sa.pub" --service-account-signing-key-file="$p/sa.key" \
    --service-cluster-ip-range=10.0.0.0/24 \
    --allow-privileged=true --profiling="${CTRAIN_APISERVER_PROFILING:-false}" -v=1 \
    ${CTRAIN_APISERVER_AUDIT_POLICY:+--audit-policy-file="$CTRAIN_APISERVER_AUDIT_POLICY" \
      --audit-log-path="$DIR/logs/audit.log" --audit-log-format=json --audit-log-maxsize=0}
  wait_for kube-apiserver "https://127.0.0.1:$API_PORT/readyz" 180 \
    --cacert "$p/ca.crt" --cert "$p/admin.crt" --key "$p/admin.key"

  log "starting kube-controller-manager and kube-scheduler"
  start kube-controller-manager "$bin/kube-controller-manager" \
    --kubeconfig="$DIR/controller-manager.kubeconfig" \
    --authentication-kubeconfig="$DIR/controller-manager.kubeconfig" \
    --authorization-kubeconfig="$DIR/controller-manager.kubeconfig" \
    --bind-address=127.0.0.1 --secure-port="$KCM_PORT" \
    --service-account-private-key-file="$p/sa.key" --root-ca-file="$p/ca.crt" \
    --use-service-account-credentials=true --leader-elect=false \
    --controllers='*,-nodeipam,-cloud-node-lifecycle,-route,-service,-attachdetach,-persistentvolume-expander,-ephemeral-volume' \
    --node-monitor-grace-period="$NODE_MONITOR_GRACE" --node-monitor-period="$NODE_MONITOR_PERIOD" \
    --profiling=false -v=1
  start kube-scheduler "$bin/kube-scheduler" \
    --kubeconfig="$DIR/scheduler.kubeconfig" \
    --authentication-kubeconfig="$DIR/scheduler.kubeconfig" \
    --authorization-kubeconfig="$DIR/scheduler.kubeconfig" \
    --bind-address=127.0.0.1 --secure-port="$SCHED_PORT" --leader-elect=false --profiling=false -v=1
  wait_for kube-controller-manager "https://127.0.0.1:$KCM_PORT/healthz" 120 -k
  wait_for kube-scheduler "https://127.0.0.1:$SCHED_PORT/healthz" 120 -k

  # The namespace and service-account controllers must have run before pods
  # can be created: wait for default/default ServiceAccount.
  local deadline=$((SECONDS + 60))
  until KUBECONFIG="$DIR/kubeconfig" "$bin/kubectl" get serviceaccount default -n default >/dev/null 2>&1; do
    ((SECONDS < deadline)) || die "ServiceAccount default/default never appeared (kube-controller-manager log: $DIR/logs/kube-controller-manager.log)"
    sleep 0.5
  done

  printf 'export KUBECONFIG=%q\nexport PATH=%q:$PATH\nexport CTRAIN_CLUSTER_DIR=%q\n' \
    "$DIR/kubeconfig" "$bin" "$DIR" >"$DIR/env"
  trap - EXIT
  log "up: $("$bin/kubectl" --kubeconfig "$DIR/kubeconfig" version -o json | python3 -c 'import json,sys; print("server", json.load(sys.stdin)["serverVersion"]["gitVersion"])')"
  cat "$DIR/env"
}

cmd_down() {
  [ -d "$DIR" ] || { log "nothing in $DIR"; return 0; }
  local n pid
  # A node joined to this control plane goes first (it undoes its iptables,
  # mounts, cgroups and links while the apiserver still answers).
  if compgen -G "$DIR/node*" >/dev/null || [ -d "$DIR/host.saved" ]; then
    bash "$here/node.sh" down --dir "$DIR" || log "node down reported errors"
  fi
  for n in kube-scheduler kube-controller-manager kube-apiserver etcd; do
    [ -f "$DIR/pids/$n" ] || continue
    pid=$(cat "$DIR/pids/$n")
    kill -TERM "$pid" 2>/dev/null || true
  done
  for n in kube-scheduler kube-controller-manager kube-apiserver etcd; do
    [ -f "$DIR/pids/$n" ] || continue
    pid=$(cat "$DIR/pids/$n")
    for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null || true
  done
  rm -rf "$DIR"
  log "down: $DIR removed"
}

cmd_env() {
  [ -f "$DIR/env" ] || die "no cluster in $DIR (run: $0 up)"
  cat "$DIR/env"
}

cmd_status() {
  local n
  for n in etcd kube-apiserver kube-controller-manager kube-scheduler; do
    if alive "$n"; then echo "$n running (pid $(cat "$DIR/pids/$n"))"; else echo "$n not running"; fi
  done
}

case "$cmd" in
up) cmd_up ;;
down) cmd_down ;;
env) cmd_env ;;
status) cmd_status ;;
*)
  sed -n '2,28p' "$0" >&2
  exit 64
  ;;
esac
