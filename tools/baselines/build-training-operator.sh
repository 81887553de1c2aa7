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
# shellcheck source=../lib/go-install.sh
. "$here/../lib/go-install.sh"
VERSION=${TRAINING_OPERATOR_VERSION:-v1.9.3}
MODULE=github.com/kubeflow/training-operator
dir=$CTRAIN_CACHE/training-operator-$VERSION

build() { # dir: the binary in dir/bin, the TFJob CRD and ClusterRole in dir/manifests
  local dir=$1 src
  ctrain_go_install "$dir/bin" "$MODULE/cmd/training-operator.v1@$VERSION" training-operator.v1
  [ -f "$dir/manifests/.complete" ] && return 0
  src=$(ctrain_go_module_dir "$MODULE@$VERSION")
  rm -rf "$dir/manifests"
  mkdir -p "$dir/manifests"
  cp "$src/manifests/base/crds/kubeflow.org_tfjobs.yaml" "$src/manifests/base/rbac/role.yaml" \
    "$dir/manifests/"
  chmod u+w "$dir/manifests/"*
  touch "$dir/manifests/.complete"
}

build "$dir"
echo "$dir/bin"
