"""ctrain-localnode against a real control plane: the Node goes Ready with a
Lease, the real scheduler binds pods to it, and the pods run as processes in
their own network and mount namespaces, on a bridge and pod CIDR of the
test's own (so a localnode of the developer's cluster is never disturbed)."""
import json
import os
import pathlib
import random
import shutil
import signal
import subprocess
import tempfile
import time
import uuid

import pytest

from conftest import BUILD

BIN = BUILD / "localnode" / "ctrain-localnode"

pytestmark = [
    pytest.mark.skipif(os.environ.get("CTRAIN_TEST_USE_KUBECONFIG") == "1",
                       reason="needs process control of the node"),
    pytest.mark.skipif(os.geteuid() != 0, reason="localnode needs root (netns, mounts)"),
    pytest.mark.skipif(shutil.which("ip") is None, reason="needs iproute2"),
]


def ip_out(*args):
    return subprocess.run(["ip", *args], capture_output=True, text=True).stdout


def free_cidr():
    for _ in range(50):
        third = random.randint(100, 250)
        cidr = f"10.88.{third}.0/24"
        if not ip_out("route", "show", cidr).strip():
            return cidr
    pytest.skip("no free 10.88.x.0/24 on this machine")


class Node:
    def __init__(self, cluster):
        self.cluster = cluster
        suffix = uuid.uuid4().hex[:6]
        self.name = "it-lnode-" + suffix
        self.bridge = "lnbr" + suffix
        self.cidr = free_cidr()
        self.state = pathlib.Path(tempfile.mkdtemp(prefix="ctrain-it-lnode-"))
        self.logfile = self.state / "localnode.log"
        self.proc = None

    def start(self):
        log = open(self.logfile, "ab")
        self.proc = subprocess.Popen(
            [str(BIN), "--kubeconfig", self.cluster.kubeconfig, "--node-name", self.name,
             "--state-dir", str(self.state), "--bridge", self.bridge, "--pod-cidr", self.cidr,
             "--bin-dir", str(BUILD / "worker"), "--heartbeat", "2", "--log-level", "debug"],
            stdout=log, stderr=subprocess.STDOUT)
        log.close()

    def log(self):
        return self.logfile.read_text(errors="replace")

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode if self.proc else None

    def pod_log(self, ns, pod, container="main"):
        p = self.state / "logs" / f"{ns}_{pod}_{container}.log"
        return p.read_text(errors="replace") if p.exists() else ""


@pytest.fixture(scope="module")
def node(cluster):
    n = Node(cluster)
    mount_points = [pathlib.Path(d) for d in ("/ckpt", "/www", "/scratch", "/sec", "/cfg")]
    existed = {d for d in mount_points if d.exists()}
    n.start()
    try:
        deadline = time.time() + 60
        while time.time() < deadline:
            p = cluster.kubectl("get", "node", n.name, check=False)
            if p.returncode == 0:
                break
            assert n.proc.poll() is None, n.log()
            time.sleep(0.5)
        cluster.kubectl("wait", "--for=condition=Ready", f"node/{n.name}", "--timeout=60s")
        yield n
    finally:
        rc = n.stop()
        log = n.log()
        # Clean shutdown: exit 0, bridge and pod namespaces gone, node NotReady.
        assert rc == 0, log[-3000:]
        assert n.bridge not in ip_out("link", "show"), "bridge left behind"
        assert "lnp-" not in ip_out("netns", "list") or all(
            line.split()[0] not in log for line in ip_out("netns", "list").splitlines()), \
            "pod network namespace left behind"
        ready = [c for c in cluster.get_json("node", n.name)["status"]["conditions"]
                 if c["type"] == "Ready"][0]
        assert ready["status"] == "False", ready
        # Mount points created on the shared root filesystem are removed again.
        left = [str(d) for d in mount_points if d.exists() and d not in existed]
        assert not left, left
        cluster.kubectl("delete", "node", n.name, "--wait=false", check=False)
        shutil.rmtree(n.state, ignore_errors=True)


