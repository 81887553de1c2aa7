#!/usr/bin/env python3
"""Tests of ctrain_keras.Progress with real TensorFlow 2.21 and tf-keras
(TF_USE_LEGACY_KERAS=1), on Fashion-MNIST (Debian's dataset-fashion-mnist):

  PY=~/.cache/ctrain/bench-tf-venv-2.21.0/bin/python   # bench/train.py's tf_venv()
  $PY python/ctrain_keras/tests/test_progress.py

1. the read token equals the C worker's (tests/unit/test_progress.c's vector);
2. one worker: during fit, /progress (chief) answers the C worker's fields with
   this epoch, step and loss; /metrics the gauges; no or a wrong bearer is 401;
   /healthz needs none;
3. two workers (MultiWorkerMirroredStrategy on loopback, one process each), worker
   1 slowed by 50 ms a step: the chief's /progress names rank 1 the slowest with
   a ratio over 1.5 (what the controller turns into a Straggler event), and in the
   middle of epoch 2 reports the job's running loss and accuracy (tf-keras's
   per-step logs are the sum over the replicas: 1.5 and more for accuracy).
"""
import json
import os
import pathlib
import socket
import subprocess
import sys
import urllib.error
import urllib.request

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
HERE = pathlib.Path(__file__).resolve()
sys.path.insert(0, str(HERE.parents[1]))

C_FIELDS = ["state", "rank", "epoch", "epochs", "step", "steps_per_epoch", "global_step",
            "replicas_in_sync", "workers", "samples_per_sec", "loss", "accuracy", "val_loss",
            "val_accuracy", "step_ms", "median_ms", "slowest_ratio", "slowest_rank",
            "worker_ms", "backup_step"]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get(port, path, bearer=None):
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}")
    if bearer:
        req.add_header("Authorization", f"Bearer {bearer}")
    try:
        with urllib.request.urlopen(req, timeout=5) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def data(n):
    import gzip
    import numpy as np
    d = pathlib.Path("/usr/share/datasets/fashion-mnist")
    with gzip.open(d / "train-images-idx3-ubyte.gz") as f:
        x = np.frombuffer(f.read(), np.uint8, offset=16).reshape(-1, 28, 28)[:n] / 255.0
    with gzip.open(d / "train-labels-idx1-ubyte.gz") as f:
        y = np.frombuffer(f.read(), np.uint8, offset=8)[:n]
    return x.astype("float32"), y.astype("int64")


