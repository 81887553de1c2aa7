#!/usr/bin/env python3
"""tools/tfrecord_fmnist.py - Fashion-MNIST (Debian's dataset-fashion-mnist, IDX)
as TFRecord shards of tf.train.Example, written by real TensorFlow
(tf.io.TFRecordWriter), for ctrain-worker --data-format tfrecord.

  PY=~/.cache/ctrain/bench-tf-venv-2.21.0/bin/python   # bench/train.py's tf_venv()
  $PY tools/tfrecord_fmnist.py OUT [--split train|t10k] [--shards 8] [--gzip|--zlib]
                               [--limit N] [--float]
  $PY tools/tfrecord_fmnist.py OUT --npz [--split train|t10k] [--deflate]

Writes OUT/<split>-0000i-of-0000S.tfrecord[.gz|.zlib]: shard i holds samples
[i*n/S, (i+1)*n/S) in the IDX order, so the shards read in name order are the
IDX file. Each Example has "image" (a bytes_list of the 28x28 raw uint8, or
with --float a float_list of the 784 pixels / 255) and "label" (int64_list).

--npz writes OUT/<split>.npz instead, with numpy.savez (members stored) or, with
--deflate, numpy.savez_compressed: x uint8 (n, 28, 28), y uint8 (n,).
"""
import argparse
import pathlib
import sys

import numpy as np
import tensorflow as tf

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent / "data"))
from tfrecord_shards import idx  # noqa: E402  (the IDX reader, one copy)


def example(img, label, as_float):
    if as_float:
        image = tf.train.Feature(float_list=tf.train.FloatList(
            value=(img.reshape(-1).astype(np.float32) / np.float32(255)).tolist()))
    else:
        image = tf.train.Feature(bytes_list=tf.train.BytesList(value=[img.tobytes()]))
    label = tf.train.Feature(int64_list=tf.train.Int64List(value=[int(label)]))
    return tf.train.Example(features=tf.train.Features(
        feature={"image": image, "label": label})).SerializeToString()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--split", default="train", choices=["train", "t10k"])
    ap.add_argument("--shards", type=int, default=8)
    ap.add_argument("--limit", type=int, default=0)
    ap.add_argument("--float", action="store_true")
    ap.add_argument("--npz", action="store_true")
    ap.add_argument("--deflate", action="store_true")
    comp = ap.add_mutually_exclusive_group()
    comp.add_argument("--gzip", action="store_true")
    comp.add_argument("--zlib", action="store_true")
    a = ap.parse_args()
    img, lab = idx(a.split)
    n = a.limit or len(lab)
    kind, ext = ("GZIP", ".gz") if a.gzip else ("ZLIB", ".zlib") if a.zlib else ("", "")
    out = pathlib.Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    if a.npz:
        (np.savez_compressed if a.deflate else np.savez)(out / f"{a.split}.npz", x=img[:n],
                                                          y=lab[:n])
        print(out / f"{a.split}.npz")
        return
    for s in range(a.shards):
        path = out / f"{a.split}-{s:05d}-of-{a.shards:05d}.tfrecord{ext}"
        with tf.io.TFRecordWriter(str(path), tf.io.TFRecordOptions(compression_type=kind)) as w:
            for i in range(s * n // a.shards, (s + 1) * n // a.shards):
                w.write(example(img[i], lab[i], a.float))
        print(path)


if __name__ == "__main__":
    main()
