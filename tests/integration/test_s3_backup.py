"""BackupAndRestore in object storage: real ctrain-worker processes on
loopback with --backup-uri s3://..., against a real S3-compatible server
(versitygw with its posix backend, tools/s3/server.sh). Nothing is faked.

The same contract as on a volume (test_checkpoint.py): a chief SIGKILLed mid
run resumes from the bucket and ends bitwise identical to an unbroken run;
the bucket only ever holds complete backups that verify (our header's
SHA-256); the server killed in the middle of an upload leaves no partial
backup and the restarted run resumes from the previous one; a corrupt object
falls back to the previous backup and is quarantined (copied aside to
<name>.corrupt-<UTC time>, never destroyed); wrong credentials or a
missing bucket exit 78 at once, naming the bucket and the server's Code,
without printing the secret.
"""
import hashlib
import os
import signal
import subprocess
import time

import pytest

from ckptlib import Run, reference, weights
from s3lib import (BUCKET, assert_only_complete_backups, new_server, step_of, stored, verifies,
                   wait_for_object)
from workerlib import WORKER

pytestmark = pytest.mark.skipif(not WORKER.exists(), reason=f"{WORKER} not built")


@pytest.fixture
def s3(monkeypatch):
    """A server of the test's own; the workers get its keys as a pod would
    (AWS_* in the environment)."""
    s = new_server()
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", s.access)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", s.secret)
    monkeypatch.setenv("AWS_REGION", "us-east-1")
    for var in ("AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3",
                "CTRAIN_BACKUP_URI", "CTRAIN_BACKUP_DIR", "CTRAIN_S3_ENDPOINT"):
        monkeypatch.delenv(var, raising=False)
    yield s
    s.stop()


def uri_args(s, prefix):
    return ["--backup-uri", f"s3://{BUCKET}/{prefix}", "--s3-endpoint", s.endpoint]


def quarantined(s, prefix):
    """Backups a restore found damaged and copied aside."""
    d = s.backend(prefix)
    return sorted(d.glob("backup-*.ckpt.corrupt-*")) if d.exists() else []


def test_sigkilled_chief_resumes_from_the_bucket_bitwise_identical(fx, tmp_path, s3):
    ref = reference(fx, tmp_path, 2, epochs=12)
    args = [*uri_args(s3, "job-a"), "--save-freq", "20"]
    a = Run(fx, tmp_path / "run", 2, *args, epochs=12, backup=False)
    wait_for_object(s3, "job-a", a, 100)
    a.kill(signal.SIGKILL, ranks=[0])
    codes = a.wait()
    assert codes[0] == -9 and codes[1] == 75, a.logs()
    assert "uploading s3://ckpt/job-a/backup-" in a.log(0), a.log(0)
    names = assert_only_complete_backups(s3, "job-a")
    # --keep 2: older ones were deleted; a kill between a save and its
    # pruning leaves one more, complete.
    assert 1 <= len(names) <= 3, names
    newest = stored(s3, "job-a")[-1]
    b = Run(fx, tmp_path / "run", 2, *args, epochs=12, tag="b", backup=False)
    assert b.wait() == [0, 0], b.logs()
    assert f"backup: resuming from s3://ckpt/job-a/{newest.name}" in b.log(0), b.log(0)
    assert weights(b.where) == ref, "resumed run differs from the unbroken one"
    # The backups have served: the chief deleted them after success.
    assert stored(s3, "job-a") == [], stored(s3, "job-a")
    assert "removed the backups in s3://ckpt/job-a" in b.log(0)