def apply(cluster, obj):
    cluster.kubectl("apply", "-f", "-", input=json.dumps(obj))


def pod(name, ns, node, command, restart="Never", **spec):
    s = {"restartPolicy": restart, "nodeSelector": {"kubernetes.io/hostname": node.name},
         "terminationGracePeriodSeconds": 30,
         "containers": [{"name": "main", "image": "ignored:latest", "command": command}]}
    for k, v in spec.items():
        if k in ("env", "volumeMounts", "workingDir"):
            s["containers"][0][k] = v
        else:
            s[k] = v
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": ns},
            "spec": s}


def wait_phase(cluster, ns, name, phases, timeout=60):
    deadline = time.time() + timeout
    last = None
    while time.time() < deadline:
        p = cluster.kubectl("get", "pod", name, "-n", ns, "-o", "json", check=False)
        if p.returncode == 0:
            last = json.loads(p.stdout)
            if last.get("status", {}).get("phase") in phases:
                return last
        time.sleep(0.3)
    raise AssertionError(f"pod {ns}/{name} not in {phases} after {timeout}s: "
                         f"{json.dumps(last and last.get('status'), indent=1)}")


def test_node_ready_with_capacity_and_lease(cluster, node):
    n = cluster.get_json("node", node.name)
    cap = n["status"]["capacity"]
    assert int(cap["cpu"]) >= 1 and cap["memory"].endswith("Ki") and cap["pods"] == "110"
    assert not [t for t in n["spec"].get("taints", []) if "not-ready" in t["key"]]
    addrs = {a["type"]: a["address"] for a in n["status"]["addresses"]}
    assert addrs["InternalIP"] == node.cidr.replace(".0/24", ".1")
    lease = cluster.get_json("lease", node.name, "-n", "kube-node-lease")
    assert lease["spec"]["holderIdentity"] == node.name
    first = lease["spec"]["renewTime"]
    time.sleep(3)  # --heartbeat 2
    assert cluster.get_json("lease", node.name, "-n", "kube-node-lease")["spec"]["renewTime"] > first


def test_failed_pod_reports_exit_code_and_log(cluster, node, namespace):
    apply(cluster, pod("fail3", namespace, node, ["sh", "-c", "echo hi; exit 3"]))
    p = wait_phase(cluster, namespace, "fail3", {"Failed", "Succeeded"})
    st = p["status"]
    assert st["phase"] == "Failed"
    term = st["containerStatuses"][0]["state"]["terminated"]
    assert term["exitCode"] == 3 and term["reason"] == "Error", term
    assert term["startedAt"] and term["finishedAt"]
    assert st["podIP"].startswith(node.cidr.rsplit(".", 1)[0] + ".")
    assert st["hostIP"] == node.cidr.replace(".0/24", ".1")
    conds = {c["type"]: c["status"] for c in st["conditions"]}
    assert conds == {"PodScheduled": "True", "Initialized": "True", "ContainersReady": "False",
                     "Ready": "False"}
    assert node.pod_log(namespace, "fail3") == "hi\n"
    assert "container images are ignored" in node.log()


def test_signal_exit_code_and_restart_policy(cluster, node, namespace):
    # "$$" is the API's escape for "$": the shell gets `kill -9 $$`.
    apply(cluster, pod("killed", namespace, node, ["sh", "-c", "kill -9 $$$$"]))
    # OnFailure: fails once (exit 1), then finds its marker in the emptyDir and succeeds.
    apply(cluster, pod("retry", namespace, node,
                       ["sh", "-c", "test -f /scratch/m && exit 0; touch /scratch/m; exit 1"],
                       restart="OnFailure", volumes=[{"name": "s", "emptyDir": {}}],
                       volumeMounts=[{"name": "s", "mountPath": "/scratch"}]))
    t = wait_phase(cluster, namespace, "killed", {"Failed"})["status"]["containerStatuses"][0]
    assert t["state"]["terminated"]["exitCode"] == 137
    assert t["state"]["terminated"]["signal"] == 9
    r = wait_phase(cluster, namespace, "retry", {"Succeeded"})["status"]["containerStatuses"][0]
    assert r["restartCount"] == 1
    assert r["lastState"]["terminated"]["exitCode"] == 1


