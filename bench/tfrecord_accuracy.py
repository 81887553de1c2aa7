#!/usr/bin/env python3
"""bench/tfrecord_accuracy: Fashion-MNIST trained from TFRecord shards written by
real TensorFlow reaches the IDX path's test accuracy with the same seed.

  PY=~/.cache/ctrain/bench-tf-venv-2.21.0/bin/python     # bench/train.py's tf_venv()
  $PY tools/tfrecord_fmnist.py DIR/plain --shards 8 && $PY tools/tfrecord_fmnist.py DIR/gzip --shards 8 --gzip
  $PY tools/tfrecord_fmnist.py DIR/one --shards 1 && $PY tools/tfrecord_fmnist.py DIR/plain --split t10k --shards 1
  $PY tools/tfrecord_fmnist.py DIR/npz --npz && $PY tools/tfrecord_fmnist.py DIR/npz-deflated --npz --deflate
  python3 bench/tfrecord_accuracy.py DIR [--epochs 5] [--build build]

Runs ctrain-worker (examples/fashion-mnist-model.json, Adam, batch 32, seed 42,
test set: IDX t10k, or the t10k TFRecord for the TFRecord runs) as
  idx-1w        IDX, 1 worker                 tfr-1w       8 plain shards, 1 worker
  tfr-gzip-1w   8 GZIP shards, 1 worker
  npz-1w        train.npz (numpy.savez), 1 worker; npz-deflated-1w: savez_compressed
  npz-2w        train.npz, 2 workers (one file: AUTO is DATA)
  idx-2w        IDX, 2 workers (one file: AUTO is DATA, with its warning)
  tfr-2w-data   1 shard, 2 workers: AUTO falls back to DATA, with its warning
  idx-2w-file   the IDX split into the same 8 shards (IDX pairs, written here), 2
                workers: AUTO is FILE (shards 0,2,4,6 on worker 0, 1,3,5,7 on 1)
  tfr-2w-file   8 TFRecord shards, 2 workers: AUTO is FILE likewise
and prints each final test accuracy and its difference from the IDX run of the
same workers and sharding; exits 1 when one differs by more than 0.002. (FILE
and DATA sharding give the workers different samples at each step, so
tfr-2w-file against idx-2w compares two training runs, not two readers; that
difference is printed too.)
"""
import argparse
import gzip
import json
import os
import pathlib
import struct
import subprocess
import sys
import tempfile

from _paths import ROOT
from workerlib import free_ports
IDX = pathlib.Path("/usr/share/datasets/fashion-mnist")
TOL = 0.002


def run(worker, world, data, test, extra, epochs, tmp, tag):
    addrs = [f"127.0.0.1:{p}" for p in free_ports(world)]
    procs = []
    for r in range(world):
        env = dict(os.environ, CTRAIN_JOB_TOKEN="tfr-acc", CTRAIN_JOB_NAME="tfr-acc",
                   CTRAIN_ATTEMPT="0")
        env.pop("TF_CONFIG", None)
        if world > 1:
            env["TF_CONFIG"] = json.dumps({"cluster": {"worker": addrs},
                                           "task": {"type": "worker", "index": r}})
        args = [str(worker), "train", "--model", str(ROOT / "examples/fashion-mnist-model.json"),
                "--data", data, "--test-data", test, "--epochs", str(epochs), "--batch", "32",
                "--optimizer", "adam", "--seed", "42", "--device", "cpu", "--termination-log", "",
                "--metrics", f"{tmp}/{tag}-r{r}.jsonl", *extra]
        procs.append(subprocess.Popen(args, env=env, stdout=subprocess.DEVNULL,
                                      stderr=open(f"{tmp}/{tag}-r{r}.log", "w")))
    codes = [p.wait() for p in procs]
    logs = [open(f"{tmp}/{tag}-r{r}.log").read() for r in range(world)]
    if codes != [0] * world:
        sys.exit(f"{tag}: exit codes {codes}\n" + "\n".join(l[-1500:] for l in logs))
    rows = [json.loads(l) for l in open(f"{tmp}/{tag}-r0.jsonl") if '"val_accuracy"' in l]
    warn = [l for l in logs[0].splitlines() if "--shard auto" in l]
    return rows[-1]["val_accuracy"], warn


