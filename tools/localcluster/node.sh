#!/usr/bin/env bash
# tools/localcluster/node.sh - a real Kubernetes node for the local control plane.
#
#   node.sh up     [--dir DIR] [--image ARCHIVE]...
#                  start containerd (+ runc), kubelet, kube-proxy and CoreDNS as
#                  node "ctrain-node" of the cluster in DIR (cluster.sh up first);
#                  import the pause image and each ARCHIVE into the node's
#                  containerd; wait until the node is Ready and DNS answers
#   node.sh import [--dir DIR] ARCHIVE...   import more images into the node
#   node.sh down   [--dir DIR]   stop it all and undo what `up` did to the host
#   node.sh reset  stop what a node whose directory is gone left behind
#   node.sh status [--dir DIR]
#
# Built or installed from the registries: kubelet and kube-proxy from the
# k8s.io/kubernetes module (build.sh), CoreDNS and crictl from their Go modules,
# containerd 1.6, runc and the CNI plugins from Debian. The pod network is a
# CNI bridge (ctrain0, 10.244.0.0/24) routed by the host, with NetworkPolicy
# enforced by kube-router's firewall (built from its Go module; iptables +
# ipset, bridged packets reach it through br_netfilter); the node IP and
# cluster DNS are the host's primary address (HOST_IP, from cluster.sh), where
# the apiserver also listens for pods. One node per machine at a time: CoreDNS
# binds HOST_IP:53 and kube-proxy owns the KUBE-* iptables chains.
#
# Quirks of these VMs: no CAP_SYS_RESOURCE (containerd restrict_oom_score_adj,
# oomScoreAdj 0 for kubelet and kube-proxy), cgroup v1 (failCgroupV1: false,
# cgroupfs driver), no swap accounting (failSwapOn: false).
#
# `down` removes exactly what `up` created: pods (CNI DEL through the CRI),
# processes, mounts under DIR/node, the KUBE-*/CNI-* iptables chains, the bridge,
# the kubepods cgroups, the netns files, /var/log/containers links, and restores
# the sysctls the components change (saved at `up` in DIR/node/sysctl.saved).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
# shellcheck source=versions.sh
. "$here/versions.sh"

cmd=${1:-}
shift || true
DIR=${CTRAIN_CLUSTER_DIR:-/tmp/ctrain-localcluster}
IMAGES=()
while (($#)); do
  case "$1" in
  --dir)
    DIR=$2
    shift 2
    ;;
  --image)
    IMAGES+=("$2")
    shift 2
    ;;
  *)
    if [ "$cmd" = import ]; then
      IMAGES+=("$1")
      shift
    else
      echo "node.sh: unknown argument '$1'" >&2
      exit 64
    fi
    ;;
  esac
done

NODE=${CTRAIN_NODE_NAME:-ctrain-node}
N=$DIR/node
POD_SUBNET=10.244.0.0/24
POD_GW=10.244.0.1
CLUSTER_CIDR=10.244.0.0/16
BRIDGE=ctrain0
LOCK=/run/ctrain-localnode.owner
SYSCTLS=(net.ipv4.ip_forward net.ipv4.conf.all.route_localnet net.bridge.bridge-nf-call-iptables
  vm.overcommit_memory vm.panic_on_oom kernel.panic kernel.panic_on_oops
  kernel.keys.root_maxkeys kernel.keys.root_maxbytes net.netfilter.nf_conntrack_max)
COMPONENTS=(network-policies coredns kube-proxy kubelet containerd)
# Host paths the components create whatever their configured roots (kubelet's
# device-plugin socket dir, the shims' sockets, CNI's cache): removed by
# `down` when `up` found them absent. Children before parents.
HOST_PATHS=(/var/log/containers /var/log/pods /var/lib/cni /var/lib/kubelet/device-plugins
  /var/lib/kubelet /run/containerd/s /run/containerd/fifo /run/containerd/runc /run/containerd
  /var/run/netns)

log() { printf 'localnode: %s\n' "$*" >&2; }
die() {
  log "error: $*"
  exit 1
}
free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'
}
alive() { [ -f "$N/pids/$1" ] && kill -0 "$(cat "$N/pids/$1")" 2>/dev/null; }
start() { # name args...
  local name=$1
  shift
  setsid "$@" >"$N/logs/$name.log" 2>&1 </dev/null &
  echo $! >"$N/pids/$name"
}
ctr_() { ctr --address "$N/containerd.sock" -n k8s.io "$@"; }
crictl_() { "$CRICTL_BIN/crictl" --runtime-endpoint "unix://$N/containerd.sock" --timeout 30s "$@"; }

