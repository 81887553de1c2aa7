"""Real disruptions cost one restart, never the job, on two nodes.

- a worker pod force-deleted (`kubectl delete --force --grace-period=0`) mid-run:
  exactly one gang restart, counted as a disruption, resumed from the backup,
  Succeeded; no pod name is ever created twice within an attempt; a pod
  labelled as a pod of the ended attempt cannot open a TCP connection to a pod
  of the new one, while one labelled with the new attempt can;
- the node running a worker (and the controller's leader) powered off: the job
  resumes on the other node and Succeeds with backoffLimit 0; the Restarting
  event names the node;
- four drains of the node running the job with backoffLimit 1: Succeeded,
  status.disruptions = 4;
- a SIGSTOPped worker: a NoProgress restart within progressDeadlineSeconds plus
  a poll, then Succeeded.
"""
import json
import os
import pathlib
import re
import signal
import time

import pytest

from e2e_lib import (EXISTING, JOB, ROOT, W0, W1, PodWatch, apply_example, build_image, cond,
                     drain, dump, events, host_only, job_json, job_pods, pod_node, probe,
                     release_held, start_node, stop_node, uncordon, wait_job, wait_log,
                     wait_succeeded, worker_pids)


def restarting_events(cluster, ns):
    return [e["message"] for e in events(cluster, ns) if e["reason"] == "Restarting"]


def resumed(node, ns):
    log = node.pod_log(ns, W0)
    m = re.search(r"backup: resuming from \S+ at epoch (\d+), step (\d+)", log)
    assert m, log[-4000:]
    return int(m.group(2))


# Worker 1 of attempt 2 waits for /tmp/go before it starts, so worker 0 of
# attempt 2 sits in the rendezvous, listening on its collective port.
HOLD_ATTEMPT_2 = (
    'if [[ "$CTRAIN_ATTEMPT" == 2 && "$TF_CONFIG" == *\'"index":1\'* ]]; then'
    " for _ in $(seq 600); do [ -e /tmp/go ] && break; sleep 0.5; done; fi;"
    ' exec ctrain-worker "$@"')


def test_force_deleted_worker_costs_one_disruption_and_the_old_attempt_is_fenced(
        cluster, node, controller, ns):
    def mutate(d):
        d["spec"]["backoffLimit"] = 0
        c = d["spec"]["replicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]
        c["command"] = ["bash", "-c", HOLD_ATTEMPT_2, "ctrain-worker"]
    # 6 epochs: still training when the force delete's kill lands.
    apply_example(cluster, ns, epochs=6, mutate=mutate)
    watch = PodWatch(cluster, ns)
    try:
        wait_log(node, ns, W0, "backup: wrote")
        cluster.kubectl("delete", "pod", W1, "-n", ns, "--force", "--grace-period=0",
                        "--wait=false")
        # Attempt 2: worker 0 up and in the rendezvous, worker 1 held.
        deadline = time.monotonic() + 240
        while True:
            pods = {p["metadata"]["name"]: p for p in job_pods(cluster, ns)}
            p0 = pods.get(W0, {})
            if (p0.get("metadata", {}).get("labels", {}).get("ctrain.dev/attempt") == "2"
                    and p0.get("status", {}).get("phase") == "Running"
                    and p0["status"].get("podIP")):
                break
            assert time.monotonic() < deadline, f"no attempt 2:\n{dump(cluster, node, ns)}"
            time.sleep(0.5)
        port = job_json(cluster, ns)["spec"]["port"]  # TF_CONFIG's addresses use it
        ip = p0["status"]["podIP"]
        # The new attempt's labels reach it (so the port is open)...
        assert probe(cluster, ns, "attempt-2", JOB, ip, port, tries=20, attempt="2") == "OPEN"
        # ... the ended attempt's do not, on the collective port or any other.
        assert probe(cluster, ns, "attempt-1", JOB, ip, port, attempt="1") == "BLOCKED"
        release_held(cluster, node, ns, W1, attempt="2")
        job = wait_succeeded(cluster, node, ns)
    finally:
        seen = watch.close()
    st = job["status"]
    assert st["restarts"] == 0 and st["disruptions"] == 1 and st["attempt"] == 2, st
    # Never a second pod of one name within one attempt.
    assert all(len(uids) == 1 for uids in seen.values()), seen
    assert resumed(node, ns) > 0
    msgs = restarting_events(cluster, ns)
    assert len(msgs) == 1 and W1 in msgs[0] and "disruption 1" in msgs[0], msgs


@pytest.mark.skipif(EXISTING, reason="powers a local node off and on")
def test_node_loss_resumes_on_the_other_node(cluster, node, controller, ns):
    """The second node runs worker 1 and the controller's leader; it loses its
    power mid-run. With backoffLimit 0 the job still Succeeds: node loss is a
    disruption; the event names the node; the leader moves to the standby."""
    if len(node.names) < 2:
        pytest.skip("needs two nodes")
    victim = node.names[-1]

    def mutate(d):
        d["spec"]["backoffLimit"] = 0
        t = d["spec"]["replicaSpecs"]["Worker"]["template"]
        # One worker per node while both are there; together once one is gone.
        t["spec"]["affinity"] = {"podAntiAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [{
                "weight": 100, "podAffinityTerm": {
                    "labelSelector": {"matchLabels": {"ctrain.dev/job-name": JOB}},
                    "topologyKey": "kubernetes.io/hostname"}}]}}
    # The leader on the victim: move it there when the standby runs there
    # (the replicas spread over the nodes).
    leader = controller.wait_leader()
    if leader["spec"]["nodeName"] != victim:
        cluster.kubectl("delete", "pod", "-n", "ctrain-system", leader["metadata"]["name"],
                        "--wait=false")
        leader = controller.wait_leader(not_uid=leader["metadata"]["uid"])
    leader_lost = leader["spec"]["nodeName"] == victim
    # 10 epochs: still training when the node is stopped (its first backup
    # comes a third into epoch 1).
    apply_example(cluster, ns, epochs=10, mutate=mutate)
    wait_log(node, ns, W0, "backup: wrote")
    where = {p["metadata"]["name"]: p["spec"].get("nodeName") for p in job_pods(cluster, ns)}
    lost = [p for p, n in where.items() if n == victim]
    assert lost, (where, victim)
    t0 = time.monotonic()
    stop_node(victim)
    try:
        j = wait_job(cluster, node, ns, lambda j: j["status"].get("attempt", 1) >= 2 and
                     cond(j, "Running"), 300, "Running again")
        recovery = time.monotonic() - t0
        assert all(p["spec"].get("nodeName") != victim for p in job_pods(cluster, ns)
                   if p["metadata"]["labels"]["ctrain.dev/attempt"] == str(j["status"]["attempt"]))
        job = wait_succeeded(cluster, node, ns)
    finally:
        start_node(victim)
    st = job["status"]
    assert st["restarts"] == 0 and st["disruptions"] >= 1, st
    msgs = restarting_events(cluster, ns)
    assert msgs and victim in msgs[0], msgs
    assert resumed(node, ns) > 0
    if leader_lost:
        assert controller.wait_leader()["spec"]["nodeName"] != victim
    print(f"disruptions: node loss of {victim} (pods {lost}, the leader too: {leader_lost}): "
          f"Running again {recovery:.1f} s after the power loss")


