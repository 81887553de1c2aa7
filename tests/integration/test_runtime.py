"""TrainingRuntime and ClusterTrainingRuntime against a real kube-apiserver: their CRDs (generated
from the job's, tools/crd/runtimes.py) and `kubectl get` columns; what the job's schema now
takes and refuses (a template may come from the runtime; spec.runtimeRef is immutable); and
ctrain-controller, with only the RBAC in manifests/, blocking a job on a missing runtime,
recording the runtime in the job's status, merging the job over it, and never changing a running
job when the runtime is edited (the merge itself is tests/unit/test_ctl_runtime.c's). No node
runs these pods: their spec is what the controller decided."""
import json
import subprocess
import sys

import pytest

from clusterlib import ROOT
from ctllib import columns, cond, create, pods, tj, wait_for

IMAGE_V1, IMAGE_V2 = "ctrain:runtime-v1", "ctrain:runtime-v2"


def runtime(name, image, mode, kind="TrainingRuntime", **spec):
    tmpl = {"spec": {"containers": [{
        "name": "worker", "image": image, "command": ["ctrain-worker"], "args": ["train"],
        "env": [{"name": "MODE", "value": mode}, {"name": "TEAM", "value": "vision"}]}]}}
    return {"apiVersion": "ctrain.dev/v1alpha1", "kind": kind, "metadata": {"name": name},
            "spec": {"replicaSpecs": {"Worker": {"template": tmpl}}, "backoffLimit": 5,
                     "progressDeadlineSeconds": 600, **spec}}


def job_over(name, rt, kind="TrainingRuntime", workers=2, env=None):
    worker = {"replicas": workers}
    if env:
        worker["template"] = {"spec": {"containers": [{"name": "worker", "env": env}]}}
    return {"apiVersion": "ctrain.dev/v1alpha1", "kind": "TrainingJob",
            "metadata": {"name": name},
            "spec": {"runtimeRef": {"kind": kind, "name": rt},
                     "replicaSpecs": {"Worker": worker}}}


def apply(cluster, ns, obj):
    args = ["apply", "-f", "-"] if obj["kind"] == "ClusterTrainingRuntime" else \
        ["apply", "-n", ns, "-f", "-"]
    return cluster.kubectl(*args, input=json.dumps(obj), check=False)


def env_of(pod):
    return {e["name"]: e.get("value") for e in pod["spec"]["containers"][0].get("env", [])}


def attempt_pods(cluster, ns, name, attempt, n=2):
    ps = pods(cluster, ns, name)
    return len(ps) == n and all(p["metadata"]["labels"]["ctrain.dev/attempt"] == str(attempt)
                                for p in ps.values()) and ps


@pytest.fixture
def runtimes_crd(crd):
    for plural in ("trainingruntimes", "clustertrainingruntimes"):
        crd.wait_established(f"{plural}.ctrain.dev")
    return crd


def test_runtime_crds_are_generated_from_the_jobs():
    p = subprocess.run([sys.executable, str(ROOT / "tools/crd/runtimes.py"), "--check"],
                       capture_output=True, text=True)
    assert p.returncode == 0, p.stderr


def test_columns_and_what_the_schema_takes(runtimes_crd, namespace):
    c = runtimes_crd
    rt = runtime("vision", IMAGE_V1, "v1", queueName="team-q", checkpoint={
        "mountPath": "/ckpt", "volume": {"persistentVolumeClaim": {"claimName": "vision-ckpt"}}})
    assert apply(c, namespace, rt).returncode == 0
    table = c.kubectl("get", "trainingruntimes", "-n", namespace).stdout
    header, row = (line.split() for line in table.splitlines()[:2])  # no empty cell here
    assert header == ["NAME", "IMAGE", "QUEUE", "CLAIM", "BACKOFF", "AGE"], table
    assert row[:5] == ["vision", IMAGE_V1, "team-q", "vision-ckpt", "5"], table
    # A runtime's fields have the job's schema: a bad checkpoint is refused as a job's is.
    bad = runtime("bad", IMAGE_V1, "v1", checkpoint={"mountPath": "/ckpt"})
    p = apply(c, namespace, bad)
    assert p.returncode != 0 and "spec.checkpoint" in p.stderr, p.stderr
    # A job without a template needs a runtime; spec.runtimeRef cannot change.
    lone = job_over("lone", "vision")
    del lone["spec"]["runtimeRef"]
    p = apply(c, namespace, lone)
    assert p.returncode != 0 and "every replica type needs a template" in p.stderr, p.stderr
    assert apply(c, namespace, job_over("over", "vision")).returncode == 0
    p = apply(c, namespace, job_over("over", "other"))
    assert p.returncode != 0 and "spec.runtimeRef is immutable" in p.stderr, p.stderr
    names, rows = columns(c.kubectl("get", "tj", "over", "-n", namespace, "-o", "wide").stdout)
    assert rows[0]["RUNTIME"] == "vision", rows


