#!/usr/bin/env python3
"""tools/tb_check.py - the TensorBoard event files ctrain-worker --tensorboard-dir
wrote, read by the real tensorboard package (EventAccumulator), against the
--metrics JSON lines of the same run: every scalar at step E equals the last
line of epoch E (a resumed run appends the epoch it redoes again; to the JSON's
printed precision and float32), learning_rate equals --lr, no step appears
twice, and every epoch has its scalars. With --steps-every N --total-steps T,
also TB_DIR/steps (--tensorboard-freq N): batch_* scalars at exactly the
global steps N, 2N, ... <= T, each once, batch_learning_rate equal to --lr.
Each run is read twice: by the legacy EventAccumulator, and by the
plugin_event_accumulator that `tensorboard --logdir` serves from (it tells a
run's first SessionLog START from a restart, the legacy one does not): both
must give the same steps and values.

  PY=~/.cache/ctrain/bench-tf-venv-2.21.0/bin/python   # with tensorboard 2.21 installed
  $PY tools/tb_check.py TB_DIR METRICS.jsonl --lr 0.001 [--steps-every N --total-steps T]
"""
import argparse
import json
import sys

from tensorboard.backend.event_processing import plugin_event_accumulator
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensorboard.util import tensor_util

TOL = {"loss": 2e-6, "accuracy": 2e-6, "val_loss": 2e-6, "val_accuracy": 2e-6,
       "samples_per_sec": 0.06}


def check_steps(path, every, total, lr):
    acc = EventAccumulator(path, size_guidance={"scalars": 0})
    acc.Reload()
    want = list(range(every, total + 1, every))
    tags = sorted(acc.Tags()["scalars"])
    bad = [] if tags == ["batch_accuracy", "batch_learning_rate", "batch_loss",
                         "batch_samples_per_sec"] else [f"steps: tags {tags}"]
    for tag in tags:
        steps = [e.step for e in acc.Scalars(tag)]
        if steps != want:
            bad.append(f"steps {tag}: {steps} != {want[:3]}...{want[-2:]}")
    if "batch_learning_rate" in tags and any(abs(e.value - lr) > lr * 1e-6
                                             for e in acc.Scalars("batch_learning_rate")):
        bad.append("steps: batch_learning_rate differs from --lr")
    print(f"tb_check: {path}: {len(tags)} tags, steps {want[0]}..{want[-1]} every {every}: "
          f"{'ok' if not bad else 'MISMATCH'}")
    return bad


def check_served(path, acc):
    """The scalars of the run at path as TensorBoard's server reads them (the
    plugin accumulator, scalars as tensors) against the legacy accumulator's."""
    srv = plugin_event_accumulator.EventAccumulator(path, tensor_size_guidance={"scalars": 0})
    srv.Reload()
    bad = []
    tags = sorted(acc.Tags()["scalars"])
    if sorted(srv.Tags()["tensors"]) != tags:
        bad.append(f"served {path}: tags {sorted(srv.Tags()['tensors'])} != {tags}")
    for tag in tags:
        want = [(e.step, e.value) for e in acc.Scalars(tag)]
        got = [(e.step, float(tensor_util.make_ndarray(e.tensor_proto)))
               for e in srv.Tensors(tag)] if tag in srv.Tags()["tensors"] else []
        if got != want:
            bad.append(f"served {path} {tag}: steps {[s for s, _ in got]} != {[s for s, _ in want]}")
    print(f"tb_check: {path} as served (plugin_event_accumulator): "
          f"{'the same steps and values' if not bad else 'MISMATCH'}")
    return bad


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("tb_dir")
    ap.add_argument("metrics")
    ap.add_argument("--lr", type=float, required=True)
    ap.add_argument("--steps-every", type=int, default=0)
    ap.add_argument("--total-steps", type=int, default=0)
    a = ap.parse_args()
    acc = EventAccumulator(a.tb_dir, size_guidance={"scalars": 0})
    acc.Reload()
    tags = acc.Tags()["scalars"]
    all_lines = [json.loads(l) for l in open(a.metrics) if '"epoch"' in l]
    last = {l["epoch"]: l for l in all_lines}
    lines = [last[e] for e in sorted(last)]
    bad = []
    for tag in tags:
        steps = [e.step for e in acc.Scalars(tag)]
        if len(steps) != len(set(steps)):
            bad.append(f"{tag}: a step appears twice: {steps}")
    for line in lines:
        for tag, tol in list(TOL.items()) + [("learning_rate", None)]:
            if tag not in line and tag != "learning_rate":
                continue
            want = a.lr if tag == "learning_rate" else line[tag]
            tol = abs(want) * 1e-6 if tol is None else tol
            got = [e.value for e in acc.Scalars(tag) if e.step == line["epoch"]] if tag in tags else []
            if len(got) != 1 or abs(got[0] - want) > tol + abs(want) * 6e-8:
                bad.append(f"epoch {line['epoch']} {tag}: event {got}, metrics {want}")
    print(f"tb_check: {len(tags)} scalar tags {sorted(tags)}, {len(lines)} epochs "
          f"(steps {[e.step for e in acc.Scalars('loss')] if 'loss' in tags else []}; "
          f"metrics lines {[l['epoch'] for l in all_lines]}), {len(bad)} mismatches")
    bad += check_served(a.tb_dir, acc)
    if a.steps_every:
        bad += check_steps(f"{a.tb_dir}/steps", a.steps_every, a.total_steps, a.lr)
        steps = EventAccumulator(f"{a.tb_dir}/steps", size_guidance={"scalars": 0})
        steps.Reload()
        bad += check_served(f"{a.tb_dir}/steps", steps)
    for b in bad:
        print("  " + b)
    sys.exit(1 if bad or not lines else 0)


if __name__ == "__main__":
    main()
