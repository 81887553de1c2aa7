"""Ownership on a shared, churning cluster: ctrain-controller against a real
kube-apiserver and kube-controller-manager (its garbage collector), with only the RBAC in
manifests/. A job deleted and re-applied under the same name while its pods still hold our
finalizer runs; objects of another namespace or another owner are never the job's, never
written or deleted, and a name the job needs that someone else holds makes the job wait
with a condition and an event that name the object. No node runs these pods: pod exits
are written into pod status (ctllib.set_pod_exit)."""
import json
import uuid

import pytest

from ctllib import cond, create, job, pods, set_pod_exit, tj, wait_for
from tenantlib import all_pods, two_tenants


def uid_of(cluster, kind, ns, name):
    return cluster.get_json(kind, name, "-n", ns)["metadata"]["uid"]


def version_of(cluster, kind, ns, name):
    md = cluster.get_json(kind, name, "-n", ns)["metadata"]
    return md["uid"], md["resourceVersion"]


@pytest.fixture
def other_namespace(cluster):
    name = "it-other-" + uuid.uuid4().hex[:6]
    cluster.kubectl("create", "namespace", name)
    yield name
    # The decoys hold a finalizer of their own: released here, or the namespace never goes.
    for p in cluster.get_json("pods", "-n", name)["items"]:
        cluster.kubectl("patch", "pod", p["metadata"]["name"], "-n", name, "--type=json", "-p",
                        '[{"op":"remove","path":"/metadata/finalizers"}]', check=False)
    cluster.kubectl("delete", "namespace", name, "--wait=false", check=False)


def test_deleted_and_reapplied_job_runs(crd, namespace, start_controller):
    """Row 1: `kubectl delete` then `kubectl apply` of a job whose pods still hold the
    ctrain.dev/attempt finalizer. Before the fix the old pods kept the finalizer for good
    (a deleted job's pods were released only while no job of that name existed) and the
    new job's creates met AlreadyExists, counted as created: it never got a pod."""
    ctl = start_controller()
    create(crd, namespace, job("again", workers=2))
    wait_for(lambda: len(pods(crd, namespace, "again")) == 2, what="2 pods")
    old_uid = tj(crd, namespace, "again")["metadata"]["uid"]
    old_pods = {p["metadata"]["name"]: p["metadata"]["uid"]
                for p in all_pods(crd, namespace, "again")}
    crd.kubectl("delete", "tj", "again", "-n", namespace, "--wait=false")
    create(crd, namespace, job("again", workers=2))
    new_uid = wait_for(lambda: (j := crd.get_json("tj", "-n", namespace)["items"]) and
                       j[0]["metadata"]["uid"] != old_uid and j[0]["metadata"]["uid"],
                       what="the re-applied job")

    def new_pods():
        ps = all_pods(crd, namespace, "again")
        mine = [p for p in ps
                if p["metadata"]["ownerReferences"][0]["uid"] == new_uid
                and not p["metadata"].get("deletionTimestamp")]
        return len(ps) == 2 and len(mine) == 2 and mine
    got = wait_for(new_pods, timeout=60, what="the new job's 2 pods, the old ones gone")
    assert {p["metadata"]["name"] for p in got} == set(old_pods)
    assert not {p["metadata"]["uid"] for p in got} & set(old_pods.values())
    for p in got:
        assert p["metadata"]["labels"]["ctrain.dev/attempt"] == "1"
    # It runs to the end like any job.
    for name in old_pods:
        set_pod_exit(crd, namespace, name, 0)
    wait_for(lambda: cond(tj(crd, namespace, "again"), "Succeeded"), what="Succeeded")
    assert "finalizer ctrain.dev/attempt removed" in ctl.logs()


def test_a_pod_of_another_namespace_is_never_the_jobs(crd, namespace, other_namespace,
                                                       start_controller):
    """Row 2: a pod in another namespace whose controller ownerReference names the job's
    uid (uids are not secret) and whose labels claim a later attempt. Before the fix it was
    taken as the job's: the job's pods were deleted, status.attempt jumped to the decoy's
    label and the NetworkPolicy was rewritten for it."""
    ctl = start_controller()
    create(crd, namespace, job("victim", workers=2))
    wait_for(lambda: len(pods(crd, namespace, "victim")) == 2, what="2 pods")
    j = tj(crd, namespace, "victim")
    before = {p["metadata"]["name"]: p["metadata"]["uid"]
              for p in all_pods(crd, namespace, "victim")}
    np_before = version_of(crd, "networkpolicy", namespace, "victim")
    decoy = {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {
            "name": "victim-worker-0", "namespace": other_namespace,
            "finalizers": ["example.com/hold"],
            "labels": {"ctrain.dev/job-name": "victim", "ctrain.dev/attempt": "7",
                       "ctrain.dev/replica-type": "worker", "ctrain.dev/replica-index": "0"},
            "ownerReferences": [{"apiVersion": "ctrain.dev/v1alpha1", "kind": "TrainingJob",
                                 "name": "victim", "uid": j["metadata"]["uid"],
                                 "controller": True}]},
        "spec": {"containers": [{"name": "c", "image": "decoy:latest"}]}}
    crd.kubectl("create", "-f", "-", input=json.dumps(decoy))
    decoy_before = version_of(crd, "pod", other_namespace, "victim-worker-0")
    # A pass over the job: its spec's annotation changes.
    crd.kubectl("annotate", "tj", "victim", "-n", namespace, "poke=1")
    wait_for(lambda: "victim" in ctl.logs(), what="a pass")
    import time
    time.sleep(3)
    j2 = tj(crd, namespace, "victim")
    assert j2["status"].get("attempt", 1) == 1, j2["status"]
    after = {p["metadata"]["name"]: p["metadata"]["uid"]
             for p in all_pods(crd, namespace, "victim")}
    assert after == before
    assert version_of(crd, "networkpolicy", namespace, "victim") == np_before
    # The decoy: untouched by the controller (the garbage collector may mark it, since its
    # owner is not in its namespace; our finalizer is never added, nor is it deleted by us).
    d = crd.get_json("pod", "victim-worker-0", "-n", other_namespace)
    assert d["metadata"]["uid"] == decoy_before[0]
    assert "ctrain.dev/attempt" not in d["metadata"].get("finalizers", [])
    assert "deleted pod victim-worker-0" not in ctl.logs()