def model(tf):
    m = tf.keras.Sequential([tf.keras.layers.Flatten(input_shape=(28, 28)),
                             tf.keras.layers.Dense(64, activation="relu"),
                             tf.keras.layers.Dense(10)])
    m.compile(optimizer="adam", metrics=["accuracy"],
              loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    return m


def test_read_token():
    import ctrain_keras
    want = "56d18c07d5448fbff71a2848b867f206425bb26a37b144bab1f381dfbd713dd9"
    assert ctrain_keras.read_token(JOB_TOKEN) == want


def test_one_worker():
    import tensorflow as tf
    import ctrain_keras
    port = free_port()
    os.environ.update(CTRAIN_PROGRESS_PORT=str(port), CTRAIN_JOB_TOKEN="job-secret")
    os.environ.pop("TF_CONFIG", None)
    bearer, seen = ctrain_keras.read_token("job-secret"), {}

    class Probe(tf.keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            if self.params["steps"] // 2 == batch + 1 and "mid" not in seen:
                seen["mid"] = get(port, "/progress", bearer)
                seen["metrics"] = get(port, "/metrics", bearer)
                seen["none"] = get(port, "/progress")
                seen["wrong"] = get(port, "/progress", "0" * 64)
                seen["health"] = get(port, "/healthz")

    x, y = data(4096)
    model(tf).fit(x, y, batch_size=64, epochs=2, verbose=0, validation_data=(x[:512], y[:512]),
                  callbacks=[ctrain_keras.Progress(global_batch=64), Probe()])
    code, body = seen["mid"]
    p = json.loads(body)
    assert code == 200 and list(p) == C_FIELDS, (code, list(p))
    assert p["state"] == "Training" and p["epoch"] == 1 and p["epochs"] == 2, p
    assert p["step"] == 32 and p["steps_per_epoch"] == 64 and p["global_step"] == 32, p
    assert 0 < p["loss"] < 3 and 0 < p["accuracy"] <= 1 and p["samples_per_sec"] > 0, p
    assert seen["none"][0] == 401 and seen["wrong"][0] == 401, (seen["none"], seen["wrong"])
    assert seen["health"] == (200, "ok\n")
    assert seen["metrics"][0] == 200 and "ctrain_worker_step 32\n" in seen["metrics"][1]
    print("one worker: /progress mid-epoch-1:", body.strip())


def worker_main(rank, ports, pport):
    """One MWMS worker process (test 3)."""
    import tensorflow as tf
    import time
    import ctrain_keras
    os.environ.update(TF_CONFIG=json.dumps({"cluster": {"worker": [f"127.0.0.1:{p}" for p in ports]},
                                            "task": {"type": "worker", "index": rank}}),
                      CTRAIN_PROGRESS_PORT=str(pport), CTRAIN_JOB_TOKEN="job-secret")
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    with strategy.scope():
        m = model(tf)

    class Slow(tf.keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            if rank == 1:
                time.sleep(0.05)

    class Report(tf.keras.callbacks.Callback):
        def on_epoch_begin(self, epoch, logs=None):
            self.epoch = epoch

        def on_train_batch_end(self, batch, logs=None):
            if rank == 0 and self.epoch == 1 and batch == 31:  # the middle of epoch 2
                print("MID " + get(pport, "/progress", ctrain_keras.read_token("job-secret"))[1],
                      flush=True)

        def on_epoch_end(self, epoch, logs=None):
            if rank == 0 and epoch == 1:
                print("PROGRESS " + get(pport, "/progress",
                                        ctrain_keras.read_token("job-secret"))[1], flush=True)

    x, y = data(4096)
    ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(64)
    m.fit(ds, epochs=2, verbose=0, callbacks=[ctrain_keras.Progress(global_batch=64), Slow(), Report()])


def test_two_workers_straggler():
    ports, pports = [free_port(), free_port()], [free_port(), free_port()]
    procs = [subprocess.Popen([sys.executable, str(HERE), "worker", str(r), json.dumps(ports),
                               str(pports[r])], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                              text=True) for r in range(2)]
    outs = [p.communicate(timeout=300)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    line = [l for l in outs[0].splitlines() if l.startswith("PROGRESS ")][0]
    p = json.loads(line[len("PROGRESS "):])
    assert p["workers"] == 2 and p["replicas_in_sync"] == 2 and len(p["worker_ms"]) == 2, p
    assert p["slowest_rank"] == 1 and p["slowest_ratio"] > 1.5, p
    print("two workers, rank 1 slowed: chief /progress:", line[len("PROGRESS "):])
    mid = json.loads([l for l in outs[0].splitlines() if l.startswith("MID ")][0][4:])
    assert mid["epoch"] == 2 and mid["step"] == 32, mid
    assert 0.3 < mid["accuracy"] <= 1 and 0 < mid["loss"] < 2.3, mid  # not 2x (summed)
    print("two workers, middle of epoch 2: chief /progress:", json.dumps(mid))


JOB_TOKEN = "job-token-123"  # tests/unit/test_progress.c

if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "worker":
        worker_main(int(sys.argv[2]), json.loads(sys.argv[3]), int(sys.argv[4]))
        sys.exit(0)
    for t in (test_read_token, test_one_worker, test_two_workers_straggler):
        t()
        print(f"ok - {t.__name__}", flush=True)
