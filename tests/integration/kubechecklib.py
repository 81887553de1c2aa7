"""Helpers of the C Kubernetes client's integration tests (test_kube_client.py,
test_kube_informer.py, test_kube_lease.py, test_kube_bench.py; the apiserver restart also
tests/e2e/test_e2e.py): build/tests/integration/kubeclient_check (a small C program that makes
the calls and checks its own expectations, "ok ..." lines then PASS; the `kubeclient_check`
fixture of conftest.py), run once or as an interactive informer session read line by line,
and what the local control plane lets a test do to it: compact etcd, restart the
kube-apiserver."""
import json
import os
import pathlib
import queue
import re
import signal
import subprocess
import threading
import time

from clusterlib import BUILD

CHECK = BUILD / "tests/integration/kubeclient_check"


def run_check(cluster, check, *args, kubeconfig=None, timeout=300):
    env = dict(cluster.env)
    if kubeconfig:
        env["KUBECONFIG"] = str(kubeconfig)
    p = subprocess.run([str(check), *map(str, args)], env=env, capture_output=True, text=True,
                       timeout=timeout)
    values = {}
    for line in p.stdout.splitlines():
        k, sep, v = line.partition("=")
        if sep and " " not in k:
            values[k] = v
    return p, values


def assert_pass(p):
    assert p.returncode == 0 and p.stdout.rstrip().endswith("PASS"), \
        f"exit {p.returncode}\n{p.stdout}\n{p.stderr[-3000:]}"


class Session:
    """kubeclient_check informer NS, read line by line."""

    def __init__(self, cluster, check, ns):
        self.p = subprocess.Popen([str(check), "informer", ns], env=cluster.env,
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True, bufsize=1)
        self.lines = queue.Queue()
        self.seen = []
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self):
        for line in self.p.stdout:
            self.lines.put(line.rstrip("\n"))
        self.lines.put(None)

    def expect(self, pattern, timeout=30):
        deadline = time.monotonic() + timeout
        rx = re.compile(pattern)
        for line in self.seen:
            if rx.fullmatch(line):
                self.seen.remove(line)
                return line
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"no line matching {pattern!r} within {timeout}s; "
                                     f"unmatched: {self.seen[-20:]}")
            try:
                line = self.lines.get(timeout=left)
            except queue.Empty:
                continue
            if line is None:
                raise AssertionError(f"informer exited waiting for {pattern!r}: "
                                     f"{self.p.stderr.read()[-2000:]}")
            if rx.fullmatch(line):
                return line
            self.seen.append(line)

    def send(self, cmd):
        self.p.stdin.write(cmd + "\n")
        self.p.stdin.flush()

    def close(self):
        if self.p.poll() is None:
            try:
                self.send("quit")
                self.p.wait(timeout=10)
            except (BrokenPipeError, subprocess.TimeoutExpired):
                self.p.kill()
                self.p.wait()


def compact_etcd(state_dir):
    """Compacts the local control plane's etcd at its current revision (through
    etcd's JSON gateway) and returns that revision."""
    import urllib.request
    ports = dict(line.split("=") for line in
                 (pathlib.Path(state_dir) / "ports").read_text().split())
    etcd = f"http://127.0.0.1:{ports['ETCD_PORT']}"

    def post(path, body):
        req = urllib.request.Request(etcd + path, data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=30) as r:
            return json.loads(r.read())

    rev = post("/v3/kv/range", {"key": "AA=="})["header"]["revision"]
    post("/v3/kv/compaction", {"revision": rev, "physical": True})
    return int(rev)


def restart_apiserver(state):
    """SIGKILLs the cluster's kube-apiserver and starts it again with the same
    command line, recording the new pid where `cluster.sh down` finds it."""
    pidfile = pathlib.Path(state) / "pids" / "kube-apiserver"
    pid = int(pidfile.read_text())
    argv = pathlib.Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[:-1]
    os.kill(pid, signal.SIGKILL)
    for _ in range(100):
        if not pathlib.Path(f"/proc/{pid}").exists():
            break
        time.sleep(0.1)
    time.sleep(2)  # the informer sees the connection die and backs off
    log = open(pathlib.Path(state) / "logs" / "kube-apiserver.restarted.log", "w")
    p = subprocess.Popen(argv, stdout=log, stderr=log, stdin=subprocess.DEVNULL,
                         start_new_session=True)
    pidfile.write_text(str(p.pid))
    return p
