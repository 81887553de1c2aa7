#!/usr/bin/env python3
"""Time from a worker's SIGKILL to the surviving workers' exit, over N runs.

Each run starts WORLD ctrain-worker processes on loopback (hand-written
TF_CONFIG, as tests/integration/test_worker_multiproc.py does) training a
4000-sample Fashion-MNIST subset with backups on, waits until training is in
its second epoch plus a random delay (so the kill lands at a random point of
a step: compute, all-reduce or a save), SIGKILLs the last rank and measures
until every survivor has exited (they must exit 75).

A SIGKILLed peer's sockets are closed by its kernel, so survivors see EOF or
RST at once; most of the time measured is the survivors' collective teardown
(ring_destroy joins the heartbeat thread, which sleeps peer_timeout/10 between
beats), hence compare --peer-timeout 10 (default) with 1.

Usage: bench/kill_latency.py [--runs 10] [--world 3] [--peer-timeout 10]
       (CTRAIN_BUILD_DIR selects the build, default ./build)
"""
import argparse
import gzip
import json
import os
import pathlib
import random
import signal
import statistics
import struct
import subprocess
import sys
import tempfile
import time

from _paths import ROOT
from workerlib import free_ports
BUILD = pathlib.Path(os.environ.get("CTRAIN_BUILD_DIR", ROOT / "build"))
WORKER = BUILD / "worker" / "ctrain-worker"
DATA = pathlib.Path("/usr/share/datasets/fashion-mnist")
MODEL = ROOT / "examples" / "fashion-mnist-model.json"


def write_raw(n, out):
    img = gzip.open(DATA / "train-images-idx3-ubyte.gz").read()
    lab = gzip.open(DATA / "train-labels-idx1-ubyte.gz").read()
    with open(out, "wb") as f:
        f.write(b"CTRAINR1" + struct.pack("<QII", n, 0, 2) + struct.pack("<II", 28, 28))
        for i in range(n):
            f.write(struct.pack("<i", lab[8 + i]) + img[16 + 784 * i:16 + 784 * (i + 1)])


def one_run(tmp, data, world, peer_timeout, rnd):
    ports = free_ports(world)
    addrs = [f"127.0.0.1:{p}" for p in ports]
    procs, logs = [], []
    for r in range(world):
        task = {"type": "chief", "index": 0} if r == 0 else {"type": "worker", "index": r - 1}
        env = dict(os.environ, CTRAIN_JOB_TOKEN="bench", CTRAIN_JOB_NAME="killbench",
                   TF_CONFIG=json.dumps({"cluster": {"chief": addrs[:1], "worker": addrs[1:]},
                                         "task": task}))
        log = tmp / f"rank{r}.log"
        logs.append(log)
        with open(log, "w") as f:
            procs.append(subprocess.Popen(
                [str(WORKER), "train", "--model", str(MODEL), "--data", str(data), "--format",
                 "raw", "--epochs", "1000", "--batch", "32", "--backup-dir", str(tmp / "bk"),
                 "--save-freq", "25", "--peer-timeout", str(peer_timeout),
                 "--rendezvous-timeout", "30"], env=env, stdout=f, stderr=subprocess.STDOUT))
    deadline = time.time() + 60
    while "Epoch 2/" not in logs[0].read_text():
        if time.time() > deadline or any(p.poll() is not None for p in procs):
            raise SystemExit("training did not start:\n" + logs[0].read_text())
        time.sleep(0.01)
    time.sleep(rnd.uniform(0.0, 0.5))
    victim = procs[-1]
    t0 = time.monotonic()
    victim.send_signal(signal.SIGKILL)
    survivors = procs[:-1]
    done = {}
    while len(done) < len(survivors):
        for i, p in enumerate(survivors):
            if i not in done and p.poll() is not None:
                done[i] = (time.monotonic() - t0, p.returncode)
        if time.monotonic() - t0 > 4 * peer_timeout + 10:
            for p in procs:
                p.kill()
            raise SystemExit("survivors did not exit")
        time.sleep(0.0005)
    victim.wait()
    codes = [done[i][1] for i in range(len(survivors))]
    if codes != [75] * len(survivors):
        raise SystemExit(f"survivors exited {codes}:\n" + logs[0].read_text()[-2000:])
    return max(t for t, _ in done.values())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--world", type=int, default=3)
    ap.add_argument("--peer-timeout", type=float, default=10.0)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    if not WORKER.exists():
        sys.exit(f"{WORKER} not built")
    rnd = random.Random(a.seed)
    with tempfile.TemporaryDirectory(prefix="ctrain-killbench-") as d:
        d = pathlib.Path(d)
        data = d / "train.raw"
        write_raw(4000, data)
        times = []
        for i in range(a.runs):
            run_dir = d / f"run{i}"
            run_dir.mkdir()
            t = one_run(run_dir, data, a.world, a.peer_timeout, rnd)
            times.append(t)
            print(f"run {i + 1}: SIGKILL rank {a.world - 1} -> all {a.world - 1} survivors "
                  f"exited 75 in {t * 1000:.1f} ms", flush=True)
    print(f"over {a.runs} runs (world {a.world}, --peer-timeout {a.peer_timeout:g} s): "
          f"median {statistics.median(times) * 1000:.1f} ms, min {min(times) * 1000:.1f} ms, "
          f"max {max(times) * 1000:.1f} ms")


if __name__ == "__main__":
    main()
