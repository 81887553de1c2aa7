"""The worker's S3 client (objstore/s3.c) against a real
S3-compatible server: versitygw with its posix backend, built once and
started on loopback by tools/s3/server.sh. Nothing here fakes the server.

Each test drives tests/integration/s3_check (a thin CLI over s3.h) and checks
what a backup needs: bytes come back exactly (single PUT and multipart),
listing by prefix with pagination, delete, permanent refusals that fail at
once with a message naming the bucket and the server's Code, transient
failures (a killed server, a 500, a stalled response) retried within bounds,
no object visible after an interrupted upload, and the store's SHA-256
checked on download. The faults are real: the server is SIGKILLed, or its
backend holds what makes a real server fail (a symlink loop answers 500
InternalError, a FIFO never answers, bytes changed under the stored checksum).
"""
import hashlib
import os
import subprocess
import sys
import threading
import time

import pytest

from s3lib import BUCKET, EXIT_CONFIG, EXIT_NOTFOUND, EXIT_TEMPFAIL, new_server


@pytest.fixture(scope="module")
def server():
    s = new_server()
    yield s
    s.stop()


@pytest.fixture
def own_server():
    """A server of the test's own, for tests that kill it."""
    s = new_server()
    yield s
    s.stop()


def run(s3_check, server, uri, *args, opts=(), env=None, timeout=120):
    e = dict(os.environ, AWS_ACCESS_KEY_ID=server.access, AWS_SECRET_ACCESS_KEY=server.secret,
             AWS_REGION="us-east-1")
    e.pop("AWS_SESSION_TOKEN", None)
    e.update(env or {})
    start = time.monotonic()
    p = subprocess.run([str(s3_check), "--endpoint", server.endpoint, *map(str, opts), uri,
                        *map(str, args)], env=e, capture_output=True, text=True, timeout=timeout)
    p.elapsed = time.monotonic() - start
    return p


def attempts(p):
    for line in p.stderr.splitlines():
        if line.startswith("attempts "):
            return int(line.split()[1])
    raise AssertionError(f"no attempts line in:\n{p.stderr}")


def ok(p):
    assert p.returncode == 0, f"exit {p.returncode}\nstdout:\n{p.stdout}\nstderr:\n{p.stderr}"
    return p.stdout


def write_random(path, size):
    h = hashlib.sha256()
    with open(path, "wb") as f:
        left = size
        while left:
            chunk = os.urandom(min(left, 1 << 20))
            h.update(chunk)
            f.write(chunk)
            left -= len(chunk)
    return h.hexdigest()


def uri(prefix):
    return f"s3://{BUCKET}/{prefix}"


def test_small_objects_round_trip_byte_exact(s3_check, server, tmp_path):
    for name, size in (("empty", 0), ("one", 1), ("small", 70_001)):
        src, dst = tmp_path / f"{name}.in", tmp_path / f"{name}.out"
        digest = write_random(src, size)
        out = ok(run(s3_check, server, uri("small"), "put", f"{name}.bin", src))
        assert out.split() == ["sha256", digest]
        out = ok(run(s3_check, server, uri("small"), "get", f"{name}.bin", dst))
        assert out.split() == ["size", str(size), "sha256", digest]
        assert dst.read_bytes() == src.read_bytes()
        # Stored under the prefix, as the backend's file shows.
        assert server.backend("small", f"{name}.bin").read_bytes() == src.read_bytes()


