#!/usr/bin/env python3
"""Writes the NumPy fixtures of tests/unit/test_numpy.c with real NumPy; run
from the repository root with a Python that has numpy (e.g. the TF venv of
bench/train.py):

  ~/.cache/ctrain/bench-tf-venv-2.21.0/bin/python tests/unit/data/make_numpy_fixtures.py

fmnist8.npz               the first 8 Fashion-MNIST t10k samples, numpy.savez (stored):
                          x uint8 (8, 28, 28), y uint8 (8,)
fmnist8_deflated.npz      the same, numpy.savez_compressed (deflated)
x_fmnist8.npy, y_fmnist8.npy  the same as a .npy pair (y int64)
feats3.npz                feats float64 (3, 4) big-endian, target int16 (3, 1)
"""
import gzip
import pathlib

import numpy as np

DATA = pathlib.Path("/usr/share/datasets/fashion-mnist")
OUT = pathlib.Path(__file__).resolve().parent


def main():
    with gzip.open(DATA / "t10k-images-idx3-ubyte.gz") as f:
        x = np.frombuffer(f.read(), np.uint8, offset=16).reshape(-1, 28, 28)[:8]
    with gzip.open(DATA / "t10k-labels-idx1-ubyte.gz") as f:
        y = np.frombuffer(f.read(), np.uint8, offset=8)[:8]
    np.savez(OUT / "fmnist8.npz", x=x, y=y)
    np.savez_compressed(OUT / "fmnist8_deflated.npz", x=x, y=y)
    np.save(OUT / "x_fmnist8.npy", x)
    np.save(OUT / "y_fmnist8.npy", y.astype(np.int64))
    feats = np.array([[i, i + 0.5, -1.0, 2.25] for i in range(3)], dtype=">f8")
    np.savez(OUT / "feats3.npz", feats=feats, target=np.arange(3, dtype=np.int16).reshape(3, 1))


if __name__ == "__main__":
    main()
