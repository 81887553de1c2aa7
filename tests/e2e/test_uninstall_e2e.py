"""`helm uninstall` with a finished job present leaves no pod or namespace stuck:
the controller installed with the Helm chart (charts/ctrain, the nodes' ctrain:latest), a
one-worker job of tiny pods run to Succeeded with cleanPodPolicy None (its finished pod stays,
holding the finalizer ctrain.dev/attempt, which the controller removes only from a pod being
deleted), `helm uninstall --wait`: the chart's post-delete hook (`ctrain-controller
--release-finalizers`) runs once the Deployment is gone and releases the finalizer. Then the
job and its namespace are deleted: its pod and the namespace are gone within 60 s.

The module's own install: the kustomize controller of the other modules (their `controller`
fixture) is not running here, and what manifests/ made (less the CRD and the namespace, which
hold the jobs) is removed first, as Helm refuses objects it does not own; the test's end
applies manifests/ again and removes its Deployment, the state the other modules leave."""
import json
import time
import uuid

import pytest

from e2e_lib import (CONTROLLER_NS, EXISTING, ROOT, Deployment, HelmSlot, dump, run_helm,
                     wait_succeeded)

pytestmark = pytest.mark.skipif(EXISTING, reason="installs and removes the controller")

FINALIZER = "ctrain.dev/attempt"
JOB = "tiny"


def release_finalizers(cluster, ns):
    """Removes every finalizer from the pods of ns (the test's cleanup after a failure)."""
    for p in cluster.get_json("pods", "-n", ns)["items"]:
        if p["metadata"].get("finalizers"):
            cluster.kubectl("patch", "pod", p["metadata"]["name"], "-n", ns, "--type=json", "-p",
                            '[{"op":"remove","path":"/metadata/finalizers"}]', check=False)


@pytest.fixture
def helm_controller(cluster, node):
    """The controller from charts/ctrain (two replicas, ctrain:latest), installed in place of
    the kustomize one; afterwards manifests/ as the other modules leave it."""
    with HelmSlot(cluster, ("ctrain",)):
        p = run_helm(cluster, "install", "ctrain", str(ROOT / "charts/ctrain"),
                     "--set", "image.tag=latest", "--set", "image.pullPolicy=Never",
                     "--wait", "--timeout", "5m")
        assert p.returncode == 0, p.stdout + p.stderr
        d = Deployment(cluster)
        d.rollout()
        d.wait_leader()
        yield d


def tiny_job():
    c = {"name": "worker", "image": "ctrain:latest", "imagePullPolicy": "Never",
         "command": ["sh", "-c", "echo done"],
         "resources": {"requests": {"cpu": "50m", "memory": "32Mi"}}}
    return {"apiVersion": "ctrain.dev/v1alpha1", "kind": "TrainingJob",
            "metadata": {"name": JOB},
            "spec": {"cleanPodPolicy": "None",
                     "replicaSpecs": {"Worker": {"replicas": 1, "template": {"spec": {
                         "containers": [c]}}}}}}


def test_helm_uninstall_with_a_finished_job_leaves_nothing_stuck(cluster, node, helm_controller):
    """A job Succeeded with cleanPodPolicy None, its pod holding ctrain.dev/attempt; `helm
    uninstall --cascade=foreground --wait` exits 0 (its post-delete hook succeeded) with the
    controller (Deployment and pods) and its hook Job gone, the CRD and the job kept, the
    finalizer released; the job and namespace deleted then are gone within 60 s."""
    ns = "un-" + uuid.uuid4().hex[:8]
    cluster.kubectl("create", "namespace", ns)
    try:
        t0 = time.monotonic()
        cluster.kubectl("apply", "-n", ns, "-f", "-", input=json.dumps(tiny_job()))
        wait_succeeded(cluster, node, ns, timeout=180, name=JOB)
        pods = cluster.get_json("pods", "-n", ns, "-l", f"ctrain.dev/job-name={JOB}")["items"]
        assert [p["metadata"]["name"] for p in pods] == [f"{JOB}-worker-0"], dump(cluster, node, ns)
        # The finished pod stays (cleanPodPolicy None) and holds the controller's finalizer.
        assert pods[0]["status"]["phase"] == "Succeeded", pods[0]["status"]
        assert FINALIZER in pods[0]["metadata"].get("finalizers", []), pods[0]["metadata"]

        t1 = time.monotonic()
        p = run_helm(cluster, "uninstall", "ctrain", "--cascade=foreground", "--wait",
                     "--timeout", "5m")
        assert p.returncode == 0, p.stdout + p.stderr
        uninstall_s = time.monotonic() - t1
        # The controller is gone (its hook Job with it, deleted once it succeeded) ...
        assert not Deployment(cluster).pods()
        left = cluster.get_json("deployments,jobs", "-n", CONTROLLER_NS, "-l",
                                "app.kubernetes.io/name=ctrain")["items"]
        assert not left, [o["metadata"]["name"] for o in left]
        # ... the CRD and the job stay, and the pod no longer holds the finalizer.
        assert cluster.get_json("tj", JOB, "-n", ns)["metadata"]["name"] == JOB
        pod = cluster.get_json("pod", f"{JOB}-worker-0", "-n", ns)
        assert FINALIZER not in pod["metadata"].get("finalizers", []), pod["metadata"]

        # Deleting the job, then its namespace: nothing stays Terminating.
        t2 = time.monotonic()
        cluster.kubectl("delete", "tj", JOB, "-n", ns, "--wait=false")
        cluster.kubectl("delete", "namespace", ns, "--wait=false")
        deadline = time.monotonic() + 60
        while cluster.kubectl("get", "namespace", ns, check=False).returncode == 0:
            assert time.monotonic() < deadline, \
                "namespace still there 60 s after its delete:\n" + \
                cluster.kubectl("get", "namespace", ns, "-o", "yaml", check=False).stdout + \
                cluster.kubectl("get", "pods", "-n", ns, "-o", "yaml", check=False).stdout[-3000:]
            time.sleep(0.5)
        gone_s = time.monotonic() - t2
        assert not cluster.get_json("pods,tj", "-n", ns)["items"]
        print(f"e2e: job Succeeded in {t1 - t0:.1f} s, helm uninstall {uninstall_s:.1f} s, "
              f"job and namespace gone {gone_s:.1f} s after their delete")
    finally:
        release_finalizers(cluster, ns)
        cluster.kubectl("delete", "namespace", ns, "--wait=false", "--ignore-not-found",
                        check=False)
