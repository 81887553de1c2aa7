#!/usr/bin/env python3
"""tools/data/tfrecord_shards.py - Fashion-MNIST (Debian's dataset-fashion-mnist, IDX) as
TFRecord shards of tf.train.Example for ctrain-worker --data / --test-data, written without
TensorFlow (plain Python + NumPy, so the integration tests and CI can make them), and a folder
uploaded to an S3-compatible bucket.

  python3 tools/data/tfrecord_shards.py OUT [--shards 64] [--test-shards 4] [--repeat R]
                                        [--compression gzip|none|zlib] [--limit N]
                                        [--upload s3://BUCKET/PREFIX/ [--endpoint URL]]
  python3 tools/data/tfrecord_shards.py --upload-only DIR s3://BUCKET/PREFIX/ [--endpoint URL]

Writes OUT/train/train-0000i-of-0000S.tfrecord[.gz|.zlib] (the training split repeated R
times, R x 60000 records, shard i holding records [i*n/S, (i+1)*n/S) of that sequence, so the
shards read in name order are the IDX file R times) and OUT/test/t10k-...-of-0000T (the 10000
test samples once). Each record is the Example tools/tfrecord_fmnist.py writes with real
TensorFlow (the same bytes, which `--check-against-tf DIR` proves against its output):
"image" a bytes_list of the 28x28 raw uint8, "label" an int64_list, so the worker needs
`--image-shape 28,28`. The records are framed as tf.io.TFRecordWriter frames them (length,
masked CRC32C of the length, data, masked CRC32C of the data); the CRC32C runs over every
record at once in NumPy, and a repeated set is the same framed bytes again, so R = 90 (4 GiB
uncompressed) is disk-bound.

--upload PUTs every file under OUT as s3://BUCKET/PREFIX/<its path under OUT> with curl's
AWS Signature V4 (an independent client: not the worker's objstore/ one), endpoint from
--endpoint or $CTRAIN_S3_ENDPOINT / $AWS_ENDPOINT_URL_S3, credentials from AWS_ACCESS_KEY_ID /
AWS_SECRET_ACCESS_KEY, region AWS_REGION (default us-east-1).
"""
import argparse
import gzip
import os
import pathlib
import subprocess
import sys
import zlib

import numpy as np

DATA = pathlib.Path("/usr/share/datasets/fashion-mnist")
EXT = {"gzip": ".gz", "zlib": ".zlib", "none": ""}


def idx(split):
    """(images uint8 (n, 28, 28), labels uint8 (n,)) of the IDX split train or t10k."""
    with gzip.open(DATA / f"{split}-images-idx3-ubyte.gz") as f:
        img = np.frombuffer(f.read(), np.uint8, offset=16).reshape(-1, 28, 28)
    with gzip.open(DATA / f"{split}-labels-idx1-ubyte.gz") as f:
        lab = np.frombuffer(f.read(), np.uint8, offset=8)
    return img, lab


def _varint(v):
    out = bytearray()
    while True:
        b = v & 0x7F
        v >>= 7
        if v:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def _field(num, payload):
    """A length-delimited protobuf field (wire type 2)."""
    return _varint(num << 3 | 2) + _varint(len(payload)) + payload


def example(img, label):
    """tf.train.Example{"image": bytes_list [img's raw bytes], "label": int64_list [label]},
    serialized as TensorFlow's protobuf serializes it (map entries in insertion order,
    the int64 list packed)."""
    image = _field(1, _field(1, img.tobytes()))  # Feature.bytes_list { value }
    lab = _field(3, _field(1, _varint(int(label))))  # Feature.int64_list { packed value }
    entries = _field(1, _field(1, b"image") + _field(2, image)) + \
        _field(1, _field(1, b"label") + _field(2, lab))
    return _field(1, entries)  # Example.features


def _crc32c_table():
    t = np.arange(256, dtype=np.uint32)
    for _ in range(8):
        t = np.where(t & 1, (t >> 1) ^ np.uint32(0x82F63B78), t >> 1).astype(np.uint32)
    return t


_TABLE = _crc32c_table()