def test_four_drains_are_disruptions_not_failures(cluster, node, controller, ns):
    """Each drain evicts the job's pods (DisruptionTarget, EvictionByEvictionAPI);
    backoffLimit 1 would allow one failure, yet four drains pass: they count in
    status.disruptions."""
    def mutate(d):
        d["spec"]["backoffLimit"] = 1
    apply_example(cluster, ns, epochs=30, mutate=mutate)
    for i in range(1, 5):
        wait_job(cluster, node, ns, lambda j: cond(j, "Running") and
                 j["status"].get("attempt", 1) == i, 240, f"attempt {i} Running")
        where = pod_node(cluster, ns, W0)
        try:
            drain(cluster, where, selector=f"ctrain.dev/job-name={JOB}")
            wait_job(cluster, node, ns, lambda j: j["status"].get("disruptions", 0) == i, 120,
                     f"disruption {i}")
        finally:
            uncordon(cluster, where)
    job = wait_succeeded(cluster, node, ns, timeout=900)
    st = job["status"]
    assert st["disruptions"] == 4 and st["restarts"] == 0, st
    assert any("EvictionByEvictionAPI" in m for m in restarting_events(cluster, ns))


@host_only()
def test_sigstopped_worker_is_restarted_for_no_progress(cluster, node, controller, ns):
    deadline_s, poll_s = 30, 10

    def mutate(d):
        d["spec"]["progressDeadlineSeconds"] = deadline_s
    apply_example(cluster, ns, epochs=20, mutate=mutate)
    wait_job(cluster, node, ns, lambda j: (j["status"].get("progress") or {}).get("step"), 120,
             "progress polled")
    pids = worker_pids(ns, 1)
    assert pids, "worker 1 process not found"
    t0 = time.monotonic()
    for pid in pids:
        os.kill(pid, signal.SIGSTOP)
    try:
        j = wait_job(cluster, node, ns, lambda j: j["status"].get("attempt", 1) >= 2, 180,
                     "a restart")
        took = time.monotonic() - t0
    finally:
        for pid in pids:
            try:
                os.kill(pid, signal.SIGCONT)
            except ProcessLookupError:
                pass
    rc = (j["status"].get("conditions") or [])
    reasons = [c.get("reason") for c in rc if c["type"] == "Restarting"]
    assert reasons == ["NoProgress"], rc
    # The step stopped moving at most one poll before the stop was noticed.
    assert took <= deadline_s + 2 * poll_s + 10, took
    job = wait_succeeded(cluster, node, ns)
    assert job["status"]["restarts"] == 1, job["status"]
    print(f"disruptions: SIGSTOP -> NoProgress restart after {took:.1f} s "
          f"(progressDeadlineSeconds {deadline_s}, polls every {poll_s} s)")


