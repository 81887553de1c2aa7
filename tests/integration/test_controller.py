"""ctrain-controller against a real kube-apiserver and kube-controller-manager,
running with only the RBAC in manifests/ (a ServiceAccount token). Pod phases
are simulated by writing pod status, as envtest-based tests do: no node runs
these pods."""
import base64
import json
import re
import time

import pytest


from ctllib import (FakeChief, columns, cond, create, gone, job, kubelet_env, pods, set_pod_exit, tj,
                    wait_for)


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
    # The cluster is in the attempt's ConfigMap; the kubelet expands the
    # reference in TF_CONFIG from the variable declared before it.
    assert env["TF_CONFIG"]["value"] == (
        '{"cluster":$(CTRAIN_TF_CLUSTER),"task":{"type":"worker","index":1},'
        '"environment":"cloud"}')
    assert env["CTRAIN_TF_CLUSTER"]["valueFrom"]["configMapKeyRef"] == {
        "name": crd.attempt_object(namespace, "tfc", "cluster"), "key": "cluster"}
    cm = crd.get_json("configmap", crd.attempt_object(namespace, "tfc", "cluster"), "-n", namespace)
    assert cm["immutable"] is True
    assert cm["metadata"]["ownerReferences"][0]["kind"] == "TrainingJob"
    tfc = json.loads(kubelet_env(crd, namespace, spec["containers"][0])["TF_CONFIG"])
    assert tfc["cluster"] == {
        "chief": [f"tfc-chief-0.tfc.{namespace}.svc:2345"],
        "worker": [f"tfc-worker-0.tfc.{namespace}.svc:2345",
                   f"tfc-worker-1.tfc.{namespace}.svc:2345"]}
    assert tfc["task"] == {"type": "worker", "index": 1}
    assert tfc["environment"] == "cloud"
    assert env["CTRAIN_JOB_NAME"]["value"] == "tfc"
    assert env["CTRAIN_NAMESPACE"]["value"] == namespace
    assert env["CTRAIN_JOB_TOKEN"]["valueFrom"]["secretKeyRef"] == {
        "name": crd.attempt_object(namespace, "tfc", "token"), "key": "token"}
    sec = crd.get_json("secret", crd.attempt_object(namespace, "tfc", "token"), "-n", namespace)
    assert sec["metadata"]["ownerReferences"][0]["uid"] == tj(crd, namespace, "tfc")["metadata"]["uid"]
    assert len(base64.b64decode(sec["data"]["token"])) == 64  # hex of HMAC-SHA256
    svc = crd.get_json("service", "tfc", "-n", namespace)
    assert svc["spec"]["clusterIP"] == "None"
    assert svc["spec"]["publishNotReadyAddresses"] is True
    j = wait_for(lambda: cond(tj(crd, namespace, "tfc"), "Created") and tj(crd, namespace, "tfc"),
                 what="Created condition")
    assert j["status"]["observedGeneration"] == j["metadata"]["generation"]
    assert "ctrain_pods_created_total 3" in ctl.metrics()
    # SuccessfulCreatePod events name every pod created, one event per pass
    # ("Created pods: a, b, c (attempt 1)"); written in the background: poll.
    names = sorted(ps)

    def create_events():
        return [e["message"] for e in crd.get_json("events", "-n", namespace)["items"]
                if e["reason"] == "SuccessfulCreatePod"]
    wait_for(lambda: all(any(re.search(rf"\b{p}\b", m) for m in create_events()) for p in names),
             what="create events naming the 3 pods")
    assert len(create_events()) < 3, create_events()  # one per pass, not one per pod
    assert all(m.endswith("(attempt 1)") for m in create_events()), create_events()
    # The attempt's NetworkPolicy: only this job's pods of attempt 1 reach its
    # pods, on every port (NCCL uses ephemeral ones)...
    np = crd.get_json("networkpolicy", "tfc", "-n", namespace)
    assert np["spec"]["podSelector"] == {"matchLabels": {"ctrain.dev/job-name": "tfc"}}
    assert np["spec"]["policyTypes"] == ["Ingress"]
    rule, progress = np["spec"]["ingress"]
    assert rule["from"] == [{"podSelector": {"matchLabels": {"ctrain.dev/job-name": "tfc",
                                                             "ctrain.dev/attempt": "1"}}}]
    assert "ports" not in rule
    # ... and the controller's pods, from the controller's namespace only, the progress port.
    assert progress["from"] == [{"namespaceSelector": {"matchLabels": {
        "kubernetes.io/metadata.name": "ctrain-system"}}, "podSelector": {"matchLabels": {
            "app.kubernetes.io/name": "ctrain", "app.kubernetes.io/component": "controller"}}}]
    assert progress["ports"] == [{"protocol": "TCP", "port": 8471}]
    c0 = spec["containers"][0]
    assert env["CTRAIN_PROGRESS_PORT"]["value"] == "8471"
    assert c0["ports"] == [{"name": "progress", "containerPort": 8471, "protocol": "TCP"}]
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
    assert env["CTRAIN_JOB_TOKEN"]["valueFrom"]["secretKeyRef"]["name"] == crd.attempt_object(
        namespace, "gang", "token", 2)
    t1 = token_of(crd, namespace, crd.attempt_object(namespace, "gang", "token", 1))
    t2 = token_of(crd, namespace, crd.attempt_object(namespace, "gang", "token", 2))
    assert t1 and t2 and t1 != t2


