#!/usr/bin/env bash
# tools/layering.sh - fails when a lower layer includes a higher one.
#
#   bash tools/layering.sh
#
# Layers: common < kube < controller, and common < worker; the worker never
# includes kube or controller headers, the controller never the worker's.
# Public library headers (common, kube) live in include/ctrain/ and are
# included as "ctrain/<name>.h"; every one belongs to a layer (the table
# below, so it cannot rot). Program-internal headers live beside their
# sources and are included by their path from the project root
# ("controller/reconcile.h", "worker/model/model.h"), so the path names the
# layer. kube/'s private headers are included only inside kube/.
set -euo pipefail
cd "$(dirname "$0")/.."

declare -A LAYER=(
  [clock.h]=common [err.h]=common [fileio.h]=common [json.h]=common [log.h]=common
  [buf.h]=common [flags.h]=common [strmap.h]=common [tfconfig.h]=common [util.h]=common
  [version.h]=common [httpd.h]=common
  [kube_client.h]=kube [kube_config.h]=kube [kube_events.h]=kube [kube_informer.h]=kube
  [kube_lease.h]=kube [kube_time.h]=kube [kube_ratelimit.h]=kube [kube_watch.h]=kube
  [kube_workqueue.h]=kube
)
declare -A MAY=(
  [common]=" common "
  [kube]=" common kube "
  [controller]=" common kube controller "
  [worker]=" common worker "
)

bad=0
for h in include/ctrain/*.h; do
  n=$(basename "$h")
  if [ -z "${LAYER[$n]:-}" ]; then
    echo "layering: $h belongs to no layer (add it to tools/layering.sh)" >&2
    bad=1
  fi
done

# The layer of a file, from where it lives.
layer_of() {
  case "$1" in
  common/*) echo common ;;
  kube/*) echo kube ;;
  controller/*) echo controller ;;
  worker/*) echo worker ;;
  include/ctrain/*) echo "${LAYER[$(basename "$1")]:-}" ;;
  esac
}

# The layer an #include "..." names ("" for a same-folder include).
layer_of_include() {
  case "$1" in
  ctrain/*) echo "${LAYER[${1#ctrain/}]:-none}" ;;
  */*) layer_of "$1" | grep . || echo none ;;
  *) echo same ;;
  esac
}

while IFS= read -r f; do
  from=$(layer_of "$f")
  [ -n "$from" ] || continue
  while IFS=: read -r line inc; do
    to=$(layer_of_include "$inc")
    if [ "$to" = same ]; then
      # a header beside this file; it must exist there
      if [ ! -f "$(dirname "$f")/$inc" ]; then
        echo "layering: $f:$line includes \"$inc\", which is not beside it (use its path from the root)" >&2
        bad=1
      fi
    elif [ "$to" = none ]; then
      echo "layering: $f:$line includes \"$inc\", which belongs to no layer" >&2
      bad=1
    elif [[ ${MAY[$from]} != *" $to "* ]]; then
      echo "layering: $f:$line: $from includes \"$inc\" ($to)" >&2
      bad=1
    elif [[ $inc == kube/* && $from != kube ]]; then
      echo "layering: $f:$line: \"$inc\" is private to kube/" >&2
      bad=1
    fi
  done < <(grep -n -o '^#include "[^"]*"' "$f" | sed 's/#include "\(.*\)"/\1/')
done < <(git ls-files --cached --others --exclude-standard -- 'common/*' 'kube/*' 'controller/*' \
  'worker/*' 'include/ctrain/*' | grep -E '\.(c|h|cu|cuh)$')

if ((bad)); then
  echo "layering: violations above (common < kube < controller; common < worker)" >&2
  exit 1
fi
echo "layering: common < kube < controller, common < worker: clean"
