#!/usr/bin/env bash
# tools/localcluster/node.sh - real Kubernetes nodes for the local control plane.
#
#   node.sh up     [--dir DIR] [--nodes N] [--image ARCHIVE]...
#                  start containerd (+ runc), kubelet, kube-proxy and kube-router's
#                  firewall for each of N nodes (default 1) of the cluster in DIR
#                  (cluster.sh up first), CoreDNS on node 1; import the pause image
#                  and each ARCHIVE into every node's containerd; wait until every
#                  node is Ready and DNS answers. Again with a larger N adds nodes.
#   node.sh import [--dir DIR] ARCHIVE...   import more images into every node
#   node.sh stop   [--dir DIR] NODE   power loss of node NODE (2..N): SIGKILL of its
#                  kubelet, containerd, shims, kube-proxy, kube-router and every pod
#                  process; its network namespace, pod mounts and cgroups go as a
#                  reboot would clear them (its disk, DIR/node-K, stays)
#   node.sh start  [--dir DIR] NODE   power it on again; waits until it is Ready
#   node.sh down   [--dir DIR] [NODE] stop it all (or one node) and undo what `up`
#                  did to the host; the last node down restores the shared state
#   node.sh reset  stop what nodes whose directory is gone left behind
#   node.sh reclaim [--dir DIR]  take down a node of another directory whose run
#                  was killed before its `down` (refused while its kubelet runs)
#   node.sh status [--dir DIR]
#   node.sh names  [--dir DIR]   the names of the nodes that are up, one a line
#
# Node names: node 1 is $CTRAIN_NODE_NAME (default ctrain-node), node K (2..9)
# is that name with "-K" (ctrain-node-2, ...); NODE is a name or its number.
#
# Built or installed from the registries: kubelet and kube-proxy from the
# k8s.io/kubernetes module (build.sh), CoreDNS and crictl from their Go modules,
# containerd 1.6, runc and the CNI plugins from Debian. Each node's pod network
# is a CNI bridge (ctrain0) routed by its host, with NetworkPolicy enforced by
# kube-router's firewall (built from its Go module; iptables + ipset, bridged
# packets reach it through br_netfilter).
#
# Node 1 runs in the host's network namespace: pods on 10.244.0.0/24; its node
# IP and the cluster DNS (CoreDNS, HOST_IP:53, serving every node) are the
# host's primary address (HOST_IP, from cluster.sh), where the apiserver also
# listens for pods. Node K >= 2 runs in a network namespace of its own, pinned
# on DIR/node-K/netns (not `ip netns add`): a veth ctrain-nK (host,
# 10.243.K.1/24) to eth0 (node, 10.243.K.2/24, the node IP), pods on
# 10.244.(K-1).0/24 with a host route via the node IP; pods reach pods of other
# nodes through the host's routing, with their own source address (an iptables
# RETURN of 10.244.0.0/16 -> 10.244.0.0/16 ahead of the bridge's masquerade,
# on the host and in each node). Every node shares the host's mount namespace
# (hostPath volumes see the same files on all nodes) and has cgroupRoot
# /<node name> (node 1: /). One cluster's nodes per machine at a time: CoreDNS
# binds HOST_IP:53 and node 1's kube-proxy owns the host's KUBE-* chains.
#
# Node-loss timings are the control plane's (cluster.sh; CTRAIN_NODE_MONITOR_GRACE,
# default 50s as upstream): a stopped node turns NotReady (Ready=Unknown) that
# long after its last status, plus up to the 5 s monitor period; its pods are
# evicted 300 s later (default tolerations); `start` makes it Ready in seconds.
#
# Quirks of these VMs: no CAP_SYS_RESOURCE (containerd restrict_oom_score_adj,
# oomScoreAdj 0 for kubelet and kube-proxy), cgroup v1 (failCgroupV1: false,
# cgroupfs driver), no swap accounting (failSwapOn: false).
#
# `down` removes exactly what `up` created: pods (CNI DEL through the CRI),
# processes, mounts under DIR/node*, the KUBE-*/CNI-* iptables chains, the
# bridge, the kubepods cgroups (node K: /<name> in every hierarchy), the network
# namespaces, veths and routes, /var/log/containers links, and (the last node
# down) the host paths the components create and the sysctls they change
# (saved at the first `up` in DIR/host.saved).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
# shellcheck source=versions.sh
. "$here/versions.sh"