def test_force_deleted_pod_is_a_disruption_never_recreated(crd, namespace, start_controller):
    """`kubectl delete pod --force --grace-period=0` of a running worker: the
    ctrain.dev/attempt finalizer keeps it listed until the controller has
    recorded the end of attempt 1 as a disruption (backoffLimit 0 still
    restarts), then releases it; no pod of attempt 1 is created again, the
    NetworkPolicy moves to attempt 2 before its pods appear."""
    start_controller()
    create(crd, namespace, job("fd", workers=2, backoffLimit=0))
    ps = wait_for(lambda: len(pods(crd, namespace, "fd")) == 2 and pods(crd, namespace, "fd"),
                  what="2 pods")
    assert ps["fd-worker-1"]["metadata"]["finalizers"] == ["ctrain.dev/attempt"]
    for p in ps:
        crd.kubectl("patch", "pod", p, "-n", namespace, "--subresource=status", "--type=merge",
                    "-p", json.dumps({"status": {"phase": "Running"}}))
    wait_for(lambda: cond(tj(crd, namespace, "fd"), "Running"), what="Running")
    uids = {p["metadata"]["uid"] for p in ps.values()}
    crd.kubectl("delete", "pod", "fd-worker-1", "-n", namespace, "--force", "--grace-period=0",
                "--wait=false")
    seen = {}

    def attempt_2():
        items = crd.get_json("pods", "-n", namespace, "-l", "ctrain.dev/job-name=fd")["items"]
        for p in items:
            seen[p["metadata"]["uid"]] = p["metadata"]["labels"]["ctrain.dev/attempt"]
        live = [p for p in items if not p["metadata"].get("deletionTimestamp")]
        return (len(live) == 2 and all(p["metadata"]["labels"]["ctrain.dev/attempt"] == "2"
                                       for p in live) and live)
    wait_for(attempt_2, timeout=60, what="attempt-2 pods")
    # Every pod of attempt 1 is one we saw before the delete: none recreated in it.
    assert {u for u, a in seen.items() if a == "1"} <= uids, seen
    st = tj(crd, namespace, "fd")["status"]
    assert st["attempt"] == 2 and st["restarts"] == 0 and st["disruptions"] == 1, st
    np = crd.get_json("networkpolicy", "fd", "-n", namespace)
    assert np["spec"]["ingress"][0]["from"][0]["podSelector"]["matchLabels"][
        "ctrain.dev/attempt"] == "2"
    ev = wait_for(lambda: [e["message"] for e in crd.get_json("events", "-n", namespace)["items"]
                           if e["reason"] == "Restarting"], what="Restarting event")
    assert "fd-worker-1" in ev[0] and "disruption 1 of 10" in ev[0], ev


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
    ctl = start_controller()
    create(crd, namespace, job("ok", workers=3))
    wait_for(lambda: len(pods(crd, namespace, "ok")) == 3, what="3 pods")
    set_pod_exit(crd, namespace, "ok-worker-0", 0)
    j = wait_for(lambda: cond(tj(crd, namespace, "ok"), "Succeeded") and tj(crd, namespace, "ok"),
                 what="Succeeded")
    assert j["status"].get("completionTime")
    # cleanPodPolicy Running (default): the unfinished workers go, worker 0 stays. Alone this
    # takes well under a second; in CI's side lane, beside the e2e tests' nodes on 2 cores, a
    # run once missed 30 s (with no log to say why): 60 s, and the controller's log if not.
    try:
        wait_for(lambda: set(pods(crd, namespace, "ok")) == {"ok-worker-0"}, timeout=60,
                 what="clean-up")
    except AssertionError as e:
        ctl.log.flush()
        raise AssertionError(f"{e}\n--- controller log:\n{ctl.log_path.read_text()[-6000:]}")


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
    re1 = crd.attempt_object(namespace, "re", "token", 1)
    token = token_of(crd, namespace, re1)
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
    assert f"secret {re1} is there" in second.logs()
    assert token_of(crd, namespace, re1) == token
    for p in pods(crd, namespace, "re").values():
        env = {e["name"]: e for e in p["spec"]["containers"][0]["env"]}
        assert env["CTRAIN_JOB_TOKEN"]["valueFrom"]["secretKeyRef"]["name"] == re1
    # A gang restart after the controller restart gets a new token.
    set_pod_exit(crd, namespace, "re-worker-3", 75)
    wait_for(lambda: all(p["metadata"]["labels"]["ctrain.dev/attempt"] == "2"
                         for p in pods(crd, namespace, "re").values())
             and len(pods(crd, namespace, "re")) == 4, what="attempt 2")
    assert token_of(crd, namespace, crd.attempt_object(namespace, "re", "token", 2)) not in (
        "", token)


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