CRICTL_BIN="$CTRAIN_CACHE/cri-tools-$CRICTL_VERSION/bin"
COREDNS_BIN="$CTRAIN_CACHE/coredns-$COREDNS_VERSION/bin"
KUBE_ROUTER_BIN="$CTRAIN_CACHE/kube-router-$KUBE_ROUTER_VERSION/bin"

# ---------------------------------------------------------------------------
# certificates and kubeconfigs for the node's components, signed by the
# cluster's CA (DIR/pki from cluster.sh)
# ---------------------------------------------------------------------------
node_pki() {
  local p=$DIR/pki
  (
    cd "$N/pki"
    umask 077
    cat >client.ext <<EXT
basicConstraints=CA:FALSE
keyUsage=digitalSignature,keyEncipherment
extendedKeyUsage=clientAuth
EXT
    cat >kubelet-serving.ext <<EXT
basicConstraints=CA:FALSE
keyUsage=digitalSignature,keyEncipherment
extendedKeyUsage=serverAuth
subjectAltName=IP:$HOST_IP,DNS:$NODE
EXT
    sign() { # name subject extfile
      openssl req -newkey rsa:2048 -nodes -keyout "$1.key" -out "$1.csr" -subj "$2" 2>/dev/null
      openssl x509 -req -in "$1.csr" -CA "$p/ca.crt" -CAkey "$p/ca.key" -CAcreateserial \
        -CAserial "$N/pki/ca.srl" -out "$1.crt" -days 3650 -extfile "$3" 2>/dev/null
      rm -f "$1.csr"
    }
    sign kubelet "/O=system:nodes/CN=system:node:$NODE" client.ext
    sign kubelet-serving "/CN=$NODE" kubelet-serving.ext
    sign kube-proxy "/CN=system:kube-proxy" client.ext
  )
  local name
  for name in kubelet kube-proxy; do
    cat >"$N/$name.kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: local
  cluster: {server: "https://127.0.0.1:$API_PORT", certificate-authority: "$p/ca.crt"}
users:
- name: $name
  user: {client-certificate: "$N/pki/$name.crt", client-key: "$N/pki/$name.key"}
contexts:
- name: local
  context: {cluster: local, user: $name}
current-context: local
EOF
    chmod 600 "$N/$name.kubeconfig"
  done
}

write_configs() {
  mkdir -p "$N/cni/net.d" "$N/cni/ipam" "$N/cni/cache"
  cat >"$N/cni/net.d/10-ctrain.conflist" <<EOF
{
  "cniVersion": "1.0.0",
  "name": "ctrain",
  "plugins": [
    {
      "type": "bridge", "bridge": "$BRIDGE", "isGateway": true, "ipMasq": true, "hairpinMode": true,
      "ipam": {"type": "host-local", "dataDir": "$N/cni/ipam",
               "ranges": [[{"subnet": "$POD_SUBNET", "gateway": "$POD_GW"}]],
               "routes": [{"dst": "0.0.0.0/0"}]}
    },
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}
EOF
  cat >"$N/containerd.toml" <<EOF
version = 2
root = "$N/containerd/root"
state = "$N/containerd/state"
oom_score = 0
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper",
  "io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing"]

[grpc]
  address = "$N/containerd.sock"

[ttrpc]
  address = "$N/containerd.ttrpc.sock"

[plugins."io.containerd.internal.v1.opt"]
  path = "$N/containerd/opt"

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$PAUSE_IMAGE"
  restrict_oom_score_adj = true
  disable_apparmor = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  enable_unprivileged_ports = false
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        Root = "$N/runc"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$N/cni/net.d"
    max_conf_num = 1
EOF
  cat >"$N/kubelet.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: "$HOST_IP"
port: $KUBELET_PORT
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: $KUBELET_HEALTHZ_PORT
tlsCertFile: "$N/pki/kubelet-serving.crt"
tlsPrivateKeyFile: "$N/pki/kubelet-serving.key"
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: "$DIR/pki/ca.crt"}
authorization: {mode: Webhook}
containerRuntimeEndpoint: "unix://$N/containerd.sock"
cgroupDriver: cgroupfs
failCgroupV1: false
failSwapOn: false
oomScoreAdj: 0
clusterDNS: ["$HOST_IP"]
clusterDomain: cluster.local
resolvConf: "$N/resolv.conf"
podLogsDir: "$N/pod-logs"
staticPodPath: ""
rotateCertificates: false
serverTLSBootstrap: false
serializeImagePulls: false
# Imported images are never pulled again: never garbage-collect them, and
# keep the eviction thresholds below what a busy shared disk reaches.
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard: {memory.available: "100Mi", nodefs.available: "1%", imagefs.available: "1%", nodefs.inodesFree: "1%"}
nodeStatusUpdateFrequency: 4s
shutdownGracePeriod: 0s
EOF
  : >"$N/resolv.conf"
  cat >"$N/kube-proxy.yaml" <<EOF
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection: {kubeconfig: "$N/kube-proxy.kubeconfig"}
hostnameOverride: $NODE
bindAddress: 0.0.0.0
mode: iptables
clusterCIDR: $CLUSTER_CIDR
# Pods on one bridge reach each other's Service addresses without
# br_netfilter only when the reply comes back through the host.
iptables: {masqueradeAll: true, localhostNodePorts: false}
conntrack: {maxPerCore: 0}
oomScoreAdj: 0
healthzBindAddress: "127.0.0.1:$PROXY_HEALTHZ_PORT"
metricsBindAddress: "127.0.0.1:$PROXY_METRICS_PORT"
EOF
  cat >"$N/Corefile" <<EOF
