"""What the controller may touch on a cluster shared by tenants, checked the
same way by the integration lane (the controller as a process, tests/integration/
test_ownership.py) and the e2e lane (its Deployment on real nodes, tests/e2e/
test_tenants.py): two users with only the default `edit` role in namespaces of their own."""
import json
import time

from ctllib import cond, job, pods, tj, wait_for


def all_pods(cluster, ns, name):
    """Every pod labelled for the job, terminating ones included."""
    return cluster.get_json("pods", "-n", ns, "-l", f"ctrain.dev/job-name={name}")["items"]


def snapshot(cluster, ns, kinds=("pods", "services", "configmaps", "secrets",
                                  "networkpolicies")):
    """(kind, name) -> (uid, resourceVersion) of every object of those kinds in ns."""
    out = {}
    for k in kinds:
        for o in cluster.get_json(k, "-n", ns)["items"]:
            out[(k, o["metadata"]["name"])] = (o["metadata"]["uid"],
                                               o["metadata"]["resourceVersion"])
    return out


def _two_tenants(crd, a, b, controller_logs, make_job=job, running=False):
    """two_tenants' steps."""
    for user, ns in (("alice", a), ("bob", b)):
        crd.kubectl("create", "rolebinding", f"{user}-edit", "-n", ns, "--clusterrole=edit",
                    f"--user={user}")

    def as_user(user, *args, **kw):
        return crd.kubectl("--as", user, *args, **kw)

    # Bob's job runs in b.
    as_user("bob", "apply", "-n", b, "-f", "-",
            input=json.dumps(make_job("shared", workers=2)))
    wait_for(lambda: len(pods(crd, b, "shared")) == 2, what="bob's 2 pods")
    if running:
        wait_for(lambda: all(p["status"].get("phase") == "Running"
                             for p in pods(crd, b, "shared").values()), timeout=180,
                 what="bob's pods Running")
        time.sleep(2)
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
            "spec": {"schedulingGates": [{"name": "example.com/hold"}],
                     "containers": [{"name": "c", "image": "decoy:latest"}]}}))
    for name in ("shared-cluster-1", "shared-cluster-2", "shared-token-1"):
        as_user("alice", "create", "configmap", name, "-n", a, "--from-literal=x=1")
    as_user("alice", "apply", "-n", a, "-f", "-",
            input=json.dumps(make_job("shared", workers=1)))
    wait_for(lambda: len(pods(crd, a, "shared")) >= 1 and [
        p for p in pods(crd, a, "shared").values()
        if p["metadata"]["ownerReferences"][0]["uid"] ==
        tj(crd, a, "shared")["metadata"]["uid"]], timeout=60, what="alice's pod")
    alice_uid = tj(crd, a, "shared")["metadata"]["uid"]
    # Nudge a pass over bob's job too (a pod event of his namespace).
    crd.kubectl("annotate", "tj", "shared", "-n", b, "nudge=1")
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
    assert f"{b}/shared: pod decoy" not in controller_logs()


def two_tenants(crd, a, b, controller_logs, make_job=job, running=False):
    """Two users, alice in namespace `a` and bob in `b`, each with only the default `edit`
    role in their own namespace. Whatever alice does in hers (a TrainingJob of bob's job's
    name, pods and ConfigMaps under any names, labels claiming bob's job, ownerReferences
    naming his job's uid), the controller writes and deletes nothing in bob's namespace, and
    in hers only objects of her own job, of kinds she could write herself.
    `controller_logs()` gives the controller's log; `make_job(name, workers=)` the
    TrainingJob; with `running`, bob's pods are waited for until they run (real nodes)
    before his namespace is recorded."""
    try:
        _two_tenants(crd, a, b, controller_logs, make_job, running)
    finally:
        for i in range(2):  # alice's decoys hold her finalizer: released, or `a` never goes
            crd.kubectl("patch", "pod", f"decoy-{i}", "-n", a, "--type=json", "-p",
                        '[{"op":"remove","path":"/metadata/finalizers"}]', check=False)
