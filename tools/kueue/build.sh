#!/usr/bin/env bash
# tools/kueue/build.sh - builds the Kueue manager (sigs.k8s.io/kueue/cmd/kueue)
# with `go install module@version` and copies the manifests install.sh needs
# (CRDs, RBAC, webhook rules) out of the module, into a cache directory keyed by
# the version: $CTRAIN_CACHE/kueue-<version>/{bin/kueue,config/...}.
# A second run returns at once. Prints the cache directory.
# Go builds run with -p ${KUEUE_GO_P:-1} under nice (shared build machine).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=versions.sh
. "$here/versions.sh"

# shellcheck source=../lib/go-install.sh
. "$here/../lib/go-install.sh"

manifests() { # dir: copies config/components/{crd,rbac,webhook} out of the module
  local dir=$1
  [ -f "$dir/.complete" ] && return 0
  local mod tmp=$dir.tmp.$$
  mod=$(ctrain_go_module_dir "sigs.k8s.io/kueue@$KUEUE_VERSION")
  [ -d "$mod/config/components" ] || { echo "kueue/build.sh: no module dir for kueue" >&2; exit 1; }
  rm -rf "$tmp"
  mkdir -p "$tmp"
  cp -r "$mod/config/components/crd" "$mod/config/components/rbac" \
    "$mod/config/components/webhook" "$mod/config/components/manager" "$tmp/"
  chmod -R u+w "$tmp"
  touch "$tmp/.complete"
  rm -rf "$dir"
  mv "$tmp" "$dir"
}

mkdir -p "$KUEUE_DIR"
CTRAIN_GO_P=${KUEUE_GO_P:-1} ctrain_go_install "$KUEUE_DIR/bin" "sigs.k8s.io/kueue/cmd/kueue@$KUEUE_VERSION" kueue
manifests "$KUEUE_DIR/config"
echo "$KUEUE_DIR"