.:53 {
    bind $HOST_IP
    errors
    health 127.0.0.1:$DNS_HEALTH_PORT
    kubernetes cluster.local in-addr.arpa ip6.arpa {
        kubeconfig $DIR/kubeconfig ctrain-local
        pods insecure
        ttl 5
    }
}
EOF
}

# ---------------------------------------------------------------------------
# host state saved at up, compared and restored at down
# ---------------------------------------------------------------------------
save_host_state() {
  local s
  : >"$N/sysctl.saved"
  for s in "${SYSCTLS[@]}"; do
    if [ -e "/proc/sys/${s//.//}" ]; then echo "$s=$(cat "/proc/sys/${s//.//}")" >>"$N/sysctl.saved"; fi
  done
  ls /var/run/netns 2>/dev/null | sort >"$N/netns.before" || true
  for s in "${HOST_PATHS[@]}"; do
    if [ -e "$s" ]; then echo "$s"; fi
  done >"$N/paths.before"
}

restore_sysctls() {
  [ -f "$N/sysctl.saved" ] || return 0
  local line
  while IFS= read -r line; do
    [ -n "$line" ] || continue
    sysctl -q -w "$line" >/dev/null 2>&1 || log "could not restore sysctl $line"
  done <"$N/sysctl.saved"
}

cleanup_ipsets() { # kube-router's ipsets (KUBE-*; iptables rules using them are gone first)
  command -v ipset >/dev/null || return 0
  local set
  for set in $(ipset list -n 2>/dev/null | grep -E '^(KUBE-|kube-router)' || true); do
    ipset destroy "$set" 2>/dev/null || log "could not destroy ipset $set"
  done
}

cleanup_iptables() { # removes the KUBE-* and CNI-* chains and every rule that jumps to them
  local ipt t chains c line
  for ipt in iptables ip6tables; do
    command -v "$ipt" >/dev/null || continue
    for t in filter nat mangle raw; do
      "$ipt-save" -t "$t" >/dev/null 2>&1 || continue
      while IFS= read -r line; do
        eval "$ipt -w -t $t -D ${line#-A }" 2>/dev/null || true
      done < <("$ipt-save" -t "$t" | grep -E '^-A ' | grep -E -- '-j (KUBE-|CNI-)' | grep -vE '^-A (KUBE-|CNI-)')
      chains=$("$ipt-save" -t "$t" | sed -n 's/^:\(\(KUBE\|CNI\)-[^ ]*\) .*/\1/p')
      for c in $chains; do "$ipt" -w -t "$t" -F "$c" 2>/dev/null || true; done
      for c in $chains; do "$ipt" -w -t "$t" -X "$c" 2>/dev/null || true; done
    done
  done
}

cleanup_cgroups() { # kubepods trees in every v1 hierarchy (and v2 if used), deepest first
  local h d pid
  for h in /sys/fs/cgroup/*/kubepods /sys/fs/cgroup/kubepods; do
    [ -d "$h" ] || continue
    # Anything still inside is a container process of ours.
    for pid in $(find "$h" -name cgroup.procs -exec cat {} + 2>/dev/null | sort -u); do
      kill -KILL "$pid" 2>/dev/null || true
    done
  done
  sleep 0.2
  for h in /sys/fs/cgroup/*/kubepods /sys/fs/cgroup/kubepods; do
    [ -d "$h" ] || continue
    find "$h" -depth -type d | while IFS= read -r d; do
      rmdir "$d" 2>/dev/null || true
    done
    [ -d "$h" ] && log "cgroup $h could not be removed (processes left?)"
  done
}

unmount_under() { # every mount point below $1, deepest first
  local m
  awk -v d="$1" '{ gsub(/\\040/, " ", $5); if (index($5, d "/") == 1 || $5 == d) print $5 }' /proc/self/mountinfo |
    awk '{ print length, $0 }' | sort -rn | cut -d' ' -f2- | while IFS= read -r m; do
    umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || log "could not unmount $m"
  done
}

# ---------------------------------------------------------------------------
cmd_up() {
  [ "$(id -u)" -eq 0 ] || die "run as root (containerd, kubelet and kube-proxy need it)"
  [ -f "$DIR/ports" ] && [ -f "$DIR/kubeconfig" ] || die "no control plane in $DIR (run cluster.sh up --dir $DIR first)"
  if [ -f "$N/ready" ] && alive kubelet; then
    log "already up in $N"
    return 0
  fi
  if [ -f "$LOCK" ]; then
    local owner
    owner=$(cat "$LOCK")
    if [ "$owner" != "$DIR" ] && [ -f "$owner/node/pids/kubelet" ] && kill -0 "$(cat "$owner/node/pids/kubelet")" 2>/dev/null; then
      die "another local node runs for $owner (stop it: bash $here/node.sh down --dir $owner)"
    fi
    # A node whose run was killed before its `down`: undo what it left.
    if [ -d "$owner/node" ]; then
      log "a stale node of $owner is left; taking it down first"
      bash "$0" down --dir "$owner" || true
    else
      cmd_reset
    fi
  fi
  # shellcheck disable=SC1091
  . "$DIR/ports"
  [ -n "${HOST_IP:-}" ] || die "$DIR/ports has no HOST_IP (a control plane from an older cluster.sh)"
  ip -4 route | grep -q "^${POD_SUBNET%/*}" && die "pod subnet $POD_SUBNET is already routed on this machine"
  if ip link show "$BRIDGE" >/dev/null 2>&1; then
    log "bridge $BRIDGE exists: a node whose directory is gone was left behind; resetting"
    cmd_reset
  fi
  local p
  for p in containerd containerd-shim-runc-v2 runc ctr iptables conntrack ipset; do
    command -v "$p" >/dev/null || die "$p not found (bash tools/setup.sh installs it)"
  done
  [ -x /usr/lib/cni/bridge ] || die "CNI plugins not found in /usr/lib/cni (containernetworking-plugins)"

  local bin
  bin=$("$here/build.sh")
  "$here/build-node.sh" >/dev/null
  local pause
  pause=$(bash "$root/tools/image/build.sh" pause | tail -1)

  rm -rf "$N"
  mkdir -p "$N/logs" "$N/pids" "$N/pki" "$N/pod-logs" "$N/kubelet"
  echo "$DIR" >"$LOCK"
  trap 'rc=$?; if [ $rc -ne 0 ]; then log "up failed; undoing"; cmd_down >/dev/null 2>&1 || true; fi' EXIT
  save_host_state

  KUBELET_PORT=$(free_port)
  KUBELET_HEALTHZ_PORT=$(free_port)
  PROXY_HEALTHZ_PORT=$(free_port)
  PROXY_METRICS_PORT=$(free_port)
  DNS_HEALTH_PORT=$(free_port)
  PAUSE_IMAGE=registry.k8s.io/pause:3.10.1
  printf 'NODE=%s\nKUBELET_PORT=%s\nKUBELET_HEALTHZ_PORT=%s\nPROXY_HEALTHZ_PORT=%s\nDNS_HEALTH_PORT=%s\n' \
    "$NODE" "$KUBELET_PORT" "$KUBELET_HEALTHZ_PORT" "$PROXY_HEALTHZ_PORT" "$DNS_HEALTH_PORT" >"$N/ports"
  node_pki
  write_configs

  log "starting containerd $(containerd --version | awk '{print $3}')"
  start containerd containerd --config "$N/containerd.toml"
  local deadline=$((SECONDS + 60))
  until ctr --address "$N/containerd.sock" version >/dev/null 2>&1; do
    alive containerd || { tail -20 "$N/logs/containerd.log" >&2; die "containerd exited"; }
    ((SECONDS < deadline)) || die "containerd did not answer on $N/containerd.sock"
    sleep 0.2
  done
  import_images "$pause" "${IMAGES[@]}"

  log "starting kubelet $K8S_VERSION as node $NODE ($HOST_IP:$KUBELET_PORT)"
  start kubelet "$bin/kubelet" --config="$N/kubelet.yaml" --kubeconfig="$N/kubelet.kubeconfig" \
    --hostname-override="$NODE" --node-ip="$HOST_IP" --root-dir="$N/kubelet" \
    --cert-dir="$N/pki" -v=1
  log "starting kube-proxy (iptables) and CoreDNS $COREDNS_VERSION on $HOST_IP:53"
  start kube-proxy "$bin/kube-proxy" --config="$N/kube-proxy.yaml" -v=1
  start coredns "$COREDNS_BIN/coredns" -conf "$N/Corefile"

  local kc=(--kubeconfig "$DIR/kubeconfig")
  deadline=$((SECONDS + 120))
  until "$bin/kubectl" "${kc[@]}" get node "$NODE" >/dev/null 2>&1; do
    for p in containerd kubelet kube-proxy coredns; do
      alive "$p" || { tail -30 "$N/logs/$p.log" >&2; die "$p exited (log: $N/logs/$p.log)"; }
    done
    ((SECONDS < deadline)) || { tail -30 "$N/logs/kubelet.log" >&2; die "node $NODE never registered"; }
    sleep 0.5
  done
  "$bin/kubectl" "${kc[@]}" wait --for=condition=Ready "node/$NODE" --timeout=120s >/dev/null ||
    { tail -30 "$N/logs/kubelet.log" >&2; die "node $NODE not Ready"; }
  deadline=$((SECONDS + 60))
  until dns_query kubernetes.default.svc.cluster.local >/dev/null 2>&1; do
    alive coredns || { tail -20 "$N/logs/coredns.log" >&2; die "coredns exited"; }
    ((SECONDS < deadline)) || { tail -20 "$N/logs/coredns.log" >&2; die "CoreDNS does not answer on $HOST_IP:53"; }
    sleep 0.5
  done
  start_network_policies "$bin"
  touch "$N/ready"
  trap - EXIT
  log "up: node $NODE Ready, DNS on $HOST_IP:53, pods on $POD_SUBNET via $BRIDGE, NetworkPolicy enforced"
}

# kube-router's firewall as the node's NetworkPolicy enforcer (only that:
# no routing, no service proxy, no CNI; the bridge and kube-proxy stay), with
# its own ServiceAccount and the read-only RBAC its firewall needs. Why
# kube-router: kube-network-policies (sigs.k8s.io) needs the nftables
# "queue" expression, which this VM's kernel lacks.
start_network_policies() { # dir-of-kubectl
  local kubectl=("$1/kubectl" --kubeconfig "$DIR/kubeconfig")
  "${kubectl[@]}" apply -f - >"$N/logs/network-policies-rbac.log" 2>&1 <<'YAML' || { cat "$N/logs/network-policies-rbac.log" >&2; die "RBAC for kube-router failed"; }
apiVersion: v1
kind: ServiceAccount
metadata: {name: kube-router, namespace: kube-system}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: ctrain-kube-router-firewall}
rules:
- {apiGroups: [""], resources: [pods, namespaces, nodes, services, endpoints], verbs: [get, list, watch]}
- {apiGroups: [networking.k8s.io], resources: [networkpolicies], verbs: [get, list, watch]}
- {apiGroups: [discovery.k8s.io], resources: [endpointslices], verbs: [get, list, watch]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: ctrain-kube-router-firewall}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: ctrain-kube-router-firewall}
subjects:
- {kind: ServiceAccount, name: kube-router, namespace: kube-system}
YAML
  local token
  token=$("${kubectl[@]}" -n kube-system create token kube-router --duration=48h) || die "no token for kube-router"
  (
    umask 077
    cat >"$N/kube-router.kubeconfig" <<KC
apiVersion: v1
kind: Config
clusters:
- name: local
  cluster: {server: "https://$HOST_IP:$API_PORT", certificate-authority: "$DIR/pki/ca.crt"}
users:
- name: kube-router
  user: {token: "$token"}
contexts:
- name: local
  context: {cluster: local, user: kube-router}
current-context: local
KC
  )
  KUBE_ROUTER_HEALTH_PORT=$(free_port)
  echo "KUBE_ROUTER_HEALTH_PORT=$KUBE_ROUTER_HEALTH_PORT" >>"$N/ports"
  log "starting kube-router $KUBE_ROUTER_VERSION (firewall only: NetworkPolicy with iptables and ipset)"
  start network-policies "$KUBE_ROUTER_BIN/kube-router" --kubeconfig="$N/kube-router.kubeconfig" \
    --hostname-override="$NODE" --run-firewall=true --run-router=false --run-service-proxy=false \
    --enable-cni=false --enable-pod-egress=false --health-port="$KUBE_ROUTER_HEALTH_PORT" \
    --metrics-port=0 --iptables-sync-period=1m -v=1
  local deadline=$((SECONDS + 60))
  until curl -fsS "http://127.0.0.1:$KUBE_ROUTER_HEALTH_PORT/healthz" >/dev/null 2>&1 &&
    iptables -S KUBE-ROUTER-FORWARD >/dev/null 2>&1; do
    alive network-policies || { tail -30 "$N/logs/network-policies.log" >&2; die "kube-router exited"; }
    ((SECONDS < deadline)) || { tail -30 "$N/logs/network-policies.log" >&2; die "kube-router's firewall never started"; }
    sleep 0.5
  done
}

