#!/usr/bin/env bash
# tools/baselines/build-training-operator.sh - builds the Kubeflow
# training-operator (the baseline of bench/controller's controller row) from its
# Go module with `go install module/cmd/training-operator.v1@version` into a
# cache directory keyed by its version, and copies beside it, from the same
# module, the TFJob CRD and the operator's ClusterRole:
#
#   $CTRAIN_CACHE/training-operator-<version>/bin/training-operator.v1
#   $CTRAIN_CACHE/training-operator-<version>/manifests/kubeflow.org_tfjobs.yaml
#   $CTRAIN_CACHE/training-operator-<version>/manifests/role.yaml
#
# Prints the bin directory. A second run returns at once.
#   TRAINING_OPERATOR_VERSION  (default v1.9.3)
#   CTRAIN_GO_P                go build -p (default 2: the machine is shared)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=../localcluster/versions.sh
. "$here/../localcluster/versions.sh"
VERSION=${TRAINING_OPERATOR_VERSION:-v1.9.3}
MODULE=github.com/kubeflow/training-operator
dir=$CTRAIN_CACHE/training-operator-$VERSION

build() { # dir
  local dir=$1
  [ -x "$dir/bin/training-operator.v1" ] && [ -f "$dir/.complete" ] && return 0
  command -v go >/dev/null || { echo "build-training-operator.sh: Go is required" >&2; exit 1; }
  echo "build-training-operator.sh: building $MODULE@$VERSION (first run only)" >&2
  local start src tmp=$dir.tmp.$$
  start=$(date +%s)
  rm -rf "$tmp"
  mkdir -p "$tmp/bin" "$tmp/manifests"
  trap 'rm -rf "$tmp"' EXIT
  (cd /tmp && GOFLAGS=-buildvcs=false GOBIN=$tmp/bin nice -n 10 go install -p "${CTRAIN_GO_P:-2}" \
    -trimpath -ldflags="-s -w" "$MODULE/cmd/training-operator.v1@$VERSION")
  # The same module version, from the module cache go install just filled.
  src=$(cd /tmp && GOFLAGS='' go mod download -json "$MODULE@$VERSION" |
    sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
  [ -d "$src" ] || { echo "build-training-operator.sh: no module dir for $MODULE@$VERSION" >&2; exit 1; }
  cp "$src/manifests/base/crds/kubeflow.org_tfjobs.yaml" "$src/manifests/base/rbac/role.yaml" \
    "$tmp/manifests/"
  chmod u+w "$tmp/manifests/"*
  touch "$tmp/.complete"
  rm -rf "$dir"
  mv "$tmp" "$dir"
  trap - EXIT
  echo "build-training-operator.sh: training-operator.v1 built in $(($(date +%s) - start)) s" >&2
}

build "$dir"
echo "$dir/bin"
