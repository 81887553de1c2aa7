#!/usr/bin/env bash
# tb_screenshot.sh - docs/img/tensorboard.png: the real TensorBoard's scalars page, in Debian's
# headless Chromium, over the events of a 2-worker ctrain-worker job (bench/tensorboard_resume.py:
# --tensorboard-dir, SIGKILLed after epoch 3's metrics line and resumed from its backup at step
# 2000; tools/tb_check.py checks the events against the metrics lines first, as the server reads
# them too). A developer tool, not part of CI.
#
#   bash tools/tb_screenshot.sh [OUT.png]          # default docs/img/tensorboard.png
#
# Needs build/worker/ctrain-worker (cmake --build build), Debian's dataset-fashion-mnist,
# chromium (apt-get install chromium) and a Python with tensorboard 2.21 in $PY (default
# ~/.cache/ctrain/bench-tf-venv-2.21.0/bin/python, which bench/tensorboard_resume.py also uses;
# docs/data.md#tensorboard installs it there). KEEP=DIR leaves the run's files in DIR.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PY=${PY:-$HOME/.cache/ctrain/bench-tf-venv-2.21.0/bin/python}
OUT=${1:-$ROOT/docs/img/tensorboard.png}
# Smoothing off; the epoch run's loss and val_accuracy and the steps run's batch_* side by side.
VIEW='#scalars&_smoothingWeight=0&tagFilter=%5E(loss%7Cval_accuracy%7Cbatch_loss%7Cbatch_accuracy)%24'

die() {
  echo "tb_screenshot: $*" >&2
  exit 1
}
command -v chromium >/dev/null || die "chromium is missing (apt-get install chromium)"
"$PY" -c 'import tensorboard' 2>/dev/null || die "no tensorboard in $PY (see docs/data.md#tensorboard)"

TMP=$(mktemp -d /tmp/ctrain-tb-shot.XXXXXX)
TB_PID=""
cleanup() {
  if [[ -n $TB_PID ]]; then kill "$TB_PID" 2>/dev/null || true; fi
  if [[ -z ${KEEP:-} ]]; then rm -rf "$TMP"; fi
}
trap cleanup EXIT
RUN=${KEEP:-$TMP}/run

# The job, its SIGKILL and resume, and tools/tb_check.py (exits non-zero on a mismatch).
python3 "$ROOT/bench/tensorboard_resume.py" --keep "$RUN"

PORT=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
"$PY" -m tensorboard.main --logdir "$RUN/tb" --host 127.0.0.1 --port "$PORT" >"$TMP/tensorboard.log" 2>&1 &
TB_PID=$!
# Until both runs' tags are loaded (the server reads the files in the background).
for _ in $(seq 120); do
  tags=$(curl -sf "http://127.0.0.1:$PORT/data/plugin/scalars/tags" || true)
  if [[ $tags == *'"steps"'*batch_loss* && $tags == *val_accuracy* ]]; then break; fi
  kill -0 "$TB_PID" 2>/dev/null || die "tensorboard exited: $(tail -5 "$TMP/tensorboard.log")"
  sleep 1
done
[[ $tags == *batch_loss* ]] || die "tensorboard never listed the scalars: $tags"

sandbox=()
if [[ $EUID -eq 0 ]]; then sandbox=(--no-sandbox); fi # Chromium refuses root with its sandbox
# --virtual-time-budget: the page's requests and the charts' drawing finish before the shot.
chromium --headless "${sandbox[@]}" --disable-gpu --hide-scrollbars --window-size=1400,1000 \
  --virtual-time-budget=20000 --screenshot="$TMP/shot.png" "http://127.0.0.1:$PORT/$VIEW" \
  >"$TMP/chromium.log" 2>&1 || die "chromium failed: $(tail -5 "$TMP/chromium.log")"
[[ -s $TMP/shot.png ]] || die "no screenshot: $(tail -5 "$TMP/chromium.log")"
mkdir -p "$(dirname "$OUT")"
cp "$TMP/shot.png" "$OUT"
echo "tb_screenshot: $OUT ($(du -k "$OUT" | cut -f1) KiB)"
