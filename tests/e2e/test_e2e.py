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


def apply_example(cluster, ns):
    """The example as a user applies it, plus a PV pre-bound to its claim
    (the local cluster has no provisioner)."""
    pv = {"apiVersion": "v1", "kind": "PersistentVolume",
          "metadata": {"name": f"e2e-{ns}"},
          "spec": {"capacity": {"storage": "10Gi"}, "accessModes": ["ReadWriteMany"],
                   "persistentVolumeReclaimPolicy": "Delete",
                   "hostPath": {"path": f"/tmp/ctrain-e2e-pv-{ns}"},
                   "claimRef": {"namespace": ns, "name": "ctrain-checkpoints"}}}
    cluster.kubectl("apply", "-f", "-", input=json.dumps(pv))
    cluster.kubectl("apply", "-n", ns, "-f", str(ROOT / "examples/fashion-mnist.yaml"))


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
    job = wait_succeeded(cluster, namespace, node)
    assert job["status"]["restarts"] == 1, job["status"]
    log = node.pod_log(namespace, "fashion-mnist-worker-0", "worker")
    # The second attempt resumed from the backup instead of starting over.
    assert re.search(r"backup: resuming from \S+ at epoch \d+, step \d+", log), log[-4000:]
    m = re.search(r"test accuracy: ([0-9.]+)", log)
    assert m and float(m.group(1)) >= 0.85, log[-3000:]
    events = cluster.get_json("events", "-n", namespace)["items"]
    restarting = [e for e in events if e["reason"] == "Restarting"]
    assert restarting and "fashion-mnist-worker-1" in restarting[0]["message"], \
        [(e["reason"], e["message"]) for e in events]
