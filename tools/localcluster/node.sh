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

# The node's jobs, one file each (functions only).
# shellcheck source=node_config.sh
. "$here/node_config.sh"
# shellcheck source=node_host.sh
. "$here/node_host.sh"
# shellcheck source=node_start.sh
. "$here/node_start.sh"

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

up_failed() { # rc: the EXIT trap of `up`: a failed `up` leaves nothing behind
  (($1 == 0)) && return 0
  log "up failed; undoing"
  TARGET=""
  cmd_down >/dev/null 2>&1 || true
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
  trap 'up_failed $?' EXIT
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
  for pid in /proc/[0-9]*; do
    pid=${pid#/proc/}
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
