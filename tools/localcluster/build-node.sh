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

# shellcheck source=../lib/go-install.sh
. "$here/../lib/go-install.sh"

ctrain_go_install "$CTRAIN_CACHE/coredns-$COREDNS_VERSION/bin" "github.com/coredns/coredns@$COREDNS_VERSION" coredns
ctrain_go_install "$CTRAIN_CACHE/cri-tools-$CRICTL_VERSION/bin" "sigs.k8s.io/cri-tools/cmd/crictl@$CRICTL_VERSION" crictl
ctrain_go_install "$CTRAIN_CACHE/kube-router-$KUBE_ROUTER_VERSION/bin" \
  "github.com/cloudnativelabs/kube-router/v2/cmd/kube-router@$KUBE_ROUTER_VERSION" kube-router
echo "$CTRAIN_CACHE/coredns-$COREDNS_VERSION/bin"
