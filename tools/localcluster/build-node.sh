#!/usr/bin/env bash
# tools/localcluster/build-node.sh - builds the node's Go components that are
# not part of k8s.io/kubernetes: CoreDNS (github.com/coredns/coredns), crictl
# (sigs.k8s.io/cri-tools) and the NetworkPolicy enforcer, kube-router
# (github.com/cloudnativelabs/kube-router/v2), each with
# `go install module@version` into a cache directory keyed by its version.
# A second run returns at once.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=versions.sh
. "$here/versions.sh"

build() { # dir package@version binary
  local dir=$1 pkg=$2 binary=$3
  [ -x "$dir/$binary" ] && [ -f "$dir/.complete" ] && return 0
  command -v go >/dev/null || { echo "build-node.sh: Go is required" >&2; exit 1; }
  echo "build-node.sh: building $pkg (first run only)" >&2
  local start tmp=$dir.tmp.$$
  start=$(date +%s)
  rm -rf "$tmp"
  mkdir -p "$tmp"
  (cd /tmp && GOFLAGS=-buildvcs=false GOBIN=$tmp go install -trimpath -ldflags="-s -w" "$pkg")
  touch "$tmp/.complete"
  rm -rf "$dir"
  mv "$tmp" "$dir"
  echo "build-node.sh: $binary built in $(($(date +%s) - start)) s" >&2
}

build "$CTRAIN_CACHE/coredns-$COREDNS_VERSION/bin" "github.com/coredns/coredns@$COREDNS_VERSION" coredns
build "$CTRAIN_CACHE/cri-tools-$CRICTL_VERSION/bin" "sigs.k8s.io/cri-tools/cmd/crictl@$CRICTL_VERSION" crictl
build "$CTRAIN_CACHE/kube-router-$KUBE_ROUTER_VERSION/bin" \
  "github.com/cloudnativelabs/kube-router/v2/cmd/kube-router@$KUBE_ROUTER_VERSION" kube-router
echo "$CTRAIN_CACHE/coredns-$COREDNS_VERSION/bin"