def test_streamed_source_goes_aws_chunked_and_the_store_checks_its_trailer(s3_check, server,
                                                                            tmp_path):
    """s3_put_source (how a backup goes up from memory): sizes around the
    1 MiB chunk, sent aws-chunked with x-amz-checksum-sha256 in the trailer,
    come back byte-exact; a source whose SHA-256 is one bit off is refused
    by the store (the trailer really is checked) and nothing is stored."""
    for size in (0, 1, 8191, 1 << 20, (1 << 20) + 1, 3 * (1 << 20) + 777):
        src, dst = tmp_path / f"{size}.in", tmp_path / f"{size}.out"
        digest = write_random(src, size)
        out = ok(run(s3_check, server, uri("stream"), "stream", f"{size}.bin", src))
        assert out.split() == ["sha256", digest]
        out = ok(run(s3_check, server, uri("stream"), "get", f"{size}.bin", dst))
        assert out.split() == ["size", str(size), "sha256", digest]
        assert server.backend("stream", f"{size}.bin").read_bytes() == src.read_bytes()
    src = tmp_path / "lie.in"
    write_random(src, (1 << 20) + 5)
    # BadDigest is retried (a body damaged on the way); the retries fail alike.
    p = run(s3_check, server, uri("stream"), "stream-lie", "lie.bin", src,
            opts=["--max-attempts", 2, "--backoff-ms", 10])
    assert p.returncode == EXIT_TEMPFAIL, (p.returncode, p.stderr)
    assert "PUT s3://ckpt/stream/lie.bin: HTTP 400 BadDigest" in p.stderr, p.stderr
    assert not server.backend("stream", "lie.bin").exists()


def test_multipart_round_trip_byte_exact(s3_check, server, tmp_path):
    src, dst = tmp_path / "big.in", tmp_path / "big.out"
    size = 12 * (1 << 20) + 12345  # three parts of 5 MiB, 5 MiB and the rest
    digest = write_random(src, size)
    opts = ["--threshold", 5 << 20, "--part-size", 5 << 20]
    out = ok(run(s3_check, server, uri("mp"), "put", "model.ckpt", src, opts=opts))
    assert out.split() == ["sha256", digest]
    # A multipart object's ETag ends in -<parts>: the upload really was multipart.
    out = ok(run(s3_check, server, uri("mp"), "head", "model.ckpt"))
    assert out.split()[:2] == ["size", str(size)]
    assert out.strip().endswith('-3"'), out
    out = ok(run(s3_check, server, uri("mp"), "get", "model.ckpt", dst))
    assert out.split() == ["size", str(size), "sha256", digest]
    assert dst.read_bytes() == src.read_bytes()
    # No upload left behind: the only object is the completed one.
    assert ok(run(s3_check, server, uri("mp"), "list")).split() == ["model.ckpt", str(size)]


def test_transfers_stream_without_whole_file_buffers(s3_check, server, tmp_path):
    """A 48 MiB single PUT and its GET run in a few MiB of memory."""
    src, dst = tmp_path / "s.in", tmp_path / "s.out"
    size = 48 << 20
    digest = write_random(src, size)
    probe = ("import resource, subprocess, sys\n"
             "r = subprocess.run(sys.argv[1:])\n"
             "print('maxrss_kib', resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss,"
             " file=sys.stderr)\n"
             "sys.exit(r.returncode)\n")
    env = dict(os.environ, AWS_ACCESS_KEY_ID=server.access, AWS_SECRET_ACCESS_KEY=server.secret)
    for args in (["--threshold", 64 << 20, uri("stream"), "put", "s.bin", src],
                 [uri("stream"), "get", "s.bin", dst]):
        p = subprocess.run([sys.executable, "-c", probe, str(s3_check), "--endpoint",
                            server.endpoint, *map(str, args)], env=env, capture_output=True,
                           text=True, timeout=300)
        ok(p)
        rss = [int(l.split()[1]) for l in p.stderr.splitlines() if l.startswith("maxrss_kib")]
        assert rss and rss[0] < 24 * 1024, f"peak RSS {rss} KiB for a {size >> 20} MiB object"
    assert p.stdout.split() == ["size", str(size), "sha256", digest]
    assert hashlib.sha256(dst.read_bytes()).hexdigest() == digest


