#!/usr/bin/env python3
"""Writes the TFRecord fixtures of tests/unit/test_tfrecord.c with real
TensorFlow (tf.io.TFRecordWriter); run it from the repository root with the TF
venv of bench/train.py (tf_venv()):

  ~/.cache/ctrain/bench-tf-venv-2.21.0/bin/python tests/unit/data/make_tfrecord_fixtures.py

fmnist8.tfrecord[.gz|.zlib]  the first 8 Fashion-MNIST t10k samples ("image": bytes_list
                             of 28x28 uint8, "label": int64_list), plain, GZIP and ZLIB
float3.tfrecord              3 Examples: "x" float_list of 4, "y" int64_list of 1, and
                             two features the reader must skip ("name" bytes, "w" int64 x3)
"""
import pathlib
import sys

import tensorflow as tf

ROOT = pathlib.Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "tools"))
from tfrecord_fmnist import example, idx  # noqa: E402

OUT = pathlib.Path(__file__).resolve().parent


def write(name, records, kind=""):
    with tf.io.TFRecordWriter(str(OUT / name), tf.io.TFRecordOptions(compression_type=kind)) as w:
        for r in records:
            w.write(r)


def float_example(i):
    f = tf.train.Feature
    return tf.train.Example(features=tf.train.Features(feature={
        "name": f(bytes_list=tf.train.BytesList(value=[b"sample-%d" % i])),
        "x": f(float_list=tf.train.FloatList(value=[i, i + 0.5, -1.0, 2.25])),
        "w": f(int64_list=tf.train.Int64List(value=[-1, 300, 1 << 40])),
        "y": f(int64_list=tf.train.Int64List(value=[i])),
    })).SerializeToString()


def main():
    img, lab = idx("t10k")
    recs = [example(img[i], lab[i], False) for i in range(8)]
    write("fmnist8.tfrecord", recs)
    write("fmnist8.tfrecord.gz", recs, "GZIP")
    write("fmnist8.tfrecord.zlib", recs, "ZLIB")
    write("float3.tfrecord", [float_example(i) for i in range(3)])


if __name__ == "__main__":
    main()
