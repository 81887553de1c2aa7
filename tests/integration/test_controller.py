"""ctrain-controller against a real kube-apiserver and kube-controller-manager,
running with only the RBAC in manifests/ (a ServiceAccount token). Pod phases
are simulated by writing pod status, as envtest-based tests do: no node runs
these pods."""
import base64
import json
import time
import uuid

import pytest


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


def tj(cluster, ns, name):
    return cluster.get_json("tj", name, "-n", ns)


def cond(j, t):
    for c in j.get("status", {}).get("conditions", []):
        if c["type"] == t and c["status"] == "True":
            return c
    return None


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


def test_pods_service_and_tf_config(crd, namespace, start_controller):
    ctl = start_controller()
    create(crd, namespace, job("tfc", workers=2, chief=True, port=2345))
    ps = wait_for(lambda: len(pods(crd, namespace, "tfc")) == 3 and pods(crd, namespace, "tfc"),
                  what="3 pods")
    assert set(ps) == {"tfc-chief-0", "tfc-worker-0", "tfc-worker-1"}
    w1 = ps["tfc-worker-1"]
    spec = w1["spec"]
    assert spec["restartPolicy"] == "Never"
    assert spec["hostname"] == "tfc-worker-1" and spec["subdomain"] == "tfc"
    assert spec["automountServiceAccountToken"] is False
    labels = w1["metadata"]["labels"]
    assert labels["ctrain.dev/replica-type"] == "worker"
    assert labels["ctrain.dev/replica-index"] == "1"
    assert labels["ctrain.dev/attempt"] == "1"
    ref = w1["metadata"]["ownerReferences"][0]
    assert ref["kind"] == "TrainingJob" and ref["controller"] and ref["blockOwnerDeletion"]
    env = {e["name"]: e for e in spec["containers"][0]["env"]}
    tfc = json.loads(env["TF_CONFIG"]["value"])
    assert tfc["cluster"] == {
        "chief": [f"tfc-chief-0.tfc.{namespace}.svc:2345"],
        "worker": [f"tfc-worker-0.tfc.{namespace}.svc:2345",
                   f"tfc-worker-1.tfc.{namespace}.svc:2345"]}
    assert tfc["task"] == {"type": "worker", "index": 1}
    assert tfc["environment"] == "cloud"
    assert env["CTRAIN_JOB_NAME"]["value"] == "tfc"
    assert env["CTRAIN_NAMESPACE"]["value"] == namespace
    assert env["CTRAIN_JOB_TOKEN"]["valueFrom"]["secretKeyRef"] == {"name": "tfc-token-1",
                                                                   "key": "token"}
    sec = crd.get_json("secret", "tfc-token-1", "-n", namespace)
    assert sec["metadata"]["ownerReferences"][0]["uid"] == tj(crd, namespace, "tfc")["metadata"]["uid"]
    assert len(base64.b64decode(sec["data"]["token"])) == 64  # hex of HMAC-SHA256
    svc = crd.get_json("service", "tfc", "-n", namespace)
    assert svc["spec"]["clusterIP"] == "None"
    assert svc["spec"]["publishNotReadyAddresses"] is True
    j = wait_for(lambda: cond(tj(crd, namespace, "tfc"), "Created") and tj(crd, namespace, "tfc"),
                 what="Created condition")
    assert j["status"]["observedGeneration"] == j["metadata"]["generation"]
    assert "ctrain_pods_created_total 3" in ctl.metrics()
    # Events for each pod created (written in the background: poll).
    wait_for(lambda: sum(1 for e in crd.get_json("events", "-n", namespace)["items"]
                         if e["reason"] == "SuccessfulCreatePod") >= 3, what="3 create events")
    # A NetworkPolicy lets only this job's pods reach the collective port.
    np = crd.get_json("networkpolicy", "tfc", "-n", namespace)
    assert np["spec"]["podSelector"] == {"matchLabels": {"ctrain.dev/job-name": "tfc"}}
    assert np["spec"]["policyTypes"] == ["Ingress"]
    (rule,) = np["spec"]["ingress"]
    assert rule["from"] == [{"podSelector": {"matchLabels": {"ctrain.dev/job-name": "tfc"}}}]
    assert rule["ports"] == [{"protocol": "TCP", "port": 2345}]
    assert np["metadata"]["ownerReferences"][0]["kind"] == "TrainingJob"