def crc32c_rows(rows):
    """CRC32C of each row of a uint8 array (n, L), all at once."""
    crc = np.full(rows.shape[0], 0xFFFFFFFF, np.uint32)
    for j in range(rows.shape[1]):
        crc = _TABLE[(crc ^ rows[:, j]) & 0xFF] ^ (crc >> np.uint32(8))
    return crc ^ np.uint32(0xFFFFFFFF)


def masked(crc):
    crc = crc.astype(np.uint64)
    return ((((crc >> 15) | (crc << 17)) & 0xFFFFFFFF) + 0xA282EAD8) & 0xFFFFFFFF


def framed(records):
    """The records framed as TFRecordWriter writes them, as one bytes object, and the
    offset of each record in it (n + 1 offsets)."""
    by_len = {}
    for i, r in enumerate(records):
        by_len.setdefault(len(r), []).append(i)
    frames = [b""] * len(records)
    for length, idxs in by_len.items():
        data = np.frombuffer(b"".join(records[i] for i in idxs), np.uint8).reshape(len(idxs), -1)
        head = np.frombuffer(np.uint64(length).tobytes(), np.uint8)
        hcrc = int(masked(crc32c_rows(head[None, :]))[0]).to_bytes(4, "little")
        dcrc = masked(crc32c_rows(data))
        for k, i in enumerate(idxs):
            frames[i] = head.tobytes() + hcrc + records[i] + int(dcrc[k]).to_bytes(4, "little")
    offsets = np.zeros(len(frames) + 1, np.int64)
    offsets[1:] = np.cumsum([len(f) for f in frames])
    return b"".join(frames), offsets


def _compressor(kind):
    if kind == "gzip":  # TF's GZIP: a gzip member (its ZlibOutputBuffer, window bits 31)
        return zlib.compressobj(6, zlib.DEFLATED, 31)
    if kind == "zlib":
        return zlib.compressobj(6, zlib.DEFLATED, 15)
    return None


def write_shards(out, split, img, lab, shards, repeat=1, compression="gzip"):
    """split's samples, repeated `repeat` times, as `shards` TFRecord files in out; their
    paths. Shard s holds records [s*N/S, (s+1)*N/S) of the repeated sequence (N = n x R)."""
    blob, off = framed([example(img[i], lab[i]) for i in range(len(lab))])
    n, total = len(lab), len(lab) * repeat
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for s in range(shards):
        path = out / f"{split}-{s:05d}-of-{shards:05d}.tfrecord{EXT[compression]}"
        a, b = s * total // shards, (s + 1) * total // shards
        comp = _compressor(compression)
        with open(path, "wb") as f:
            while a < b:  # whole passes over the blob where the range allows
                i = a % n
                j = i + min(b - a, n - i)
                chunk = blob[off[i]:off[j]]
                f.write(comp.compress(chunk) if comp else chunk)
                a += j - i
            if comp:
                f.write(comp.flush())
        paths.append(path)
    return paths


def write_fmnist(out, shards=64, test_shards=4, repeat=1, compression="gzip", limit=0):
    """Fashion-MNIST as out/train/ (repeated) and out/test/ shards; (train paths, test paths)."""
    out = pathlib.Path(out)
    img, lab = idx("train")
    timg, tlab = idx("t10k")
    if limit:
        img, lab = img[:limit], lab[:limit]
    train = write_shards(out / "train", "train", img, lab, shards, repeat, compression)
    test = write_shards(out / "test", "t10k", timg, tlab, test_shards, 1, compression) \
        if test_shards else []
    return train, test


def endpoint_from_env(endpoint=None):
    return endpoint or os.environ.get("CTRAIN_S3_ENDPOINT") or \
        os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")


def put(endpoint, bucket, key, path, access, secret, region="us-east-1"):
    """One PUT of the file at path as bucket/key (path-style), signed V4 by curl."""
    url = f"{endpoint.rstrip('/')}/{bucket}/{key}"
    p = subprocess.run(["curl", "-sS", "--fail-with-body", "--retry", "3", "--aws-sigv4",
                        f"aws:amz:{region}:s3", "--user", f"{access}:{secret}", "-H",
                        "x-amz-content-sha256: UNSIGNED-PAYLOAD", "-T", str(path), url],
                       capture_output=True, text=True, timeout=600)
    if p.returncode != 0:
        raise RuntimeError(f"upload of {path} to {url} failed (curl exit {p.returncode}): "
                           f"{(p.stderr + p.stdout).strip()[-800:]}")


