"""seed_mnist.py IDX_DIR OUT_NPZ: writes the four IDX gz files of IDX_DIR (MNIST's format:
train-/t10k- images-idx3-ubyte.gz, labels-idx1-ubyte.gz) as the npz that
tf.keras.datasets.mnist.load_data() reads (x_train, y_train, x_test, y_test, uint8), and
makes the installed tf_keras (and keras, if it has the same loader) expect that file's
sha256 instead of MNIST's: their get_file() re-downloads a cached file whose hash differs,
and there is no network here. Fails when a loader's MNIST hash is not found exactly once,
so a TensorFlow upgrade that moves it is noticed at build time."""
import gzip
import hashlib
import os
import pathlib
import sys
import sysconfig

import numpy as np

MNIST_SHA256 = "731c5ac602752760c8e48fbffcf8c3b850d9dc2a2aedcf2cc48468fc17b673d1"


def idx(path, magic, dims):
    with gzip.open(path, "rb") as f:
        raw = f.read()
    got = int.from_bytes(raw[0:4], "big")
    assert got == magic, f"{path}: magic {got}, not {magic}"
    shape = [int.from_bytes(raw[4 + 4 * i:8 + 4 * i], "big") for i in range(dims)]
    data = np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * dims)
    return data.reshape(shape)


def main(src, out):
    src = pathlib.Path(src)
    arrays = {}
    for part, prefix, n in (("train", "train", 60000), ("test", "t10k", 10000)):
        x = idx(src / f"{prefix}-images-idx3-ubyte.gz", 2051, 3)
        y = idx(src / f"{prefix}-labels-idx1-ubyte.gz", 2049, 1)
        assert x.shape == (n, 28, 28) and y.shape == (n,), (x.shape, y.shape)
        arrays[f"x_{part}"], arrays[f"y_{part}"] = x, y
    os.makedirs(os.path.dirname(out), exist_ok=True)
    np.savez_compressed(out, **arrays)
    digest = hashlib.sha256(pathlib.Path(out).read_bytes()).hexdigest()
    patched = 0
    site = pathlib.Path(sysconfig.get_paths()["purelib"])
    for pkg in ("tf_keras", "keras"):
        f = site / pkg / "src/datasets/mnist.py"
        if not f.exists():
            continue
        text = f.read_text()
        assert text.count(MNIST_SHA256) == 1, f"{f}: MNIST's sha256 not found once"
        f.write_text(text.replace(MNIST_SHA256, digest))
        print(f"{f}: expects {digest} (Fashion-MNIST as mnist.npz)")
        patched += 1
    assert patched, "no tf_keras/keras mnist loader found"


if __name__ == "__main__":
    main(*sys.argv[1:])
