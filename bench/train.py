#!/usr/bin/env python3
"""bench/train: training throughput and time to 0.87 test accuracy.

Model: examples/fashion-mnist-model.json (Flatten -> Dense 128 relu -> Dense 10),
Adam, per-replica batch 32, Fashion-MNIST from Debian's dataset-fashion-mnist.
Runs in one go, on this machine, so the figures share its noise:
  baseline  1 worker  (batch 32, lr 0.001)
  2 workers x batch 32 on loopback (TCP ring), lr scaled by replicas (--scale-lr)
  1 worker x cpu:2 (two logical CPU replicas, batch 32 each), lr scaled likewise
and prints samples/s of each (and per replica), the ratios against the
baseline, and for each run
the wall time (from process start, rendezvous included) until the end of the
first epoch whose test accuracy reached 0.87.

  python3 bench/train.py [--epochs 5] [--build build]

cpu:2 runs its two replicas one after the other in one process (they exist to
test the multi-replica path on CPU, as TF's logical devices do): expect about
the 1-worker samples/s, not twice it.
"""
import argparse
import json
import os
import pathlib
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "integration"))
from test_worker_multiproc import free_ports  # noqa: E402
DATA = pathlib.Path("/usr/share/datasets/fashion-mnist")
TARGET = 0.87


def run(worker, world, epochs, tmp, extra, device="cpu", tag=None):
    tag = tag or f"w{world}"
    ports = free_ports(world)
    addrs = [f"127.0.0.1:{p}" for p in ports]
    procs = []
    t0 = time.monotonic()
    for r in range(world):
        env = dict(os.environ, CTRAIN_JOB_TOKEN="bench", CTRAIN_JOB_NAME="bench",
                   CTRAIN_ATTEMPT="0")
        if world > 1:
            env["TF_CONFIG"] = json.dumps({"cluster": {"worker": addrs},
                                           "task": {"type": "worker", "index": r}})
        else:
            env.pop("TF_CONFIG", None)
        args = [str(worker), "train", "--model", str(ROOT / "examples/fashion-mnist-model.json"),
                "--data", str(DATA / "train"), "--test-data", str(DATA / "t10k"),
                "--epochs", str(epochs), "--batch", "32", "--optimizer", "adam",
                "--device", device, "--metrics", f"{tmp}/{tag}-r{r}.jsonl", *extra]
        procs.append(subprocess.Popen(args, env=env, stdout=subprocess.DEVNULL,
                                      stderr=open(f"{tmp}/{tag}-r{r}.log", "w")))
    codes = [p.wait() for p in procs]
    wall = time.monotonic() - t0
    if codes != [0] * world:
        sys.exit(f"bench/train: {tag} run failed {codes}; logs in {tmp}")
    lines = [json.loads(l) for l in open(f"{tmp}/{tag}-r0.jsonl") if l.strip()]
    epochs_rows = [l for l in lines if "epoch" in l and "val_accuracy" in l]
    samples = sum(l["samples_per_sec"] * l["seconds"] for l in epochs_rows)
    secs = sum(l["seconds"] for l in epochs_rows)
    startup = wall - secs
    t_target = None
    acc = 0.0
    for l in epochs_rows:
        acc = l["val_accuracy"]
        if acc >= TARGET:
            t_target = startup + sum(x["seconds"] for x in epochs_rows if x["epoch"] <= l["epoch"])
            break
    replicas = epochs_rows[-1].get("replicas", world)
    return {"run": tag, "world": world, "replicas_in_sync": replicas,
            "samples_per_sec": samples / secs,
            "samples_per_sec_per_replica": samples / secs / replicas, "wall_s": wall,
            "final_val_accuracy": epochs_rows[-1]["val_accuracy"], "time_to_target_s": t_target,
            "epoch_accs": [round(l["val_accuracy"], 4) for l in epochs_rows]}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--epochs", type=int, default=5)
    ap.add_argument("--build", default=str(ROOT / "build"))
    a = ap.parse_args()
    worker = pathlib.Path(a.build) / "worker/ctrain-worker"
    with tempfile.TemporaryDirectory(prefix="bench-train-") as tmp:
        base = run(worker, 1, a.epochs, tmp, [], tag="1-worker")
        two = run(worker, 2, a.epochs, tmp, ["--scale-lr"], tag="2-workers")
        rep = run(worker, 1, a.epochs, tmp, ["--scale-lr"], device="cpu:2", tag="1-worker-cpu2")
    for r in (base, two, rep):
        tt = f"{r['time_to_target_s']:.1f} s" if r["time_to_target_s"] else "not reached"
        print(f"{r['run']}: {r['replicas_in_sync']} replica(s) in sync, "
              f"{r['samples_per_sec']:.0f} samples/s ({r['samples_per_sec_per_replica']:.0f} per "
              f"replica), test accuracy by epoch {r['epoch_accs']}, time to {TARGET}: {tt}")
    for name, r in (("2-worker", two), ("cpu:2 x 1 worker", rep)):
        print(f"ratio {name}/1-worker samples/s (baseline: 1 worker, same run): "
              f"{r['samples_per_sec'] / base['samples_per_sec']:.2f}")
    print(json.dumps({"baseline": base, "two_workers": two, "one_worker_cpu2": rep}))


if __name__ == "__main__":
    main()
