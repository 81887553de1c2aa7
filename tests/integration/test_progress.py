"""The progress port and the termination message, on real worker processes.

No Kubernetes: 2 `ctrain-worker train` processes on loopback (TF_CONFIG and
CTRAIN_JOB_TOKEN as in test_worker_multiproc.py), each with --progress-port.
Checks: /progress on the chief advances (epoch, step, global step) while
training runs; /progress and /metrics without (or with a wrong) bearer get
401; the read token is HMAC-SHA256(job token, "ctrain-progress-read"); the
non-chief serves only /metrics; neither token appears in either worker's
output; the chief's termination log holds the final metrics its metrics
file and log line report (and, after a lost peer, the state Failed and the
error); without a job token the port stays closed and training succeeds.
"""
import hashlib
import hmac
import json
import os
import signal
import subprocess
import time
import urllib.error
import urllib.request

import pytest

from workerlib import DATA, MODEL, WORKER, free_ports, log_of, tf_config

pytestmark = pytest.mark.skipif(not WORKER.exists(), reason=f"{WORKER} not built")

TOKEN = "tok-progress-7f3a9c51e2"
READ = hmac.new(TOKEN.encode(), b"ctrain-progress-read", hashlib.sha256).hexdigest()


def start(tmp_path, ports, pports, rank, *extra, epochs=2, token=TOKEN):
    ttype, index = ("chief", 0) if rank == 0 else ("worker", rank - 1)
    env = dict(os.environ, TF_CONFIG=tf_config(ports, ttype, index),
               CTRAIN_JOB_NAME="ptest", CTRAIN_ATTEMPT="0")
    env.pop("CTRAIN_PROGRESS_PORT", None)
    if token is not None:
        env["CTRAIN_JOB_TOKEN"] = token
    else:
        env.pop("CTRAIN_JOB_TOKEN", None)
    args = [str(WORKER), "train", "--model", str(MODEL), "--data", str(DATA / "train"),
            "--test-data", str(DATA / "t10k"), "--epochs", str(epochs), "--batch", "32",
            "--output", str(tmp_path / "out"), "--metrics", str(tmp_path / f"m{rank}.jsonl"),
            "--rendezvous-timeout", "30", "--peer-timeout", "3",
            "--progress-port", str(pports[rank]),
            "--termination-log", str(tmp_path / f"term{rank}.json"), *extra]
    log = open(tmp_path / f"rank{rank}.log", "w")
    return subprocess.Popen(args, env=env, stdout=log, stderr=subprocess.STDOUT)


def get(port, path, token=READ):
    """(status, body) of GET http://127.0.0.1:port/path; token None: no header."""
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}")
    if token is not None:
        req.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(req, timeout=5) as r:
            return r.status, r.read().decode(), dict(r.headers)
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode(), dict(e.headers)


def wait_up(port, procs, tmp_path, timeout=30):
    deadline = time.time() + timeout
    while True:
        try:
            if get(port, "/healthz", None)[0] == 200:
                return
        except OSError:
            pass
        assert time.time() < deadline, [log_of(tmp_path, r) for r in range(len(procs))]
        assert all(p.poll() is None for p in procs), [log_of(tmp_path, r) for r in range(2)]
        time.sleep(0.05)


