# shellcheck shell=bash disable=SC2034
# tools/kueue/versions.sh - the pinned Kueue release (sourced by build.sh and install.sh).
# v0.17.0 is the only version of sigs.k8s.io/kueue the Go module proxy serves here.
KUEUE_VERSION=v0.17.0
CTRAIN_CACHE=${CTRAIN_CACHE:-$HOME/.cache/ctrain}
KUEUE_DIR="$CTRAIN_CACHE/kueue-$KUEUE_VERSION"
