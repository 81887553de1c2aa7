#!/usr/bin/env python3
"""bench/data: training from shards in an S3 bucket against the same shards on local disk.

Fashion-MNIST as 64 GZIP TFRecord train shards and 4 test shards (tools/data/
tfrecord_shards.py: the bytes real TensorFlow writes), on local disk and uploaded to a real
S3-compatible server on loopback (versitygw with its posix backend, started by
tests/integration/s3lib.py; curl's SigV4 PUTs). Each round runs, one after the other, the
same 2-worker job (ctrain-worker processes on loopback, hand-written TF_CONFIG, as
bench/train.py runs them; examples/fashion-mnist-model.json, Adam, batch 32 a worker, seed
42, --epochs):
  local     --data-stream --data DIR/train --test-data DIR/test   (the baseline)
  bucket    --data s3://ckpt/fmnist/train/ --test-data s3://ckpt/fmnist/test/ --s3-endpoint URL
both through the streaming reader (default prefetch 256 MiB and shuffle buffer of 10000
records; no --data-cache, so every epoch reads the bucket again). It prints, per row, the
training samples/s (the chief's epochs: samples over seconds, the test-set evaluation outside
the timing), the wall time of the whole process (listing, the counting pass and evaluation
included), the final test accuracy and the chief's "data: peak RSS" line; then the ratios:
bucket/local samples/s (goal >= 0.9) and the accuracy difference (goal |diff| <= 0.002).
With --rounds N the figures are medians over the rounds (both rows in every round, local
first in odd rounds and bucket first in even ones).
Exits 1 when a goal is not met.

  python3 bench/data.py [--epochs 3] [--rounds 3] [--build build] [--shards 64]
"""
import argparse
import datetime
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import time

from _paths import ROOT
from s3lib import BUCKET, new_server
from workerlib import free_ports

sys.path.insert(0, str(ROOT / "tools/data"))
import tfrecord_shards  # noqa: E402

MODEL = ROOT / "examples/fashion-mnist-model.json"
RATIO_GOAL, ACC_TOL = 0.9, 0.002
REPORT = re.compile(r"data: peak RSS .*")


def run(worker, tmp, tag, data_args, env, epochs):
    """One 2-worker job; (samples/s, wall s, val_accuracy, the chief's data line)."""
    addrs = [f"127.0.0.1:{p}" for p in free_ports(2)]
    procs = []
    t0 = time.monotonic()
    for r in range(2):
        e = dict(env, CTRAIN_JOB_TOKEN="bench-data", CTRAIN_JOB_NAME="bench-data",
                 CTRAIN_ATTEMPT="0", TF_CONFIG=json.dumps(
                     {"cluster": {"worker": addrs}, "task": {"type": "worker", "index": r}}))
        args = [str(worker), "train", "--model", str(MODEL), "--epochs", str(epochs),
                "--batch", "32", "--optimizer", "adam", "--seed", "42", "--device", "cpu",
                "--image-shape", "28,28", "--termination-log", "",
                "--metrics", f"{tmp}/{tag}-r{r}.jsonl", *data_args]
        procs.append(subprocess.Popen(args, env=e, stdout=subprocess.DEVNULL,
                                      stderr=open(f"{tmp}/{tag}-r{r}.log", "w")))
    codes = [p.wait() for p in procs]
    wall = time.monotonic() - t0
    log = open(f"{tmp}/{tag}-r0.log").read()
    if codes != [0, 0]:
        for r in range(2):
            print(f"--- {tag} rank {r} (tail):\n{open(f'{tmp}/{tag}-r{r}.log').read()[-2000:]}",
                  file=sys.stderr)
        sys.exit(f"bench/data: {tag} failed {codes}")
    rows = [json.loads(line) for line in open(f"{tmp}/{tag}-r0.jsonl")
            if '"val_accuracy"' in line]
    samples = sum(r["samples_per_sec"] * r["seconds"] for r in rows)
    secs = sum(r["seconds"] for r in rows)
    m = REPORT.search(log)
    return samples / secs, wall, rows[-1]["val_accuracy"], m[0] if m else "(no data line)"


def machine():
    model = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo")
                  if line.startswith("model name")), platform.machine())
    return f"{os.cpu_count()} CPUs, {model}, {platform.node()}"


