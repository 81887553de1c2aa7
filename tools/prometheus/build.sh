#!/usr/bin/env bash
# tools/prometheus/build.sh - builds Prometheus (github.com/prometheus/prometheus/cmd/prometheus)
# from its Go module with `go install module@version`, once, into
# $CTRAIN_CACHE/prometheus-<version>/prometheus, and prints that path; `build.sh promtool`
# builds and prints promtool ($CTRAIN_CACHE/promtool-<version>/promtool) instead.
# For the e2e test that scrapes the controller through
# manifests/components/monitoring/prometheus-scrape.yaml (tests/e2e/test_e2e.py) and the
# `promtool check config` of that file (tests/integration/test_monitoring.py).
#
# Not Debian's prometheus package: Debian builds it without Kubernetes service discovery
# (kubernetes_sd_configs is refused as an unknown field). Built with only the Kubernetes
# service discovery (build tags remove_all_sd,enable_kubernetes_sd; file, HTTP and static
# targets are always in), without the web UI's assets (the HTTP API is all the tests use).
# The first build takes a few minutes on 2 cores; later runs return at once.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# Prometheus 3.16.0 (Prometheus v3.X.Y is the Go module's v0.3XX.Y).
PROMETHEUS_MODULE_VERSION=${PROMETHEUS_MODULE_VERSION:-v0.316.0}
CACHE=${CTRAIN_CACHE:-$HOME/.cache/ctrain}
# shellcheck source=../lib/go-install.sh
. "$here/../lib/go-install.sh"
binary=${1:-prometheus}
case "$binary" in
prometheus | promtool) ;;
*)
  echo "prometheus/build.sh: builds prometheus or promtool, not '$binary'" >&2
  exit 64
  ;;
esac
dir="$CACHE/$binary-$PROMETHEUS_MODULE_VERSION"
GOFLAGS="-tags=remove_all_sd,enable_kubernetes_sd" ctrain_go_install "$dir" \
  "github.com/prometheus/prometheus/cmd/$binary@$PROMETHEUS_MODULE_VERSION" "$binary"
echo "$dir/$binary"