cmd=${1:-}
shift || true
DIR=${CTRAIN_CLUSTER_DIR:-/tmp/ctrain-localcluster}
IMAGES=()
NODES=1
TARGET=""
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
  --nodes)
    NODES=$2
    shift 2
    ;;
  *)
    if [ "$cmd" = import ]; then
      IMAGES+=("$1")
      shift
    elif [ "$cmd" = stop ] || [ "$cmd" = start ] || [ "$cmd" = down ]; then
      [ -z "$TARGET" ] || { echo "node.sh: one NODE at a time" >&2; exit 64; }
      TARGET=$1
      shift
    else
      echo "node.sh: unknown argument '$1'" >&2
      exit 64
    fi
    ;;
  esac
done
case "$NODES" in [1-9]) ;; *) echo "node.sh: --nodes takes 1..9" >&2; exit 64 ;; esac

NODE_BASE=${CTRAIN_NODE_NAME:-ctrain-node}
CLUSTER_CIDR=10.244.0.0/16
BRIDGE=ctrain0
LOCK=/run/ctrain-localnode.owner
HOST_SAVED=$DIR/host.saved
# The rule that keeps pods' source addresses between nodes (on the host and in
# each node's namespace), marked so that `down` finds it.
RETURN_RULE=(POSTROUTING -s "$CLUSTER_CIDR" -d "$CLUSTER_CIDR" -m comment --comment ctrain-localcluster-pods -j RETURN)
SYSCTLS=(net.ipv4.ip_forward net.ipv4.conf.all.route_localnet net.bridge.bridge-nf-call-iptables
  vm.overcommit_memory vm.panic_on_oom kernel.panic kernel.panic_on_oops
  kernel.keys.root_maxkeys kernel.keys.root_maxbytes net.netfilter.nf_conntrack_max)
COMPONENTS=(network-policies coredns kube-proxy kubelet containerd)
# Host paths the components create whatever their configured roots (kubelet's
# device-plugin socket dir, the shims' sockets, CNI's cache): shared by all
# nodes, removed by the last node's `down` when the first `up` found them
# absent. Children before parents.
HOST_PATHS=(/var/log/containers /var/log/pods /var/lib/cni /var/lib/kubelet/device-plugins
  /var/lib/kubelet /run/containerd/s /run/containerd/fifo /run/containerd/runc /run/containerd
  /var/run/netns)

# select_node K: the per-node settings of node K (1..9)
#   NODE name, N its directory, NODE_IP, POD_SUBNET/POD_GW, CNI_NET (the CNI
#   network's name, which keys its cache entries), IN (the command prefix that
#   runs in its network namespace), VETH/LINK_GW (host end), API_HOST (where
#   its components reach the apiserver).
select_node() {
  IDX=$1
  if ((IDX == 1)); then
    NODE=$NODE_BASE
    N=$DIR/node
    NODE_IP=${HOST_IP:-}
    POD_SUBNET=10.244.0.0/24
    POD_GW=10.244.0.1
    CNI_NET=ctrain
    IN=()
    VETH=""
    LINK_GW=""
    API_HOST=127.0.0.1
  else
    NODE=$NODE_BASE-$IDX
    N=$DIR/node-$IDX
    NODE_IP=10.243.$IDX.2
    LINK_GW=10.243.$IDX.1
    POD_SUBNET=10.244.$((IDX - 1)).0/24
    POD_GW=10.244.$((IDX - 1)).1
    CNI_NET=ctrain$IDX
    IN=(nsenter --net="$N/netns")
    VETH=ctrain-n$IDX
    API_HOST=${HOST_IP:-}
  fi
}

node_index() { # NAME or number -> K
  case "$1" in
  "$NODE_BASE") echo 1 ;;
  "$NODE_BASE"-[1-9]) echo "${1##*-}" ;;
  [1-9]) echo "$1" ;;
  *) die "no node '$1' (names: $NODE_BASE, $NODE_BASE-2, ... $NODE_BASE-9)" ;;
  esac
}

node_indexes() { # the indexes of the nodes with a directory in DIR, highest first
  local d
  for d in "$DIR"/node-[2-9]; do [ -d "$d" ] && echo "${d##*-}"; done | sort -rn
  [ -d "$DIR/node" ] && echo 1
  return 0
}