def test_list_by_prefix_with_pagination_and_delete(s3_check, server, tmp_path):
    src = tmp_path / "x"
    src.write_bytes(b"0123456789")
    for name in ("run-a/ckpt-1", "run-a/ckpt-2", "run-a/ckpt-10", "run-b/ckpt-1"):
        ok(run(s3_check, server, uri("lst"), "put", name, src))
    out = ok(run(s3_check, server, uri("lst"), "list", "run-a/"))
    assert out.splitlines() == ["run-a/ckpt-1 10", "run-a/ckpt-10 10", "run-a/ckpt-2 10"]
    assert len(ok(run(s3_check, server, uri("lst"), "list")).splitlines()) == 4

    # More than one page (ListObjectsV2 pages hold 1000): files placed in the
    # backend are objects to the server.
    many = server.backend("page")
    many.mkdir(parents=True)
    for i in range(1203):
        (many / f"obj-{i:05d}").write_bytes(b"x" * (i % 7))
    out = ok(run(s3_check, server, uri("page"), "list"))
    lines = out.splitlines()
    assert len(lines) == 1203
    assert lines[0] == "obj-00000 0" and lines[-1] == f"obj-01202 {1202 % 7}"
    assert lines == sorted(lines)

    # Delete: gone from head and list; deleting again is not an error.
    ok(run(s3_check, server, uri("lst"), "delete", "run-a/ckpt-2"))
    p = run(s3_check, server, uri("lst"), "head", "run-a/ckpt-2")
    assert p.returncode == EXIT_NOTFOUND, p.stderr
    assert "HEAD s3://ckpt/lst/run-a/ckpt-2: HTTP 404" in p.stderr
    out = ok(run(s3_check, server, uri("lst"), "list", "run-a/"))
    assert out.splitlines() == ["run-a/ckpt-1 10", "run-a/ckpt-10 10"]
    ok(run(s3_check, server, uri("lst"), "delete", "run-a/ckpt-2"))
    p = run(s3_check, server, uri("lst"), "get", "run-a/ckpt-2", tmp_path / "y")
    assert p.returncode == EXIT_NOTFOUND and "NoSuchKey" in p.stderr, p.stderr


def test_permanent_errors_fail_at_once_naming_bucket_and_code(s3_check, server, tmp_path):
    src = tmp_path / "x"
    src.write_bytes(b"payload")
    wrong_secret = "not-" + server.secret
    cases = [
        ({"AWS_SECRET_ACCESS_KEY": wrong_secret}, uri("perm"), ["put", "a", src],
         "PUT s3://ckpt/perm/a: HTTP 403 SignatureDoesNotMatch"),
        # versitygw answers an unknown key with 404 XAdminUserNotFound, AWS
        # with 403 InvalidAccessKeyId: permanent either way.
        ({"AWS_ACCESS_KEY_ID": "AKNOSUCHUSER"}, uri("perm"), ["list"],
         "ListObjectsV2 s3://ckpt/perm/: HTTP 40"),
        ({}, "s3://no-such-bucket/p", ["list"],
         "ListObjectsV2 s3://no-such-bucket/p/: HTTP 404 NoSuchBucket"),
        ({}, "s3://no-such-bucket/p", ["put", "a", src],
         "PUT s3://no-such-bucket/p/a: HTTP 404 NoSuchBucket"),
    ]
    for env, u, args, want in cases:
        p = run(s3_check, server, u, *args, env=env, opts=["--backoff-ms", 1000], timeout=30)
        assert p.returncode == EXIT_CONFIG, f"{args}: exit {p.returncode}\n{p.stderr}"
        assert want in p.stderr, p.stderr
        assert attempts(p) == 1, p.stderr  # no retry loop
        assert p.elapsed < 5, p.elapsed
        assert "retrying" not in p.stderr
        # The credentials never appear in what the client prints.
        for secret in (server.secret, wrong_secret):
            assert secret not in p.stderr + p.stdout
    # Nothing was written by the refused PUT.
    assert not server.backend("perm", "a").exists()