def test_subdomain_names_and_tcp_between_pods(cluster, node, namespace):
    ns = namespace
    server = ("mkdir -p /www && echo hello-from-a > /www/hello.txt && cd /www && "
              "exec python3 -m http.server 8080 --bind 0.0.0.0")
    apply(cluster, pod("a", ns, node, ["sh", "-c", server], hostname="a", subdomain="grp",
                       volumes=[{"name": "www", "emptyDir": {}}],
                       volumeMounts=[{"name": "www", "mountPath": "/www"}]))
    client = (f"for i in $(seq 100); do getent hosts a.grp.{ns}.svc && "
              f"curl -sf --max-time 2 http://a.grp.{ns}.svc:8080/hello.txt && "
              f"getent hosts b.grp.{ns}.svc.cluster.local && hostname && exit 0; sleep 0.2; done; exit 1")
    apply(cluster, pod("b", ns, node, ["sh", "-c", client], hostname="b", subdomain="grp"))
    a = wait_phase(cluster, ns, "a", {"Running"})
    b = wait_phase(cluster, ns, "b", {"Succeeded", "Failed"})
    out = node.pod_log(ns, "b")
    assert b["status"]["phase"] == "Succeeded", out
    a_ip, b_ip = a["status"]["podIP"], b["status"]["podIP"]
    assert a_ip != b_ip
    assert f"{a_ip}       a.grp.{ns}.svc" in out or f"{a_ip} " in out, out
    assert "hello-from-a" in out
    assert f"{b_ip}" in out and out.strip().endswith("b"), out  # own name and hostname
    # Each pod has its own network namespace: its address is not on the host.
    assert a_ip not in ip_out("-4", "addr", "show")
    cluster.kubectl("delete", "pod", "a", "b", "-n", ns, "--timeout=60s")


def test_delete_sends_sigterm_and_pod_disappears(cluster, node, namespace):
    cmd = "trap 'echo got-term; exit 0' TERM; echo ready; while true; do sleep 0.2; done"
    apply(cluster, pod("long", namespace, node, ["sh", "-c", cmd]))
    wait_phase(cluster, namespace, "long", {"Running"})
    deadline = time.time() + 10
    while "ready" not in node.pod_log(namespace, "long") and time.time() < deadline:
        time.sleep(0.2)
    t0 = time.time()
    cluster.kubectl("delete", "pod", "long", "-n", namespace, "--timeout=60s")
    took = time.time() - t0
    assert cluster.kubectl("get", "pod", "long", "-n", namespace, check=False).returncode != 0
    assert "got-term" in node.pod_log(namespace, "long")
    assert took < 20, took  # well inside the 30 s grace: the trap exited at once


def test_delete_escalates_to_sigkill_after_grace(cluster, node, namespace):
    cmd = "trap '' TERM; echo ready; while true; do sleep 0.2; done"
    apply(cluster, pod("stubborn", namespace, node, ["sh", "-c", cmd],
                       terminationGracePeriodSeconds=2))
    wait_phase(cluster, namespace, "stubborn", {"Running"})
    time.sleep(0.5)
    t0 = time.time()
    cluster.kubectl("delete", "pod", "stubborn", "-n", namespace, "--timeout=60s")
    assert 1.5 <= time.time() - t0 < 20
    assert "grace period over; SIGKILL" in node.log()


