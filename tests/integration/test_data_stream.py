"""The streaming data reader (worker/data/stream.h) with real ctrain-worker processes on
loopback against a real S3-compatible server (versitygw, tests/integration/s3lib.py) and
real files: Fashion-MNIST as GZIP TFRecord shards (tools/data/tfrecord_shards.py, the
bytes real TensorFlow writes), uploaded with curl's SigV4 (not the worker's client).

Checks: (a) 2 workers reading the shards from the bucket reach the test accuracy of the same
job reading the same shards from local disk (--data-stream) within 0.002; (b) a worker
SIGKILLed mid-epoch while reading from the bucket, restarted, resumes from its backup and
every step's loss after the resume (TensorBoard's batch_loss, every step) is bitwise that of
an unbroken run, as are the final weights; (c) the training set repeated to >= 4 GiB of
uncompressed shards on local disk trains, 1 epoch, in a cgroup v1 memory cgroup of 1 GiB,
and its peak RSS ("data: peak RSS" log line) is recorded beside the prefetch and shuffle
settings (skipped, saying why, where no memory cgroup can be made).
"""
import json
import os
import pathlib
import re
import shutil
import signal
import struct
import subprocess
import sys
import time

import pytest

from clusterlib import ROOT
from s3lib import BUCKET, new_server
from workerlib import MODEL, WORKER, free_ports, tf_config

sys.path.insert(0, str(ROOT / "tools/data"))
import tfrecord_shards  # noqa: E402

pytestmark = pytest.mark.skipif(not WORKER.exists(), reason=f"{WORKER} not built")

SHAPE = ["--image-shape", "28,28"]
REPORT = re.compile(r"data: peak RSS (\d+(?:\.\d+)?) MiB; reader budget (\d+(?:\.\d+)?) MiB "
                    r"\(prefetch (\d+) bytes, shuffle buffer (\d+) records\)")
CGROUP_V1 = pathlib.Path("/sys/fs/cgroup/memory")
GIB = 1 << 30


@pytest.fixture(scope="module")
def shards(tmp_path_factory):
    """Fashion-MNIST as 16 GZIP train shards and 2 test shards on local disk."""
    d = tmp_path_factory.mktemp("fmnist-tfr")
    tfrecord_shards.write_fmnist(d, shards=16, test_shards=2)
    return d


@pytest.fixture(scope="module")
def bucket(shards):
    """A server of this module's own holding the shards under s3://ckpt/fmnist/; the
    workers get its keys as a pod would (AWS_* in their environment)."""
    s = new_server()
    try:
        tfrecord_shards.upload_dir(shards, f"s3://{BUCKET}/fmnist/", s.endpoint, s.access,
                                   s.secret, "us-east-1")
        yield s
    finally:
        s.stop()


def s3_env(s):
    env = {k: v for k, v in os.environ.items()
           if k not in ("TF_CONFIG", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL",
                        "AWS_ENDPOINT_URL_S3", "CTRAIN_S3_ENDPOINT", "CTRAIN_BACKUP_DIR",
                        "CTRAIN_BACKUP_URI")}
    if s is not None:
        env.update(AWS_ACCESS_KEY_ID=s.access, AWS_SECRET_ACCESS_KEY=s.secret,
                   AWS_REGION="us-east-1")
    return env


def bucket_args(s):
    return ["--data", f"s3://{BUCKET}/fmnist/train/", "--test-data",
            f"s3://{BUCKET}/fmnist/test/", "--s3-endpoint", s.endpoint]


def local_args(d):
    return ["--data-stream", "--data", str(d / "train"), "--test-data", str(d / "test")]


class Job:
    """`world` ctrain-worker processes of one job in `where` (world 1: no TF_CONFIG)."""

    def __init__(self, where, world, *args, env=None, tag="a", model=MODEL, preexec=None):
        self.where, self.world, self.tag = pathlib.Path(where), world, tag
        self.where.mkdir(parents=True, exist_ok=True)
        ports = free_ports(world)
        self.procs = []
        for r in range(world):
            e = dict(env or s3_env(None), CTRAIN_JOB_TOKEN="tok-data", CTRAIN_JOB_NAME="data",
                     CTRAIN_ATTEMPT="0")
            e.pop("TF_CONFIG", None)
            if world > 1:
                e["TF_CONFIG"] = tf_config(ports, "chief" if r == 0 else "worker",
                                           0 if r == 0 else r - 1)
            argv = [str(WORKER), "train", "--model", str(model), "--batch", "32", "--seed", "42",
                    "--device", "cpu", "--termination-log", "", "--output",
                    str(self.where / "out"), "--metrics", str(self.where / "metrics.jsonl"),
                    "--rendezvous-timeout", "60", "--peer-timeout", "3", *SHAPE, *args]
            with open(self.log_path(r), "w") as log:
                self.procs.append(subprocess.Popen(argv, env=e, stdout=log,
                                                   stderr=subprocess.STDOUT, preexec_fn=preexec))

    def log_path(self, r):
        return self.where / f"{self.tag}-rank{r}.log"

    def log(self, r=0):
        return self.log_path(r).read_text()

    def logs(self):
        return "\n".join(f"--- rank {r}\n{self.log(r)[-3000:]}" for r in range(self.world))

    def wait(self, timeout=300):
        return [p.wait(timeout=timeout) for p in self.procs]

    def accuracy(self):
        rows = [json.loads(line) for line in (self.where / "metrics.jsonl").read_text()
                .splitlines() if '"val_accuracy"' in line]
        return rows[-1]["val_accuracy"]


