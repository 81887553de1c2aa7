# shellcheck shell=bash disable=SC2034
# tools/kwok/versions.sh - the pinned KWOK release (sourced by build.sh and run.sh).
KWOK_VERSION=v0.8.0
CTRAIN_CACHE=${CTRAIN_CACHE:-$HOME/.cache/ctrain}
KWOK_DIR="$CTRAIN_CACHE/kwok-$KWOK_VERSION"