dns_query() { # name -> prints the A records CoreDNS gives
  python3 - "$HOST_IP" "$1" <<'PY'
import random, socket, struct, sys
server, name = sys.argv[1], sys.argv[2]
qid = random.randrange(65536)
q = struct.pack(">HHHHHH", qid, 0x0100, 1, 0, 0, 0)
q += b"".join(bytes([len(p)]) + p.encode() for p in name.split(".")) + b"\0" + struct.pack(">HH", 1, 1)
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.settimeout(2)
s.sendto(q, (server, 53))
r = s.recv(4096)
rcode, an = r[3] & 15, struct.unpack(">H", r[6:8])[0]
if rcode or not an:
    sys.exit(f"rcode {rcode}, {an} answers")
print(f"{name}: {an} answers")
PY
}

import_images() { # archive...
  local a
  for a in "$@"; do
    [ -n "$a" ] || continue
    [ -f "$a" ] || die "image archive $a not found"
    log "importing $(basename "$a") into the node's containerd"
    ctr_ images import --no-unpack=false "$a" >"$N/logs/import.log" 2>&1 ||
      { cat "$N/logs/import.log" >&2; die "ctr images import $a failed"; }
  done
}

cmd_import() {
  [ -S "$N/containerd.sock" ] || die "no node in $N (node.sh up first)"
  import_images "${IMAGES[@]}"
}