def idx_shards(out, shards):
    """The IDX train split as `shards` IDX pairs of consecutive samples, as
    tools/tfrecord_fmnist.py cuts the TFRecord shards; their prefixes."""
    img = gzip.open(IDX / "train-images-idx3-ubyte.gz").read()
    lab = gzip.open(IDX / "train-labels-idx1-ubyte.gz").read()
    n = struct.unpack(">I", lab[4:8])[0]
    prefixes = []
    for s in range(shards):
        a, b = s * n // shards, (s + 1) * n // shards
        p = f"{out}/train{s}"
        with gzip.open(f"{p}-images-idx3-ubyte.gz", "wb", compresslevel=1) as f:
            f.write(img[:4] + struct.pack(">I", b - a) + img[8:16] + img[16 + 784 * a:16 + 784 * b])
        with gzip.open(f"{p}-labels-idx1-ubyte.gz", "wb", compresslevel=1) as f:
            f.write(lab[:4] + struct.pack(">I", b - a) + lab[8 + a:8 + b])
        prefixes.append(p)
    return ",".join(prefixes)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dir")
    ap.add_argument("--epochs", type=int, default=5)
    ap.add_argument("--build", default=str(ROOT / "build"))
    a = ap.parse_args()
    d, worker = pathlib.Path(a.dir), pathlib.Path(a.build) / "worker/ctrain-worker"
    shape = ["--image-shape", "28,28"]
    tfr_test = str(d / "plain/t10k-00000-of-00001.tfrecord")
    acc, bad = {}, False
    with tempfile.TemporaryDirectory(prefix="ctrain-tfr-acc-") as tmp:
        plan = [("idx-1w", 1, str(IDX / "train"), str(IDX / "t10k"), [], []),
                ("tfr-1w", 1, str(d / "plain/train-*"), tfr_test, shape, ["idx-1w"]),
                ("tfr-gzip-1w", 1, str(d / "gzip"), tfr_test, shape, ["idx-1w"]),
                ("npz-1w", 1, str(d / "npz/train.npz"), str(IDX / "t10k"), [], ["idx-1w"]),
                ("npz-deflated-1w", 1, str(d / "npz-deflated/train.npz"), str(IDX / "t10k"), [],
                 ["idx-1w"]),
                ("idx-2w", 2, str(IDX / "train"), str(IDX / "t10k"), [], []),
                ("npz-2w", 2, str(d / "npz/train.npz"), str(IDX / "t10k"), [], ["idx-2w"]),
                ("tfr-2w-data", 2, str(d / "one"), tfr_test, shape, ["idx-2w"]),
                ("idx-2w-file", 2, idx_shards(tmp, 8), str(IDX / "t10k"), [], []),
                ("tfr-2w-file", 2, str(d / "plain/train-*"), tfr_test, shape,
                 ["idx-2w-file", "idx-2w"])]
        for tag, world, data, test, extra, refs in plan:
            acc[tag], warn = run(worker, world, data, test, extra, a.epochs, tmp, tag)
            diff = "".join(f"  diff vs {r} {acc[tag] - acc[r]:+.4f}" for r in refs)
            bad |= bool(refs) and abs(acc[tag] - acc[refs[0]]) > TOL
            if data.startswith(tmp):
                data = f"8 IDX prefixes {tmp}/train0..7"
            print(f"{tag:12s} workers {world}  --data {data}\n{'':12s} val_accuracy "
                  f"{acc[tag]:.4f}{diff}", flush=True)
            for w in warn:
                print(f"{'':12s} rank 0 warns:{w.split(' warn ', 1)[-1]}", flush=True)
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