def test_sigterm_mid_pass_exits_promptly(crd, namespace, start_controller):
    """A pass of many writes (here 200 pod creates at 4 requests/s, 50 s; a
    4096-pod gang's deletes at the default QPS are minutes) does not hold a
    SIGTERM: the pass stops sending, the controller exits 0 at once, and
    the next leader creates what was not sent. What is already waiting in
    the client's rate limiter still goes out (a slow-start batch, at most
    17 writes: about 4 s at this QPS, under 1 s at the default 20)."""
    a = start_controller("--kube-api-qps", "4", "--kube-api-burst", "4", name="slow")
    create(crd, namespace, job("wide", workers=200))
    wait_for(lambda: len(pods(crd, namespace, "wide")) >= 4, timeout=60, what="the first pods")
    t0 = time.monotonic()
    assert a.stop() == 0
    assert time.monotonic() - t0 < 10
    logs = a.logs()
    assert "pod creates not sent" in logs or "pass cut short" in logs, logs[-2000:]
    assert len(pods(crd, namespace, "wide")) < 200
    # The next leader finishes the job's pods, then releases them when it goes.
    start_controller("--kube-api-qps", "1000", "--kube-api-burst", "1000", name="next")
    wait_for(lambda: len(pods(crd, namespace, "wide")) == 200, timeout=60, what="200 pods")
    crd.kubectl("delete", "trainingjob", "wide", "-n", namespace, "--wait=false")
    wait_for(lambda: gone(crd, namespace, "wide"), timeout=60, what="the pods gone")


