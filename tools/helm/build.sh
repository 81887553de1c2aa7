#!/usr/bin/env bash
# tools/helm/build.sh - builds the Helm CLI (helm.sh/helm/v3/cmd/helm) from its Go module
# with `go install module@version`, once, into $CTRAIN_CACHE/helm-<version>/helm, and prints
# that path. For `helm lint` and `helm template` of charts/ctrain (tests/integration/
# test_chart.py, tools/release.sh) and `helm install` in the e2e tests. The first build takes
# a few minutes on 2 cores; later runs return at once.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
HELM_VERSION=${HELM_VERSION:-v3.22.0}
CACHE=${CTRAIN_CACHE:-$HOME/.cache/ctrain}
# shellcheck source=../lib/go-install.sh
. "$here/../lib/go-install.sh"
dir="$CACHE/helm-$HELM_VERSION"
ctrain_go_install "$dir" "helm.sh/helm/v3/cmd/helm@$HELM_VERSION" helm
echo "$dir/helm"
