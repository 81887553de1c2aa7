"""Several nodes: a TrainingJob whose workers run on two different nodes
(pod anti-affinity), talking across the host's routing; a node's power loss
and return as the control plane sees them.

The session's nodes come from tests/conftest.py (CTRAIN_TEST_NODES, default 2):
ctrain-node in the host's network namespace, ctrain-node-2 in its own.
"""
import json
import time

import pytest

from e2e_lib import (EXISTING, JOB, W0, W1, apply_example, claim_dir, dump, node_ready, pod_node,
                     start_node, stop_node, wait_log, wait_node_ready, wait_succeeded)


@pytest.fixture
def two_nodes(node):
    if len(node.names) < 2:
        pytest.skip(f"needs two nodes, the cluster has {node.names}")
    return node


def spread(d):
    """The workers on different nodes: a required pod anti-affinity on the
    job's label, per node name."""
    t = d["spec"]["replicaSpecs"]["Worker"]["template"]
    t.setdefault("metadata", {}).setdefault("labels", {})["bench.ctrain.dev/spread"] = "yes"
    t["spec"]["affinity"] = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {"matchLabels": {"ctrain.dev/job-name": JOB}},
         "topologyKey": "kubernetes.io/hostname"}]}}


def test_job_workers_on_two_nodes_train_and_succeed(cluster, two_nodes, controller, ns):
    """One worker per node: TF_CONFIG's peer names resolve through CoreDNS (on
    the first node) from both nodes, the ring connects across them (pod to
    pod through the host's routing, source addresses kept), the job
    Succeeds, and the chief's model lands on the shared hostPath claim."""
    node = two_nodes
    # 20 epochs: the workers still run while their peers' names are looked up
    # from inside them (with 1 the job could end before `kubectl exec`).
    apply_example(cluster, ns, epochs=20, mutate=spread)
    # Both logs while the workers run: once the job has Succeeded the kubelet
    # of the second node may no longer serve its pod's log (one cold CI run
    # read '' there).
    for p in (W0, W1):
        wait_log(node, ns, p, "of 2 connected")
    where = {p: pod_node(cluster, ns, p) for p in (W0, W1)}
    assert where[W0] != where[W1], where
    assert set(where.values()) <= set(node.names), where
    ips = {p: cluster.get_json("pod", p, "-n", ns)["status"]["podIP"] for p in (W0, W1)}
    # Each worker resolves its peer's TF_CONFIG name to the peer's pod IP.
    for me, peer in ((W0, W1), (W1, W0)):
        got = cluster.kubectl("exec", "-n", ns, me, "--", "getent", "hosts",
                              f"{peer}.{JOB}.{ns}.svc").stdout
        assert got.split()[:1] == [ips[peer]], (me, peer, ips, got)
    job = wait_succeeded(cluster, node, ns, timeout=600)
    assert job["status"].get("restarts", 0) == 0, job["status"]
    if not EXISTING:
        assert (claim_dir(ns) / "model" / "model.safetensors").stat().st_size > 400000
    print(f"multinode: workers on {json.dumps(where)}")


@pytest.mark.skipif(EXISTING, reason="powers a local node off and on")
def test_stopped_node_goes_not_ready_and_comes_back(cluster, two_nodes, namespace):
    """node.sh stop (SIGKILL of everything of the node, its network gone):
    the node turns Ready=Unknown after the node monitor grace period (20 s
    in the test cluster), tainted unreachable, its pod not Ready; node.sh
    start: Ready again in seconds, the pod running again in place."""
    name = two_nodes.names[-1]
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "sleeper"},
           "spec": {"nodeName": name, "terminationGracePeriodSeconds": 0,
                    "containers": [{"name": "c", "image": "ctrain:latest",
                                    "imagePullPolicy": "IfNotPresent",
                                    "command": ["sleep", "infinity"]}]}}
    cluster.kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(pod))
    cluster.kubectl("wait", "--for=condition=Ready", "pod/sleeper", "-n", namespace,
                    "--timeout=120s", timeout=150)
    assert node_ready(cluster, name) == "True"
    t0 = time.monotonic()
    stop_node(name)
    stopped = time.monotonic() - t0
    try:
        lost = stopped + wait_node_ready(cluster, name, ready=False, timeout=90)
        assert node_ready(cluster, name) == "Unknown"
        # The node lifecycle controller taints it and marks its pods not Ready.
        deadline = time.monotonic() + 30
        while True:
            taints = {t["key"] for t in cluster.get_json("node", name)["spec"].get("taints", [])}
            p = cluster.get_json("pod", "sleeper", "-n", namespace)
            ready = [c["status"] for c in p["status"].get("conditions", []) if c["type"] == "Ready"]
            if "node.kubernetes.io/unreachable" in taints and ready == ["False"]:
                break
            assert time.monotonic() < deadline, (taints, p["status"])
            time.sleep(0.5)
    finally:
        t1 = time.monotonic()
        start_node(name)
    back = time.monotonic() - t1
    assert node_ready(cluster, name) == "True"
    deadline = time.monotonic() + 60
    while {t["key"] for t in cluster.get_json("node", name)["spec"].get("taints", [])} & {
            "node.kubernetes.io/unreachable", "node.kubernetes.io/not-ready"}:
        assert time.monotonic() < deadline, cluster.get_json("node", name)["spec"]
        time.sleep(0.5)
    p = cluster.kubectl("wait", "--for=condition=Ready", "pod/sleeper", "-n", namespace,
                        "--timeout=120s", check=False, timeout=150)
    assert p.returncode == 0, dump(cluster, two_nodes, namespace, kinds="pods")
    print(f"multinode: {name} NotReady {lost:.1f} s after node.sh stop began (the stop "
          f"took {stopped:.1f} s), Ready {back:.1f} s after node.sh start")