def test_missing_runtime_blocks_then_the_job_runs_over_it(runtimes_crd, namespace,
                                                          start_controller):
    c = runtimes_crd
    start_controller()
    create(c, namespace, job_over("late", "vision", env=[{"name": "MODE", "value": "job"}]))
    j = wait_for(lambda: cond(tj(c, namespace, "late"), "Blocked") and tj(c, namespace, "late"),
                 what="Blocked")
    b = cond(j, "Blocked")
    assert b["reason"] == "RuntimeNotFound", b
    assert f"TrainingRuntime {namespace}/vision not found" in b["message"], b
    assert not pods(c, namespace, "late")
    ev = wait_for(lambda: c.get_json("events", "-n", namespace, "--field-selector",
                                     "reason=RuntimeNotFound")["items"], what="the event")
    assert f"TrainingRuntime {namespace}/vision" in ev[0]["message"], ev
    # The runtime appears: its informer brings the job back at once (not after the 30 s retry).
    assert apply(c, namespace, runtime("vision", IMAGE_V1, "v1")).returncode == 0
    ps = wait_for(lambda: attempt_pods(c, namespace, "late", 1), timeout=20, what="pods")
    for p in ps.values():
        assert p["spec"]["containers"][0]["image"] == IMAGE_V1
        e = env_of(p)
        assert e["MODE"] == "job" and e["TEAM"] == "vision", e  # the job's env wins by name
    j = tj(c, namespace, "late")
    assert j["status"]["runtime"]["name"] == "vision", j["status"]
    assert j["status"]["runtime"]["spec"]["backoffLimit"] == 5
    assert not cond(j, "Blocked")


def test_editing_a_runtime_never_changes_a_running_job(runtimes_crd, namespace, start_controller):
    c = runtimes_crd
    start_controller()
    assert apply(c, namespace, runtime("vision", IMAGE_V1, "v1")).returncode == 0
    create(c, namespace, job_over("before", "vision"))
    ps = wait_for(lambda: attempt_pods(c, namespace, "before", 1), what="attempt-1 pods")
    assert {env_of(p)["MODE"] for p in ps.values()} == {"v1"}
    gen1 = tj(c, namespace, "before")["status"]["runtime"]["generation"]
    # The admin edits the runtime while the job runs.
    assert apply(c, namespace, runtime("vision", IMAGE_V2, "v2")).returncode == 0
    # A disruption restarts the gang: the new attempt is made from the recorded runtime.
    c.kubectl("delete", "pod", "before-worker-0", "-n", namespace, "--wait=false")
    ps = wait_for(lambda: attempt_pods(c, namespace, "before", 2), what="attempt-2 pods")
    for p in ps.values():
        assert p["spec"]["containers"][0]["image"] == IMAGE_V1
        assert env_of(p)["MODE"] == "v1"
    j = tj(c, namespace, "before")
    assert j["status"]["disruptions"] == 1 and j["status"]["runtime"]["generation"] == gen1
    # A job admitted after the edit takes it.
    create(c, namespace, job_over("after", "vision"))
    ps = wait_for(lambda: attempt_pods(c, namespace, "after", 1), what="pods of the new job")
    for p in ps.values():
        assert p["spec"]["containers"][0]["image"] == IMAGE_V2
        assert env_of(p)["MODE"] == "v2"
    assert tj(c, namespace, "after")["status"]["runtime"]["generation"] == gen1 + 1


def test_cluster_runtime_and_an_invalid_merge(runtimes_crd, namespace, start_controller):
    c = runtimes_crd
    start_controller()
    name = f"crt-{namespace}"
    rt = runtime(name, IMAGE_V1, "cluster", kind="ClusterTrainingRuntime")
    assert apply(c, namespace, rt).returncode == 0
    try:
        create(c, namespace, job_over("wide", name, kind="ClusterTrainingRuntime", workers=1))
        ps = wait_for(lambda: attempt_pods(c, namespace, "wide", 1, n=1), what="pod")
        assert env_of(next(iter(ps.values())))["MODE"] == "cluster"
        # A runtime without a Chief template, a job with a Chief and none of its own: the job
        # fails InvalidSpec naming the field and the runtime.
        chief = job_over("chiefless", name, kind="ClusterTrainingRuntime", workers=1)
        chief["spec"]["replicaSpecs"]["Chief"] = {"replicas": 1}
        create(c, namespace, chief)
        j = wait_for(lambda: cond(tj(c, namespace, "chiefless"), "Failed") and
                     tj(c, namespace, "chiefless"), what="Failed")
        f = cond(j, "Failed")
        assert f["reason"] == "InvalidSpec", f
        assert "Chief" in f["message"] and f"ClusterTrainingRuntime {name}" in f["message"], f
    finally:
        c.kubectl("delete", "clustertrainingruntime", name, check=False)


def test_the_examples_run_over_their_runtime(runtimes_crd, namespace, start_controller):
    """examples/runtime.yaml and examples/fashion-mnist-runtime.yaml as a user applies them: the
    pods are the runtime's worker (image, command, mounts, the claim) with the job's cpu."""
    c = runtimes_crd
    start_controller()
    for f in ("runtime.yaml", "fashion-mnist-runtime.yaml"):
        c.kubectl("apply", "-n", namespace, "-f", str(ROOT / "examples" / f))
    ps = wait_for(lambda: attempt_pods(c, namespace, "fashion-mnist-trial", 1), what="pods")
    for p in ps.values():
        w = p["spec"]["containers"][0]
        assert w["image"] == "ctrain:latest" and w["command"] == ["ctrain-worker"], w
        assert w["resources"]["requests"] == {"cpu": "750m", "memory": "512Mi"}, w["resources"]
        assert {"/etc/ctrain", "/ckpt"} <= {m["mountPath"] for m in w["volumeMounts"]}, w
        claims = [v["persistentVolumeClaim"]["claimName"] for v in p["spec"]["volumes"]
                  if "persistentVolumeClaim" in v]
        assert claims == ["ctrain-checkpoints"], p["spec"]["volumes"]
    _, rows = columns(c.kubectl("get", "tj", "-n", namespace, "-o", "wide").stdout)
    assert rows[0]["RUNTIME"] == "fashion-mnist-cpu", rows