def test_checkpoint_uri_renders_backup_env(crd, namespace, start_controller):
    """spec.checkpoint.uri gives every chief and worker container
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
    """docs/operations.md's key rotation: delete the key Secret and restart the
    controller. The running attempt's Secret is never rewritten (its pods
    and any pod of it still to start agree); the next attempt's token comes
    from the new key, which the restarted controller created."""
    import signal
    first = start_controller(name="before")
    create(crd, namespace, job("rot", workers=2))
    wait_for(lambda: len(pods(crd, namespace, "rot")) == 2, what="2 pods")
    rot1 = crd.attempt_object(namespace, "rot", "token", 1)
    t1 = token_of(crd, namespace, rot1)
    old_key = crd.get_json("secret", "ctrain-controller-key", "-n", "ctrain-system")
    first.stop(signal.SIGTERM)
    crd.kubectl("delete", "secret", "ctrain-controller-key", "-n", "ctrain-system")
    second = start_controller(name="after")
    wait_for(lambda: "became leader" in second.logs(), timeout=40, what="leadership")
    new_key = crd.get_json("secret", "ctrain-controller-key", "-n", "ctrain-system")
    assert new_key["metadata"]["uid"] != old_key["metadata"]["uid"]
    assert new_key["data"]["key"] != old_key["data"]["key"]
    # The name tag follows the key: the new key's pass writes attempt 1's Secret under a
    # new name, and the one the running pods name is untouched.
    wait_for(lambda: re.search(r"secret rot-token-1-[0-9a-f]{10} created", second.logs()),
             what="a pass over rot")
    assert token_of(crd, namespace, rot1) == t1
    set_pod_exit(crd, namespace, "rot-worker-0", 75)
    wait_for(lambda: len(pods(crd, namespace, "rot")) == 2 and all(
        p["metadata"]["labels"]["ctrain.dev/attempt"] == "2"
        for p in pods(crd, namespace, "rot").values()), what="attempt 2")
    t2 = token_of(crd, namespace, crd.attempt_object(namespace, "rot", "token", 2))
    assert t2 and t2 != t1


# ---- progress polling, stragglers, the result ----------------------------------

@pytest.fixture
def fake_chief():
    f = FakeChief()
    yield f
    f.close()


def progress_answer(epoch, accuracy, worker_ms=(0.85, 0.86), sps=16500.5):
    med = sorted(worker_ms)[len(worker_ms) // 2]
    slowest = max(range(len(worker_ms)), key=lambda i: worker_ms[i])
    return {"state": "Training", "rank": 0, "epoch": epoch, "epochs": 3, "step": 19,
            "steps_per_epoch": 1875, "global_step": 1894, "replicas_in_sync": len(worker_ms),
            "workers": len(worker_ms), "samples_per_sec": sps, "loss": 0.4, "accuracy": accuracy,
            "val_loss": None, "val_accuracy": None, "step_ms": 1.1, "median_ms": med,
            "slowest_ratio": worker_ms[slowest] / med, "slowest_rank": slowest,
            "worker_ms": list(worker_ms), "backup_step": None}


def set_pods_running(cluster, ns, names):
    """The kubelet's part: Running, with the fake chief's address as pod IP."""
    for pod in names:
        st = {"status": {"phase": "Running", "podIP": "127.0.0.1",
                         "podIPs": [{"ip": "127.0.0.1"}]}}
        cluster.kubectl("patch", "pod", pod, "-n", ns, "--subresource=status", "--type=merge",
                        "-p", json.dumps(st))


def bind(cluster, ns, pod, node):
    """The scheduler's part: spec.nodeName through the binding subresource."""
    b = {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": pod},
         "target": {"apiVersion": "v1", "kind": "Node", "name": node}}
    cluster.kubectl("create", "--raw", f"/api/v1/namespaces/{ns}/pods/{pod}/binding", "-f", "-",
                    input=json.dumps(b))


def job_read_token(cluster, ns, name, attempt=1):
    import hashlib
    import hmac
    token = token_of(cluster, ns, cluster.attempt_object(ns, name, "token", attempt)).encode()
    return hmac.new(token, b"ctrain-progress-read", hashlib.sha256).hexdigest()


def polls(ctl, result):
    for line in ctl.metrics().splitlines():
        if line.startswith(f'ctrain_progress_polls_total{{result="{result}"}}'):
            return int(float(line.split()[-1]))
    return None


def running_job(cluster, ns, name, chief, workers, **spec):
    create(cluster, ns, job(name, workers=workers, progressPort=chief.port, **spec))
    wait_for(lambda: len(pods(cluster, ns, name)) == workers, what=f"{workers} pods")
    set_pods_running(cluster, ns, sorted(pods(cluster, ns, name)))
    wait_for(lambda: cond(tj(cluster, ns, name), "Running"), what="Running")


def test_progress_polled_into_status(crd, namespace, start_controller, fake_chief):
    ctl = start_controller("--progress-interval=1")
    fake_chief.answer = progress_answer(1, 0.61)
    running_job(crd, namespace, "pr", fake_chief, 2)
    j = wait_for(lambda: (tj(crd, namespace, "pr").get("status", {}).get("progress", {})
                          .get("epoch") == 1) and tj(crd, namespace, "pr"), what="progress 1")
    p = j["status"]["progress"]
    assert p["epochs"] == 3 and p["stepsPerEpoch"] == 1875 and p["replicasInSync"] == 2
    assert p["accuracy"] == 0.61 and p["samplesPerSec"] == 16500.5
    assert p["slowestWorker"]["pod"] == "pr-worker-1" and p["lastPollTime"]
    # The bearer is the HMAC of this attempt's job token.
    assert fake_chief.auth and set(fake_chief.auth) == {
        "Bearer " + job_read_token(crd, namespace, "pr")}
    fake_chief.answer = progress_answer(2, 0.74, sps=17000.0)
    wait_for(lambda: tj(crd, namespace, "pr")["status"]["progress"].get("epoch") == 2,
             what="progress 2")
    _, rows = columns(crd.kubectl("get", "tj", "pr", "-n", namespace, "-o", "wide").stdout)
    assert rows[0]["EPOCH"] == "2" and rows[0]["ACCURACY"] == "0.74", rows
    assert rows[0]["SAMPLES/S"] == "17000", rows
    assert polls(ctl, "ok") >= 2
    # Status writes stay bounded: the answer no longer changes, so neither does the job.
    rv = tj(crd, namespace, "pr")["metadata"]["resourceVersion"]
    time.sleep(3.5)
    assert tj(crd, namespace, "pr")["metadata"]["resourceVersion"] == rv
    # A chief that refuses (or is gone) is counted, never the job's failure.
    fake_chief.code = 401
    before = polls(ctl, "error")
    wait_for(lambda: polls(ctl, "error") >= before + 2, what="failed polls counted")
    j = tj(crd, namespace, "pr")
    assert cond(j, "Running") and not cond(j, "Failed")
    assert j["status"]["progress"]["epoch"] == 2


