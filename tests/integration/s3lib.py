"""A real S3-compatible server for the object storage tests (test_s3.py, test_s3_backup.py,
test_s3_gcs.py, tests/e2e/test_s3_e2e.py): versitygw with its posix backend, built once and
started on loopback by tools/s3/server.sh (`new_server`), and what a test reads of the
backups it holds: the stored objects, their step, and our own check that one verifies (the
size its header declares, the SHA-256 in its last 32 bytes). The s3_check program (a thin CLI
over objstore/s3.h) is the `s3_check` fixture of conftest.py."""
import hashlib
import os
import pathlib
import secrets
import shutil
import signal
import struct
import subprocess
import tempfile
import time

import pytest

from clusterlib import ROOT

SERVER = ROOT / "tools/s3/server.sh"
BUCKET = "ckpt"
EXIT_NOTFOUND = 4
EXIT_TEMPFAIL = 75
EXIT_CONFIG = 78


class Server:
    """One versitygw process over DIR; kill() and start() keep its data."""

    def __init__(self, dir_, host=None, region=None):
        self.dir = pathlib.Path(dir_)
        self.host, self.region = host, region
        self.access = "AK" + secrets.token_hex(8).upper()
        self.secret = secrets.token_urlsafe(30)
        self.env = dict(os.environ, S3_ACCESS_KEY=self.access, S3_SECRET_KEY=self.secret)
        self.endpoint = None
        self.port = None

    def start(self):
        args = ["bash", str(SERVER), "up", "--dir", str(self.dir), "--bucket", BUCKET]
        if self.port:
            args += ["--port", str(self.port)]
        if self.host:
            args += ["--host", self.host]
        if self.region:
            args += ["--region", self.region]
        p = subprocess.run(args, env=self.env, capture_output=True, text=True, timeout=1800)
        if p.returncode != 0:
            pytest.fail(f"versitygw did not start:\n{p.stderr[-4000:]}")
        self.endpoint = p.stdout.strip().splitlines()[-1]
        self.port = int(self.endpoint.rsplit(":", 1)[1])

    def kill(self):
        """SIGKILL, as a crash: nothing is flushed or cleaned up."""
        pid = int((self.dir / "versitygw.pid").read_text())
        os.kill(pid, signal.SIGKILL)
        for _ in range(100):
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                return
            time.sleep(0.05)

    def stop(self):
        subprocess.run(["bash", str(SERVER), "down", "--dir", str(self.dir)], capture_output=True,
                       text=True, timeout=120)
        shutil.rmtree(self.dir, ignore_errors=True)  # the test's own mkdtemp

    def backend(self, *parts):
        """A path in the posix backend: bucket BUCKET is DIR/root/ckpt."""
        return self.dir.joinpath("root", BUCKET, *parts)


def new_server(host=None, region=None):
    """A started server on 127.0.0.1 (or `host`), answering for us-east-1
    (or `region`)."""
    s = Server(tempfile.mkdtemp(prefix="ctrain-s3-"), host, region)
    s.start()
    return s


HEADER = 128


def stored(s, prefix):
    """The backup objects as the server's backend holds them, oldest first."""
    d = s.backend(prefix)
    return sorted(d.glob("backup-*.ckpt")) if d.exists() else []


def step_of(path):
    return int(path.name[7:27])


def verifies(path):
    """Our own check of a stored backup: the size the header declares and
    the SHA-256 in its last 32 bytes."""
    data = path.read_bytes()
    if len(data) < HEADER + 32 or data[:8] != b"CTRNBKUP":
        return False
    world, = struct.unpack_from("<Q", data, 88)
    slots, = struct.unpack_from("<I", data, 100)
    n, replicas = struct.unpack_from("<QQ", data, 112)
    size = HEADER + world * replicas * 6 * 8 + n * 4 + slots * n * 4 + 32
    return size == len(data) and hashlib.sha256(data[:-32]).digest() == data[-32:]


def assert_only_complete_backups(s, prefix):
    """Every object under the prefix is a backup that verifies: no partial
    upload, no temp object (quarantined ones aside)."""
    d = s.backend(prefix)
    names = sorted(p.name for p in d.iterdir() if ".ckpt.corrupt-" not in p.name) \
        if d.exists() else []
    assert all(n.startswith("backup-") and n.endswith(".ckpt") for n in names), names
    for p in stored(s, prefix):
        assert verifies(p), f"{p} does not verify"
    return names


def wait_for_object(s, prefix, run, min_step, timeout=90):
    deadline = time.time() + timeout
    while time.time() < deadline:
        for p in stored(s, prefix):
            if step_of(p) >= min_step:
                return p
        assert all(p.poll() is None for p in run.procs), run.logs()
        time.sleep(0.005)
    raise AssertionError(f"no backup >= {min_step} in the bucket:\n{run.logs()}")