def test_server_killed_mid_upload_leaves_no_partial_backup_and_run_resumes(fx, tmp_path, s3):
    ref = reference(fx, tmp_path, 2, epochs=6)
    # Uploads capped at 100 kB/s: a ~610 kB backup takes six seconds on the
    # wire, so the server dies in the middle of one even on a loaded machine.
    args = [*uri_args(s3, "job-b"), "--save-freq", "40"]
    a = Run(fx, tmp_path / "run", 2, *args, "--s3-max-send-rate", "100000", epochs=6,
            backup=False)
    first = wait_for_object(s3, "job-b", a, 40, timeout=120)
    assert step_of(first) == 40
    deadline = time.time() + 60
    while "uploading s3://ckpt/job-b/backup-00000000000000000080.ckpt" not in a.log(0):
        assert time.time() < deadline and all(p.poll() is None for p in a.procs), a.logs()
        time.sleep(0.01)
    time.sleep(1.5)
    s3.kill()
    start = time.monotonic()
    codes = a.wait(timeout=120)
    assert codes == [75, 75], a.logs()
    assert time.monotonic() - start < 60
    log = a.log(0)
    # The upload in flight is the one that failed (not a later request).
    assert "backup: --backup-uri: s3: PUT s3://ckpt/job-b/backup-00000000000000000080.ckpt" in log
    assert "(6 attempts)" in log, log
    assert "previous backup is intact" in log, log
    # The server comes back over the same data: only the complete backup.
    s3.start()
    assert assert_only_complete_backups(s3, "job-b") == [first.name]
    b = Run(fx, tmp_path / "run", 2, *args, epochs=6, tag="b", backup=False)
    assert b.wait() == [0, 0], b.logs()
    assert f"backup: resuming from s3://ckpt/job-b/{first.name}" in b.log(0), b.log(0)
    assert weights(b.where) == ref


