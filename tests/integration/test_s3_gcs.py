"""gs://bucket/prefix: Google Cloud Storage through its S3-compatible XML API
(storage.googleapis.com, HMAC keys as AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY,
path-style, SigV4 with region "auto", the body's SHA-256 signed as
x-amz-content-sha256 rather than sent as x-amz-checksum-sha256, which GCS's
XML API does not take). Exercised against a real S3-compatible server
(versitygw, tools/s3/server.sh) answering for region "auto", reached through
the endpoint override (--endpoint / --s3-endpoint, and AWS_ENDPOINT_URL):
objects round-trip (single PUT and multipart), list, delete, and a worker's
backups in gs:// survive a SIGKILLed chief and are removed after success.
Without an override, gs:// goes to storage.googleapis.com.
"""
import hashlib
import os
import signal
import subprocess

import pytest

from ckptlib import Run, reference, weights
from s3lib import (BUCKET, EXIT_CONFIG, assert_only_complete_backups, new_server, stored,
                   wait_for_object)
from workerlib import WORKER


@pytest.fixture(scope="module")
def gcs():
    """A server that, like GCS's XML API, takes SigV4 for region "auto"."""
    s = new_server(region="auto")
    yield s
    s.stop()


def env_for(s, **extra):
    e = dict(os.environ, AWS_ACCESS_KEY_ID=s.access, AWS_SECRET_ACCESS_KEY=s.secret)
    for v in ("AWS_SESSION_TOKEN", "AWS_REGION", "AWS_DEFAULT_REGION", "AWS_ENDPOINT_URL",
              "AWS_ENDPOINT_URL_S3", "CTRAIN_S3_ENDPOINT", "CTRAIN_BACKUP_URI",
              "CTRAIN_BACKUP_DIR"):
        e.pop(v, None)
    e.update(extra)
    return e


def cli(s3_check, s, *args, endpoint=True, env=None, timeout=120):
    pre = ["--endpoint", s.endpoint] if endpoint else []
    return subprocess.run([str(s3_check), *pre, *map(str, args)], env=env or env_for(s),
                          capture_output=True, text=True, timeout=timeout)


def test_gs_objects_round_trip_through_the_endpoint_override(s3_check, gcs, tmp_path):
    src = tmp_path / "src.bin"
    data = os.urandom(13 << 20)
    src.write_bytes(data)
    want = hashlib.sha256(data).hexdigest()
    # One PUT, then multipart (a 5 MiB threshold: three parts).
    p = cli(s3_check, gcs, "gs://ckpt/g", "put", "one.bin", src)
    assert p.returncode == 0, p.stderr
    assert p.stdout.split()[-1] == want, p.stdout
    p = cli(s3_check, gcs, "--threshold", 5 << 20, "--part-size", 5 << 20, "gs://ckpt/g", "put",
            "parts.bin", src)
    assert p.returncode == 0, p.stderr
    for name in ("one.bin", "parts.bin"):
        assert gcs.backend("g", name).read_bytes() == data, name
        out = tmp_path / f"got-{name}"
        p = cli(s3_check, gcs, "gs://ckpt/g", "get", name, out)
        assert p.returncode == 0, p.stderr
        assert out.read_bytes() == data
    p = cli(s3_check, gcs, "gs://ckpt/g", "list")
    assert p.returncode == 0, p.stderr
    assert sorted(line.split()[0] for line in p.stdout.splitlines()) == ["one.bin", "parts.bin"]
    p = cli(s3_check, gcs, "gs://ckpt/g", "uploads")
    assert p.returncode == 0 and p.stdout.strip() == "", (p.stdout, p.stderr)
    # The override also comes from AWS_ENDPOINT_URL, as the AWS tools read it.
    p = cli(s3_check, gcs, "gs://ckpt/g", "delete", "one.bin", endpoint=False,
            env=env_for(gcs, AWS_ENDPOINT_URL=gcs.endpoint))
    assert p.returncode == 0, p.stderr
    assert not gcs.backend("g", "one.bin").exists()
    p = cli(s3_check, gcs, "gs://ckpt/g", "delete", "parts.bin")
    assert p.returncode == 0, p.stderr


def test_gs_signs_for_region_auto_and_defaults_to_googleapis(s3_check, gcs, tmp_path):
    # A store that expects us-east-1 refuses gs://'s signature: it is scoped
    # to "auto", as GCS's XML API expects (permanent: exit 78, at once).
    aws = new_server()
    try:
        p = cli(s3_check, aws, "gs://ckpt/g", "list")
        assert p.returncode == EXIT_CONFIG, p.stderr
        assert 'region "auto" is wrong' in p.stderr and "gs://ckpt/g/" in p.stderr, p.stderr
        # The same URI as s3:// signs for us-east-1 and is served.
        p = cli(s3_check, aws, "s3://ckpt/g", "list")
        assert p.returncode == 0, p.stderr
    finally:
        aws.stop()
    # Without an override the request goes to storage.googleapis.com
    # (unreachable from here: the transport error names the host).
    p = cli(s3_check, gcs, "--max-attempts", 1, "gs://ckpt/g", "list", endpoint=False)
    assert p.returncode != 0
    assert "storage.googleapis.com" in p.stderr, p.stderr
    assert gcs.secret not in p.stderr and gcs.secret not in p.stdout


@pytest.mark.skipif(not WORKER.exists(), reason=f"{WORKER} not built")
def test_worker_backups_in_gs_survive_a_killed_chief(fx, tmp_path, gcs, monkeypatch):
    """The worker with --backup-uri gs://... and the endpoint as the
    controller passes it (CTRAIN_S3_ENDPOINT): killed mid run, it resumes
    from the bucket and ends with the weights of an unbroken run."""
    for k, v in env_for(gcs, CTRAIN_S3_ENDPOINT=gcs.endpoint).items():
        if os.environ.get(k) != v:
            monkeypatch.setenv(k, v)
    for v in ("AWS_SESSION_TOKEN", "AWS_REGION", "AWS_DEFAULT_REGION", "AWS_ENDPOINT_URL",
              "AWS_ENDPOINT_URL_S3", "CTRAIN_BACKUP_URI", "CTRAIN_BACKUP_DIR"):
        monkeypatch.delenv(v, raising=False)
    ref = reference(fx, tmp_path, 2, epochs=8)
    args = ["--backup-uri", f"gs://{BUCKET}/job-g", "--save-freq", "20"]
    a = Run(fx, tmp_path / "run", 2, *args, epochs=8, backup=False)
    wait_for_object(gcs, "job-g", a, 60)
    a.kill(signal.SIGKILL, ranks=[0])
    codes = a.wait()
    assert codes[0] == -9, a.logs()
    assert "uploading gs://ckpt/job-g/backup-" in a.log(0), a.log(0)
    assert_only_complete_backups(gcs, "job-g")
    newest = stored(gcs, "job-g")[-1]
    b = Run(fx, tmp_path / "run", 2, *args, epochs=8, tag="b", backup=False)
    assert b.wait() == [0, 0], b.logs()
    assert f"backup: resuming from gs://ckpt/job-g/{newest.name}" in b.log(0), b.log(0)
    assert weights(b.where) == ref, "resumed run differs from the unbroken one"
    assert stored(gcs, "job-g") == [], stored(gcs, "job-g")
    assert gcs.secret not in a.logs() + b.logs()
