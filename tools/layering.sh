#!/usr/bin/env bash
# tools/layering.sh - fails when a lower layer includes a higher one.
#
#   bash tools/layering.sh
#
# Layers: common < kube < controller, and common < worker; the worker never
# includes kube or controller headers, the controller never the worker's.
# Every header in include/ctrain/ belongs to one layer (the table below); a
# header missing from it is an error too, so the table cannot rot.
set -euo pipefail
cd "$(dirname "$0")/.."

declare -A LAYER=(
  [clock.h]=common [err.h]=common [exitcode.h]=common [fileio.h]=common [log.h]=common [tfconfig.h]=common
  [util.h]=common [version.h]=common
  [kube_client.h]=kube [kube_config.h]=kube [kube_events.h]=kube [kube_informer.h]=kube
  [kube_lease.h]=kube [kube_time.h]=kube [kube_ratelimit.h]=kube [kube_strmap.h]=kube [kube_watch.h]=kube
  [kube_workqueue.h]=kube
  [ctl.h]=controller [ctl_http.h]=controller [ctl_options.h]=controller [podbuild.h]=controller
  [reconcile.h]=controller [slowstart.h]=controller
  [ckpt.h]=worker [coll.h]=worker [coll_nccl.h]=worker [data.h]=worker [devinfo.h]=worker
  [dmodel.h]=worker [evaluate.h]=worker [kernels.h]=worker [model.h]=worker [optim.h]=worker
  [ring.h]=worker [rng.h]=worker [safetensors.h]=worker [train.h]=worker [wk_options.h]=worker
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

# The layer of a source or header file, from where it lives.
layer_of() {
  case "$1" in
  common/*) echo common ;;
  kube/*) echo kube ;;
  controller/*) echo controller ;;
  worker/*) echo worker ;;
  include/ctrain/*) echo "${LAYER[$(basename "$1")]:-}" ;;
  esac
}

while IFS= read -r f; do
  from=$(layer_of "$f")
  [ -n "$from" ] || continue
  while IFS=: read -r line inc; do
    to=${LAYER[$inc]:-}
    if [ -z "$to" ]; then
      echo "layering: $f:$line includes ctrain/$inc, which belongs to no layer" >&2
      bad=1
    elif [[ ${MAY[$from]} != *" $to "* ]]; then
      echo "layering: $f:$line: $from includes ctrain/$inc ($to)" >&2
      bad=1
    fi
  done < <(grep -n -o '#include "ctrain/[a-z_0-9]*\.h"' "$f" | sed 's/#include "ctrain\/\(.*\)"/\1/')
done < <(git ls-files --cached --others --exclude-standard -- 'common/*' 'kube/*' 'controller/*' \
  'worker/*' 'include/ctrain/*' | grep -E '\.(c|h|cu|cuh)$')

if ((bad)); then
  echo "layering: violations above (common < kube < controller; common < worker)" >&2
  exit 1
fi
echo "layering: common < kube < controller, common < worker: clean"