@pytest.mark.parametrize("damage", ["backend", "uploaded"])
def test_corrupt_object_falls_back_to_the_previous_and_is_quarantined(fx, tmp_path, s3,
                                                                      s3_check, damage):
    """backend: bytes changed under the store's own checksum (the GET fails
    it); uploaded: a damaged image uploaded whole, the store's checksum
    right, so only our header's SHA-256 catches it."""
    ref = reference(fx, tmp_path, 1, epochs=3)
    args = [*uri_args(s3, "job-c"), "--save-freq", "30", "--keep", "3"]
    a = Run(fx, tmp_path / "run", 1, *args, "--keep-backup", epochs=2, backup=False)
    assert a.wait() == [0], a.logs()
    saved = stored(s3, "job-c")
    assert len(saved) == 3 and all(verifies(p) for p in saved), saved
    newest, previous = saved[-1], saved[-2]
    data = bytearray(newest.read_bytes())
    data[len(data) // 2] ^= 0x40
    if damage == "backend":
        newest.write_bytes(bytes(data))
    else:
        bad = tmp_path / "bad.ckpt"
        bad.write_bytes(bytes(data))
        p = subprocess.run([str(s3_check), "--endpoint", s3.endpoint, f"s3://{BUCKET}/job-c",
                            "put", newest.name, str(bad)], capture_output=True, text=True,
                           timeout=60)
        assert p.returncode == 0, p.stderr
        assert newest.read_bytes() == bytes(data)
    b = Run(fx, tmp_path / "run", 1, *args, "--keep-backup", epochs=3, tag="b", backup=False)
    assert b.wait() == [0], b.logs()
    log = b.log(0)
    assert f"skipping s3://ckpt/job-c/{newest.name}" in log, log
    assert f"quarantined: moved aside to s3://ckpt/job-c/{newest.name}.corrupt-" in log, log
    assert ("ChecksumMismatch" if damage == "backend" else "SHA-256 mismatch") in log, log
    assert f"resuming from s3://ckpt/job-c/{previous.name}" in log, log
    assert weights(b.where) == ref
    # What the bucket holds now all verifies (the corrupt object moved
    # aside, its step saved again by the resumed run); the damaged bytes are
    # kept, whole, under the quarantine name.
    assert_only_complete_backups(s3, "job-c")
    q = quarantined(s3, "job-c")
    assert [p.name.split(".corrupt-")[0] for p in q] == [newest.name], q
    assert q[0].read_bytes() == bytes(data)


@pytest.mark.parametrize("fault", ["secret", "bucket"])
def test_refused_access_exits_78_at_once_naming_it(fx, tmp_path, s3, monkeypatch, fault):
    wrong = "not-" + s3.secret
    if fault == "secret":
        monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", wrong)
        target, want = f"s3://{BUCKET}/job-d", "HTTP 403 SignatureDoesNotMatch"
    else:
        target, want = "s3://no-such-bucket/job-d", "HTTP 404 NoSuchBucket"
    start = time.monotonic()
    a = Run(fx, tmp_path / "run", 1, "--backup-uri", target, "--s3-endpoint", s3.endpoint,
            backup=False)
    assert a.wait(timeout=60) == [78], a.logs()
    elapsed = time.monotonic() - start
    log = a.log(0)
    assert want in log and target.split("/")[2] in log, log
    assert "exit 78" in log and "Epoch 1/" not in log, log
    assert "attempt" not in log.replace("(1 attempt)", ""), log  # no retry loop
    assert elapsed < 15, elapsed
    for secret in (s3.secret, wrong):
        assert secret not in log


def test_backup_location_flags(fx, tmp_path, s3):
    d = fx["dir"]
    base = [str(WORKER), "train", "--model", str(d / "model.json"), "--data",
            str(d / "train.raw"), "--format", "raw"]
    env = dict(os.environ)
    env.pop("TF_CONFIG", None)
    p = subprocess.run(base + ["--backup-dir", str(tmp_path / "bk"), "--backup-uri",
                               "s3://ckpt/x"], env=env, capture_output=True, text=True,
                       timeout=30)
    assert p.returncode == 64 and "not both" in p.stderr, p.stderr
    both = dict(env, CTRAIN_BACKUP_DIR=str(tmp_path / "bk"), CTRAIN_BACKUP_URI="s3://ckpt/x")
    p = subprocess.run(base, env=both, capture_output=True, text=True, timeout=30)
    assert p.returncode == 64 and "both set" in p.stderr, p.stderr
    p = subprocess.run(base + ["--backup-uri", "http://ckpt/x"], env=env, capture_output=True,
                       text=True, timeout=30)
    assert p.returncode == 78 and "--backup-uri http://ckpt/x" in p.stderr, p.stderr
    # The environment alone names the bucket and the endpoint (as the
    # controller will set them): a run that backs up, then cleans up.
    envs = dict(env, CTRAIN_BACKUP_URI=f"s3://{BUCKET}/job-e", CTRAIN_S3_ENDPOINT=s3.endpoint)
    p = subprocess.run(base + ["--save-freq", "50", "--keep-backup"], env=envs,
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert "uploading s3://ckpt/job-e/backup-" in p.stderr
    assert [x.name for x in stored(s3, "job-e")][-1] == "backup-00000000000000000100.ckpt"
    assert_only_complete_backups(s3, "job-e")


def test_unfinished_upload_left_by_a_killed_chief_is_aborted_at_start(fx, tmp_path, s3,
                                                                       s3_check):
    """A multipart upload a killed chief never completed (created here with
    the curl CLI's own SigV4) is aborted by the next chief before it
    writes; the worker reports it."""
    key = "job-f/backup-00000000000000000007.ckpt"
    cfg = tmp_path / "curl.cfg"  # the keys in a file, not on a command line
    cfg.write_text(f'user = "{s3.access}:{s3.secret}"\n')
    p = subprocess.run(["curl", "-sS", "--fail", "-K", str(cfg), "--aws-sigv4",
                        "aws:amz:us-east-1:s3", "-X", "POST", "-H",
                        f"x-amz-content-sha256: {hashlib.sha256(b'').hexdigest()}",
                        f"{s3.endpoint}/{BUCKET}/{key}?uploads="], capture_output=True,
                       text=True, timeout=30)
    assert p.returncode == 0 and "<UploadId>" in p.stdout, p.stdout + p.stderr
    uploads = [str(s3_check), "--endpoint", s3.endpoint, f"s3://{BUCKET}/job-f", "uploads"]
    left = subprocess.run(uploads, capture_output=True, text=True, timeout=30)
    assert left.returncode == 0 and left.stdout.startswith(key.split("/")[1]), left
    a = Run(fx, tmp_path / "run", 1, *uri_args(s3, "job-f"), "--save-freq", "60", epochs=1,
            backup=False)
    assert a.wait() == [0], a.logs()
    assert f"aborted an unfinished upload of s3://{BUCKET}/{key}" in a.log(0), a.log(0)
    left = subprocess.run(uploads, capture_output=True, text=True, timeout=30)
    assert left.returncode == 0 and left.stdout == "", left
