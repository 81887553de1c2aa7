#!/usr/bin/env bash
# tools/kwok/build.sh - builds KWOK (sigs.k8s.io/kwok/cmd/kwok, the fake kubelet
# that drives thousands of fake Nodes and their pods' status from stage
# policies) with `go install module@version`, into a cache directory keyed by
# the version: $CTRAIN_CACHE/kwok-<version>/bin/kwok. A second run returns at
# once. Prints the binary's path.
# Go builds run with -p ${KWOK_GO_P:-1} under nice (shared build machine).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=versions.sh
. "$here/versions.sh"
# shellcheck source=../lib/go-install.sh
. "$here/../lib/go-install.sh"

CTRAIN_GO_P=${KWOK_GO_P:-1} ctrain_go_install "$KWOK_DIR/bin" "sigs.k8s.io/kwok/cmd/kwok@$KWOK_VERSION" kwok
echo "$KWOK_DIR/bin/kwok"