load_ports() {
  # shellcheck disable=SC1091
  . "$DIR/ports"
  [ -n "${HOST_IP:-}" ] || die "$DIR/ports has no HOST_IP (a control plane from an older cluster.sh)"
}

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
  setsid "${IN[@]}" "$@" >"$N/logs/$name.log" 2>&1 </dev/null &
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
subjectAltName=IP:$NODE_IP,DNS:$NODE
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
  cluster: {server: "https://$API_HOST:$API_PORT", certificate-authority: "$p/ca.crt"}
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
  local netns_opt="" cgroup_root=""
  if ((IDX > 1)); then
    # The pods' network namespaces under the node's state dir, not the
    # host's shared /run/netns; the node's pods in a cgroup tree of its own.
    netns_opt="netns_mounts_under_state_dir = true"
    cgroup_root="cgroupRoot: /$NODE"
  fi
  cat >"$N/cni/net.d/10-ctrain.conflist" <<EOF
{
  "cniVersion": "1.0.0",
  "name": "$CNI_NET",
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
  $netns_opt
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
address: "$NODE_IP"
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
$cgroup_root
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
  ((IDX == 1)) || return 0
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
# host state saved at the first node's up, restored by the last node's down
# ---------------------------------------------------------------------------
save_host_state() {
  local s
  [ -d "$HOST_SAVED" ] && return 0
  mkdir -p "$HOST_SAVED"
  : >"$HOST_SAVED/sysctl"
  for s in "${SYSCTLS[@]}"; do
    if [ -e "/proc/sys/${s//.//}" ]; then echo "$s=$(cat "/proc/sys/${s//.//}")" >>"$HOST_SAVED/sysctl"; fi
  done
  ls /var/run/netns 2>/dev/null | sort >"$HOST_SAVED/netns" || true
  for s in "${HOST_PATHS[@]}"; do
    if [ -e "$s" ]; then echo "$s"; fi
  done >"$HOST_SAVED/paths"
}

restore_sysctls() {
  [ -f "$HOST_SAVED/sysctl" ] || return 0
  local line
  while IFS= read -r line; do
    [ -n "$line" ] || continue
    sysctl -q -w "$line" >/dev/null 2>&1 || log "could not restore sysctl $line"
  done <"$HOST_SAVED/sysctl"
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

kill_cgroup_tree() { # name (kubepods, or a node's cgroupRoot): SIGKILL of every process in it
  local h pid round
  for round in 1 2 3; do
    for h in /sys/fs/cgroup/*/"$1" /sys/fs/cgroup/"$1"; do
      [ -d "$h" ] || continue
      for pid in $(find "$h" -name cgroup.procs -exec cat {} + 2>/dev/null | sort -u); do
        kill -KILL "$pid" 2>/dev/null || true
      done
    done
    sleep 0.2
  done
}

remove_cgroup_tree() { # name: rmdir in every hierarchy, deepest first
  local h d
  for h in /sys/fs/cgroup/*/"$1" /sys/fs/cgroup/"$1"; do
    [ -d "$h" ] || continue
    find "$h" -depth -type d | while IFS= read -r d; do
      rmdir "$d" 2>/dev/null || true
    done
    [ -d "$h" ] && log "cgroup $h could not be removed (processes left?)"
  done
  return 0
}

cleanup_cgroups() { # node 1's kubepods trees in every v1 hierarchy (and v2 if used)
  kill_cgroup_tree kubepods
  remove_cgroup_tree kubepods
}

make_cgroup_root() { # node K's cgroupRoot, in every v1 hierarchy, before its kubelet starts
  local h
  for h in /sys/fs/cgroup/*/; do
    h=${h%/}
    [ "${h##*/}" = unified ] && continue
    [ -L "$h" ] && continue
    mkdir -p "$h/$NODE"
    if [ -f "$h/cpuset.cpus" ]; then
      cat "$h/cpuset.cpus" >"$h/$NODE/cpuset.cpus"
      cat "$h/cpuset.mems" >"$h/$NODE/cpuset.mems"
    fi
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
# node K's network: its namespace, the veth to the host, the routes
# ---------------------------------------------------------------------------
host_return_rule() { # add|del: the pods' RETURN rule in the host's nat table
  if iptables -w -t nat -C "${RETURN_RULE[@]}" 2>/dev/null; then
    [ "$1" = del ] && iptables -w -t nat -D "${RETURN_RULE[@]}"
  elif [ "$1" = add ]; then
    # Ahead of the bridge's per-pod masquerade rules (CNI-*, appended per
    # pod), behind kube-proxy's KUBE-POSTROUTING jump (prepended: Service
    # traffic is still masqueraded, hairpin included).
    local pos
    pos=$(iptables -w -t nat -S POSTROUTING | grep -E '^-A ' | grep -n -- '-j CNI-' | head -1 | cut -d: -f1 || true)
    if [ -n "$pos" ]; then
      iptables -w -t nat -I "${RETURN_RULE[0]}" "$pos" "${RETURN_RULE[@]:1}"
    else
      iptables -w -t nat -A "${RETURN_RULE[@]}"
    fi
  fi
  return 0
}

net_up() {
  ((IDX > 1)) || return 0
  if ! mountpoint -q "$N/netns" 2>/dev/null; then
    : >"$N/netns"
    unshare --net="$N/netns" true
  fi
  ip link del "$VETH" 2>/dev/null || true
  local deadline=$((SECONDS + 20))
  while ip link show "$VETH" >/dev/null 2>&1; do # a namespace going away takes its veth with it, later
    ((SECONDS < deadline)) || die "link $VETH stays"
    sleep 0.2
  done
  # created inside, its host end moved to the host's namespace (this shell's)
  "${IN[@]}" ip link add eth0 type veth peer name "$VETH" netns $$
  ip addr add "$LINK_GW/24" dev "$VETH"
  ip link set "$VETH" up
  "${IN[@]}" ip link set lo up
  "${IN[@]}" ip addr add "$NODE_IP/24" dev eth0
  "${IN[@]}" ip link set eth0 up
  "${IN[@]}" ip route add default via "$LINK_GW"
  "${IN[@]}" sysctl -q -w net.ipv4.ip_forward=1 >/dev/null
  "${IN[@]}" iptables -w -t nat -A "${RETURN_RULE[@]}"
  sysctl -q -w net.ipv4.ip_forward=1 >/dev/null
  ip route replace "$POD_SUBNET" via "$NODE_IP" dev "$VETH"
  host_return_rule add
}

net_down() {
  ((IDX > 1)) || return 0
  ip route del "$POD_SUBNET" 2>/dev/null || true
  ip link del "$VETH" 2>/dev/null || true
  if mountpoint -q "$N/netns" 2>/dev/null; then umount "$N/netns" 2>/dev/null || umount -l "$N/netns" || true; fi
  rm -f "$N/netns"
}

netns_pids() { # processes inside node K's network namespace
  local ino pid
  mountpoint -q "$N/netns" 2>/dev/null || return 0
  ino=$(stat -L -c %i "$N/netns" 2>/dev/null) || return 0
  for pid in $(ls /proc | grep -E '^[0-9]+$'); do
    [ "$(stat -L -c %i "/proc/$pid/ns/net" 2>/dev/null)" = "$ino" ] && echo "$pid"
  done
  return 0
}

# ---------------------------------------------------------------------------
# Nodes of another directory that hold the host lock: a live one (its kubelet
# runs) is refused; one whose run was killed before its `down` is taken down
# (its directory's saved host state restores what it changed), or reset when
# its directory is gone. `up` does this first; a test harness calls it before
# it records the host state that `down` must give back.
cmd_reclaim() {
  [ -f "$LOCK" ] || return 0
  local owner
  owner=$(cat "$LOCK")
  [ "$owner" = "$DIR" ] && return 0
  if [ -f "$owner/node/pids/kubelet" ] && kill -0 "$(cat "$owner/node/pids/kubelet")" 2>/dev/null; then
    die "another local node runs for $owner (stop it: bash $here/node.sh down --dir $owner)"
  fi
  if [ -d "$owner/node" ] || [ -d "$owner/host.saved" ]; then
    log "a stale node of $owner is left; taking it down first"
    bash "$0" down --dir "$owner" || true
  else
    cmd_reset
  fi
}

cmd_up() {
  [ "$(id -u)" -eq 0 ] || die "run as root (containerd, kubelet and kube-proxy need it)"
  [ -f "$DIR/ports" ] && [ -f "$DIR/kubeconfig" ] || die "no control plane in $DIR (run cluster.sh up --dir $DIR first)"
  load_ports
  select_node 1
  if ! { [ -f "$N/ready" ] && alive kubelet; }; then
    cmd_reclaim
    ip -4 route | grep -q "^${POD_SUBNET%/*}" && die "pod subnet $POD_SUBNET is already routed on this machine"
    if ip link show "$BRIDGE" >/dev/null 2>&1; then
      log "bridge $BRIDGE exists: a node whose directory is gone was left behind; resetting"
      cmd_reset
    fi
  fi
  local p
  for p in containerd containerd-shim-runc-v2 runc ctr iptables conntrack ipset nsenter unshare; do
    command -v "$p" >/dev/null || die "$p not found (bash tools/setup.sh installs it)"
  done
  [ -x /usr/lib/cni/bridge ] || die "CNI plugins not found in /usr/lib/cni (containernetworking-plugins)"

  BIN=$("$here/build.sh")
  "$here/build-node.sh" >/dev/null
  PAUSE=$(bash "$root/tools/image/build.sh" pause | tail -1)
  echo "$DIR" >"$LOCK"
  trap 'rc=$?; if [ $rc -ne 0 ]; then log "up failed; undoing"; TARGET=""; cmd_down >/dev/null 2>&1 || true; fi' EXIT
  save_host_state
  local k
  for k in $(seq 1 "$NODES"); do
    select_node "$k"
    if [ -f "$N/ready" ] && alive kubelet; then
      log "node $NODE already up in $N"
      # The images given may be newer than the node's (a rebuilt ctrain:latest
      # that pods take IfNotPresent): import them again.
      import_images "${IMAGES[@]}"
      continue
    fi
    [ -f "$N/stopped" ] && die "node $NODE is stopped (node.sh start $NODE)"
    node_up
  done
  trap - EXIT
}

node_up() { # the node of select_node, from nothing
  if ((IDX > 1)); then
    if ip -4 route | grep -q "^${POD_SUBNET%/*}"; then die "pod subnet $POD_SUBNET is already routed on this machine"; fi
    if ip -4 route | grep -q "^${NODE_IP%.*}\."; then die "${NODE_IP%.*}.0/24 is already routed on this machine"; fi
  fi
  rm -rf "$N"
  mkdir -p "$N/logs" "$N/pids" "$N/pki" "$N/pod-logs" "$N/kubelet"
  unset KUBE_ROUTER_HEALTH_PORT
  KUBELET_PORT=$(free_port)
  KUBELET_HEALTHZ_PORT=$(free_port)
  PROXY_HEALTHZ_PORT=$(free_port)
  PROXY_METRICS_PORT=$(free_port)
  DNS_HEALTH_PORT=$(free_port)
  PAUSE_IMAGE=registry.k8s.io/pause:3.10.1
  printf 'NODE=%s\nKUBELET_PORT=%s\nKUBELET_HEALTHZ_PORT=%s\nPROXY_HEALTHZ_PORT=%s\nPROXY_METRICS_PORT=%s\nDNS_HEALTH_PORT=%s\n' \
    "$NODE" "$KUBELET_PORT" "$KUBELET_HEALTHZ_PORT" "$PROXY_HEALTHZ_PORT" "$PROXY_METRICS_PORT" "$DNS_HEALTH_PORT" >"$N/ports"
  node_pki
  write_configs
  node_start "$PAUSE" "${IMAGES[@]}"
}

node_start() { # [archive...]: the node's network, containerd (+ images), kubelet, kube-proxy, kube-router
  net_up
  ((IDX == 1)) || make_cgroup_root
  log "starting containerd $(containerd --version | awk '{print $3}') for node $NODE"
  start containerd containerd --config "$N/containerd.toml"
  local deadline=$((SECONDS + 60))
  until ctr --address "$N/containerd.sock" version >/dev/null 2>&1; do
    alive containerd || { tail -20 "$N/logs/containerd.log" >&2; die "containerd exited"; }
    ((SECONDS < deadline)) || die "containerd did not answer on $N/containerd.sock"
    sleep 0.2
  done
  import_images "$@"

  log "starting kubelet $K8S_VERSION as node $NODE ($NODE_IP:$KUBELET_PORT)"
  start kubelet "$BIN/kubelet" --config="$N/kubelet.yaml" --kubeconfig="$N/kubelet.kubeconfig" \
    --hostname-override="$NODE" --node-ip="$NODE_IP" --root-dir="$N/kubelet" \
    --cert-dir="$N/pki" -v=1
  local comps=(containerd kubelet kube-proxy)
  if ((IDX == 1)); then
    log "starting kube-proxy (iptables) and CoreDNS $COREDNS_VERSION on $HOST_IP:53"
    start kube-proxy "$BIN/kube-proxy" --config="$N/kube-proxy.yaml" -v=1
    start coredns "$COREDNS_BIN/coredns" -conf "$N/Corefile"
    comps+=(coredns)
  else
    log "starting kube-proxy (iptables)"
    start kube-proxy "$BIN/kube-proxy" --config="$N/kube-proxy.yaml" -v=1
  fi

  local kc=(--kubeconfig "$DIR/kubeconfig") p
  deadline=$((SECONDS + 120))
  until "$BIN/kubectl" "${kc[@]}" get node "$NODE" >/dev/null 2>&1; do
    for p in "${comps[@]}"; do
      alive "$p" || { tail -30 "$N/logs/$p.log" >&2; die "$p exited (log: $N/logs/$p.log)"; }
    done
    ((SECONDS < deadline)) || { tail -30 "$N/logs/kubelet.log" >&2; die "node $NODE never registered"; }
    sleep 0.5
  done
  "$BIN/kubectl" "${kc[@]}" wait --for=condition=Ready "node/$NODE" --timeout=120s >/dev/null ||
    { tail -30 "$N/logs/kubelet.log" >&2; die "node $NODE not Ready"; }
  if ((IDX == 1)); then
    deadline=$((SECONDS + 60))
    until dns_query kubernetes.default.svc.cluster.local >/dev/null 2>&1; do
      alive coredns || { tail -20 "$N/logs/coredns.log" >&2; die "coredns exited"; }
      ((SECONDS < deadline)) || { tail -20 "$N/logs/coredns.log" >&2; die "CoreDNS does not answer on $HOST_IP:53"; }
      sleep 0.5
    done
  fi
  start_network_policies "$BIN"
  rm -f "$N/stopped"
  touch "$N/ready"
  if ((IDX == 1)); then
    log "up: node $NODE Ready, DNS on $HOST_IP:53, pods on $POD_SUBNET via $BRIDGE, NetworkPolicy enforced"
  else
    log "up: node $NODE Ready at $NODE_IP (namespace $N/netns), pods on $POD_SUBNET, NetworkPolicy enforced"
  fi
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
  if [ -z "${KUBE_ROUTER_HEALTH_PORT:-}" ]; then
    KUBE_ROUTER_HEALTH_PORT=$(free_port)
    echo "KUBE_ROUTER_HEALTH_PORT=$KUBE_ROUTER_HEALTH_PORT" >>"$N/ports"
  fi
  log "starting kube-router $KUBE_ROUTER_VERSION (firewall only: NetworkPolicy with iptables and ipset)"
  start network-policies "$KUBE_ROUTER_BIN/kube-router" --kubeconfig="$N/kube-router.kubeconfig" \
    --hostname-override="$NODE" --run-firewall=true --run-router=false --run-service-proxy=false \
    --enable-cni=false --enable-pod-egress=false --health-port="$KUBE_ROUTER_HEALTH_PORT" \
    --metrics-port=0 --iptables-sync-period=1m -v=1
  local deadline=$((SECONDS + 60))
  until "${IN[@]}" curl -fsS "http://127.0.0.1:$KUBE_ROUTER_HEALTH_PORT/healthz" >/dev/null 2>&1 &&
    "${IN[@]}" iptables -S KUBE-ROUTER-FORWARD >/dev/null 2>&1; do
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
    log "importing $(basename "$a") into the containerd of $NODE"
    ctr_ images import --no-unpack=false "$a" >"$N/logs/import.log" 2>&1 ||
      { cat "$N/logs/import.log" >&2; die "ctr images import $a failed"; }
  done
}

cmd_import() {
  local k n=0
  for k in $(node_indexes); do
    select_node "$k"
    [ -S "$N/containerd.sock" ] && alive containerd || { log "node $NODE is not running: not imported"; continue; }
    import_images "${IMAGES[@]}"
    n=$((n + 1))
  done
  ((n > 0)) || die "no node in $DIR (node.sh up first)"
}

# Every process of the node, at once and with SIGKILL, as a power loss: its
# components, its shims, its pods (by its cgroups) and, for node K, whatever
# else runs in its network namespace.
kill_node() {
  local n pid
  for n in "${COMPONENTS[@]}"; do
    [ -f "$N/pids/$n" ] && kill -KILL "$(cat "$N/pids/$n")" 2>/dev/null || true
  done
  for pid in $(pgrep -f "containerd-shim-runc-v2 .*-address $N/containerd.sock" || true); do
    kill -KILL "$pid" 2>/dev/null || true
  done
  if ((IDX == 1)); then kill_cgroup_tree kubepods; else kill_cgroup_tree "$NODE"; fi
  if ((IDX > 1)); then
    for pid in $(netns_pids); do kill -KILL "$pid" 2>/dev/null || true; done
  fi
  rm -f "$N"/pids/*
}

cmd_stop() {
  [ -n "$TARGET" ] || die "which node? (node.sh stop NODE)"
  load_ports
  select_node "$(node_index "$TARGET")"
  ((IDX > 1)) || die "node 1 ($NODE) carries the cluster's DNS and the host's network; stop nodes 2..N (or use down)"
  [ -d "$N" ] || die "no node $NODE in $DIR"
  kill_node
  # What a reboot clears: the network, /run (containerd's state, runc's),
  # the pods' mounts (tmpfs of secrets and tokens) and the cgroups.
  unmount_under "$N"
  net_down
  rm -rf "$N/containerd/state" "$N/runc"
  remove_cgroup_tree "$NODE"
  rm -f "$N/ready"
  touch "$N/stopped"
  log "stopped: node $NODE lost its power (it turns NotReady after the node monitor grace period)"
}

cmd_start() {
  [ -n "$TARGET" ] || die "which node? (node.sh start NODE)"
  load_ports
  select_node "$(node_index "$TARGET")"
  [ -f "$N/stopped" ] || { alive kubelet && { log "node $NODE is running"; return 0; }; }
  [ -f "$N/ports" ] || die "no node $NODE in $DIR (node.sh up --nodes K creates it)"
  BIN=$("$here/build.sh")
  # shellcheck disable=SC1091
  . "$N/ports"
  PAUSE_IMAGE=registry.k8s.io/pause:3.10.1
  node_start
}

down_one() { # the node of select_node: stop everything, undo its host changes
  local n pid
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
  # Shims of ours (they outlive containerd by design) and anything left in
  # the node's cgroups (or its network namespace).
  kill_node
  if ((IDX == 1)); then
    cleanup_cgroups
    [ -x "$K8S_BIN_DIR/kube-proxy" ] && "$K8S_BIN_DIR/kube-proxy" --cleanup >/dev/null 2>&1 || true
    cleanup_iptables
    cleanup_ipsets
    ip link del "$BRIDGE" 2>/dev/null || true
    # Network namespaces left by a pod whose CNI DEL did not run.
    if [ -f "$HOST_SAVED/netns" ]; then
      comm -13 "$HOST_SAVED/netns" <(ls /var/run/netns 2>/dev/null | sort) | while IFS= read -r n; do
        case "$n" in cni-*) ip netns delete "$n" 2>/dev/null || { umount "/var/run/netns/$n" 2>/dev/null; rm -f "/var/run/netns/$n"; } ;; esac
      done
    fi
  fi
  # Links of our pods' logs; our CNI cache entries.
  if [ -d /var/log/containers ]; then
    find /var/log/containers -maxdepth 1 -type l -lname "$N/*" -delete 2>/dev/null || true
  fi
  rm -f /var/lib/cni/results/"$CNI_NET"-* 2>/dev/null || true
  # Node K: its pods' namespaces and mounts, then its own namespace (its
  # iptables, ipsets, bridge and the veths go with it), the veth and route.
  unmount_under "$N"
  net_down
  ((IDX == 1)) || remove_cgroup_tree "$NODE"
  rm -rf "$N"
  log "down: node $NODE removed from $DIR"
}

down_shared() { # after the last node: what the nodes share on the host
  local p
  host_return_rule del
  if [ -f "$HOST_SAVED/paths" ]; then
    for p in "${HOST_PATHS[@]}"; do
      grep -qx "$p" "$HOST_SAVED/paths" && continue
      [ -e "$p" ] || continue
      rm -rf "$p"
    done
  fi
  restore_sysctls
  [ -f "$LOCK" ] && [ "$(cat "$LOCK")" = "$DIR" ] && rm -f "$LOCK"
  rm -rf "$HOST_SAVED"
}

cmd_down() {
  [ -f "$DIR/ports" ] && load_ports
  local k
  if [ -n "$TARGET" ]; then
    select_node "$(node_index "$TARGET")"
    [ -d "$N" ] || { log "no node $NODE in $DIR"; return 0; }
    down_one
  else
    [ -n "$(node_indexes)" ] || [ -d "$HOST_SAVED" ] || { log "no node in $DIR"; return 0; }
    for k in $(node_indexes); do
      select_node "$k"
      down_one
    done
  fi
  [ -n "$(node_indexes)" ] || down_shared
  return 0
}

# Nodes left behind by a run killed before its `down`, whose directory is
# gone: stop their processes (found by their binaries and configs), pods,
# mounts, iptables chains, bridge, veths, routes and cgroups. The sysctls
# they changed cannot be known any more and stay.
cmd_reset() {
  local pid exe cmdline m l
  for pid in $(ls /proc | grep -E '^[0-9]+$'); do
    exe=$(readlink "/proc/$pid/exe" 2>/dev/null) || continue
    cmdline=$(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null) || continue
    case "$exe $cmdline" in
    "$K8S_BIN_DIR/kubelet "* | "$K8S_BIN_DIR/kube-proxy "* | "$COREDNS_BIN/coredns "* | \
      "$KUBE_ROUTER_BIN/kube-router "* | \
      *"containerd --config "*/node/containerd.toml* | *containerd-shim-runc-v2*/node/containerd.sock* | \
      *"containerd --config "*/node-[2-9]/containerd.toml* | *containerd-shim-runc-v2*/node-[2-9]/containerd.sock*)
      kill -KILL "$pid" 2>/dev/null || true
      ;;
    esac
  done
  sleep 0.5
  cleanup_cgroups
  for m in /sys/fs/cgroup/cpu/"$NODE_BASE"-[2-9]; do
    [ -d "$m" ] || continue
    kill_cgroup_tree "${m##*/}"
    remove_cgroup_tree "${m##*/}"
  done
  [ -x "$K8S_BIN_DIR/kube-proxy" ] && "$K8S_BIN_DIR/kube-proxy" --cleanup >/dev/null 2>&1 || true
  cleanup_iptables
  cleanup_ipsets
  host_return_rule del
  ip link del "$BRIDGE" 2>/dev/null || true
  for l in $(ip -o link show 2>/dev/null | sed -n 's/^[0-9]*: \(ctrain-n[2-9]\)@.*/\1/p'); do
    ip link del "$l" 2>/dev/null || true
  done
  for l in $(seq 2 9); do ip route del "10.244.$((l - 1)).0/24" 2>/dev/null || true; done
  awk '{ print $5 }' /proc/self/mountinfo | { grep -E '/node(-[2-9])?/(containerd|kubelet|netns)(/|$)|^/run/netns/cni-|^/var/run/netns/cni-' || true; } |
    awk '{ print length, $0 }' | sort -rn | cut -d' ' -f2- | while IFS= read -r m; do umount -l "$m" 2>/dev/null || true; done
  for m in /var/run/netns/cni-*; do if [ -e "$m" ]; then rm -f "$m"; fi; done
  # What the components leave outside their directories (see HOST_PATHS).
  rm -rf /var/lib/kubelet/device-plugins /run/containerd/s
  rm -f /var/lib/cni/results/ctrain* /var/lib/cni/results/cni-loopback-* 2>/dev/null || true
  find /var/log/containers -maxdepth 1 -type l -lname '*/node/pod-logs/*' -delete 2>/dev/null || true
  find /var/log/containers -maxdepth 1 -type l -lname '*/node-[2-9]/pod-logs/*' -delete 2>/dev/null || true
  for m in /var/log/containers /var/lib/cni/results /var/lib/cni /var/lib/kubelet /run/containerd /var/run/netns; do
    rmdir "$m" 2>/dev/null || true
  done
  rm -f "$LOCK"
  log "reset: what a lost node left is removed (the sysctls it set stay: ${SYSCTLS[*]})"
}

cmd_status() {
  local n k
  for k in $(node_indexes | sort -n); do
    select_node "$k"
    [ -f "$N/stopped" ] && { echo "node $NODE: stopped"; continue; }
    for n in "${COMPONENTS[@]}"; do
      ((IDX == 1)) || [ "$n" != coredns ] || continue
      if alive "$n"; then echo "node $NODE: $n running (pid $(cat "$N/pids/$n"))"; else echo "node $NODE: $n not running"; fi
    done
  done
}

cmd_names() {
  local k
  for k in $(node_indexes | sort -n); do
    select_node "$k"
    echo "$NODE"
  done
}

case "$cmd" in
up) cmd_up ;;
import) cmd_import ;;
stop) cmd_stop ;;
start) cmd_start ;;
down) cmd_down ;;
reset) cmd_reset ;;
reclaim) cmd_reclaim ;;
status) cmd_status ;;
names) cmd_names ;;
*)
  sed -n '2,60p' "$0" >&2
  exit 64
  ;;
esac
