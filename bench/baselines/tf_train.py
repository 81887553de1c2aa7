#!/usr/bin/env python3
"""bench/baselines/tf_train: TensorFlow's row of bench/train.py.

The same training as ctrain-worker's row, in stock TensorFlow 2.21 with
tf-keras (TF_USE_LEGACY_KERAS=1: Keras 3's fit() cannot run
MultiWorkerMirroredStrategy): Flatten -> Dense 128 relu -> Dense 10 on
Fashion-MNIST (Debian's /usr/share/datasets/fashion-mnist), Adam, per-replica
batch 32, the learning rate scaled by the replicas (as ctrain's --scale-lr),
the input pipeline of examples/tensorflow-mwms.yaml (tf.data, shuffled each
epoch, DATA auto-sharding). One worker runs the default strategy; with
TF_CONFIG set (several processes on loopback ports), MultiWorkerMirroredStrategy.

Each epoch's training time is taken around fit()'s epoch (on_epoch_begin to
on_epoch_end, the test-set evaluation after it, outside the timing, as
ctrain-worker times its epochs) and written as one JSON line per epoch to
--metrics, in ctrain-worker's --metrics fields (epoch, seconds,
samples_per_sec, val_accuracy, replicas), so bench/train.py reads both alike.

--model FILE builds the model from Keras JSON instead
(tf.keras.models.model_from_json: bench/train.py's CNN rows pass
tests/data/keras/cnn-tf_keras.json, the file ctrain-worker reads in its row),
the images reshaped to the model's input shape, the loss from logits unless
the last layer is a softmax (as ctrain-worker folds it into the loss).

Run by bench/train.py with the interpreter of a venv it creates once (see
tf_venv() there); by hand:
    TF_USE_LEGACY_KERAS=1 python tf_train.py --epochs 2 --metrics /tmp/m.jsonl
"""
import argparse
import gzip
import json
import os
import pathlib
import time

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

DATA = pathlib.Path("/usr/share/datasets/fashion-mnist")


def idx(path):
    with gzip.open(path) as f:
        raw = f.read()
    dims = np.frombuffer(raw[4:4 + 4 * raw[3]], dtype=">u4")
    return np.frombuffer(raw[4 + 4 * raw[3]:], dtype=np.uint8).reshape(dims)


class EpochTimer(tf.keras.callbacks.Callback):
    """Times each training epoch, then evaluates on the test set."""

    def __init__(self, test, steps, global_batch, replicas, out, chief):
        super().__init__()
        self.test, self.steps, self.gb, self.replicas = test, steps, global_batch, replicas
        self.out, self.chief, self.t0 = out, chief, 0.0

    def on_epoch_begin(self, epoch, logs=None):
        self.t0 = time.monotonic()

    def on_epoch_end(self, epoch, logs=None):
        secs = time.monotonic() - self.t0
        _, acc = self.model.evaluate(self.test, verbose=0)
        if self.chief:
            row = {"epoch": epoch + 1, "steps": self.steps, "seconds": secs,
                   "samples_per_sec": self.steps * self.gb / secs, "loss": logs.get("loss"),
                   "accuracy": logs.get("accuracy"), "val_accuracy": float(acc),
                   "replicas": self.replicas}
            with open(self.out, "a") as f:
                f.write(json.dumps(row) + "\n")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--epochs", type=int, default=5)
    ap.add_argument("--batch", type=int, default=32, help="per replica")
    ap.add_argument("--lr", type=float, default=0.001, help="before scaling by replicas")
    ap.add_argument("--data", default=str(DATA))
    ap.add_argument("--model", help="Keras JSON (model.to_json()); default the MLP")
    ap.add_argument("--metrics", required=True)
    a = ap.parse_args()
    multi = "TF_CONFIG" in os.environ
    strategy = (tf.distribute.MultiWorkerMirroredStrategy() if multi
                else tf.distribute.get_strategy())
    chief = not multi or json.loads(os.environ["TF_CONFIG"])["task"]["index"] == 0
    rep = strategy.num_replicas_in_sync
    d = pathlib.Path(a.data)
    x = idx(d / "train-images-idx3-ubyte.gz").astype("float32") / 255.0
    y = idx(d / "train-labels-idx1-ubyte.gz").astype("int64")
    xt = idx(d / "t10k-images-idx3-ubyte.gz").astype("float32") / 255.0
    yt = idx(d / "t10k-labels-idx1-ubyte.gz").astype("int64")
    if a.model:  # e.g. (28, 28, 1) for a CNN
        shape = tuple(json.loads(pathlib.Path(a.model).read_text())["config"]["layers"][0]
                      ["config"]["batch_input_shape"][1:])
        x, xt = x.reshape((-1, *shape)), xt.reshape((-1, *shape))
    gb = a.batch * rep
    steps = len(x) // gb
    opts = tf.data.Options()
    opts.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
    ds = (tf.data.Dataset.from_tensor_slices((x, y)).shuffle(len(x), seed=1).repeat()
          .batch(gb, drop_remainder=True).prefetch(tf.data.AUTOTUNE).with_options(opts))
    test = tf.data.Dataset.from_tensor_slices((xt, yt)).batch(1000).with_options(opts)
    with strategy.scope():
        if a.model:
            model = tf.keras.models.model_from_json(pathlib.Path(a.model).read_text())
        else:
            model = tf.keras.Sequential([
                tf.keras.layers.Flatten(input_shape=(28, 28)),
                tf.keras.layers.Dense(128, activation="relu"),
                tf.keras.layers.Dense(10),
            ])
        logits = model.layers[-1].get_config().get("activation") != "softmax"
        model.compile(optimizer=tf.keras.optimizers.Adam(a.lr * rep),
                      loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=logits),
                      metrics=["accuracy"])
    model.fit(ds, epochs=a.epochs, steps_per_epoch=steps, verbose=0,
              callbacks=[EpochTimer(test, steps, gb, rep, a.metrics, chief)])


if __name__ == "__main__":
    main()
