"""The whole system as a user drives it: the local control plane, the
controller (ServiceAccount token, manifests/ RBAC), ctrain-localnode running
the pods as processes, and `kubectl apply -f examples/fashion-mnist.yaml` +
`kubectl wait` -- to a trained model on the shared claim, also when a worker
is killed on the way."""
import json
import os
import pathlib
import re
import signal
import sys
import time
import uuid

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "integration"))
from test_localnode import BIN as LOCALNODE, Node  # noqa: E402

pytestmark = [
    pytest.mark.skipif(os.geteuid() != 0, reason="localnode needs root (netns, mounts)"),
    pytest.mark.skipif(os.environ.get("CTRAIN_TEST_USE_KUBECONFIG") == "1",
                       reason="needs localnode's process control"),
    pytest.mark.skipif(not LOCALNODE.exists(), reason=f"{LOCALNODE} not built"),
]


@pytest.fixture(scope="module")
def node(cluster):
    n = Node(cluster)
    n.start()
    try:
        deadline = time.time() + 60
        while cluster.kubectl("get", "node", n.name, check=False).returncode != 0:
            assert n.proc.poll() is None and time.time() < deadline, n.log()[-3000:]
            time.sleep(0.5)
        cluster.kubectl("wait", "--for=condition=Ready", f"node/{n.name}", "--timeout=60s")
        yield n
    finally:
        n.stop()
        cluster.kubectl("delete", "node", n.name, "--wait=false", check=False)