cmd_down() {
  [ -d "$N" ] || { log "no node in $N"; return 0; }
  local n pid bin
  bin=$K8S_BIN_DIR
  # The kubelet and kube-proxy stop first, so nothing recreates what follows.
  for n in kubelet kube-proxy coredns network-policies; do
    [ -f "$N/pids/$n" ] && kill -TERM "$(cat "$N/pids/$n")" 2>/dev/null || true
  done
  for n in kubelet kube-proxy coredns network-policies; do
    [ -f "$N/pids/$n" ] || continue
    pid=$(cat "$N/pids/$n")
    for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null || true
  done
  # Pods: stop and remove every sandbox through the CRI, which runs CNI DEL
  # (veth, IP, masquerade rules) and removes the netns.
  if alive containerd && [ -x "$CRICTL_BIN/crictl" ]; then
    crictl_ rmp --all --force >/dev/null 2>&1 || crictl_ rmp --all --force >/dev/null 2>&1 || log "crictl rmp failed"
  fi
  if [ -f "$N/pids/containerd" ]; then
    pid=$(cat "$N/pids/containerd")
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null || true
  fi
  # Shims of ours (they outlive containerd by design) and anything left in kubepods.
  for pid in $(pgrep -f "containerd-shim-runc-v2 .*-address $N/containerd.sock" || true); do
    kill -KILL "$pid" 2>/dev/null || true
  done
  cleanup_cgroups
  [ -x "$bin/kube-proxy" ] && "$bin/kube-proxy" --cleanup >/dev/null 2>&1 || true
  cleanup_iptables
  cleanup_ipsets
  ip link del "$BRIDGE" 2>/dev/null || true
  # Network namespaces left by a pod whose CNI DEL did not run.
  if [ -f "$N/netns.before" ]; then
    comm -13 "$N/netns.before" <(ls /var/run/netns 2>/dev/null | sort) | while IFS= read -r n; do
      case "$n" in cni-*) ip netns delete "$n" 2>/dev/null || { umount "/var/run/netns/$n" 2>/dev/null; rm -f "/var/run/netns/$n"; } ;; esac
    done
  fi
  # Links of our pods' logs; directories that did not exist before.
  if [ -d /var/log/containers ]; then
    find /var/log/containers -maxdepth 1 -type l -lname "$N/*" -delete 2>/dev/null || true
  fi
  rm -f /var/lib/cni/results/ctrain-* 2>/dev/null || true
  if [ -f "$N/paths.before" ]; then
    for p in "${HOST_PATHS[@]}"; do
      grep -qx "$p" "$N/paths.before" && continue
      [ -e "$p" ] || continue
      rm -rf "$p"
    done
  fi
  unmount_under "$N"
  restore_sysctls
  [ -f "$LOCK" ] && [ "$(cat "$LOCK")" = "$DIR" ] && rm -f "$LOCK"
  rm -rf "$N"
  log "down: node removed from $DIR"
}

