"""The C informer (list+watch cache) against a real kube-apiserver: initial
sync, add/update/delete handlers, the owner-UID index, prompt stop, and
convergence after the kube-apiserver is killed and restarted mid-watch."""
import json
import os
import pathlib
import queue
import re
import signal
import subprocess
import tempfile
import threading
import time

import pytest

from conftest import ROOT, Cluster, _local_kubectl
from test_kube_client import CHECK, check_bin, compact_etcd, run_check  # noqa: F401

LABEL = {"ctrain.dev/it": "kubeclient"}


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


def cm(name, owner=None):
    md = {"name": name, "labels": LABEL}
    if owner:
        md["ownerReferences"] = [{"apiVersion": "v1", "kind": "ConfigMap", "name": owner[0],
                                  "uid": owner[1]}]
    return json.dumps({"apiVersion": "v1", "kind": "ConfigMap", "metadata": md,
                       "data": {"k": "v"}})


def create(cluster, ns, body):
    out = cluster.kubectl("create", "-n", ns, "-f", "-", "-o", "json", input=body).stdout
    return json.loads(out)["metadata"]["uid"]


def test_informer_sync_handlers_owner_index(cluster, check_bin, namespace):
    ns = namespace
    create(cluster, ns, cm("pre"))
    s = Session(cluster, check_bin, ns)
    try:
        s.expect(rf"event add {ns}/pre \d+")
        s.expect("synced")
        owner = create(cluster, ns, cm("owner"))
        create(cluster, ns, cm("child1", ("owner", owner)))
        create(cluster, ns, cm("child2", ("owner", owner)))
        for n in ("owner", "child1", "child2"):
            s.expect(rf"event add {ns}/{n} \d+")
        s.send(f"owner {owner}")
        s.expect(f"owned {ns}/child1,{ns}/child2")
        cluster.kubectl("annotate", "-n", ns, "configmap", "child1", "touched=yes")
        s.expect(rf"event update {ns}/child1 \d+")
        cluster.kubectl("delete", "-n", ns, "configmap", "child2")
        s.expect(rf"event delete {ns}/child2 \d+")
        s.send("dump")
        s.expect(f"cache {ns}/child1,{ns}/owner,{ns}/pre")
        s.expect(r"stats lists=1 events=\d+ synced=1")
        s.send(f"owner {owner}")
        s.expect(f"owned {ns}/child1")
        s.send("quit")
        line = s.expect(r"stopped_in_s=[\d.]+")
        assert float(line.split("=")[1]) < 1.0, line  # the open watch is cancelled at once
        s.expect("PASS")
    finally:
        s.close()


def _restart_apiserver(state):
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


@pytest.mark.skipif(os.environ.get("CTRAIN_TEST_USE_KUBECONFIG") == "1",
                    reason="needs the local control plane's process control")
def test_informer_converges_after_apiserver_restart_and_410_after_compaction(check_bin):
    script = ROOT / "tools/localcluster/cluster.sh"
    state = tempfile.mkdtemp(prefix="ctrain-it-restart-")
    up = subprocess.run(["bash", str(script), "up", "--dir", state], capture_output=True,
                        text=True, timeout=600)
    assert up.returncode == 0, up.stderr[-3000:]
    s = None
    try:
        c = Cluster(pathlib.Path(state) / "kubeconfig", _local_kubectl(), state)
        ns = "restart"
        c.kubectl("create", "namespace", ns)
        create(c, ns, cm("a"))
        create(c, ns, cm("b"))
        s = Session(c, check_bin, ns)
        s.expect("synced")
        _restart_apiserver(state)
        deadline = time.monotonic() + 120
        while c.kubectl("get", "--raw", "/readyz", check=False).returncode != 0:
            assert time.monotonic() < deadline, "kube-apiserver did not come back"
            time.sleep(0.5)
        # Changes right after the restart, while the informer may still be
        # backing off: it must converge on them either through the resumed
        # watch or through a relist (410 from the new watch cache).
        c.kubectl("delete", "-n", ns, "configmap", "a")
        create(c, ns, cm("c"))
        s.expect(rf"event delete {ns}/a \d+", timeout=90)
        s.expect(rf"event add {ns}/c \d+", timeout=90)
        s.send("dump")
        s.expect(f"cache {ns}/b,{ns}/c")
        line = s.expect(r"stats lists=\d+ events=\d+ synced=1")
        print("after apiserver restart:", line)
        s.send("quit")
        s.expect("PASS")

        # 410 Gone for real: compact etcd past every version so far and restart
        # the apiserver (its new watch cache starts after the compaction); a
        # watch from version 1 then gets 410, relists (b and c: nothing lost)
        # and resumes.
        compact_etcd(state)
        _restart_apiserver(state)
        deadline = time.monotonic() + 120
        while c.kubectl("get", "--raw", "/readyz", check=False).returncode != 0:
            assert time.monotonic() < deadline, "kube-apiserver did not come back"
            time.sleep(0.5)
        p, v = run_check(c, check_bin, "gone", ns, "1", 2)
        assert p.returncode == 0 and p.stdout.rstrip().endswith("PASS"), p.stdout + p.stderr
        assert v["relist_items"] == "2"
        assert "resourceVersion too old (410)" in p.stderr
    finally:
        if s:
            s.close()
        subprocess.run(["bash", str(script), "down", "--dir", state], capture_output=True,
                       text=True, timeout=120)
