"""Ownership on a shared, churning cluster (issue 40): ctrain-controller against a real
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


def all_pods(cluster, ns, name):
    """Every pod labelled for the job, terminating ones included."""
    return cluster.get_json("pods", "-n", ns, "-l", f"ctrain.dev/job-name={name}")["items"]


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


def snapshot(cluster, ns, kinds=("pods", "services", "configmaps", "secrets",
                                  "networkpolicies")):
    """(kind, name) -> (uid, resourceVersion) of every object of those kinds in ns."""
    out = {}
    for k in kinds:
        for o in cluster.get_json(k, "-n", ns)["items"]:
            out[(k, o["metadata"]["name"])] = (o["metadata"]["uid"],
                                               o["metadata"]["resourceVersion"])
    return out


def test_two_tenants_with_edit_roles(crd, namespace, other_namespace, start_controller):
    """Two users, each with only the default `edit` role in their own namespace. Whatever
    one does in hers (a TrainingJob of the other's job name, pods and ConfigMaps and Secrets
    under any names, labels claiming the other's job, ownerReferences naming the other's
    job's uid), the controller writes and deletes nothing in the other namespace, and in
    hers only objects of her own job, of kinds she could write herself."""
    a, b = namespace, other_namespace
    for user, ns in (("alice", a), ("bob", b)):
        crd.kubectl("create", "rolebinding", f"{user}-edit", "-n", ns, "--clusterrole=edit",
                    f"--user={user}")
    ctl = start_controller()

    def as_user(user, *args, **kw):
        return crd.kubectl("--as", user, *args, **kw)

    # Bob's job runs in b.
    as_user("bob", "apply", "-n", b, "-f", "-", input=json.dumps(job("shared", workers=2)))
    wait_for(lambda: len(pods(crd, b, "shared")) == 2, what="bob's 2 pods")
    wait_for(lambda: cond(tj(crd, b, "shared"), "Created"), what="bob's job Created")
    bob_uid = tj(crd, b, "shared")["metadata"]["uid"]
    before_b = snapshot(crd, b)
    bob_pods = {p["metadata"]["name"]: p["metadata"]["uid"] for p in all_pods(crd, b, "shared")}

    # Alice, in a: decoys first (her own namesake objects under every name the controller
    # ever used), then a job of bob's job's name.
    hostile_ref = [{"apiVersion": "ctrain.dev/v1alpha1", "kind": "TrainingJob",
                    "name": "shared", "uid": bob_uid, "controller": True}]
    for i in range(2):
        as_user("alice", "apply", "-n", a, "-f", "-", input=json.dumps({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"decoy-{i}", "ownerReferences": hostile_ref,
                         "finalizers": ["example.com/hold"],
                         "labels": {"ctrain.dev/job-name": "shared", "ctrain.dev/attempt": "9",
                                    "ctrain.dev/replica-type": "worker",
                                    "ctrain.dev/replica-index": str(i)}},
            "spec": {"containers": [{"name": "c", "image": "decoy:latest"}]}}))
    for name in ("shared-cluster-1", "shared-cluster-2", "shared-token-1"):
        as_user("alice", "create", "configmap", name, "-n", a, "--from-literal=x=1")
    as_user("alice", "apply", "-n", a, "-f", "-", input=json.dumps(job("shared", workers=1)))
    wait_for(lambda: len(pods(crd, a, "shared")) >= 1 and [
        p for p in pods(crd, a, "shared").values()
        if p["metadata"]["ownerReferences"][0]["uid"] ==
        tj(crd, a, "shared")["metadata"]["uid"]], timeout=60, what="alice's pod")
    alice_uid = tj(crd, a, "shared")["metadata"]["uid"]
    # Nudge a pass over bob's job too (a pod event of his namespace).
    crd.kubectl("annotate", "tj", "shared", "-n", b, "nudge=1")
    import time
    time.sleep(3)

    # Nothing of b changed: every object as it was, bob's job on attempt 1 with its pods.
    assert snapshot(crd, b) == before_b
    assert {p["metadata"]["name"]: p["metadata"]["uid"]
            for p in all_pods(crd, b, "shared")} == bob_pods
    assert tj(crd, b, "shared")["status"].get("attempt", 1) == 1
    # In a: every object the controller made is alice's job's, of a kind she may write.
    for (kind, name), _ in snapshot(crd, a).items():
        o = crd.get_json(kind, name, "-n", a)
        refs = o["metadata"].get("ownerReferences", [])
        if any(r.get("kind") == "TrainingJob" and r.get("uid") == alice_uid for r in refs):
            verb_ok = crd.kubectl("auth", "can-i", "create", kind, "-n", a, "--as", "alice",
                                  check=False).stdout.strip()
            assert verb_ok == "yes", f"the controller wrote {kind} {name}, which alice cannot"
        elif name.startswith("decoy-") or name.startswith("shared-"):
            # Alice's own objects: never gained our finalizer, never written by us.
            assert "ctrain.dev/attempt" not in o["metadata"].get("finalizers", []), name
    assert f"{b}/shared: pod decoy" not in ctl.logs()
    for i in range(2):
        crd.kubectl("patch", "pod", f"decoy-{i}", "-n", a, "--type=json", "-p",
                    '[{"op":"remove","path":"/metadata/finalizers"}]', check=False)