def test_progress_advances_auth_and_termination_log(tmp_path):
    ports, pports = free_ports(2), free_ports(2)
    procs = [start(tmp_path, ports, pports, r) for r in range(2)]
    try:
        wait_up(pports[0], procs, tmp_path)
        wait_up(pports[1], procs, tmp_path)
        # Unauthenticated, wrong bearer, the job token itself: 401 everywhere.
        for port, path in [(pports[0], "/progress"), (pports[0], "/metrics"),
                           (pports[1], "/metrics")]:
            for tok in (None, "0" * 64, TOKEN):
                code, body, headers = get(port, path, tok)
                assert code == 401, (port, path, tok, code, body)
                assert headers.get("WWW-Authenticate", "").startswith("Bearer"), headers
                assert "epoch" not in body
        assert get(pports[1], "/progress")[0] == 404  # the chief's alone
        seen, spe, worker_metrics = [], set(), None
        while procs[0].poll() is None:
            try:
                code, body, headers = get(pports[0], "/progress")
            except OSError:  # the chief finished between poll() and the request
                break
            assert code == 200, body
            assert headers["Content-Type"] == "application/json"
            p = json.loads(body)
            if p["state"] == "Training":
                seen.append((p["epoch"], p["step"], p["global_step"]))
                spe.add(p["steps_per_epoch"])
                if worker_metrics is None:  # worker 1's own, while it trains
                    worker_metrics = get(pports[1], "/metrics")
                assert p["replicas_in_sync"] == 2 and p["workers"] == 2, p
                assert p["steps_per_epoch"] > 0 and p["epochs"] == 2, p
                assert 0 < p["step"] <= p["steps_per_epoch"], p
                assert p["samples_per_sec"] is None or p["samples_per_sec"] > 0, p
                assert 0 <= p["accuracy"] <= 1 and p["loss"] > 0, p
                if p["epoch"] == 2:
                    # The first epoch's straggler numbers and evaluation.
                    assert len(p["worker_ms"]) == 2 and p["slowest_rank"] in (0, 1), p
                    assert p["slowest_ratio"] >= 1.0 and p["median_ms"] > 0, p
                    assert 0 < p["val_accuracy"] <= 1, p
            time.sleep(0.1)
        codes = [p.wait(timeout=120) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    logs = [log_of(tmp_path, r) for r in range(2)]
    assert codes == [0, 0], "\n".join(logs)
    # Epoch and step advanced while we watched.
    assert len(seen) >= 3, seen
    assert len(spe) == 1, spe
    spe = sorted(spe)
    assert seen == sorted(seen), seen
    assert len({s[2] for s in seen}) >= 3, seen
    assert {s[0] for s in seen} == {1, 2}, seen
    code, text, headers = worker_metrics
    assert code == 200 and headers["Content-Type"].startswith("text/plain"), text
    assert "\nctrain_worker_rank 1\n" in text, text
    assert "# TYPE ctrain_worker_step_seconds gauge\n" in text, text
    assert "\nctrain_worker_replicas_in_sync 2\n" in text, text
    # No token, job or read, in anything either worker printed.
    for r, text in enumerate(logs):
        assert TOKEN not in text, f"rank {r} printed the job token"
        assert READ not in text, f"rank {r} printed the read token"
        assert f"progress port {pports[r]}" in text, text
    # The termination message: the chief's final numbers, as its metrics file
    # and its last log line give them.
    raw = (tmp_path / "term0.json").read_bytes()
    assert len(raw) < 4096
    term = json.loads(raw)
    last = json.loads((tmp_path / "m0.jsonl").read_text().splitlines()[-1])
    assert term["state"] == "Succeeded", term
    for k in ("loss", "accuracy", "val_loss", "val_accuracy"):
        assert term[k] == pytest.approx(last[k], abs=1e-6), (k, term, last)
    assert term["samples_per_sec"] == pytest.approx(last["samples_per_sec"], abs=0.1)
    assert term["epochs"] == 2 and term["replicas_in_sync"] == 2, term
    assert term["steps"] == 2 * spe[0] and seen[-1][2] <= term["steps"], (term, spe, seen[-1])
    assert term["model"] == str(tmp_path / "out"), term
    assert "error" not in term, term
    assert f"test accuracy: {term['val_accuracy']:.4f}" in logs[0], logs[0]
    assert not (tmp_path / "term1.json").exists()  # the chief's alone


def test_lost_peer_termination_log_says_failed(tmp_path):
    ports, pports = free_ports(2), free_ports(2)
    procs = [start(tmp_path, ports, pports, r, epochs=50) for r in range(2)]
    try:
        wait_up(pports[0], procs, tmp_path)
        deadline = time.time() + 60
        while True:
            p = json.loads(get(pports[0], "/progress")[1])
            if p["global_step"] >= 10:
                break
            assert time.time() < deadline, p
            time.sleep(0.1)
        procs[1].send_signal(signal.SIGKILL)
        assert procs[0].wait(timeout=30) == 75, log_of(tmp_path, 0)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    term = json.loads((tmp_path / "term0.json").read_text())
    assert term["state"] == "Failed", term
    assert term["model"] is None, term
    assert "rank 1" in term["error"], term
    assert term["steps"] >= 10 and term["replicas_in_sync"] == 2, term
    assert TOKEN not in log_of(tmp_path, 0) and READ not in log_of(tmp_path, 0)


def test_no_job_token_keeps_the_port_closed(tmp_path):
    # One worker needs no token to train; without one the port cannot
    # authenticate anyone, so it stays closed and training goes on.
    (pport,) = free_ports(1)
    env = dict(os.environ)
    for k in ("TF_CONFIG", "CTRAIN_JOB_TOKEN", "CTRAIN_PROGRESS_PORT"):
        env.pop(k, None)
    args = [str(WORKER), "train", "--model", str(MODEL), "--data", str(DATA / "train"),
            "--epochs", "1", "--batch", "64", "--progress-port", str(pport),
            "--termination-log", str(tmp_path / "term.json")]
    proc = subprocess.Popen(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)
    refused = False
    deadline = time.time() + 60
    while proc.poll() is None and time.time() < deadline:
        try:
            get(pport, "/healthz", None)
            pytest.fail("the progress port answered without a job token")
        except OSError:
            refused = True
        time.sleep(0.2)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0, out
    assert refused
    assert "CTRAIN_JOB_TOKEN is not set" in out and "stays closed" in out, out
    term = json.loads((tmp_path / "term.json").read_text())
    assert term["state"] == "Succeeded" and term["epochs"] == 1 and term["model"] is None, term


def test_bad_data_termination_log_says_failed_with_the_error(tmp_path):
    # A permanent failure before training: the chief still reports, with
    # nothing measured (nulls) and the error.
    bad = tmp_path / "bad-images-idx3-ubyte"
    bad.write_bytes(b"\x00\x00\x08\x03garbage")
    env = dict(os.environ)
    for k in ("TF_CONFIG", "CTRAIN_JOB_TOKEN", "CTRAIN_PROGRESS_PORT"):
        env.pop(k, None)
    proc = subprocess.run([str(WORKER), "train", "--model", str(MODEL), "--data", str(bad),
                           "--termination-log", str(tmp_path / "term.json")],
                          env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          timeout=60)
    assert proc.returncode == 65, proc.stdout
    term = json.loads((tmp_path / "term.json").read_text())
    assert term["state"] == "Failed" and term["model"] is None, term
    assert term["loss"] is None and term["accuracy"] is None and term["steps"] == 0, term
    assert str(bad) in term["error"], term
    assert term["error"] in proc.stdout, (term, proc.stdout)
