# shellcheck shell=bash disable=SC2034 # DIR is what the sourcing script reads
# args.sh - the local cluster's directory option, for the scripts that take only
# that (cluster.sh, kueue/install.sh; sourced). dir_args NAME ARG... sets DIR from
# `--dir DIR` (default $CTRAIN_CLUSTER_DIR, else /tmp/ctrain-localcluster); any
# other argument exits 64 naming the script NAME.
dir_args() {
  local me=$1
  shift
  DIR=${CTRAIN_CLUSTER_DIR:-/tmp/ctrain-localcluster}
  while (($#)); do
    case "$1" in
    --dir)
      DIR=${2:?"$me: --dir takes a directory"}
      shift 2
      ;;
    *)
      echo "$me: unknown argument '$1'" >&2
      exit 64
      ;;
    esac
  done
}