def test_exit_75_gang_restarts_with_attempt_2(crd, namespace, start_controller):
    start_controller()
    create(crd, namespace, job("gang", workers=2))
    wait_for(lambda: len(pods(crd, namespace, "gang")) == 2, what="2 pods")
    old = {n: p["metadata"]["uid"] for n, p in pods(crd, namespace, "gang").items()}
    set_pod_exit(crd, namespace, "gang-worker-1", 75)

    def restarted():
        ps = pods(crd, namespace, "gang")
        return len(ps) == 2 and all(p["metadata"]["labels"]["ctrain.dev/attempt"] == "2"
                                    for p in ps.values()) and ps
    ps = wait_for(restarted, what="attempt-2 pods")
    assert all(p["metadata"]["uid"] not in old.values() for p in ps.values())
    j = tj(crd, namespace, "gang")
    assert j["status"]["restarts"] == 1
    env = {e["name"]: e for e in ps["gang-worker-0"]["spec"]["containers"][0]["env"]}
    assert env["CTRAIN_ATTEMPT"]["value"] == "2"
    restarts = wait_for(lambda: [e for e in crd.get_json("events", "-n", namespace)["items"]
                                 if e["reason"] == "Restarting"], what="Restarting event")
    assert "gang-worker-1" in restarts[0]["message"] and "75" in restarts[0]["message"]
    # A gang restart makes a new token, in a new Secret; attempt 1's stays until the job goes.
    assert env["CTRAIN_JOB_TOKEN"]["valueFrom"]["secretKeyRef"]["name"] == "gang-token-2"
    t1 = token_of(crd, namespace, "gang-token-1")
    t2 = token_of(crd, namespace, "gang-token-2")
    assert t1 and t2 and t1 != t2


def token_of(cluster, ns, secret):
    """The token in a job's Secret, read as the admin (the controller cannot)."""
    return base64.b64decode(cluster.get_json("secret", secret, "-n", ns)["data"]["token"]).decode()


def test_exit_78_fails_without_restart(crd, namespace, start_controller):
    start_controller()
    create(crd, namespace, job("perm", workers=2))
    wait_for(lambda: len(pods(crd, namespace, "perm")) == 2, what="2 pods")
    set_pod_exit(crd, namespace, "perm-worker-0", 78)
    j = wait_for(lambda: cond(tj(crd, namespace, "perm"), "Failed") and tj(crd, namespace, "perm"),
                 what="Failed")
    c = cond(j, "Failed")
    assert "78" in c["message"], c
    assert j["status"].get("restarts", 0) == 0
    time.sleep(2)
    assert all(p["metadata"]["labels"]["ctrain.dev/attempt"] == "1"
               for p in pods(crd, namespace, "perm").values())


def test_success_and_clean_pod_policy(crd, namespace, start_controller):
    start_controller()
    create(crd, namespace, job("ok", workers=3))
    wait_for(lambda: len(pods(crd, namespace, "ok")) == 3, what="3 pods")
    set_pod_exit(crd, namespace, "ok-worker-0", 0)
    j = wait_for(lambda: cond(tj(crd, namespace, "ok"), "Succeeded") and tj(crd, namespace, "ok"),
                 what="Succeeded")
    assert j["status"].get("completionTime")
    # cleanPodPolicy Running (default): the unfinished workers go, worker 0 stays.
    wait_for(lambda: set(pods(crd, namespace, "ok")) == {"ok-worker-0"}, what="clean-up")