def upload_dir(local, uri, endpoint, access=None, secret=None, region=None):
    """Every file under local PUT as uri/<relative path> (uri: s3://bucket/prefix/); the
    object URIs, in name order."""
    if not uri.startswith("s3://"):
        raise ValueError(f"upload: {uri!r} is not an s3://bucket/prefix/ URI")
    bucket, _, prefix = uri[5:].partition("/")
    prefix = prefix.strip("/")
    access = access or os.environ["AWS_ACCESS_KEY_ID"]
    secret = secret or os.environ["AWS_SECRET_ACCESS_KEY"]
    region = region or os.environ.get("AWS_REGION", "us-east-1")
    local = pathlib.Path(local)
    uris = []
    for path in sorted(p for p in local.rglob("*") if p.is_file()):
        key = "/".join(x for x in (prefix, path.relative_to(local).as_posix()) if x)
        put(endpoint, bucket, key, path, access, secret, region)
        uris.append(f"s3://{bucket}/{key}")
    return uris


def check_against_tf(tf_dir, split="train"):
    """The records of tools/tfrecord_fmnist.py's shards in tf_dir (plain, written by real
    TensorFlow) against ours, byte for byte; exits 1 on a difference."""
    files = sorted(pathlib.Path(tf_dir).glob(f"{split}-*.tfrecord"))
    theirs = b"".join(f.read_bytes() for f in files)
    img, lab = idx(split)
    n = 0
    pos = 0
    while pos < len(theirs):
        n += 1
        pos += 16 + int.from_bytes(theirs[pos:pos + 8], "little")
    ours, _ = framed([example(img[i], lab[i]) for i in range(n)])
    same = ours == theirs
    print(f"{len(files)} TensorFlow shard(s), {n} records: "
          f"{'byte-identical' if same else 'DIFFERENT'}")
    sys.exit(0 if same else 1)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out", nargs="?")
    ap.add_argument("--shards", type=int, default=64)
    ap.add_argument("--test-shards", type=int, default=4)
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--limit", type=int, default=0, help="the first N training samples only")
    ap.add_argument("--compression", default="gzip", choices=sorted(EXT))
    ap.add_argument("--upload", metavar="S3_URI")
    ap.add_argument("--upload-only", nargs=2, metavar=("DIR", "S3_URI"))
    ap.add_argument("--endpoint")
    ap.add_argument("--check-against-tf", metavar="DIR")
    a = ap.parse_args()
    if a.check_against_tf:
        check_against_tf(a.check_against_tf)
    if a.upload_only:
        ep = endpoint_from_env(a.endpoint)
        for u in upload_dir(a.upload_only[0], a.upload_only[1], ep):
            print(u)
        return
    if not a.out:
        ap.error("OUT is required")
    train, test = write_fmnist(a.out, a.shards, a.test_shards, a.repeat, a.compression, a.limit)
    size = sum(p.stat().st_size for p in train + test)
    print(f"{len(train)} train + {len(test)} test shards in {a.out}: {size} bytes", flush=True)
    if a.upload:
        ep = endpoint_from_env(a.endpoint)
        if not ep:
            sys.exit("--upload: no endpoint (--endpoint, $CTRAIN_S3_ENDPOINT, $AWS_ENDPOINT_URL_S3)")
        uris = upload_dir(a.out, a.upload, ep)
        print(f"uploaded {len(uris)} objects to {a.upload} at {ep}")


if __name__ == "__main__":
    try:
        main()
    except (RuntimeError, ValueError, KeyError, OSError) as e:
        sys.exit(f"tfrecord_shards: {e!s}" if not isinstance(e, KeyError) else
                 f"tfrecord_shards: {e.args[0]} is not set in the environment")