def test_foreign_objects_under_the_jobs_names_are_never_touched(crd, namespace,
                                                                start_controller):
    """Row 3: an admin's NetworkPolicy named like the job, a pod under one of the job's pod
    names, and a ConfigMap and Secret under the old `<job>-cluster-1` and `<job>-token-1`
    names, none of them the job's. Before the fix the NetworkPolicy was merge-patched (its
    podSelector rewritten, its Egress type dropped), the ConfigMap and Secret adopted as
    they were, and the previous attempt's ConfigMap deleted with no ownership check. Now
    the job waits (Blocked, a NameTaken event naming the object) and touches none of them;
    once the names are free it runs."""
    ctl = start_controller()
    admin_np = {
        "apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
        "metadata": {"name": "fence"},
        "spec": {"podSelector": {}, "policyTypes": ["Ingress", "Egress"]}}
    create(crd, namespace, admin_np)
    crd.kubectl("create", "configmap", "fence-cluster-1", "-n", namespace,
                "--from-literal=cluster={\"worker\":[\"a:1\",\"b:1\",\"c:1\"]}")
    crd.kubectl("create", "secret", "generic", "fence-token-1", "-n", namespace,
                "--from-literal=token=old")
    foreign = {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "fence-worker-1"},
        "spec": {"containers": [{"name": "c", "image": "someone:latest"}]}}
    create(crd, namespace, foreign)
    kept = {(k, n): version_of(crd, k, namespace, n) for k, n in [
        ("networkpolicy", "fence"), ("configmap", "fence-cluster-1"),
        ("secret", "fence-token-1"), ("pod", "fence-worker-1")]}
    create(crd, namespace, job("fence", workers=2))

    blocked = wait_for(lambda: cond(tj(crd, namespace, "fence"), "Blocked"), timeout=60,
                       what="the Blocked condition")
    assert blocked["reason"] == "NameTaken"
    assert "NetworkPolicy fence" in blocked["message"] or "pod fence-worker-1" in \
        blocked["message"], blocked
    events = wait_for(lambda: [e["message"] for e in
                               crd.get_json("events", "-n", namespace)["items"]
                               if e["reason"] == "NameTaken"], what="a NameTaken event")
    assert any("is not this job's" in m for m in events), events
    assert not pods(crd, namespace, "fence")  # the policy blocks every pod of the pass
    for (k, n), v in kept.items():
        assert version_of(crd, k, namespace, n) == v, f"{k} {n} was written"

    # The admin's policy goes: the job still waits on the pod name.
    crd.kubectl("delete", "networkpolicy", "fence", "-n", namespace)
    wait_for(lambda: "pod fence-worker-1" in (cond(tj(crd, namespace, "fence"), "Blocked") or
                                              {}).get("message", ""),
             timeout=60, what="Blocked on the pod")
    assert version_of(crd, "pod", namespace, "fence-worker-1") == kept[("pod", "fence-worker-1")]
    # The pod goes too: the job runs, Blocked turns False.
    crd.kubectl("delete", "pod", "fence-worker-1", "-n", namespace, "--grace-period=0",
                "--force")
    wait_for(lambda: len(pods(crd, namespace, "fence")) == 2, timeout=60, what="2 pods")
    wait_for(lambda: not cond(tj(crd, namespace, "fence"), "Blocked"), what="Blocked False")
    np = crd.get_json("networkpolicy", "fence", "-n", namespace)
    assert np["metadata"]["ownerReferences"][0]["uid"] == tj(crd, namespace, "fence")[
        "metadata"]["uid"]
    # A gang restart deletes the previous attempt's ConfigMap: its own, never the namesake.
    cm1 = crd.attempt_object(namespace, "fence", "cluster", 1)
    set_pod_exit(crd, namespace, "fence-worker-0", 75)
    wait_for(lambda: len(pods(crd, namespace, "fence")) == 2 and all(
        p["metadata"]["labels"]["ctrain.dev/attempt"] == "2"
        for p in pods(crd, namespace, "fence").values()), timeout=60, what="attempt 2")
    wait_for(lambda: crd.kubectl("get", "configmap", cm1, "-n", namespace,
                                 check=False).returncode != 0, what=f"{cm1} deleted")
    for k, n in [("configmap", "fence-cluster-1"), ("secret", "fence-token-1")]:
        assert version_of(crd, k, namespace, n) == kept[(k, n)], f"{k} {n} was written"
    assert "fence-cluster-1 " not in ctl.logs()


def test_two_tenants_with_edit_roles(crd, namespace, other_namespace, start_controller):
    """Two users with only the default `edit` role, each in a namespace of her own: nothing
    one does makes the controller write in the other's (tenantlib.two_tenants)."""
    ctl = start_controller()
    two_tenants(crd, namespace, other_namespace, ctl.logs)