def test_missing_credentials_are_a_config_error(s3_check, server):
    p = run(s3_check, server, uri("x"), "list", env={"AWS_SECRET_ACCESS_KEY": ""})
    assert p.returncode == EXIT_CONFIG
    assert "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY must both be set" in p.stderr


def test_server_error_500_is_retried_then_reported(s3_check, server, tmp_path):
    """A symlink loop in the posix backend makes versitygw answer 500
    InternalError: a real 5xx, retried with backoff, then reported."""
    server.backend("fault").mkdir(parents=True, exist_ok=True)
    os.symlink("loop", server.backend("fault", "loop"))
    p = run(s3_check, server, uri("fault"), "get", "loop", tmp_path / "out",
            opts=["--max-attempts", 3, "--backoff-ms", 50])
    assert p.returncode == EXIT_TEMPFAIL, p.stderr
    assert attempts(p) == 3
    assert p.stderr.count("HTTP 500 InternalError (attempt") == 2, p.stderr
    assert "GET s3://ckpt/fault/loop: HTTP 500 InternalError" in p.stderr
    assert "(3 attempts)" in p.stderr
    assert tmp_path.joinpath("out").read_bytes() == b""  # nothing from the error bodies


def test_stalled_response_times_out_and_is_retried(s3_check, server, tmp_path):
    """A FIFO in the backend: versitygw blocks opening it and never answers."""
    server.backend("stall").mkdir(parents=True, exist_ok=True)
    fifo = server.backend("stall", "fifo")
    os.mkfifo(fifo)
    try:
        p = run(s3_check, server, uri("stall"), "get", "fifo", tmp_path / "out",
                opts=["--stall-s", 1, "--max-attempts", 2, "--backoff-ms", 50], timeout=60)
        assert p.returncode == EXIT_TEMPFAIL, p.stderr
        assert attempts(p) == 2
        assert "timed out" in p.stderr and "(2 attempts)" in p.stderr, p.stderr
        assert p.elapsed < 15, p.elapsed
    finally:
        # Release the server's blocked readers.
        for _ in range(4):
            try:
                fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
                os.close(fd)
            except OSError:
                break


def test_stored_checksum_is_verified_on_download(s3_check, server, tmp_path):
    src = tmp_path / "x"
    write_random(src, 4096)
    ok(run(s3_check, server, uri("sum"), "put", "obj", src))
    # Flip one byte in the stored object; its stored SHA-256 stays.
    stored = server.backend("sum", "obj")
    data = bytearray(stored.read_bytes())
    data[100] ^= 0xFF
    stored.write_bytes(bytes(data))
    p = run(s3_check, server, uri("sum"), "get", "obj", tmp_path / "out",
            opts=["--max-attempts", 2, "--backoff-ms", 20])
    assert p.returncode != 0
    assert "corrupt" in p.stderr and "ChecksumMismatch" in p.stderr, p.stderr
    # With checksums off (stores without them) the bytes are returned as they are.
    p = run(s3_check, server, uri("sum"), "get", "obj", tmp_path / "out2",
            opts=["--no-checksum"])
    ok(p)
    assert tmp_path.joinpath("out2").read_bytes() == bytes(data)


def kill_during(server, proc, after_s):
    """SIGKILLs the server after_s into proc's run, unless proc ended first."""
    def go():
        try:
            proc.wait(timeout=after_s)
        except subprocess.TimeoutExpired:
            server.kill()
    t = threading.Thread(target=go)
    t.start()
    return t