def test_bucket_and_local_disk_reach_the_same_accuracy(shards, bucket, tmp_path):
    """(a) The same 16 shards, 2 workers, 1 epoch, seed 42: from the bucket and from local
    disk through the same streaming reader."""
    a = Job(tmp_path / "s3", 2, *bucket_args(bucket), "--epochs", "1", env=s3_env(bucket))
    assert a.wait() == [0, 0], a.logs()
    b = Job(tmp_path / "local", 2, *local_args(shards), "--epochs", "1")
    assert b.wait() == [0, 0], b.logs()
    acc_s3, acc_local = a.accuracy(), b.accuracy()
    assert acc_s3 > 0.80 and acc_local > 0.80, (acc_s3, acc_local)
    assert abs(acc_s3 - acc_local) <= 0.002, (acc_s3, acc_local)
    for job in (a, b):
        assert REPORT.search(job.log(0)), job.log(0)[-2000:]


# --- (b) resume ---------------------------------------------------------------------------

def _fields(buf):
    """A protobuf message's fields: {number: [value]} (varint: int, fixed: raw bytes,
    length-delimited: bytes)."""
    out, pos = {}, 0
    while pos < len(buf):
        key, pos = _uvarint(buf, pos)
        num, wt = key >> 3, key & 7
        if wt == 0:
            v, pos = _uvarint(buf, pos)
        elif wt == 1:
            v, pos = buf[pos:pos + 8], pos + 8
        elif wt == 5:
            v, pos = buf[pos:pos + 4], pos + 4
        elif wt == 2:
            n, pos = _uvarint(buf, pos)
            v, pos = buf[pos:pos + n], pos + n
        else:
            raise ValueError(f"wire type {wt}")
        out.setdefault(num, []).append(v)
    return out


