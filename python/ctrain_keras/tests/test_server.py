#!/usr/bin/env python3
"""Tests of the limits of ctrain_keras.Progress's HTTP server:
those of the C worker's (include/common/ctrain/httpd.h). TensorFlow is not
needed: with it (the venv of test_progress.py) the callback runs on it;
without it, the server's process stands a module in for TensorFlow (the
server uses none of it). Any Python 3.9+ on Linux (threads and descriptors
are counted in /proc):

  python3 python/ctrain_keras/tests/test_server.py
  python3 -m pytest python/ctrain_keras/tests/test_server.py

1. 300 idle connections to a Progress's server: its /progress is answered
   while they are held, within the controller's 2 s; its process starts no
   thread for them and never holds more than 256 of them (its descriptors),
   and within 15 s the server has closed all 300;
2. a request head over 16 KiB is answered 431 (and read: no reset); one of
   8 KiB is answered;
3. the answers are those of before (codes, auth, JSON fields, /metrics);
4. Progress(request_timeout=, max_connections=) reach the server;
5. the server itself, with short limits: a full table sheds the oldest idle
   connection for a request; a head sent a byte at a time is dropped at the
   deadline; 300 idle connections with a 1 s timeout and 16 connections; a
   thread holding the GIL (the training) does not keep /progress unanswered.
"""

import hashlib
import hmac
import importlib.util
import json
import os
import pathlib
import selectors
import socket
import subprocess
import sys
import threading
import time

HERE = pathlib.Path(__file__).resolve()
PKG = HERE.parents[1]
BEARER = hmac.new(b"job-secret", b"ctrain-progress-read", hashlib.sha256).hexdigest()
C_FIELDS = [
    "state",
    "rank",
    "epoch",
    "epochs",
    "step",
    "steps_per_epoch",
    "global_step",
    "replicas_in_sync",
    "workers",
    "samples_per_sec",
    "loss",
    "accuracy",
    "val_loss",
    "val_accuracy",
    "step_ms",
    "median_ms",
    "slowest_ratio",
    "slowest_rank",
    "worker_ms",
    "backup_step",
]