@pytest.mark.parametrize("kind", ["single", "multipart"])
def test_server_killed_mid_upload_leaves_no_object(s3_check, own_server, tmp_path, kind):
    s = own_server
    src = tmp_path / "x"
    size = (4 << 20) if kind == "single" else (15 << 20)
    write_random(src, size)
    opts = ["--threshold", 5 << 20, "--part-size", 5 << 20, "--max-send", 2 << 20,
            "--max-attempts", 3, "--backoff-ms", 100, "--stall-s", 5]
    env = dict(os.environ, AWS_ACCESS_KEY_ID=s.access, AWS_SECRET_ACCESS_KEY=s.secret)
    start = time.monotonic()
    proc = subprocess.Popen([str(s3_check), "--endpoint", s.endpoint, *map(str, opts),
                             uri("crash"), "put", "ckpt.bin", src], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    t = kill_during(s, proc, 1.0 if kind == "single" else 3.5)
    out, err = proc.communicate(timeout=120)
    t.join()
    elapsed = time.monotonic() - start
    assert proc.returncode == EXIT_TEMPFAIL, f"exit {proc.returncode}\n{err}"
    assert "network error" in err and "(3 attempts)" in err, err
    assert elapsed < 30, elapsed
    # The server comes back over the same data: no object, whole or partial.
    s.start()
    p = run(s3_check, s, uri("crash"), "head", "ckpt.bin")
    assert p.returncode == EXIT_NOTFOUND, p.stderr
    assert ok(run(s3_check, s, uri("crash"), "list")) == ""
    assert not s.backend("crash", "ckpt.bin").exists()
    # A multipart upload's parts outlive the killed server (the abort could
    # not reach it): listed as an unfinished upload, and aborted.
    left = ok(run(s3_check, s, uri("crash"), "uploads")).splitlines()
    if kind == "single":
        assert left == []
    else:
        assert len(left) == 1 and left[0].startswith("ckpt.bin "), left
        ok(run(s3_check, s, uri("crash"), "abort", *left[0].split()))
        assert ok(run(s3_check, s, uri("crash"), "uploads")) == ""
    # And the same upload then succeeds.
    ok(run(s3_check, s, uri("crash"), "put", "ckpt.bin", src, opts=opts[:4]))
    out = ok(run(s3_check, s, uri("crash"), "get", "ckpt.bin", tmp_path / "back"))
    assert out.split()[1] == str(size)
    assert tmp_path.joinpath("back").read_bytes() == src.read_bytes()


def test_source_changing_mid_upload_aborts_the_upload(s3_check, server, tmp_path):
    """The file shrinks under a multipart upload: the client stops, aborts the
    upload while the store is up (no parts left) and nothing is visible."""
    src = tmp_path / "x"
    write_random(src, 15 << 20)
    opts = ["--threshold", 5 << 20, "--part-size", 5 << 20, "--max-send", 2 << 20]
    env = dict(os.environ, AWS_ACCESS_KEY_ID=server.access, AWS_SECRET_ACCESS_KEY=server.secret)
    proc = subprocess.Popen([str(s3_check), "--endpoint", server.endpoint, *map(str, opts),
                             uri("shrink"), "put", "ckpt.bin", src], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        proc.wait(timeout=3.5)
    except subprocess.TimeoutExpired:
        os.truncate(src, 1 << 20)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode != 0, err
    assert "I/O error" in err and "changed during the upload" in err, err
    assert "(1 attempt)" in err  # a local failure is not retried
    assert run(s3_check, server, uri("shrink"), "head", "ckpt.bin").returncode == EXIT_NOTFOUND
    assert ok(run(s3_check, server, uri("shrink"), "uploads")) == ""


def read_range(s3_check, server, u, name, off, length, out, etag=None, opts=()):
    return run(s3_check, server, u, "range", name, off, length, out,
               *([etag] if etag else []), opts=opts)


def test_ranged_reads_into_memory_at_the_bucket_root(s3_check, server, tmp_path):
    """s3_get_range (how the data reader streams a shard) against the real
    server, from a location without a prefix ("s3://ckpt" and "s3://ckpt/":
    names are whole keys): a range in the middle, one that crosses the
    parts of a multipart object, one past the end (what exists), one at and
    one beyond the end (nothing, not an error), an absent object."""
    src = tmp_path / "shard"
    size = 12 * (1 << 20) + 4321  # multipart: parts of 5 MiB, 5 MiB and the rest
    write_random(src, size)
    data = src.read_bytes()
    ok(run(s3_check, server, uri("rng"), "put", "shard.bin", src,
           opts=["--threshold", 5 << 20, "--part-size", 5 << 20]))
    etag = ok(run(s3_check, server, uri("rng"), "head", "shard.bin")).split()[3]
    assert etag.startswith('"') and etag.endswith('-3"'), etag
    out = tmp_path / "out"
    cases = [(1000, 5000), ((5 << 20) - 777, 1 << 20), (0, 64 << 20), (size - 100, 1000),
             (size, 1000), (size + 12345, 10)]
    for root in (f"s3://{BUCKET}", f"s3://{BUCKET}/"):
        for off, length in cases:
            for tag in (None, etag):
                p = read_range(s3_check, server, root, "rng/shard.bin", off, length, out, tag)
                want = data[off:off + length]
                assert ok(p).split() == ["got", str(len(want)), "sha256",
                                         hashlib.sha256(want).hexdigest()], (off, length)
                assert out.read_bytes() == want
                assert attempts(p) == 1, p.stderr
    empty = tmp_path / "empty"
    empty.write_bytes(b"")
    ok(run(s3_check, server, f"s3://{BUCKET}", "put", "rng/empty.bin", empty))
    p = read_range(s3_check, server, f"s3://{BUCKET}", "rng/empty.bin", 0, 10, out)
    assert ok(p).split()[:2] == ["got", "0"]
    p = read_range(s3_check, server, f"s3://{BUCKET}", "rng/absent.bin", 0, 10, out)
    assert p.returncode == EXIT_NOTFOUND, p.stderr
    assert "GET s3://ckpt/rng/absent.bin bytes 0-9: HTTP 404" in p.stderr, p.stderr


def test_ranged_read_of_a_replaced_object_fails_as_changed(s3_check, server, tmp_path):
    """A reader walks an object by its listed ETag; the object is overwritten
    in between: the next range fails on its If-Match (the server's 412),
    CTRAIN_E_DATA (exit 65), never the new bytes mixed in."""
    old, new, out = tmp_path / "old", tmp_path / "new", tmp_path / "out"
    write_random(old, 300_000)
    write_random(new, 300_000)
    ok(run(s3_check, server, uri("chg"), "put", "shard.bin", old))
    etag = ok(run(s3_check, server, uri("chg"), "head", "shard.bin")).split()[3]
    p = read_range(s3_check, server, uri("chg"), "shard.bin", 0, 100_000, out, etag)
    ok(p)
    assert out.read_bytes() == old.read_bytes()[:100_000]
    ok(run(s3_check, server, uri("chg"), "put", "shard.bin", new))
    fresh = ok(run(s3_check, server, uri("chg"), "head", "shard.bin")).split()[3]
    assert fresh != etag
    p = read_range(s3_check, server, uri("chg"), "shard.bin", 100_000, 100_000, out, etag,
                   opts=["--backoff-ms", 1000])
    assert p.returncode == 65, f"exit {p.returncode}\n{p.stderr}"
    assert "GET s3://ckpt/chg/shard.bin bytes 100000-199999: " in p.stderr, p.stderr
    assert "HTTP 412 PreconditionFailed: changed while being read" in p.stderr, p.stderr
    assert attempts(p) == 1 and "retrying" not in p.stderr, p.stderr
    assert out.read_bytes() == b""  # nothing of the new object
    # With the new ETag the read goes on, over the new bytes.
    p = read_range(s3_check, server, uri("chg"), "shard.bin", 100_000, 100_000, out, fresh)
    ok(p)
    assert out.read_bytes() == new.read_bytes()[100_000:200_000]