def example_docs(epochs=None, model_json=None):
    import yaml
    docs = list(yaml.safe_load_all(open(ROOT / "examples/fashion-mnist.yaml")))
    for d in docs:
        if d["kind"] == "TrainingJob" and epochs:
            c = d["spec"]["replicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]
            c["args"] = [f"--epochs={epochs}" if a.startswith("--epochs=") else a
                         for a in c["args"]]
        if d["kind"] == "ConfigMap" and model_json is not None:
            d["data"]["model.json"] = model_json
    return docs


def apply_example(cluster, ns, epochs=None, model_json=None):
    """The example as a user applies it (optionally with fewer epochs or
    another model config), plus a PV pre-bound to its claim (the local
    cluster has no provisioner)."""
    pv = {"apiVersion": "v1", "kind": "PersistentVolume",
          "metadata": {"name": f"e2e-{ns}"},
          "spec": {"capacity": {"storage": "10Gi"}, "accessModes": ["ReadWriteMany"],
                   "persistentVolumeReclaimPolicy": "Delete",
                   "hostPath": {"path": f"/tmp/ctrain-e2e-pv-{ns}"},
                   "claimRef": {"namespace": ns, "name": "ctrain-checkpoints"}}}
    cluster.kubectl("apply", "-f", "-", input=json.dumps(pv))
    if epochs is None and model_json is None:
        cluster.kubectl("apply", "-n", ns, "-f", str(ROOT / "examples/fashion-mnist.yaml"))
    else:
        cluster.kubectl("apply", "-n", ns, "-f", "-",
                        input=json.dumps({"apiVersion": "v1", "kind": "List",
                                          "items": example_docs(epochs, model_json)}))


UNBROKEN = {}  # the unbroken run's final accuracy, for the fault test


def claim_dir(node, ns):
    return node.state / "pvc" / ns / "ctrain-checkpoints"


def worker_pids(ns, index):
    """PIDs of ctrain-worker processes of this namespace's job, worker `index`."""
    pids = []
    for p in pathlib.Path("/proc").iterdir():
        if not p.name.isdigit():
            continue
        try:
            if b"ctrain-worker" not in (p / "cmdline").read_bytes():
                continue
            env = (p / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if f"CTRAIN_NAMESPACE={ns}".encode() in env and any(
                e.startswith(b"TF_CONFIG=") and f'"index":{index}'.encode() in e for e in env):
            pids.append(int(p.name))
    return pids


def wait_succeeded(cluster, ns, node, timeout=600):
    p = cluster.kubectl("wait", "--for=condition=Succeeded", "tj/fashion-mnist", "-n", ns,
                        f"--timeout={timeout}s", check=False, timeout=timeout + 30)
    if p.returncode != 0:
        tj = cluster.kubectl("get", "tj", "fashion-mnist", "-n", ns, "-o", "yaml").stdout
        pods = cluster.kubectl("get", "pods", "-n", ns, "-o", "wide").stdout
        logs = {i: node.pod_log(ns, f"fashion-mnist-worker-{i}", "worker")[-2000:]
                for i in (0, 1)}
        raise AssertionError(f"job did not succeed:\n{tj}\n{pods}\n{logs}\n"
                             f"{node.log()[-2000:]}")
    return cluster.get_json("tj", "fashion-mnist", "-n", ns)


def test_apply_to_trained_model(cluster, node, namespace, start_controller):
    start_controller()
    apply_example(cluster, namespace)
    job = wait_succeeded(cluster, namespace, node)
    assert job["status"].get("restarts", 0) == 0
    log = node.pod_log(namespace, "fashion-mnist-worker-0", "worker")
    m = re.search(r"test accuracy: ([0-9.]+)", log)
    assert m, log[-3000:]
    assert float(m.group(1)) >= 0.85, log[-3000:]
    assert "Epoch 5/5" in log
    model = claim_dir(node, namespace) / "model"
    assert (model / "model.safetensors").stat().st_size > 400000
    assert json.loads((model / "model.json").read_text())["layers"]
    # Backups are removed after success; the metrics file stays.
    left = [p.name for p in claim_dir(node, namespace).iterdir() if "backup" in p.name]
    assert not left, left
    rows = [json.loads(l) for l in (claim_dir(node, namespace) / "metrics.jsonl").read_text()
            .splitlines() if l.strip()]
    final = [r for r in rows if "val_accuracy" in r][-1]
    assert final["val_accuracy"] >= 0.87, final
    # The model file loads with `ctrain-worker evaluate` and gives the same accuracy.
    import subprocess
    ev = subprocess.run([str(ROOT / "build/worker/ctrain-worker"), "evaluate", "--model",
                         str(model), "--test-data", "/usr/share/datasets/fashion-mnist/t10k"],
                        capture_output=True, text=True, timeout=120)
    assert ev.returncode == 0, ev.stderr
    assert abs(json.loads(ev.stdout)["accuracy"] - final["val_accuracy"]) < 1e-4
    UNBROKEN["accuracy"] = final["val_accuracy"]
    # No job token in any log of the run: workers, the node agent.
    import base64
    sec = cluster.get_json("secret", "fashion-mnist-token", "-n", namespace)
    tokens = [base64.b64decode(v).decode() for v in sec["data"].values()]
    logs = [node.log()] + [p.read_text(errors="replace")
                           for p in (node.state / "logs").glob(f"{namespace}_*")]
    assert len(logs) >= 3
    for t in tokens:
        assert len(t) >= 16
        for text in logs:
            assert t not in text and t[:16] not in text
    print(f"e2e: test accuracy {m.group(1)}; model at {model}")


def test_killed_worker_costs_a_restart_not_the_work(cluster, node, namespace, start_controller):
    start_controller()
    apply_example(cluster, namespace)
    # Wait for a step backup on the claim, then SIGKILL worker 1's process.
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        log0 = node.pod_log(namespace, "fashion-mnist-worker-0", "worker")
        if "backup: wrote" in log0:
            break
        time.sleep(0.5)
    else:
        raise AssertionError("no backup written:\n" + log0[-3000:])
    pids = worker_pids(namespace, 1)
    assert pids, "worker 1 process not found"
    for pid in pids:
        os.kill(pid, signal.SIGKILL)

    def restarting():
        j = cluster.get_json("tj", "fashion-mnist", "-n", namespace)
        conds = {c["type"]: c for c in j.get("status", {}).get("conditions", [])}
        r = conds.get("Restarting")
        return r and (r["status"] == "True" or j["status"].get("restarts") == 1) and j
    deadline = time.monotonic() + 60
    while not restarting():
        assert time.monotonic() < deadline, "never Restarting"
        time.sleep(0.2)
    job = wait_succeeded(cluster, namespace, node)
    assert job["status"]["restarts"] == 1, job["status"]
    assert job["status"]["attempt"] == 2, job["status"]
    ps = cluster.get_json("pods", "-n", namespace)["items"]
    assert {p["metadata"]["labels"]["ctrain.dev/attempt"] for p in ps} == {"2"}
    log = node.pod_log(namespace, "fashion-mnist-worker-0", "worker")
    # The second attempt resumed from the backup instead of starting over.
    assert re.search(r"backup: resuming from \S+ at epoch \d+, step \d+", log), log[-4000:]
    m = re.search(r"test accuracy: ([0-9.]+)", log)
    assert m and float(m.group(1)) >= 0.85, log[-3000:]
    if "accuracy" in UNBROKEN:
        assert abs(float(m.group(1)) - UNBROKEN["accuracy"]) <= 0.01, (m.group(1), UNBROKEN)
    events = cluster.get_json("events", "-n", namespace)["items"]
    restarting = [e for e in events if e["reason"] == "Restarting"]
    assert restarting and "fashion-mnist-worker-1" in restarting[0]["message"], \
        [(e["reason"], e["message"]) for e in events]


def cond(job, t):
    for c in job.get("status", {}).get("conditions", []):
        if c["type"] == t and c["status"] == "True":
            return c
    return None


def wait_job(cluster, ns, pred, timeout=120, what="state"):
    deadline = time.monotonic() + timeout
    while True:
        j = cluster.get_json("tj", "fashion-mnist", "-n", ns)
        if pred(j):
            return j
        assert time.monotonic() < deadline, f"timed out waiting for {what}: {j.get('status')}"
        time.sleep(0.3)


def job_pods(cluster, ns):
    return cluster.get_json("pods", "-n", ns, "-l", "ctrain.dev/job-name=fashion-mnist")["items"]


def test_broken_model_config_fails_without_restart(cluster, node, namespace, start_controller):
    start_controller()
    apply_example(cluster, namespace, model_json='{"layers": [{"type": "Dense", "units": "ten"}]}')
    j = wait_job(cluster, namespace, lambda j: cond(j, "Failed"), what="Failed")
    msg = cond(j, "Failed")["message"]
    assert "78" in msg, msg
    assert j["status"].get("restarts", 0) == 0
    log = node.pod_log(namespace, "fashion-mnist-worker-0", "worker")
    assert "model.json: model config" in log and "exit 78" in log, log[-2000:]


def wait_backup(node, ns, timeout=300):
    deadline = time.monotonic() + timeout
    while "backup: wrote" not in node.pod_log(ns, "fashion-mnist-worker-0", "worker"):
        assert time.monotonic() < deadline, node.pod_log(ns, "fashion-mnist-worker-0", "worker")
        time.sleep(0.3)


def test_suspend_resume_then_delete_running_job(cluster, node, namespace, start_controller):
    start_controller()
    apply_example(cluster, namespace, epochs=3)
    wait_backup(node, namespace)
    cluster.kubectl("patch", "tj", "fashion-mnist", "-n", namespace, "--type=merge",
                    "-p", '{"spec":{"suspend":true}}')
    wait_job(cluster, namespace, lambda j: cond(j, "Suspended"), what="Suspended")
    deadline = time.monotonic() + 60
    while job_pods(cluster, namespace) or worker_pids(namespace, 0) or worker_pids(namespace, 1):
        assert time.monotonic() < deadline, "pods/processes left after suspend"
        time.sleep(0.3)
    cluster.kubectl("patch", "tj", "fashion-mnist", "-n", namespace, "--type=merge",
                    "-p", '{"spec":{"suspend":false}}')
    wait_succeeded(cluster, namespace, node)
    log = node.pod_log(namespace, "fashion-mnist-worker-0", "worker")
    assert "backup: resuming from" in log, log[-3000:]

    # A second job, deleted while it runs: its pods and processes go.
    ns2 = namespace + "-del"
    cluster.kubectl("create", "namespace", ns2)
    try:
        apply_example(cluster, ns2, epochs=3)
        deadline = time.monotonic() + 120
        while not (worker_pids(ns2, 0) and worker_pids(ns2, 1)):
            assert time.monotonic() < deadline, "workers never started"
            time.sleep(0.3)
        cluster.kubectl("delete", "tj", "fashion-mnist", "-n", ns2, "--wait=false")
        deadline = time.monotonic() + 90
        while job_pods(cluster, ns2) or worker_pids(ns2, 0) or worker_pids(ns2, 1):
            assert time.monotonic() < deadline, "pods/processes left after delete"
            time.sleep(0.3)
    finally:
        cluster.kubectl("delete", "namespace", ns2, "--wait=false", check=False)


class PodWatch:
    """Records every (pod name, attempt) -> uid seen while the job runs."""

    def __init__(self, cluster, ns):
        import threading
        self.cluster, self.ns, self.seen, self.stop = cluster, ns, {}, False
        self.t = threading.Thread(target=self.run, daemon=True)
        self.t.start()

    def run(self):
        while not self.stop:
            try:
                for p in job_pods(self.cluster, self.ns):
                    key = (p["metadata"]["name"], p["metadata"]["labels"]["ctrain.dev/attempt"])
                    self.seen.setdefault(key, set()).add(p["metadata"]["uid"])
            except Exception:
                pass  # the apiserver is being restarted
            time.sleep(0.3)

    def close(self):
        self.stop = True
        self.t.join()
        return self.seen


def test_apiserver_and_controller_restarted_mid_job(cluster, node, namespace, start_controller):
    from test_kube_informer import _restart_apiserver
    first = start_controller(name="first")
    apply_example(cluster, namespace, epochs=3)
    watch = PodWatch(cluster, namespace)
    try:
        wait_backup(node, namespace)
        _restart_apiserver(cluster.state_dir)
        # The restarted apiserver takes a while to serve again (longer on a busy machine).
        deadline = time.monotonic() + 180
        while cluster.kubectl("get", "--raw", "/readyz", check=False).returncode != 0:
            assert time.monotonic() < deadline, "kube-apiserver did not come back"
            time.sleep(0.5)
        cluster.kubectl("wait", "--for=condition=Ready", f"node/{node.name}", "--timeout=90s",
                        timeout=120)
        first.stop(signal.SIGKILL)
        start_controller(name="second")
        job = wait_succeeded(cluster, namespace, node)
    finally:
        seen = watch.close()
    assert job["status"].get("restarts", 0) == 0, job["status"]
    assert seen and all(len(uids) == 1 for uids in seen.values()), seen
    assert {k[1] for k in seen} == {"1"}, seen


def test_leader_killed_mid_job_standby_takes_over(cluster, node, namespace, start_controller):
    a = start_controller(name="a")
    deadline = time.monotonic() + 30
    while "became leader" not in a.logs():
        assert time.monotonic() < deadline, a.logs()
        time.sleep(0.2)
    b = start_controller(name="b")
    apply_example(cluster, namespace, epochs=3)
    wait_backup(node, namespace)
    a.stop(signal.SIGKILL)
    job = wait_succeeded(cluster, namespace, node)
    assert "became leader" in b.logs()
    assert job["status"].get("restarts", 0) == 0