def test_pvc_shared_between_pods(cluster, node, namespace):
    ns = namespace
    pv = f"pv-{ns}"
    apply(cluster, {"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": pv},
                    "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteMany"],
                             "storageClassName": "", "hostPath": {"path": "/nonexistent-unused"},
                             "claimRef": {"namespace": ns, "name": "shared"}}})
    apply(cluster, {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                    "metadata": {"name": "shared", "namespace": ns,
                                 "annotations": {"pv.kubernetes.io/bind-completed": "yes"}},
                    "spec": {"accessModes": ["ReadWriteMany"], "storageClassName": "",
                             "volumeName": pv, "resources": {"requests": {"storage": "1Gi"}}}})
    # Bound to this node directly: the scheduler's volume binding (with the PV controller off
    # in the local control plane) is not what is under test here, the claim directory is.
    vol = {"volumes": [{"name": "d", "persistentVolumeClaim": {"claimName": "shared"}}],
           "volumeMounts": [{"name": "d", "mountPath": "/ckpt"}], "nodeName": node.name}
    apply(cluster, pod("writer", ns, node, ["sh", "-c", "echo written-by-writer > /ckpt/f.txt"],
                       **vol))
    assert wait_phase(cluster, ns, "writer", {"Succeeded", "Failed"})["status"]["phase"] == \
        "Succeeded", node.pod_log(ns, "writer")
    apply(cluster, pod("reader", ns, node, ["sh", "-c", "cat /ckpt/f.txt"], **vol))
    assert wait_phase(cluster, ns, "reader", {"Succeeded", "Failed"})["status"]["phase"] == \
        "Succeeded"
    assert node.pod_log(ns, "reader") == "written-by-writer\n"
    assert (node.state / "pvc" / ns / "shared" / "f.txt").read_text() == "written-by-writer\n"
    # The claim is the pod's own view: the host path /ckpt does not hold it.
    assert not pathlib.Path("/ckpt/f.txt").exists()
    cluster.kubectl("delete", "pv", pv, "--wait=false", check=False)


def test_env_fieldref_secret_configmap_and_volumes(cluster, node, namespace):
    ns = namespace
    cluster.kubectl("create", "secret", "generic", "s1", "-n", ns, "--from-literal=token=s3cr3t")
    cluster.kubectl("create", "configmap", "c1", "-n", ns, "--from-literal=mode=fast")
    env = [{"name": "MY_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
           {"name": "MY_NS", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
           {"name": "MY_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
           {"name": "MY_NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
           {"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "s1", "key": "token"}}},
           {"name": "MODE", "valueFrom": {"configMapKeyRef": {"name": "c1", "key": "mode"}}},
           {"name": "COMBO", "value": "$(MY_NAME)@$(MY_IP)"}]
    script = ("echo name=$MY_NAME ns=$MY_NS ip=$MY_IP node=$MY_NODE token=$TOKEN mode=$MODE "
              "combo=$COMBO; echo sec=$(cat /sec/token) cfg=$(cat /cfg/mode) pwd=$(pwd); "
              "test -s /var/run/secrets/kubernetes.io/serviceaccount/token && "
              "cat /var/run/secrets/kubernetes.io/serviceaccount/namespace; echo")
    apply(cluster, pod("envpod", ns, node, ["sh", "-c", script], env=env, workingDir="/tmp",
                       volumes=[{"name": "sec", "secret": {"secretName": "s1"}},
                                {"name": "cfg", "configMap": {"name": "c1"}}],
                       volumeMounts=[{"name": "sec", "mountPath": "/sec"},
                                     {"name": "cfg", "mountPath": "/cfg"}]))
    p = wait_phase(cluster, ns, "envpod", {"Succeeded", "Failed"})
    out = node.pod_log(ns, "envpod")
    assert p["status"]["phase"] == "Succeeded", out
    ip = p["status"]["podIP"]
    assert (f"name=envpod ns={ns} ip={ip} node={node.name} token=s3cr3t mode=fast "
            f"combo=envpod@{ip}") in out, out
    assert "sec=s3cr3t cfg=fast pwd=/tmp" in out, out
    # The projected service-account volume the admission plugin added.
    assert out.strip().endswith(ns), out


def test_missing_command_is_start_error(cluster, node, namespace):
    apply(cluster, pod("nocmd", namespace, node, ["no-such-program-xyz"]))
    st = wait_phase(cluster, namespace, "nocmd", {"Failed"})["status"]["containerStatuses"][0]
    term = st["state"]["terminated"]
    assert term["reason"] == "StartError" and term["exitCode"] == 128
    assert "executable file not found" in term["message"]