def test_active_deadline_fires(crd, namespace, start_controller):
    start_controller()
    create(crd, namespace, job("late", workers=1, activeDeadlineSeconds=3))
    wait_for(lambda: len(pods(crd, namespace, "late")) == 1, what="1 pod")
    t0 = time.monotonic()
    j = wait_for(lambda: cond(tj(crd, namespace, "late"), "Failed") and tj(crd, namespace, "late"),
                 timeout=30, what="DeadlineExceeded")
    assert cond(j, "Failed")["reason"] == "DeadlineExceeded"
    assert time.monotonic() - t0 < 15


def test_delete_job_garbage_collects_pods(crd, namespace, start_controller):
    start_controller()
    create(crd, namespace, job("gc", workers=2))
    wait_for(lambda: len(pods(crd, namespace, "gc")) == 2, what="2 pods")
    crd.kubectl("delete", "tj", "gc", "-n", namespace, "--wait=false")
    wait_for(lambda: not crd.get_json("pods", "-n", namespace, "-l",
                                      "ctrain.dev/job-name=gc")["items"],
             timeout=60, what="pods garbage-collected")
    wait_for(lambda: crd.kubectl("get", "service", "gc", "-n", namespace,
                                 check=False).returncode != 0, timeout=60, what="service GC")


def test_controller_restart_creates_no_duplicates(crd, namespace, start_controller):
    import signal
    ctl = start_controller(name="first")
    create(crd, namespace, job("re", workers=4))
    wait_for(lambda: len(pods(crd, namespace, "re")) == 4, what="4 pods")
    before = {n: p["metadata"]["uid"] for n, p in pods(crd, namespace, "re").items()}
    token = token_of(crd, namespace, "re-token-1")
    ctl.stop(signal.SIGKILL)
    second = start_controller(name="second")
    # The new leader must wait out the killed one's lease, then sync and reconcile.
    wait_for(lambda: "became leader" in second.logs(), timeout=40, what="leadership")
    wait_for(lambda: "ctrain_reconcile_total 0" not in second.metrics(), what="a reconcile")
    time.sleep(2)
    after = {n: p["metadata"]["uid"] for n, p in pods(crd, namespace, "re").items()}
    assert after == before
    assert "ctrain_pods_created_total 0" in second.metrics()
    assert "already exists" not in second.logs()
    # The restarted controller derives the same token for the same attempt
    # (it cannot read the Secret): the Secret is untouched and what the pods'
    # secretKeyRef names still resolves to the token they started with.
    assert "secret re-token-1 is there" in second.logs()
    assert token_of(crd, namespace, "re-token-1") == token
    for p in pods(crd, namespace, "re").values():
        env = {e["name"]: e for e in p["spec"]["containers"][0]["env"]}
        assert env["CTRAIN_JOB_TOKEN"]["valueFrom"]["secretKeyRef"]["name"] == "re-token-1"
    # A gang restart after the controller restart gets a new token.
    set_pod_exit(crd, namespace, "re-worker-3", 75)
    wait_for(lambda: all(p["metadata"]["labels"]["ctrain.dev/attempt"] == "2"
                         for p in pods(crd, namespace, "re").values())
             and len(pods(crd, namespace, "re")) == 4, what="attempt 2")
    assert token_of(crd, namespace, "re-token-2") not in ("", token)


def test_sigterm_releases_lease_for_standby(crd, namespace, start_controller):
    a = start_controller(name="a")
    wait_for(lambda: "became leader" in a.logs(), timeout=20, what="a leads")
    b = start_controller(name="b")
    time.sleep(2)
    assert "became leader" not in b.logs()
    t0 = time.monotonic()
    assert a.stop() == 0
    wait_for(lambda: "became leader" in b.logs(), timeout=20, what="b leads")
    # Released on SIGTERM: far sooner than the 15 s lease duration.
    assert time.monotonic() - t0 < 10
    create(crd, namespace, job("after", workers=1))
    wait_for(lambda: len(pods(crd, namespace, "after")) == 1, what="pod from the new leader")


