"""ctrain_keras - ctrain's progress port for stock TensorFlow jobs.

One line in a Keras script:

    model.fit(..., callbacks=[ctrain_keras.Progress()])

serves, from the TensorFlow process, what ctrain-worker serves
(DESIGN.md "Worker contract", worker/progress.h), so `kubectl get tj` shows
EPOCH, ACCURACY and SAMPLES/S for the job and the controller's straggler
detection sees every worker's time per step:

    GET /progress  the chief only: the same JSON fields as ctrain-worker's
    GET /metrics   every worker: Prometheus text (ctrain_worker_* gauges)
    GET /healthz   "ok", no authentication

The server has the C worker's limits (_server.py): one thread, at most 256
connections, a new one taking the slot of the oldest idle one when full;
2 s from the accept to send the request head and take the answer; a head
over 16 KiB is answered 431; one answer per connection.

/progress and /metrics need `Authorization: Bearer <read token>`, the read
token being hex(HMAC-SHA256(key = $CTRAIN_JOB_TOKEN, "ctrain-progress-read")),
as the controller derives it; anything else is 401. The port is
$CTRAIN_PROGRESS_PORT (the controller sets it; unset or 0: the callback does
nothing), the rank and the workers come from $TF_CONFIG.

At each epoch's end the workers all-gather their time per step (a
collective of the distribution strategy, so every worker must use the
callback, as with BackupAndRestore); the chief reports the slowest one and
its ratio to the median, from which the controller raises Straggler.

What a callback can time: training is synchronous, so every worker's step
(on_train_batch_begin to _end) lasts as long as the slowest one's, the
others waiting in the all-reduce. A worker's own time per step is therefore
taken as its time between steps (its host work: callbacks, Python, a
per-step input it feeds) plus the shortest step of any worker (the step of
the worker that arrived last, which did not wait). A worker slow in that host
work shows; one slow inside the compiled step (the kernels) cannot be told
apart from a callback, unlike ctrain-worker, which times its compute before
the all-reduce.
"""
import hashlib
import hmac
import json
import math
import os
import threading
import time

import tensorflow as tf

from . import _server

READ_LABEL = b"ctrain-progress-read"


def read_token(job_token):
    """The bearer the controller sends for job_token."""
    return hmac.new(job_token.encode(), READ_LABEL, hashlib.sha256).hexdigest()


def _task():
    """(rank, workers, chief) from TF_CONFIG (no TF_CONFIG: one worker)."""
    cfg = json.loads(os.environ.get("TF_CONFIG") or "{}")
    cluster, task = cfg.get("cluster", {}), cfg.get("task", {})
    chiefs = len(cluster.get("chief", []))
    workers = chiefs + len(cluster.get("worker", []))
    kind, index = task.get("type", "worker"), int(task.get("index", 0))
    rank = index if kind == "chief" else chiefs + index
    return rank, max(workers, 1), rank == 0


def _num(v, decimals):
    return None if v is None or not math.isfinite(v) else round(float(v), decimals)


