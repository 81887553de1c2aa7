#!/usr/bin/env bash
# tools/s3/server.sh - a real S3-compatible server on loopback for the tests:
# versitygw (github.com/versity/versitygw, Apache-2.0) with its posix backend.
#
#   tools/s3/server.sh build
#       builds versitygw once with `go install module@version` into
#       $CTRAIN_CACHE/versitygw-<version>/bin (a second run returns at once);
#       prints that directory.
#   tools/s3/server.sh up --dir DIR [--host ADDR] [--port N] [--region R] [--bucket NAME]...
#       starts it on 127.0.0.1, or on ADDR (the node's host address, where
#       pods reach it) (a free port unless --port), answering for region R
#       (default us-east-1; GCS's XML API signs "auto"), buckets are the
#       directories of DIR/root (each --bucket is made), object metadata in
#       DIR/meta. Credentials: $S3_ACCESS_KEY / $S3_SECRET_KEY (passed to the
#       server in its environment, never on its command line). Waits until it
#       answers; prints the endpoint (http://ADDR:N) as the last line and
#       writes it to DIR/endpoint. Data already in DIR/root is kept, so a
#       killed server can be started again over the same objects.
#   tools/s3/server.sh down --dir DIR
#       stops it and removes what `up` made under DIR.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=../lib/go-install.sh
. "$here/../lib/go-install.sh"
VERSITYGW_VERSION=${VERSITYGW_VERSION:-v1.8.0}
CTRAIN_CACHE=${CTRAIN_CACHE:-$HOME/.cache/ctrain}
BIN_DIR="$CTRAIN_CACHE/versitygw-$VERSITYGW_VERSION/bin"

die() {
  echo "s3/server.sh: $*" >&2
  exit 1
}

build() {
  ctrain_go_install "$BIN_DIR" "github.com/versity/versitygw/cmd/versitygw@$VERSITYGW_VERSION" \
    versitygw || die "could not build versitygw $VERSITYGW_VERSION"
  echo "$BIN_DIR"
}

free_port() {
  python3 -c 'import socket,sys; s=socket.socket(); s.bind((sys.argv[1], 0)); print(s.getsockname()[1])' "$1"
}

up() {
  local dir=$1 host=$2 port=$3 region=$4
  shift 4
  [ -n "${S3_ACCESS_KEY:-}" ] && [ -n "${S3_SECRET_KEY:-}" ] || die "set S3_ACCESS_KEY and S3_SECRET_KEY"
  build >/dev/null
  mkdir -p "$dir/root" "$dir/meta"
  local b
  for b in "$@"; do
    mkdir -p "$dir/root/$b"
  done
  if [ -f "$dir/versitygw.pid" ] && kill -0 "$(cat "$dir/versitygw.pid")" 2>/dev/null; then
    die "a server already runs for $dir (pid $(cat "$dir/versitygw.pid"))"
  fi
  [ -n "$port" ] || port=$(free_port "$host")
  # The keys travel in the environment (versitygw reads ROOT_ACCESS_KEY_ID /
  # ROOT_SECRET_ACCESS_KEY), so `ps` never shows them.
  ROOT_ACCESS_KEY_ID=$S3_ACCESS_KEY ROOT_SECRET_ACCESS_KEY=$S3_SECRET_KEY \
    setsid "$BIN_DIR/versitygw" --port "$host:$port" --region "$region" --quiet \
    posix --sidecar "$dir/meta" "$dir/root" >>"$dir/versitygw.log" 2>&1 </dev/null &
  echo $! >"$dir/versitygw.pid"
  local endpoint="http://$host:$port" _
  for _ in $(seq 1 150); do
    if curl -s -o /dev/null --max-time 1 "$endpoint/"; then
      echo "$endpoint" >"$dir/endpoint"
      echo "$endpoint"
      return 0
    fi
    kill -0 "$(cat "$dir/versitygw.pid")" 2>/dev/null || break
    sleep 0.2
  done
  tail -n 20 "$dir/versitygw.log" >&2 || true
  down "$dir"
  die "versitygw did not start on $endpoint"
}

down() {
  local dir=$1 pid _
  if [ -f "$dir/versitygw.pid" ]; then
    pid=$(cat "$dir/versitygw.pid")
    if kill -0 "$pid" 2>/dev/null; then
      kill "$pid" 2>/dev/null || true
      for _ in $(seq 1 50); do
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
      done
      kill -9 "$pid" 2>/dev/null || true
    fi
  fi
  rm -rf "$dir/root" "$dir/meta" "$dir/versitygw.pid" "$dir/versitygw.log" "$dir/endpoint"
}

cmd=${1:-}
shift || true
dir="" port="" host=127.0.0.1 region=us-east-1
buckets=()
while [ $# -gt 0 ]; do
  case "$1" in
  --dir) dir=$2; shift 2 ;;
  --port) port=$2; shift 2 ;;
  --host) host=$2; shift 2 ;;
  --region) region=$2; shift 2 ;;
  --bucket) buckets+=("$2"); shift 2 ;;
  *) die "unknown argument $1" ;;
  esac
done
case "$cmd" in
build) build ;;
up)
  [ -n "$dir" ] || die "up needs --dir DIR"
  up "$dir" "$host" "$port" "$region" "${buckets[@]}"
  ;;
down)
  [ -n "$dir" ] || die "down needs --dir DIR"
  down "$dir"
  ;;
*) die "usage: server.sh build | up --dir DIR [--host ADDR] [--port N] [--region R] [--bucket NAME]... | down --dir DIR" ;;
esac