def test_checkpoint_uri_renders_backup_env(crd, namespace, start_controller):
    """Issue 19: spec.checkpoint.uri gives every chief and worker container
    the URI, the endpoint and the credentials by secretKeyRef; the
    controller never reads that Secret (it may not exist yet)."""
    ctl = start_controller()
    create(crd, namespace, job("s3j", workers=2, chief=True, checkpoint={
        "uri": "s3://bucket/runs/s3j", "endpoint": "http://minio.storage:9000",
        "credentialsSecret": "s3-creds"}))
    ps = wait_for(lambda: len(pods(crd, namespace, "s3j")) == 3 and pods(crd, namespace, "s3j"),
                  what="3 pods")
    for p in ps.values():
        env = {e["name"]: e for e in p["spec"]["containers"][0]["env"]}
        assert env["CTRAIN_BACKUP_URI"] == {"name": "CTRAIN_BACKUP_URI",
                                            "value": "s3://bucket/runs/s3j"}
        assert env["CTRAIN_S3_ENDPOINT"]["value"] == "http://minio.storage:9000"
        for k, optional in (("AWS_ACCESS_KEY_ID", False), ("AWS_SECRET_ACCESS_KEY", False),
                            ("AWS_SESSION_TOKEN", True)):
            assert env[k]["valueFrom"]["secretKeyRef"] == {
                "name": "s3-creds", "key": k, "optional": optional}, env[k]
        assert "CTRAIN_BACKUP_DIR" not in env
        assert not p["spec"].get("volumes")
    # The Secret's name is in the pods only: not in status, events or logs.
    j = tj(crd, namespace, "s3j")
    assert "s3-creds" not in json.dumps(j.get("status", {}))
    evs = crd.get_json("events", "-n", namespace)["items"]
    assert not [e for e in evs if "s3-creds" in e.get("message", "")]
    assert "s3-creds" not in ctl.logs()


def test_key_rotation_changes_only_new_attempts(crd, namespace, start_controller):
    """README's key rotation: delete the key Secret and restart the
    controller. The running attempt's Secret is never rewritten (its pods
    and any pod of it still to start agree); the next attempt's token comes
    from the new key, which the restarted controller created."""
    import signal
    first = start_controller(name="before")
    create(crd, namespace, job("rot", workers=2))
    wait_for(lambda: len(pods(crd, namespace, "rot")) == 2, what="2 pods")
    t1 = token_of(crd, namespace, "rot-token-1")
    old_key = crd.get_json("secret", "ctrain-controller-key", "-n", "ctrain-system")
    first.stop(signal.SIGTERM)
    crd.kubectl("delete", "secret", "ctrain-controller-key", "-n", "ctrain-system")
    second = start_controller(name="after")
    wait_for(lambda: "became leader" in second.logs(), timeout=40, what="leadership")
    new_key = crd.get_json("secret", "ctrain-controller-key", "-n", "ctrain-system")
    assert new_key["metadata"]["uid"] != old_key["metadata"]["uid"]
    assert new_key["data"]["key"] != old_key["data"]["key"]
    wait_for(lambda: "secret rot-token-1 is there" in second.logs(), what="a pass over rot")
    assert token_of(crd, namespace, "rot-token-1") == t1
    set_pod_exit(crd, namespace, "rot-worker-0", 75)
    wait_for(lambda: len(pods(crd, namespace, "rot")) == 2 and all(
        p["metadata"]["labels"]["ctrain.dev/attempt"] == "2"
        for p in pods(crd, namespace, "rot").values()), what="attempt 2")
    t2 = token_of(crd, namespace, "rot-token-2")
    assert t2 and t2 != t1