class _Snapshot:
    """What the callback last saw; read by the server under the lock."""

    def __init__(self, rank, workers):
        self.lock = threading.Lock()
        self.d = {"state": "Starting", "rank": rank, "epoch": 0, "epochs": 0, "step": 0,
                  "steps_per_epoch": 0, "global_step": 0, "replicas_in_sync": workers,
                  "workers": workers, "samples_per_sec": None, "loss": None, "accuracy": None,
                  "val_loss": None, "val_accuracy": None, "step_ms": None, "median_ms": None,
                  "slowest_ratio": None, "slowest_rank": None, "worker_ms": [],
                  "backup_step": None}

    def update(self, **kv):
        with self.lock:
            self.d.update(kv)

    def json(self):
        with self.lock:
            d = dict(self.d)
        for k, dec in (("samples_per_sec", 1), ("loss", 6), ("accuracy", 6), ("val_loss", 6),
                       ("val_accuracy", 6), ("step_ms", 3), ("median_ms", 3),
                       ("slowest_ratio", 3)):
            d[k] = _num(d[k], dec)
        d["worker_ms"] = [_num(v, 3) for v in d["worker_ms"]]
        return json.dumps(d, separators=(",", ":")) + "\n"

    def metrics(self):
        with self.lock:
            d = dict(self.d)
        rows = [("rank", "This worker's rank (chief 0).", d["rank"]),
                ("epoch", "Epoch in progress, 1-based (0: not started).", d["epoch"]),
                ("epochs", "Epochs to train.", d["epochs"]),
                ("step", "Steps done of the epoch in progress.", d["step"]),
                ("steps_per_epoch", "Steps per epoch.", d["steps_per_epoch"]),
                ("global_step", "Optimizer steps since the job's start.", d["global_step"]),
                ("samples_per_sec", "Global training samples per second, this epoch.",
                 d["samples_per_sec"]),
                ("loss", "Training loss, running mean of the epoch.", d["loss"]),
                ("accuracy", "Training accuracy, running mean of the epoch.", d["accuracy"]),
                ("step_ms", "This worker's milliseconds per step, this epoch.", d["step_ms"])]
        out = []
        for name, help_, v in rows:
            v = "NaN" if v is None or not math.isfinite(v) else f"{float(v):.9g}"
            out.append(f"# HELP ctrain_worker_{name} {help_}\n# TYPE ctrain_worker_{name} gauge\n"
                       f"ctrain_worker_{name} {v}\n")
        return "".join(out)


def _handler(snap, bearer, chief):
    class Handler(_server.Handler):  # log_message (no logging) and _send are its
        def do_GET(self):
            path = self.path.split("?", 1)[0]
            if path == "/healthz":
                return self._send(200, "ok\n")
            if path not in ("/progress", "/metrics") or (path == "/progress" and not chief):
                return self._send(404, "not found\n")
            got = self.headers.get("Authorization", "")
            if not hmac.compare_digest(got.encode(), f"Bearer {bearer}".encode()):
                return self._send(401, "unauthorized\n", extra=[("WWW-Authenticate", "Bearer")])
            if path == "/progress":
                return self._send(200, snap.json(), "application/json")
            return self._send(200, snap.metrics(), "text/plain; version=0.0.4; charset=utf-8")

    return Handler