# A node left behind by a run killed before its `down`, whose directory is
# gone: stop its processes (found by their binaries and configs), pods,
# mounts, iptables chains, bridge and cgroups. The sysctls it changed cannot
# be known any more and stay.
cmd_reset() {
  local pid exe cmdline m
  for pid in $(ls /proc | grep -E '^[0-9]+$'); do
    exe=$(readlink "/proc/$pid/exe" 2>/dev/null) || continue
    cmdline=$(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null) || continue
    case "$exe $cmdline" in
    "$K8S_BIN_DIR/kubelet "* | "$K8S_BIN_DIR/kube-proxy "* | "$COREDNS_BIN/coredns "* | \
      "$KUBE_ROUTER_BIN/kube-router "* | \
      *"containerd --config "*/node/containerd.toml* | *containerd-shim-runc-v2*/node/containerd.sock*)
      kill -KILL "$pid" 2>/dev/null || true
      ;;
    esac
  done
  sleep 0.5
  cleanup_cgroups
  [ -x "$K8S_BIN_DIR/kube-proxy" ] && "$K8S_BIN_DIR/kube-proxy" --cleanup >/dev/null 2>&1 || true
  cleanup_iptables
  cleanup_ipsets
  ip link del "$BRIDGE" 2>/dev/null || true
  awk '{ print $5 }' /proc/self/mountinfo | grep -E '/node/(containerd|kubelet)(/|$)|^/run/netns/cni-|^/var/run/netns/cni-' |
    awk '{ print length, $0 }' | sort -rn | cut -d' ' -f2- | while IFS= read -r m; do umount -l "$m" 2>/dev/null || true; done
  for m in /var/run/netns/cni-*; do if [ -e "$m" ]; then rm -f "$m"; fi; done
  # What the components leave outside their directories (see HOST_PATHS).
  rm -rf /var/lib/kubelet/device-plugins /run/containerd/s
  rm -f /var/lib/cni/results/ctrain-* /var/lib/cni/results/cni-loopback-* 2>/dev/null || true
  find /var/log/containers -maxdepth 1 -type l -lname '*/node/pod-logs/*' -delete 2>/dev/null || true
  for m in /var/log/containers /var/lib/cni/results /var/lib/cni /var/lib/kubelet /run/containerd /var/run/netns; do
    rmdir "$m" 2>/dev/null || true
  done
  rm -f "$LOCK"
  log "reset: what a lost node left is removed (the sysctls it set stay: ${SYSCTLS[*]})"
}

cmd_status() {
  local n
  for n in "${COMPONENTS[@]}"; do
    if alive "$n"; then echo "$n running (pid $(cat "$N/pids/$n"))"; else echo "$n not running"; fi
  done
}

case "$cmd" in
up) cmd_up ;;
import) cmd_import ;;
down) cmd_down ;;
reset) cmd_reset ;;
status) cmd_status ;;
*)
  sed -n '2,30p' "$0" >&2
  exit 64
  ;;
esac