def test_straggler_event_after_two_polls_and_cleared(crd, namespace, start_controller,
                                                     fake_chief):
    start_controller("--progress-interval=1")
    fake_chief.answer = progress_answer(1, 0.5, worker_ms=(1.0, 1.0, 1.0))
    running_job(crd, namespace, "sg", fake_chief, 3)
    bind(crd, namespace, "sg-worker-2", "node-slow")
    wait_for(lambda: tj(crd, namespace, "sg").get("status", {}).get("progress"), what="progress")
    time.sleep(2.5)  # polls of an even job: no Straggler
    assert not [e for e in crd.get_json("events", "-n", namespace)["items"]
                if e["reason"] == "Straggler"]
    fake_chief.answer = progress_answer(1, 0.5, worker_ms=(1.0, 1.0, 2.1))
    evs = wait_for(lambda: [e for e in crd.get_json("events", "-n", namespace)["items"]
                            if e["reason"] == "Straggler"], what="Straggler event")
    (ev,) = evs
    assert ev["type"] == "Warning"
    assert ev["message"] == ("worker sg-worker-2 on node node-slow computes 2.1x the median "
                             "step time"), ev["message"]
    j = tj(crd, namespace, "sg")
    st = [c for c in j["status"]["conditions"] if c["type"] == "Straggler"][0]
    assert st["status"] == "True" and "sg-worker-2" in st["message"]
    assert j["status"]["conditions"][-1]["type"] == "Running"  # the State column
    fake_chief.answer = progress_answer(1, 0.5, worker_ms=(1.0, 1.0, 1.1))
    wait_for(lambda: [c for c in tj(crd, namespace, "sg")["status"]["conditions"]
                      if c["type"] == "Straggler" and c["status"] == "False"],
             what="Straggler False")
    wait_for(lambda: [e for e in crd.get_json("events", "-n", namespace)["items"]
                      if e["reason"] == "StragglerRecovered"], what="StragglerRecovered event")


def test_result_from_the_termination_message(crd, namespace, start_controller, fake_chief):
    start_controller("--progress-interval=1")
    fake_chief.answer = progress_answer(3, 0.86)
    running_job(crd, namespace, "rs", fake_chief, 2)
    wait_for(lambda: tj(crd, namespace, "rs").get("status", {}).get("progress"), what="progress")
    msg = {"state": "Succeeded", "loss": 0.35, "accuracy": 0.877, "val_loss": 0.41,
           "val_accuracy": 0.86, "samples_per_sec": 16000.25, "epochs": 3, "steps": 5625,
           "model": "/ckpt/model", "replicas_in_sync": 2}
    st = {"status": {"phase": "Succeeded", "containerStatuses": [{
        "name": "worker", "ready": False, "restartCount": 0, "image": "ctrain:latest",
        "imageID": "", "state": {"terminated": {
            "exitCode": 0, "reason": "Completed", "message": json.dumps(msg),
            "startedAt": "2026-01-01T00:00:00Z", "finishedAt": "2026-01-01T00:01:00Z"}}}]}}
    crd.kubectl("patch", "pod", "rs-worker-0", "-n", namespace, "--subresource=status",
                "--type=merge", "-p", json.dumps(st))
    j = wait_for(lambda: cond(tj(crd, namespace, "rs"), "Succeeded") and tj(crd, namespace, "rs"),
                 what="Succeeded")
    assert j["status"]["result"] == {
        "state": "Succeeded", "loss": 0.35, "accuracy": 0.877, "valLoss": 0.41,
        "valAccuracy": 0.86, "samplesPerSec": 16000.25, "epochs": 3, "steps": 5625,
        "model": "/ckpt/model", "replicasInSync": 2}
    assert j["status"]["progress"]["accuracy"] == 0.877
    ev = wait_for(lambda: [e for e in crd.get_json("events", "-n", namespace)["items"]
                           if e["reason"] == "Succeeded"], what="Succeeded event")
    assert "accuracy 0.877 (val 0.86), model /ckpt/model" in ev[0]["message"], ev[0]["message"]
    # The pods go; the answer stays in the API.
    crd.kubectl("delete", "pods", "-n", namespace, "-l", "ctrain.dev/job-name=rs", "--wait=false")
    time.sleep(2)
    assert tj(crd, namespace, "rs")["status"]["result"]["accuracy"] == 0.877


