#!/usr/bin/env python3
"""bench/tensorboard_resume: a 2-worker ctrain job writing TensorBoard events
(--tensorboard-dir) and --metrics, SIGKILLed in the middle and resumed from its
backups, then checked by tools/tb_check.py with the real tensorboard package.

  python3 bench/tensorboard_resume.py [--epochs 6] [--build build] [--keep DIR]

Backups every 1000 steps (an epoch is 937 steps of global batch 64): the
workers are killed as soon as epoch 3's metrics line appears (step 2811),
so the newest backup is at step 2000, inside epoch 3: the resumed run
redoes epoch 3, whose event the killed run had already written, and its
SessionLog START at step 3 supersedes it. With --tensorboard-freq 200 the
steps run (TB_DIR/steps) restarts likewise at global step 2001.
"""
import argparse
import json
import os
import pathlib
import signal
import subprocess
import sys
import tempfile
import time

from _paths import ROOT
from workerlib import free_ports
DATA = pathlib.Path("/usr/share/datasets/fashion-mnist")
TF_PY = pathlib.Path.home() / ".cache/ctrain/bench-tf-venv-2.21.0/bin/python"


def start(worker, tmp, epochs, attempt):
    addrs = [f"127.0.0.1:{p}" for p in free_ports(2)]
    procs = []
    for r in range(2):
        env = dict(os.environ, CTRAIN_JOB_TOKEN="tb", CTRAIN_JOB_NAME="tb",
                   CTRAIN_ATTEMPT=str(attempt),
                   TF_CONFIG=json.dumps({"cluster": {"worker": addrs},
                                         "task": {"type": "worker", "index": r}}))
        args = [str(worker), "train", "--model", str(ROOT / "examples/fashion-mnist-model.json"),
                "--data", str(DATA / "train"), "--test-data", str(DATA / "t10k"),
                "--epochs", str(epochs), "--batch", "32", "--seed", "42", "--device", "cpu",
                "--backup-dir", f"{tmp}/backup", "--save-freq", "1000", "--termination-log", "",
                "--metrics", f"{tmp}/metrics.jsonl", "--tensorboard-dir", f"{tmp}/tb",
                "--tensorboard-freq", "200"]
        procs.append(subprocess.Popen(args, env=env, stdout=subprocess.DEVNULL,
                                      stderr=open(f"{tmp}/a{attempt}-r{r}.log", "w")))
    return procs


def lines(path):
    try:
        return sum(1 for l in open(path) if '"epoch"' in l)
    except FileNotFoundError:
        return 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--epochs", type=int, default=6)
    ap.add_argument("--build", default=str(ROOT / "build"))
    ap.add_argument("--keep", help="leave the run's files in this directory")
    a = ap.parse_args()
    worker = pathlib.Path(a.build) / "worker/ctrain-worker"
    tmp = a.keep or tempfile.mkdtemp(prefix="ctrain-tb-resume-")
    os.makedirs(tmp, exist_ok=True)
    procs = start(worker, tmp, a.epochs, 0)
    while lines(f"{tmp}/metrics.jsonl") < 3:
        if any(p.poll() is not None for p in procs):
            sys.exit(f"a worker ended before epoch 3: see {tmp}/a0-r*.log")
        time.sleep(0.005)
    for p in procs:
        p.send_signal(signal.SIGKILL)
    codes = [p.wait() for p in procs]
    print(f"attempt 0: SIGKILLed both workers after epoch 3's metrics line: {codes}")
    procs = start(worker, tmp, a.epochs, 1)
    codes = [p.wait() for p in procs]
    resumed = [l for l in open(f"{tmp}/a1-r0.log") if "resum" in l.lower()][:2]
    print(f"attempt 1: exit codes {codes}")
    for l in resumed:
        print("  " + l.strip())
    if codes != [0, 0]:
        sys.exit(open(f"{tmp}/a1-r0.log").read()[-2000:])
    print(f"event files: {sorted(os.listdir(f'{tmp}/tb'))}")
    rc = subprocess.run([str(TF_PY), str(ROOT / "tools/tb_check.py"), f"{tmp}/tb",
                         f"{tmp}/metrics.jsonl", "--lr", "0.001", "--steps-every", "200",
                         "--total-steps", str(937 * a.epochs)],
                        stderr=subprocess.DEVNULL).returncode
    sys.exit(rc)


if __name__ == "__main__":
    main()
