# shellcheck shell=bash disable=SC2034 # every name here is read by the scripts that source it
# versions.sh - the pinned control-plane release (sourced by build.sh and cluster.sh).
# Keep in step with gomod/go.mod; the cache directory is keyed by both.
K8S_VERSION=v1.35.4
ETCD_VERSION=v3.6.5
CTRAIN_CACHE=${CTRAIN_CACHE:-$HOME/.cache/ctrain}
K8S_BIN_DIR="$CTRAIN_CACHE/k8s-$K8S_VERSION-etcd-$ETCD_VERSION/bin"
K8S_BINARIES=(etcd kube-apiserver kube-controller-manager kube-scheduler kubectl kubelet kube-proxy)
# The node's own Go-built components (build-node.sh); containerd, runc and the
# CNI plugins come from Debian (tools/setup.sh).
COREDNS_VERSION=v1.15.0
CRICTL_VERSION=v1.34.0
# NetworkPolicy enforcement: kube-router's firewall (iptables + ipset). The only
# version the module proxy serves; used for the local test cluster only.
KUBE_ROUTER_VERSION=v2.1.0
