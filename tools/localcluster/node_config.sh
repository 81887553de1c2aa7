# shellcheck shell=bash
# node_config.sh - a node's certificates, kubeconfigs and component configs.
# (sourced by tools/localcluster/node.sh: its globals, select_node's variables
# and helpers are in scope; shellcheck reads it with node.sh's names unknown)

# ---------------------------------------------------------------------------
# certificates and kubeconfigs for the node's components, signed by the
# cluster's CA (DIR/pki from cluster.sh)
# ---------------------------------------------------------------------------
node_pki() {
  local p=$DIR/pki
  (
    cd "$N/pki" || exit 1
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
