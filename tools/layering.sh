#!/usr/bin/env bash
# tools/layering.sh - fails on the layering violations the compiler cannot see.
#
#   bash tools/layering.sh
#
# Layers: common < kube < controller, and common < objstore < worker; the
# worker never includes kube or controller headers, the controller never the
# worker's or objstore's. The public headers of a library are in its own
# include root (include/common/ctrain/, include/objstore/ctrain/,
# include/kube/ctrain/, included as "ctrain/<name>.h"), which CMake gives only
# to the targets that link it: a worker file that includes
# "ctrain/kube_client.h" does not compile, nor a controller file that includes
# "ctrain/s3.h" (tests/unit/layering/ proves it). What the compiler cannot tell apart are
# the programs' internal headers, included by their path from the project
# root ("controller/reconcile.h", "worker/model/model.h"), which both programs
# have on their path. So this checks those paths: the first folder names the
# layer; kube/'s private headers (kube_*_int.h, kube_util.h, kube_yaml.h) and
# objstore/'s (s3_internal.h) are included only inside their own folder; a
# public header is spelled "ctrain/<name>.h", never by its path.
set -euo pipefail
cd "$(dirname "$0")/.."

declare -A MAY=(
  [common]=" common "
  [objstore]=" common objstore "
  [kube]=" common kube "
  [controller]=" common kube controller "
  [worker]=" common objstore worker "
)

# The layer of a path from the project root, from its first folder.
layer_of() {
  case "$1" in
  common/* | include/common/*) echo common ;;
  objstore/* | include/objstore/*) echo objstore ;;
  kube/* | include/kube/*) echo kube ;;
  controller/*) echo controller ;;
  worker/*) echo worker ;;
  esac
}

bad=0
while IFS= read -r f; do
  from=$(layer_of "$f")
  while IFS=: read -r line inc; do
    case "$inc" in
    ctrain/*) continue ;;                       # a public header: the compiler checks it
    include/*/ctrain/* | */include/ctrain/*) why="spell it \"ctrain/${inc##*/}\"" ;;
    */*)
      to=$(layer_of "$inc")
      if [ -z "$to" ]; then
        why="a path in no layer"
      elif [[ ${MAY[$from]} != *" $to "* ]]; then
        why="$from includes $to"
      elif [[ ($to == kube || $to == objstore) && $from != "$to" ]]; then
        why="private to $to/"
      else
        continue
      fi
      ;;
    *) continue ;;                              # beside the file
    esac
    echo "layering: $f:$line: \"$inc\": $why" >&2
    bad=1
  done < <(grep -n -o '^#include "[^"]*"' "$f" | sed 's/#include "\(.*\)"/\1/')
done < <(git ls-files --cached --others --exclude-standard -- 'include/*' 'common/*' 'objstore/*' \
  'kube/*' 'controller/*' 'worker/*' | grep -E '\.(c|h|cu|cuh)$')

if ((bad)); then
  echo "layering: violations above (common < kube < controller; common < objstore < worker)" >&2
  exit 1
fi
echo "layering: common < kube < controller, common < objstore < worker: clean (paths; the compiler checks \"ctrain/\")"
