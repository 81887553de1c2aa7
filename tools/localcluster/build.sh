#!/usr/bin/env bash
# tools/localcluster/build.sh - builds the local control plane from Go modules.
#
# Builds etcd, kube-apiserver, kube-controller-manager, kube-scheduler,
# kubectl, and the node's kubelet and kube-proxy for the release pinned in versions.sh (module in gomod/, staging
# modules replaced by their published v0.X.Y) into a cache directory outside
# the repo keyed by version. A second run finds them and returns at once.
# Prints the bin directory on stdout.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=versions.sh
. "$here/versions.sh"

complete=1
for b in "${K8S_BINARIES[@]}"; do [ -x "$K8S_BIN_DIR/$b" ] || complete=0; done
if ((complete)) && [ -f "$K8S_BIN_DIR/.complete" ]; then
  echo "$K8S_BIN_DIR"
  exit 0
fi

command -v go >/dev/null || { echo "build.sh: Go is required (the machine's go, or golang-go)" >&2; exit 1; }
grep -q "k8s.io/kubernetes $K8S_VERSION" "$here/gomod/go.mod" ||
  { echo "build.sh: gomod/go.mod does not pin k8s.io/kubernetes $K8S_VERSION" >&2; exit 1; }

minor=${K8S_VERSION#v1.}
minor=${minor%%.*}
ld="-s -w"
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  ld+=" -X $pkg.gitVersion=$K8S_VERSION -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor"
  ld+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
done

tmp="$K8S_BIN_DIR.tmp.$$"
rm -rf "$tmp"
mkdir -p "$tmp"
echo "build.sh: building Kubernetes $K8S_VERSION and etcd $ETCD_VERSION (first run only; ~15-30 min on 2 cores)" >&2
start=$(date +%s)
(
  cd "$here/gomod"
  export GOFLAGS="-buildvcs=false"
  go build -trimpath -ldflags="$ld" -o "$tmp/" \
    go.etcd.io/etcd/server/v3 \
    k8s.io/kubernetes/cmd/kube-apiserver \
    k8s.io/kubernetes/cmd/kube-controller-manager \
    k8s.io/kubernetes/cmd/kube-scheduler \
    k8s.io/kubernetes/cmd/kubectl \
    k8s.io/kubernetes/cmd/kubelet \
    k8s.io/kubernetes/cmd/kube-proxy
)
# go names the etcd main package after its module's last element before /v3.
mv "$tmp/server" "$tmp/etcd"
touch "$tmp/.complete"
rm -rf "$K8S_BIN_DIR"
mkdir -p "$(dirname "$K8S_BIN_DIR")"
mv "$tmp" "$K8S_BIN_DIR"
echo "build.sh: built in $(($(date +%s) - start)) s into $K8S_BIN_DIR" >&2
echo "$K8S_BIN_DIR"