def test_large_job_stores_linear_bytes(crd, namespace, start_controller):
    """What a job stores is linear in its size. 512 workers (no
    node: the pods stay Pending): the pods and the cluster ConfigMap as the
    apiserver returns them, against the same pods with the cluster in each
    TF_CONFIG (before: n pods x n addresses)."""
    n = 512
    start_controller("--kube-api-qps", "1000", "--kube-api-burst", "1000")
    create(crd, namespace, job("big", workers=n, chief=True))
    wait_for(lambda: len(pods(crd, namespace, "big")) == n + 1, timeout=120,
             what=f"{n + 1} pods")
    items = crd.get_json("pods", "-n", namespace, "-l", "ctrain.dev/job-name=big")["items"]
    cm = crd.get_json("configmap", crd.attempt_object(namespace, "big", "cluster"), "-n", namespace)

    def size(o):
        return len(json.dumps(o, separators=(",", ":")))
    cluster = cm["data"]["cluster"]
    after = sum(size(p) for p in items) + size(cm)
    # The same pods with TF_CONFIG holding the cluster, as before the cluster ConfigMap.
    before = sum(size(p) for p in items) + len(items) * (len(json.dumps(cluster)) - 20)
    print(f"\n{n} workers + chief as stored: after {after} bytes "
          f"({after / len(items):.0f} per pod, ConfigMap {size(cm)}); "
          f"before {before} bytes")
    assert len(json.loads(cluster)["worker"]) == n
    assert max(size(p) for p in items) < 6000
    assert after < before / 5
    # Every pod's TF_CONFIG, as its kubelet makes it, is TF's whole one.
    for p in items[:: n // 8]:
        tfc = json.loads(kubelet_env(crd, namespace, p["spec"]["containers"][0])["TF_CONFIG"])
        labels = p["metadata"]["labels"]
        assert tfc["task"] == {"type": labels["ctrain.dev/replica-type"],
                               "index": int(labels["ctrain.dev/replica-index"])}
        assert len(tfc["cluster"]["worker"]) == n and len(tfc["cluster"]["chief"]) == 1
    # Gone before the controller stops: pods that keep their finalizer would
    # hold the namespace, and every later test's controller would release them.
    crd.kubectl("delete", "trainingjob", "big", "-n", namespace, "--wait=false")
    wait_for(lambda: gone(crd, namespace, "big"), timeout=120, what="the pods gone")


def test_pod_the_apiserver_refuses_fails_the_job(crd, namespace, start_controller):
    """A template the apiserver always refuses (422 Invalid:
    containerPort -5) fails the job, its message naming the field, instead of
    Created forever with FailedCreatePod events."""
    ctl = start_controller()
    bad = job("badport", workers=2)
    bad["spec"]["replicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["ports"] = [
        {"containerPort": -5}]
    create(crd, namespace, bad)
    j = wait_for(lambda: cond(tj(crd, namespace, "badport"), "Failed") and
                 tj(crd, namespace, "badport"), timeout=60, what="Failed")
    c = cond(j, "Failed")
    assert c["reason"] == "FailedCreatePod", c
    assert "containerPort" in c["message"] and "422" in c["message"], c
    assert "badport-worker-0" in c["message"], c
    assert pods(crd, namespace, "badport") == {}
    # Terminal: no more creates are tried.
    time.sleep(3)
    m = re.search(r"^ctrain_pod_create_errors_total (\d+)", ctl.metrics(), re.M)
    n = int(m.group(1)) if m else None
    time.sleep(3)
    m2 = re.search(r"^ctrain_pod_create_errors_total (\d+)", ctl.metrics(), re.M)
    assert (int(m2.group(1)) if m2 else None) == n
