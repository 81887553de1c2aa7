# shellcheck shell=bash
# node_start.sh - starting a node's components: containerd, kubelet, kube-proxy,
# kube-router's firewall, CoreDNS, and the DNS check.
# (sourced by tools/localcluster/node.sh: its globals, select_node's variables
# and helpers are in scope; shellcheck reads it with node.sh's names unknown)

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
