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

build() { # dir package@version binary
  local dir=$1 pkg=$2 binary=$3
  [ -x "$dir/$binary" ] && [ -f "$dir/.complete" ] && return 0
  command -v go >/dev/null || { echo "kueue/build.sh: Go is required" >&2; exit 1; }
  echo "kueue/build.sh: building $pkg (first run only)" >&2
  local start tmp=$dir.tmp.$$
  start=$(date +%s)
  rm -rf "$tmp"
  mkdir -p "$tmp"
  (cd /tmp && GOFLAGS=-buildvcs=false GOBIN=$tmp nice -n 10 \
    go install -p "${KUEUE_GO_P:-1}" -trimpath -ldflags="-s -w" "$pkg")
  touch "$tmp/.complete"
  rm -rf "$dir"
  mv "$tmp" "$dir"
  echo "kueue/build.sh: $binary built in $(($(date +%s) - start)) s" >&2
}

manifests() { # dir: copies config/components/{crd,rbac,webhook} out of the module
  local dir=$1
  [ -f "$dir/.complete" ] && return 0
  local mod tmp=$dir.tmp.$$
  mod=$(cd /tmp && go mod download -json "sigs.k8s.io/kueue@$KUEUE_VERSION" |
    sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
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
build "$KUEUE_DIR/bin" "sigs.k8s.io/kueue/cmd/kueue@$KUEUE_VERSION" kueue
manifests "$KUEUE_DIR/config"
echo "$KUEUE_DIR"