@pytest.mark.skipif(EXISTING, reason="the data and backups are node directories")
def test_stock_tensorflow_custom_loop_force_deleted_worker(cluster, node, controller, namespace):
    """Stock TensorFlow (ctrain-tf), Chief + 2 Workers, a custom training loop
    with tf.train.CheckpointManager on the shared directory: worker 1
    force-deleted mid-run costs exactly one gang restart (a disruption), the
    new gang resumes at the saved step and the job Succeeds. This job once
    failed BackoffLimitExceeded: the pod came back inside the same
    attempt and a stale process joined the next one."""
    import shutil
    node.import_image(build_image("tf"))
    ns, job = namespace, "tf-loop"
    backup = pathlib.Path(f"/tmp/ctrain-e2e-tfloop-{ns}")
    shutil.rmtree(backup, ignore_errors=True)
    script = (ROOT / "tests/e2e/tf/custom_loop.py").read_text()
    # The stock TF image runs as root: no runAsNonRoot default for it.
    tmpl = {"spec": {"securityContext": {"runAsNonRoot": False}, "containers": [{
        "name": "tensorflow", "image": "ctrain-tf:2.21.0", "imagePullPolicy": "IfNotPresent",
        "command": ["python3", "/app/custom_loop.py"],
        "env": [{"name": "TF_CPP_MIN_LOG_LEVEL", "value": "1"},
                {"name": "STEPS", "value": "400"}, {"name": "SAVE_EVERY", "value": "50"}],
        "volumeMounts": [{"name": "app", "mountPath": "/app", "readOnly": True},
                         {"name": "data", "mountPath": "/data", "readOnly": True}],
        "resources": {"requests": {"cpu": "200m", "memory": "768Mi"}}}],
        "volumes": [{"name": "app", "configMap": {"name": job}},
                    {"name": "data", "hostPath": {"path": "/usr/share/datasets/fashion-mnist"}}]}}
    docs = [
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": job},
         "data": {"custom_loop.py": script}},
        {"apiVersion": "ctrain.dev/v1alpha1", "kind": "TrainingJob", "metadata": {"name": job},
         "spec": {"backoffLimit": 0,
                  "checkpoint": {"mountPath": "/ckpt", "volume": {"hostPath": {
                      "path": str(backup), "type": "DirectoryOrCreate"}}},
                  "replicaSpecs": {"Chief": {"replicas": 1, "template": tmpl},
                                   "Worker": {"replicas": 2, "template": tmpl}}}}]
    chief, w1 = f"{job}-chief-0", f"{job}-worker-1"
    try:
        cluster.kubectl("apply", "-n", ns, "-f", "-",
                        input=json.dumps({"apiVersion": "v1", "kind": "List", "items": docs}))
        deadline = time.monotonic() + 900
        while "step 100 " not in node.pod_log(ns, chief):
            assert time.monotonic() < deadline, dump(cluster, node, ns)
            time.sleep(1)
        assert "replicas in sync: 3" in node.pod_log(ns, chief)
        cluster.kubectl("delete", "pod", w1, "-n", ns, "--force", "--grace-period=0",
                        "--wait=false")
        p = cluster.kubectl("wait", "--for=condition=Succeeded", f"tj/{job}", "-n", ns,
                            "--timeout=900s", check=False, timeout=930)
        assert p.returncode == 0, dump(cluster, node, ns)
        st = job_json(cluster, ns, job)["status"]
        assert st["restarts"] + st["disruptions"] == 1 and st["disruptions"] == 1, st
        log = node.pod_log(ns, chief)
        m = re.search(r"resumed from \S+ at step (\d+)", log)
        assert m and int(m.group(1)) > 0, log[-4000:]
        acc = re.search(r"test accuracy: ([0-9.]+)", log)
        assert acc and float(acc.group(1)) >= 0.80, log[-3000:]
        msgs = restarting_events(cluster, ns)
        assert len(msgs) == 1 and w1 in msgs[0], msgs
        print(f"disruptions: stock TF custom loop resumed at step {m.group(1)} after a force "
              f"delete, test accuracy {acc.group(1)}")
    finally:
        shutil.rmtree(backup, ignore_errors=True)