def load_server():
    """ctrain_keras/_server.py without the package (whose __init__ imports TF)."""
    spec = importlib.util.spec_from_file_location(
        "ctrain_keras_server", PKG / "ctrain_keras" / "_server.py"
    )
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def request(port, head, timeout=10):
    """Sends head (bytes), reads to the end: (status, {header: value}, body)."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(head)
        data = b""
        while True:
            got = s.recv(65536)
            if not got:
                break
            data += got
    top, _, body = data.partition(b"\r\n\r\n")
    lines = top.decode("latin-1").split("\r\n")
    hdrs = dict(line.split(": ", 1) for line in lines[1:] if ": " in line)
    return int(lines[0].split()[1]), hdrs, body.decode()


def get(port, path, bearer=None, extra=b""):
    auth = f"Authorization: Bearer {bearer}\r\n".encode() if bearer else b""
    return request(port, f"GET {path} HTTP/1.1\r\nHost: x\r\n".encode() + auth + extra + b"\r\n")


def threads(pid):
    with open(f"/proc/{pid}/status") as f:
        return int(next(line for line in f if line.startswith("Threads:")).split()[1])


def fds(pid):
    return len(os.listdir(f"/proc/{pid}/fd"))


def open_idle(port, n):
    return [socket.create_connection(("127.0.0.1", port), timeout=5) for _ in range(n)]


def wait_closed(socks, within):
    """Waits until the server has closed every socket (EOF or reset);
    returns how many are still open at `within` seconds."""
    sel, open_ = selectors.DefaultSelector(), set(socks)
    for s in socks:
        s.setblocking(False)
        sel.register(s, selectors.EVENT_READ)
    until = time.monotonic() + within
    while open_ and time.monotonic() < until:
        for key, _ in sel.select(timeout=0.2):
            try:
                if key.fileobj.recv(4096):
                    continue
            except BlockingIOError:
                continue
            except OSError:
                pass
            sel.unregister(key.fileobj)
            open_.discard(key.fileobj)
    sel.close()
    return len(open_)


class Progress:
    """A process whose ctrain_keras.Progress serves on a free port, as the
    chief of a one-worker job (the `serve` mode at the end of this file)."""

    def __init__(self, **kwargs):
        env = dict(
            os.environ,
            CTRAIN_PROGRESS_PORT=str(free_port()),
            CTRAIN_JOB_TOKEN="job-secret",
            TF_USE_LEGACY_KERAS="1",
            TF_CPP_MIN_LOG_LEVEL="2",
        )
        env.pop("TF_CONFIG", None)
        self.p = subprocess.Popen(
            [sys.executable, str(HERE), "serve", json.dumps(kwargs)],
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        line = self.p.stdout.readline()
        assert line, "the Progress process ended before serving"
        self.info = json.loads(line)
        self.port, self.pid = self.info["port"], self.p.pid

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.p.stdin.close()
        self.p.wait(timeout=30)


def serve_main(kwargs):
    sys.path.insert(0, str(PKG))
    try:
        import tensorflow  # noqa: F401
    except ImportError:  # the server uses no TensorFlow: the callback's base class will do
        import types

        tf = types.ModuleType("tensorflow")
        tf.keras = types.SimpleNamespace(callbacks=types.SimpleNamespace(Callback=object))
        sys.modules["tensorflow"] = tf
    import ctrain_keras

    p = ctrain_keras.Progress(**kwargs)
    port = p.start()
    s = p.server
    info = {"port": port, "server": f"{type(s).__module__}.{type(s).__name__}"}
    for k in ("max_connections", "request_timeout", "head_max"):
        info[k] = getattr(s, k, None)
    print(json.dumps(info), flush=True)
    sys.stdin.read()  # until the test closes it


# ---- through ctrain_keras.Progress (its defaults: 256 connections, 2 s) -----


def test_idle_flood_bounded():
    with Progress() as srv:
        base_threads, base_fds = threads(srv.pid), fds(srv.pid)
        peak, stop = [(base_threads, base_fds)], threading.Event()

        def sample():
            while not stop.is_set():
                peak.append((threads(srv.pid), fds(srv.pid)))
                time.sleep(0.02)

        sampler = threading.Thread(target=sample)
        sampler.start()
        try:
            idle = open_idle(srv.port, 300)
            t0 = time.monotonic()
            code, _, body = get(srv.port, "/progress", BEARER)
            answered = time.monotonic() - t0
            assert code == 200 and json.loads(body)["state"] == "Starting", (code, body)
            assert answered < 2, f"/progress took {answered:.2f} s behind 300 idle connections"
            left = wait_closed(idle, 15)
            t_closed = time.monotonic() - t0
            time.sleep(0.3)
            after = threads(srv.pid), fds(srv.pid)
        finally:
            stop.set()
            sampler.join()
        most = max(t for t, _ in peak), max(f for _, f in peak)
        print(
            f"300 idle: /progress answered in {answered * 1000:.0f} ms; threads {base_threads} "
            f"before, {most[0]} at most, {after[0]} after; descriptors {base_fds} before, "
            f"{most[1]} at most, {after[1]} after; closed by the server within {t_closed:.1f} s "
            f"({left} left open)"
        )
        assert left == 0, f"{left} of 300 idle connections still open after 15 s"
        assert most[0] <= base_threads and after[0] <= base_threads, (base_threads, most, after)
        # + 1: a new connection is accepted before the one it replaces is closed
        assert most[1] <= base_fds + 256 + 1 and after[1] <= base_fds, (base_fds, most, after)


def test_long_head_431():
    pad = b"".join(b"X-Pad-%02d: %s\r\n" % (i, b"a" * 1012) for i in range(32))  # 32 KiB
    with Progress() as srv:
        code, _, body = get(srv.port, "/progress", BEARER, pad)
        assert (code, body) == (431, "too large\n"), (code, body)
        code, _, body = get(srv.port, "/progress", BEARER, pad[: 8 * 1024])  # 8 lines
        assert code == 200 and json.loads(body)["rank"] == 0, (code, body)


def test_answers_unchanged():
    with Progress() as srv:
        assert srv.info["server"] == "ctrain_keras._server.Server", srv.info
        code, _, body = get(srv.port, "/progress", BEARER)
        assert code == 200 and list(json.loads(body)) == C_FIELDS, (code, body)
        code, hdrs, _ = get(srv.port, "/progress")
        assert code == 401 and hdrs["WWW-Authenticate"] == "Bearer", (code, hdrs)
        assert get(srv.port, "/metrics", "0" * 64)[0] == 401
        code, hdrs, body = get(srv.port, "/metrics?x=1", BEARER)
        assert code == 200 and "ctrain_worker_step 0\n" in body, (code, body)
        assert hdrs["Content-Type"] == "text/plain; version=0.0.4; charset=utf-8", hdrs
        assert get(srv.port, "/healthz")[::2] == (200, "ok\n")
        assert get(srv.port, "/nope", BEARER)[0] == 404
        assert request(srv.port, b"POST /progress HTTP/1.1\r\n\r\n")[0] == 501
        with socket.create_connection(("127.0.0.1", srv.port), timeout=10) as s:
            s.sendall(b"GET / BOGUS/1.0\r\n\r\n")  # http.server: no status line, an HTML 400
            assert b"Error code: 400" in s.recv(4096)


def test_progress_limits_configurable():
    with Progress(request_timeout=1.5, max_connections=8) as srv:
        assert (srv.info["max_connections"], srv.info["request_timeout"]) == (8, 1.5), srv.info
        assert srv.info["head_max"] == 16384, srv.info


# ---- the server alone, with short limits ------------------------------------


class Server:
    def __init__(self, **limits):
        mod = load_server()

        class Handler(mod.Handler):
            def do_GET(self):
                self._send(200, "ok\n")

        self.s = mod.Server(("127.0.0.1", 0), Handler, **limits)
        self.port = self.s.server_port
        self.t = threading.Thread(target=self.s.serve_forever, daemon=True)
        self.t.start()
        self.threads = threading.active_count()  # with the server's

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.s.shutdown()
        self.s.server_close()
        self.t.join()


def test_full_table_sheds_oldest_idle():
    with Server(max_connections=4, request_timeout=30) as srv:
        idle = open_idle(srv.port, 4)
        time.sleep(0.2)  # past the grace time
        t0 = time.monotonic()
        assert get(srv.port, "/x")[::2] == (200, "ok\n")
        assert time.monotonic() - t0 < 2
        assert wait_closed(idle[:1], 2) == 0, "the oldest idle connection was not shed"
        assert wait_closed(idle[1:], 0.5) == 3, "a younger idle connection was shed"
        assert srv.s.shed == 1 and srv.s.connections() <= 4
        for s in idle:
            s.close()


def test_slow_head_dropped_at_deadline():
    with Server(request_timeout=1.0) as srv:
        s = socket.create_connection(("127.0.0.1", srv.port), timeout=5)
        t0, closed = time.monotonic(), False
        try:
            for c in b"GET /x HTTP/1.1\r\nHost: " + b"x" * 100:  # a byte every 0.1 s
                s.sendall(bytes([c]))
                time.sleep(0.1)
        except OSError:
            closed = True
        if not closed:
            s.settimeout(5)
            closed = s.recv(1) == b""
        took = time.monotonic() - t0
        s.close()
        assert closed and 0.9 < took < 3, (closed, took)


def test_idle_flood_short_timeout():
    with Server(max_connections=16, request_timeout=1.0) as srv:
        peak, stop = [(0, 0)], threading.Event()

        def sample():
            while not stop.is_set():
                peak.append((threading.active_count(), srv.s.connections()))
                time.sleep(0.01)

        sampler = threading.Thread(target=sample)
        sampler.start()
        try:
            idle = open_idle(srv.port, 300)
            t0 = time.monotonic()
            assert get(srv.port, "/x")[::2] == (200, "ok\n")
            answered = time.monotonic() - t0
            left = wait_closed(idle, 10)
        finally:
            stop.set()
            sampler.join()
        threads, conns = max(t for t, _ in peak) - 1, max(c for _, c in peak)  # - the sampler
        assert left == 0 and conns <= 16 and threads <= srv.threads, (left, conns, threads)
        # 50 ms per 16 idle connections ahead of it in the backlog (the grace time)
        assert answered < 5 and srv.s.connections() == 0, (answered, srv.s.connections())
        print(
            f"300 idle, 16 connections, 1 s: answered in {answered * 1000:.0f} ms, shed {srv.s.shed}"
        )


def test_answered_while_gil_held():
    stop = threading.Event()

    def train():  # pure Python: holds the GIL but every switch interval (5 ms)
        while not stop.is_set():
            sum(range(1000))

    hog = threading.Thread(target=train)
    hog.start()
    try:
        with Server() as srv:
            idle = open_idle(srv.port, 300)
            t0 = time.monotonic()
            assert get(srv.port, "/x")[::2] == (200, "ok\n")
            answered = time.monotonic() - t0
            assert answered < 2, f"answered in {answered:.2f} s with the GIL busy"
            assert srv.s.connections() <= 256
            for s in idle:
                s.close()
    finally:
        stop.set()
        hog.join()
    print(f"300 idle, the GIL busy: answered in {answered * 1000:.0f} ms")


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "serve":
        serve_main(json.loads(sys.argv[2]))
        sys.exit(0)
    for t in (
        test_idle_flood_bounded,
        test_long_head_431,
        test_answers_unchanged,
        test_progress_limits_configurable,
        test_full_table_sheds_oldest_idle,
        test_slow_head_dropped_at_deadline,
        test_idle_flood_short_timeout,
        test_answered_while_gil_held,
    ):
        t()
        print(f"ok - {t.__name__}", flush=True)