class Progress(tf.keras.callbacks.Callback):
    """Serves /progress and /metrics for the controller (see the module doc).

    global_batch: samples per step over all workers (a tf.data pipeline's
    batch under MultiWorkerMirroredStrategy), for samples/s; without it
    samples/s is null (tf-keras does not tell callbacks the batch size).
    request_timeout (seconds a connection has from its accept to send its
    request and take the answer) and max_connections (connections held at
    once) bound the server (_server's doc); the defaults are 2 s and 256."""

    def __init__(self, global_batch=None, port=None, request_timeout=_server.REQUEST_TIMEOUT,
                 max_connections=_server.MAX_CONNECTIONS):
        super().__init__()
        self.request_timeout, self.max_connections = request_timeout, max_connections
        self.rank, self.workers, self.chief = _task()
        self.port = int(port if port is not None else os.environ.get("CTRAIN_PROGRESS_PORT", 0))
        self.global_batch = global_batch
        self.snap = _Snapshot(self.rank, self.workers)
        self.server = None
        self.gstep, self.t_epoch, self.t_batch, self.t_end = 0, 0.0, 0.0, 0.0
        self.host, self.step = 0.0, 0.0  # this epoch: seconds between steps, inside steps
        self.batch_scale = 1.0  # per-step logs times this: the job's running means

    def start(self):
        """Starts the server (on_train_begin does); returns the bound port."""
        token = os.environ.get("CTRAIN_JOB_TOKEN", "")
        if self.server or not self.port or not token:
            return self.server.server_port if self.server else 0
        handler = _handler(self.snap, read_token(token), self.chief)
        self.server = _server.Server(("", self.port), handler, self.max_connections,
                                     self.request_timeout)
        threading.Thread(target=self.server.serve_forever, name="ctrain-progress",
                         daemon=True).start()
        return self.server.server_port

    def on_train_begin(self, logs=None):
        self.start()
        p = self.params or {}
        strategy = tf.distribute.get_strategy()
        n = strategy.num_replicas_in_sync
        # tf-keras's per-step logs under several replicas are the sum of the replicas'
        # running means (Model.distribute_reduction_method "auto" is "sum" but on TPUs;
        # MultiWorkerMirroredStrategy's 2 workers showed ACCURACY 1.46): their mean is
        # the job's, the replicas taking equal shares of each batch. The epoch's logs
        # are the metrics' aggregated results already.
        method = getattr(self.model, "distribute_reduction_method", "auto")
        tpu = type(strategy).__name__.startswith("TPUStrategy")
        self.batch_scale = 1.0 / n if method == "sum" or (method == "auto" and not tpu) else 1.0
        self.snap.update(epochs=p.get("epochs", 0), steps_per_epoch=p.get("steps") or 0,
                         replicas_in_sync=n)

    def on_epoch_begin(self, epoch, logs=None):
        self.t_epoch = self.t_end = time.monotonic()
        self.host = self.step = 0.0
        self.snap.update(state="Training", epoch=epoch + 1, step=0)

    def on_train_batch_begin(self, batch, logs=None):
        self.t_batch = time.monotonic()
        self.host += self.t_batch - self.t_end

    def on_train_batch_end(self, batch, logs=None):
        logs = logs or {}
        self.t_end = time.monotonic()
        self.step += self.t_end - self.t_batch
        self.gstep += 1
        done = batch + 1
        gb, k = self.global_batch, self.batch_scale
        loss, acc = logs.get("loss"), logs.get("accuracy")
        self.snap.update(step=done, global_step=self.gstep,
                         loss=None if loss is None else float(loss) * k,
                         accuracy=None if acc is None else float(acc) * k,
                         step_ms=(self.host + self.step) * 1000.0 / done,
                         samples_per_sec=(done * gb / (self.t_end - self.t_epoch)) if gb else None)

    def on_epoch_end(self, epoch, logs=None):
        logs = logs or {}
        with self.snap.lock:
            done = self.snap.d["step"]
        n = max(done, 1)
        pairs = _gather([self.host * 1000.0 / n, self.step * 1000.0 / n])
        shortest = min(p[1] for p in pairs)
        ms = [p[0] + shortest for p in pairs]  # each worker's own time per step (module doc)
        finite = sorted(v for v in ms if math.isfinite(v))
        median = finite[(len(finite) - 1) // 2] if finite else None
        slow = max(range(len(ms)), key=lambda r: ms[r] if math.isfinite(ms[r]) else -1)
        self.snap.update(loss=logs.get("loss"), accuracy=logs.get("accuracy"),
                         val_loss=logs.get("val_loss"), val_accuracy=logs.get("val_accuracy"),
                         worker_ms=ms, median_ms=median, slowest_rank=slow if finite else None,
                         step_ms=ms[self.rank] if self.rank < len(ms) else None,
                         slowest_ratio=(ms[slow] / median) if finite and median else None,
                         step=done)

    def on_train_end(self, logs=None):
        self.snap.update(state="Succeeded")


def _gather(pair):
    """Every replica's [host ms, step ms], in replica order (one replica per
    worker under MultiWorkerMirroredStrategy on CPU): an all-gather."""
    strategy = tf.distribute.get_strategy()
    if strategy.num_replicas_in_sync == 1:
        return [pair]

    def fn():
        ctx = tf.distribute.get_replica_context()
        return ctx.all_gather(tf.constant([pair], tf.float64), axis=0)

    out = strategy.experimental_local_results(strategy.run(fn))[0]
    return [[float(a), float(b)] for a, b in out.numpy()]