def main():
    ap = argparse.ArgumentParser(description="bucket vs local disk, samples/s and accuracy")
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--shards", type=int, default=64)
    ap.add_argument("--build", default=os.environ.get("CTRAIN_BUILD_DIR", str(ROOT / "build")))
    a = ap.parse_args()
    worker = f"{a.build}/worker/ctrain-worker"
    start = datetime.datetime.now(datetime.timezone.utc)
    print(f"bench/data: {start:%Y-%m-%d %H:%M} UTC; {machine()}; load average "
          f"{', '.join(f'{x:.2f}' for x in os.getloadavg())}", flush=True)
    with tempfile.TemporaryDirectory(prefix="ctrain-bench-data-") as tmp:
        train, test = tfrecord_shards.write_fmnist(f"{tmp}/shards", a.shards, 4)
        size = sum(p.stat().st_size for p in train)
        s3 = new_server()
        try:
            tfrecord_shards.upload_dir(f"{tmp}/shards", f"s3://{BUCKET}/fmnist/", s3.endpoint,
                                       s3.access, s3.secret, "us-east-1")
            env = {k: v for k, v in os.environ.items()
                   if not k.startswith(("AWS_", "CTRAIN_S3", "CTRAIN_BACKUP"))}
            s3env = dict(env, AWS_ACCESS_KEY_ID=s3.access, AWS_SECRET_ACCESS_KEY=s3.secret,
                         AWS_REGION="us-east-1")
            plan = [("local", ["--data-stream", "--data", f"{tmp}/shards/train",
                               "--test-data", f"{tmp}/shards/test"], env),
                    ("bucket", ["--data", f"s3://{BUCKET}/fmnist/train/", "--test-data",
                                f"s3://{BUCKET}/fmnist/test/", "--s3-endpoint", s3.endpoint],
                     s3env)]
            res = {tag: [] for tag, _, _ in plan}
            for rnd in range(a.rounds):
                for tag, args, e in plan if rnd % 2 == 0 else plan[::-1]:
                    res[tag].append(run(worker, tmp, f"{tag}{rnd}", args, e, a.epochs))
                    sps, wall, acc, line = res[tag][-1]
                    print(f"round {rnd + 1} {tag:6s} {sps:9.0f} samples/s  wall {wall:5.1f} s  "
                          f"val_accuracy {acc:.4f}  {line}", flush=True)
        finally:
            s3.stop()
    med = {tag: [statistics.median(x[i] for x in rows) for i in range(3)]
           for tag, rows in res.items()}
    ratio = med["bucket"][0] / med["local"][0]
    diff = med["bucket"][2] - med["local"][2]
    accs = {tag: sorted({x[2] for x in rows}) for tag, rows in res.items()}
    print(f"\nFashion-MNIST, {a.shards} GZIP TFRecord shards ({size / 2**20:.1f} MiB), 2 workers "
          f"on loopback, {a.epochs} epochs, seed 42; medians of {a.rounds} round(s)")
    print("| Row | Training samples/s | Wall s | Test accuracy |\n|---|---|---|---|")
    for tag, (sps, wall, acc) in med.items():
        print(f"| {tag} | {sps:,.0f} | {wall:.1f} | {acc:.4f} (rounds: "
              f"{', '.join(f'{x:.4f}' for x in accs[tag])}) |")
    ok_ratio, ok_acc = ratio >= RATIO_GOAL, abs(diff) <= ACC_TOL
    print(f"ratio bucket/local samples/s (baseline: local disk, same run): {ratio:.3f} "
          f"(goal >= {RATIO_GOAL}: {'met' if ok_ratio else 'NOT met'})")
    print(f"test accuracy bucket - local: {diff:+.4f} (goal |diff| <= {ACC_TOL}: "
          f"{'met' if ok_acc else 'NOT met'})")
    print(f"command: python3 bench/data.py --epochs {a.epochs} --rounds {a.rounds} --build "
          f"{a.build}; load average after {', '.join(f'{x:.2f}' for x in os.getloadavg())}")
    sys.exit(0 if ok_ratio and ok_acc else 1)


if __name__ == "__main__":
    main()
