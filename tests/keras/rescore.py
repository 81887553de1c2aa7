"""Re-scores a ctrain model with real Keras: builds the model from the same
JSON (model_from_json), loads our model.safetensors by Keras' names and
layouts (docs/models.md), evaluates on the Fashion-MNIST test set and prints
the accuracy next to ctrain's own.

  python tests/keras/rescore.py OUTPUT_DIR [--tf-keras] [--ctrain-acc X]

OUTPUT_DIR is ctrain-worker's --output (model.json, model.safetensors). Runs
in the TF venv (bench/train.py's tf_venv(): tensorflow_cpu 2.21, tf_keras 2.21,
keras 3.15.1). Exit 1 when --ctrain-acc is given and the two differ by more
than 0.002."""
import argparse
import gzip
import json
import os
import pathlib
import struct
import sys

import numpy as np

DATA = pathlib.Path("/usr/share/datasets/fashion-mnist")


def read_safetensors(path):
    raw = pathlib.Path(path).read_bytes()
    (hl,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + hl])
    body = raw[8 + hl:]
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        a, b = t["data_offsets"]
        out[name] = np.frombuffer(body[a:b], dtype="<f4").reshape(t["shape"])
    return out


def read_idx(prefix):
    with gzip.open(f"{prefix}-images-idx3-ubyte.gz") as f:
        _, n, h, w = struct.unpack(">IIII", f.read(16))
        x = np.frombuffer(f.read(), dtype=np.uint8).reshape(n, h * w)
    with gzip.open(f"{prefix}-labels-idx1-ubyte.gz") as f:
        f.read(8)
        y = np.frombuffer(f.read(), dtype=np.uint8)
    return x.astype(np.float32) * np.float32(1.0 / 255.0), y


def keras_weight_names(layer):
    """The names of layer.get_weights() in order (Keras 3 and tf-keras)."""
    return [w.name.split("/")[-1].split(":")[0] for w in layer.weights]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("outdir")
    ap.add_argument("--tf-keras", action="store_true", help="tf-keras 2.x instead of Keras 3")
    ap.add_argument("--ctrain-acc", type=float)
    a = ap.parse_args()
    if a.tf_keras:
        os.environ["TF_USE_LEGACY_KERAS"] = "1"
        import tf_keras as keras
    else:
        import keras
    out = pathlib.Path(a.outdir)
    model = keras.models.model_from_json((out / "model.json").read_text())
    tensors = read_safetensors(out / "model.safetensors")
    used = 0
    for layer in model.layers:
        names = keras_weight_names(layer)
        if names:
            layer.set_weights([tensors[f"{layer.name}/{n}"] for n in names])
            used += len(names)
    assert used == len(tensors), f"{len(tensors) - used} tensors left unused"
    x, y = read_idx(DATA / "t10k")
    x = x.reshape((-1,) + tuple(model.input_shape[1:]))
    logits = model.predict(x, batch_size=500, verbose=0)
    acc = float(np.mean(np.argmax(logits, axis=1) == y))
    print(json.dumps({"keras": keras.__version__, "accuracy": acc, "ctrain": a.ctrain_acc}))
    if a.ctrain_acc is not None and abs(acc - a.ctrain_acc) > 0.002:
        sys.exit(1)


if __name__ == "__main__":
    main()
