# shellcheck shell=bash
# tools/lib/go-install.sh - the one way our scripts build a Go tool from its
# module and cache it by version (sourced by tools/localcluster/build-node.sh,
# tools/kueue/build.sh, tools/s3/server.sh, tools/baselines/*.sh).
#
#   ctrain_go_install DIR PACKAGE@VERSION BINARY
#       `go install PACKAGE@VERSION` into DIR (a cache directory keyed by the
#       version, e.g. ~/.cache/ctrain/coredns-v1.15.0/bin), built in a temp
#       directory and moved into place whole, with DIR/.complete as the
#       marker: a second call returns at once; a killed build leaves nothing
#       that looks complete. Runs under nice with -p ${CTRAIN_GO_P:-2} (the
#       build machines are shared). Progress goes to stderr.
#   ctrain_go_module_dir MODULE@VERSION
#       prints the module's source directory in the module cache (downloaded
#       if needed), for copying manifests out of it.

ctrain_go_install() {
  local dir=$1 pkg=$2 binary=$3
  [ -x "$dir/$binary" ] && [ -f "$dir/.complete" ] && return 0
  command -v go >/dev/null || { echo "go-install: Go is required to build $pkg" >&2; return 1; }
  echo "go-install: building $pkg (first run only)" >&2
  local start tmp=$dir.tmp.$$
  start=$(date +%s)
  rm -rf "$tmp"
  mkdir -p "$tmp"
  if ! (cd /tmp && GOFLAGS="-buildvcs=false ${GOFLAGS:-}" GOBIN=$tmp nice -n 10 \
    go install -p "${CTRAIN_GO_P:-2}" -trimpath -ldflags="-s -w" "$pkg") >&2; then
    rm -rf "$tmp"
    echo "go-install: go install $pkg failed" >&2
    return 1
  fi
  touch "$tmp/.complete"
  rm -rf "$dir"
  mkdir -p "$(dirname "$dir")"
  mv "$tmp" "$dir"
  echo "go-install: $binary built in $(($(date +%s) - start)) s" >&2
}

ctrain_go_module_dir() {
  local d
  d=$(cd /tmp && GOFLAGS='' go mod download -json "$1" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
  [ -d "$d" ] || { echo "go-install: no module directory for $1" >&2; return 1; }
  echo "$d"
}