def _uvarint(buf, pos):
    v = shift = 0
    while True:
        b = buf[pos]
        pos += 1
        v |= (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            return v, pos


def step_losses(path):
    """{step: batch_loss as its 4 stored bytes} of one TensorBoard event file (TFRecord
    framing of Event protos: step 2, summary 5 of values 1 {tag 1, simple_value 2})."""
    raw, pos, out = path.read_bytes(), 0, {}
    while pos + 12 <= len(raw):
        (n,) = struct.unpack_from("<Q", raw, pos)
        ev = _fields(raw[pos + 12:pos + 12 + n])
        pos += 16 + n
        for summ in ev.get(5, []):
            for val in _fields(summ).get(1, []):
                f = _fields(val)
                if f.get(1) == [b"batch_loss"]:
                    out[ev.get(2, [0])[0]] = f[2][0]
    return out


def backup_steps(d):
    return sorted(int(p.name[7:27]) for p in pathlib.Path(d).glob("backup-*.ckpt"))


def test_sigkilled_worker_reading_the_bucket_resumes_with_bitwise_step_losses(bucket, tmp_path):
    """(b) Backups every 100 steps (epochs of 937 steps of global batch 64: every backup is
    mid-epoch); rank 1 SIGKILLed once one at step >= 300 exists, the chief exits 75; the
    restarted job resumes and each step's batch_loss from there on equals the unbroken run's
    bit for bit, and so do the final weights."""
    env = s3_env(bucket)
    common = [*bucket_args(bucket), "--epochs", "3", "--save-freq", "100",
              "--tensorboard-freq", "1"]
    ref = Job(tmp_path / "ref", 2, *common, "--backup-dir", str(tmp_path / "ref/bk"),
              "--tensorboard-dir", str(tmp_path / "ref/tb"), env=env)
    assert ref.wait() == [0, 0], ref.logs()
    run = tmp_path / "run"
    args = [*common, "--backup-dir", str(run / "bk"), "--tensorboard-dir", str(run / "tb")]
    a = Job(run, 2, *args, env=env)
    deadline = time.time() + 120
    while not any(s >= 300 for s in backup_steps(run / "bk")):
        assert all(p.poll() is None for p in a.procs), a.logs()
        assert time.time() < deadline, a.logs()
        time.sleep(0.002)
    a.procs[1].send_signal(signal.SIGKILL)
    assert a.wait(timeout=60) == [75, -9], a.logs()
    saved = backup_steps(run / "bk")
    assert saved and all(s % 937 for s in saved), saved
    done = {p.name for p in (run / "tb/steps").glob("events.out.tfevents.*")}
    b = Job(run, 2, *args, env=env, tag="b")
    assert b.wait() == [0, 0], b.logs()
    assert "backup: resuming from" in b.log(0), b.log(0)[-3000:]
    new = [p for p in (run / "tb/steps").glob("events.out.tfevents.*") if p.name not in done]
    assert len(new) == 1, new
    want = {}
    for p in (tmp_path / "ref/tb/steps").glob("events.out.tfevents.*"):
        want.update(step_losses(p))
    got = step_losses(new[0])
    first = min(got)
    assert first - 1 in saved and first > 300, (first, saved)
    assert sorted(got) == list(range(first, 3 * 937 + 1)), (min(got), max(got), len(got))
    diff = [s for s in got if got[s] != want.get(s)]
    assert not diff, f"{len(diff)} steps differ from the unbroken run, first {diff[:5]}"
    assert (run / "out/model.safetensors").read_bytes() == \
        (tmp_path / "ref/out/model.safetensors").read_bytes()


# --- (c) larger than memory ---------------------------------------------------------------

class MemoryCgroup:
    """A cgroup v1 memory cgroup of the test's own, limited to `limit` bytes; removed by
    close() (its processes must have ended)."""

    def __init__(self, limit):
        self.path = CGROUP_V1 / f"ctrain-test-{os.getpid()}"
        if not (CGROUP_V1 / "memory.limit_in_bytes").exists():
            pytest.skip(f"no cgroup v1 memory controller at {CGROUP_V1}")
        try:
            self.path.mkdir()
        except OSError as e:
            pytest.skip(f"cannot make the memory cgroup {self.path}: {e}")
        try:
            (self.path / "memory.limit_in_bytes").write_text(str(limit))
            swap = self.path / "memory.memsw.limit_in_bytes"
            if swap.exists():  # no swapping past the limit either
                swap.write_text(str(limit))
        except OSError as e:
            self.close()
            pytest.skip(f"cannot limit the memory cgroup {self.path}: {e}")

    def enter(self):
        """preexec_fn: the child joins the cgroup before it execs the worker."""
        (self.path / "cgroup.procs").write_text(str(os.getpid()))

    def read(self, name):
        return int((self.path / name).read_text())

    def oom_kills(self):
        for line in (self.path / "memory.oom_control").read_text().splitlines():
            if line.startswith("oom_kill "):
                return int(line.split()[1])
        return "unknown"

    def close(self):
        for _ in range(50):
            try:
                self.path.rmdir()
                return
            except FileNotFoundError:
                return
            except OSError:  # EBUSY while the last process is being reaped
                time.sleep(0.1)
        self.path.rmdir()


def test_data_larger_than_memory_trains_in_a_1gib_cgroup(tmp_path, record_property):
    """(c) The training set repeated 87 times (5.2 M records, >= 4 GiB uncompressed, in 16
    shards) and the test set, on local disk; one worker (a linear model, batch 256, default
    prefetch and shuffle buffer) in a 1 GiB memory cgroup trains 1 epoch to exit 0."""
    cg = MemoryCgroup(GIB)
    job = None
    try:
        t0 = time.time()
        train, _ = tfrecord_shards.write_fmnist(tmp_path / "big", shards=16, test_shards=1,
                                                repeat=87, compression="none")
        size = sum(p.stat().st_size for p in train)
        assert size >= 4 * GIB, size
        wrote = time.time() - t0
        model = tmp_path / "linear.json"
        model.write_text(json.dumps({"input_shape": [28, 28], "layers": [
            {"type": "Flatten"}, {"type": "Dense", "units": 10}]}))
        t1 = time.time()
        job = Job(tmp_path / "run", 1, *local_args(tmp_path / "big"), "--epochs", "1",
                  "--batch", "256", model=model, preexec=cg.enter)
        codes = job.wait(timeout=1200)
        trained = time.time() - t1
        assert codes == [0], f"{codes} (-9: killed at the cgroup's limit; {cg.oom_kills()} " \
            f"OOM kill(s))\n{job.logs()}"
        m = REPORT.search(job.log(0))
        assert m, job.log(0)[-3000:]
        rss, budget, prefetch, shuffle = float(m[1]), float(m[2]), int(m[3]), int(m[4])
        assert rss < 1024 and budget < 1024, m[0]
        assert job.accuracy() > 0.70, job.accuracy()
        line = (f"{size / GIB:.2f} GiB of shards, 1 GiB cgroup: peak RSS {rss} MiB, reader "
                f"budget {budget} MiB, prefetch {prefetch} bytes, shuffle buffer {shuffle} "
                f"records; cgroup max usage {cg.read('memory.max_usage_in_bytes') >> 20} MiB "
                f"(page cache included); wrote {wrote:.0f} s, trained {trained:.0f} s")
        record_property("data_larger_than_memory", line)
        print(line)
    finally:
        if job is not None:
            for p in job.procs:
                if p.poll() is None:
                    p.kill()
                    p.wait()
        cg.close()
        shutil.rmtree(tmp_path / "big", ignore_errors=True)  # 4 GiB: not kept by pytest
