"""Helpers of the controller's integration tests (test_controller.py and the modules that
drive ctrain-controller the same way): TrainingJob manifests, waiting, pods of a job, pod
exits written into pod status (no node runs these pods), the kubelet's view of a
container's environment, `kubectl get` tables split into columns, and a fake chief's progress
port."""
import http.server
import json
import re
import threading
import time

from clusterlib import cond as cond  # re-exported: the one is clusterlib's


def job(name, workers=2, chief=False, **spec):
    tmpl = {"spec": {"containers": [{"name": "worker", "image": "ctrain:latest",
                                     "command": ["ctrain-worker"], "args": ["train"]}]}}
    rs = {"Worker": {"replicas": workers, "template": tmpl}}
    if chief:
        rs["Chief"] = {"replicas": 1, "template": tmpl}
    return {"apiVersion": "ctrain.dev/v1alpha1", "kind": "TrainingJob",
            "metadata": {"name": name}, "spec": {"replicaSpecs": rs, **spec}}


def wait_for(fn, timeout=30, what="condition"):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = fn()
        if last:
            return last
        time.sleep(0.25)
    raise AssertionError(f"timed out waiting for {what}; last: {last!r}")


def pods(cluster, ns, name):
    items = cluster.get_json("pods", "-n", ns, "-l", f"ctrain.dev/job-name={name}")["items"]
    return {p["metadata"]["name"]: p for p in items if not p["metadata"].get("deletionTimestamp")}


def gone(cluster, ns, name):
    """No pod of the job left, terminating ones included."""
    return not cluster.get_json("pods", "-n", ns, "-l", f"ctrain.dev/job-name={name}")["items"]


def tj(cluster, ns, name):
    return cluster.get_json("tj", name, "-n", ns)


def set_pod_exit(cluster, ns, pod, code):
    phase = "Succeeded" if code == 0 else "Failed"
    st = {"status": {"phase": phase, "containerStatuses": [{
        "name": "worker", "ready": False, "restartCount": 0, "image": "ctrain:latest",
        "imageID": "", "state": {"terminated": {
            "exitCode": code, "reason": "Completed" if code == 0 else "Error",
            "startedAt": "2026-01-01T00:00:00Z", "finishedAt": "2026-01-01T00:01:00Z"}}}]}}
    cluster.kubectl("patch", "pod", pod, "-n", ns, "--subresource=status", "--type=merge",
                    "-p", json.dumps(st))


def create(cluster, ns, obj):
    cluster.kubectl("apply", "-n", ns, "-f", "-", input=json.dumps(obj))


def kubelet_env(cluster, ns, container):
    """The container's environment as the kubelet makes it (pkg/kubelet
    makeEnvironmentVariables): in list order, a configMapKeyRef read from
    the apiserver, $(VAR) in a value expanded from the variables declared
    before it ($$ is a literal $; an unknown reference stays as written)."""
    env, cms = {}, {}
    for e in container.get("env", []):
        if "value" in e:
            env[e["name"]] = re.sub(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)",
                                    lambda m: "$" if m.group(0) == "$$"
                                    else env.get(m.group(1), m.group(0)), e["value"])
        elif "configMapKeyRef" in e.get("valueFrom", {}):
            ref = e["valueFrom"]["configMapKeyRef"]
            if ref["name"] not in cms:
                cms[ref["name"]] = cluster.get_json("configmap", ref["name"], "-n", ns)
            env[e["name"]] = cms[ref["name"]]["data"][ref["key"]]
    return env


def columns(table):
    """Splits `kubectl get` output into dicts by the header's column offsets
    (empty cells stay empty instead of shifting the row)."""
    lines = table.splitlines()
    header = lines[0]
    names = header.split()
    starts = [header.index(n) for n in names]
    rows = []
    for line in lines[1:]:
        cells = [line[a:b].strip() for a, b in zip(starts, starts[1:] + [None])]
        rows.append(dict(zip(names, cells)))
    return names, rows


class FakeChief:
    """A chief's progress port on 127.0.0.1: GET /progress answers `answer`
    (JSON) or `code`; records each Authorization header."""

    def __init__(self):
        self.answer = {}
        self.code = 200
        self.auth = []
        fake = self

        class H(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                fake.auth.append(self.headers.get("Authorization"))
                body = json.dumps(fake.answer).encode() if fake.code == 200 else b"no"
                self.send_response(fake.code if self.path == "/progress" else 404)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *a):
                pass

        self.srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.port = self.srv.server_address[1]
        threading.Thread(target=self.srv.serve_forever, daemon=True).start()

    def close(self):
        self.srv.shutdown()
        self.srv.server_close()
