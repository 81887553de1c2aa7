"""ctrain-controller --enable-tfjob against a real kube-apiserver with
training-operator v1.9.3's TFJob CRD (manifests/crds-tfjob/), running as
the controller's ServiceAccount with the base RBAC plus the TFJob rules below.
Pod phases are simulated by writing pod status, as test_controller.py does: no
node runs these pods."""
import json
import signal
import time

import pytest

from clusterlib import ROOT, cond
from ctllib import create, pods, set_pod_exit, wait_for

TFJOB_CRD = ROOT / "manifests/crds-tfjob/kubeflow.org_tfjobs.yaml"

# What the controller needs on TFJobs besides the base ClusterRole (the
# component's RBAC grants the same): patch writes the ctrain.dev/attempt and
# ctrain.dev/restarts annotations.
RBAC = {
    "apiVersion": "v1", "kind": "List", "items": [
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
         "metadata": {"name": "ctrain-it-tfjob"},
         "rules": [{"apiGroups": ["kubeflow.org"], "resources": ["tfjobs"],
                    "verbs": ["get", "list", "watch", "patch", "delete"]},
                   {"apiGroups": ["kubeflow.org"], "resources": ["tfjobs/status"],
                    "verbs": ["get", "update", "patch"]}]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
         "metadata": {"name": "ctrain-it-tfjob"},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                     "name": "ctrain-it-tfjob"},
         "subjects": [{"kind": "ServiceAccount", "name": "ctrain-controller",
                       "namespace": "ctrain-system"}]}]}


@pytest.fixture(scope="module")
def tfcrd(crd):
    crd.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(TFJOB_CRD))
    # Right after the apply the CRD may have no status yet, which `kubectl
    # wait` reports as an error rather than waiting: poll the condition.
    wait_for(lambda: any(c["type"] == "Established" and c["status"] == "True"
                         for c in crd.get_json("crd", "tfjobs.kubeflow.org")
                         .get("status", {}).get("conditions") or []),
             timeout=60, what="TFJob CRD Established")
    crd.kubectl("apply", "-f", "-", input=json.dumps(RBAC))
    return crd


def tfjob(name, workers=2, chief=False, ps=0, restart="OnFailure", port=None, **run_policy):
    ctr = {"name": "tensorflow", "image": "tensorflow/tensorflow:2.15.0",
           "command": ["python", "train.py"]}
    if port:
        ctr["ports"] = [{"name": "tfjob-port", "containerPort": port}]
    tmpl = {"spec": {"containers": [ctr]}}
    rs = {"Worker": {"replicas": workers, "restartPolicy": restart, "template": tmpl}}
    if chief:
        rs["Chief"] = {"replicas": 1, "restartPolicy": restart, "template": tmpl}
    if ps:
        rs["PS"] = {"replicas": ps, "restartPolicy": restart, "template": tmpl}
    return {"apiVersion": "kubeflow.org/v1", "kind": "TFJob", "metadata": {"name": name},
            "spec": {"runPolicy": run_policy, "tfReplicaSpecs": rs}}


def tfj(cluster, ns, name):
    return cluster.get_json("tfjobs.kubeflow.org", name, "-n", ns)


def running(cluster, ns, pod):
    st = {"status": {"phase": "Running", "containerStatuses": [{
        "name": "tensorflow", "ready": True, "restartCount": 0, "image": "tf", "imageID": "",
        "state": {"running": {"startedAt": "2026-01-01T00:00:00Z"}}}]}}
    cluster.kubectl("patch", "pod", pod, "-n", ns, "--subresource=status", "--type=merge",
                    "-p", json.dumps(st))


def metric(ctl, name):
    for line in ctl.metrics().splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    raise AssertionError(f"no metric {name}")


def test_pods_labels_tf_config_and_status_in_tfjob_shape(tfcrd, namespace, start_controller):
    ctl = start_controller("--enable-tfjob")
    create(tfcrd, namespace, tfjob("tfa", workers=2, chief=True, port=2345))
    ps = wait_for(lambda: len(pods(tfcrd, namespace, "tfa")) == 3 and pods(tfcrd, namespace, "tfa"),
                  what="3 pods")
    assert set(ps) == {"tfa-chief-0", "tfa-worker-0", "tfa-worker-1"}
    uid = tfj(tfcrd, namespace, "tfa")["metadata"]["uid"]
    for name, p in ps.items():
        ref = p["metadata"]["ownerReferences"][0]
        assert (ref["apiVersion"], ref["kind"], ref["uid"]) == ("kubeflow.org/v1", "TFJob", uid)
        assert ref["controller"] and ref["blockOwnerDeletion"]
        labels = p["metadata"]["labels"]
        typ, idx = name.split("-")[1:]
        assert labels["training.kubeflow.org/job-name"] == "tfa"
        assert labels["training.kubeflow.org/replica-type"] == typ
        assert labels["training.kubeflow.org/replica-index"] == idx
        assert labels["training.kubeflow.org/operator-name"] == "ctrain"
        assert labels.get("training.kubeflow.org/job-role") == ("master" if typ == "chief" else None)
        assert p["spec"]["restartPolicy"] == "Never"
    env = {e["name"]: e for e in ps["tfa-worker-1"]["spec"]["containers"][0]["env"]}
    ref = env["CTRAIN_TF_CLUSTER"]["valueFrom"]["configMapKeyRef"]
    assert ref == {"name": tfcrd.attempt_object(namespace, "tfa", "cluster"), "key": "cluster"}
    cm = tfcrd.get_json("configmap", ref["name"], "-n", namespace)
    assert cm["metadata"]["ownerReferences"][0]["kind"] == "TFJob"
    tfc = json.loads(env["TF_CONFIG"]["value"].replace("$(CTRAIN_TF_CLUSTER)",
                                                       cm["data"]["cluster"]))
    assert tfc["cluster"] == {
        "chief": [f"tfa-chief-0.tfa.{namespace}.svc:2345"],
        "worker": [f"tfa-worker-0.tfa.{namespace}.svc:2345",
                   f"tfa-worker-1.tfa.{namespace}.svc:2345"]}
    assert tfc["task"] == {"type": "worker", "index": 1}
    svc = tfcrd.get_json("service", "tfa", "-n", namespace)
    assert svc["spec"]["clusterIP"] == "None"
    assert svc["metadata"]["ownerReferences"][0]["kind"] == "TFJob"
    # The status, read back: the CRD's structural schema kept what we wrote.
    j = wait_for(lambda: cond(tfj(tfcrd, namespace, "tfa"), "Created")
                 and tfj(tfcrd, namespace, "tfa"), what="Created")
    assert j["status"]["replicaStatuses"]["Chief"]["active"] == 1
    assert j["status"]["replicaStatuses"]["Worker"]["active"] == 2
    assert j["status"]["startTime"]
    assert j["metadata"]["annotations"]["ctrain.dev/attempt"] == "1"
    assert j["metadata"]["annotations"]["ctrain.dev/restarts"] == "0"
    for p in ps:
        running(tfcrd, namespace, p)
    j = wait_for(lambda: cond(tfj(tfcrd, namespace, "tfa"), "Running")
                 and tfj(tfcrd, namespace, "tfa"), what="Running")
    assert cond(j, "Running")["reason"] == "TFJobRunning"
    # (While the pods were Pending on this node-less cluster, Created named
    # them Unschedulable; running, it says what training-operator says.)
    c = cond(j, "Created")
    assert c["reason"] == "TFJobCreated" and c["message"] == "TFJob tfa is created"
    set_pod_exit(tfcrd, namespace, "tfa-chief-0", 0)
    j = wait_for(lambda: cond(tfj(tfcrd, namespace, "tfa"), "Succeeded")
                 and tfj(tfcrd, namespace, "tfa"), what="Succeeded")
    assert cond(j, "Succeeded")["reason"] == "TFJobSucceeded"
    assert j["status"]["completionTime"]
    assert j["status"]["replicaStatuses"]["Chief"]["succeeded"] == 1
    # Events on the TFJob.
    ev = wait_for(lambda: [e for e in tfcrd.get_json("events", "-n", namespace)["items"]
                           if e["involvedObject"].get("kind") == "TFJob"
                           and e["reason"] == "TFJobSucceeded"], what="TFJobSucceeded event")
    assert ev[0]["involvedObject"]["name"] == "tfa"
    # cleanPodPolicy defaults to None for TFJob: the workers stay.
    writes = metric(ctl, "ctrain_status_updates_total")
    time.sleep(2)
    assert len(pods(tfcrd, namespace, "tfa")) == 3
    # What the schema keeps is what we compare with: a settled job is not
    # written again and again (the apiserver prunes what TFJob's status lacks).
    tfcrd.kubectl("annotate", "tfjobs.kubeflow.org", "tfa", "-n", namespace, "poke=1")
    time.sleep(2)
    assert metric(ctl, "ctrain_status_updates_total") == writes
    assert metric(ctl, "ctrain_reconcile_total") > 0


def test_gang_restart_count_survives_controller_restart(tfcrd, namespace, start_controller):
    first = start_controller("--enable-tfjob", name="first")
    create(tfcrd, namespace, tfjob("tfg", workers=3, backoffLimit=3))
    wait_for(lambda: len(pods(tfcrd, namespace, "tfg")) == 3, what="3 pods")
    old = {p["metadata"]["uid"] for p in pods(tfcrd, namespace, "tfg").values()}
    set_pod_exit(tfcrd, namespace, "tfg-worker-2", 75)

    def attempt(n):
        def f():
            ps = pods(tfcrd, namespace, "tfg")
            return len(ps) == 3 and all(p["metadata"]["labels"]["ctrain.dev/attempt"] == str(n)
                                        for p in ps.values()) and ps
        return f
    ps = wait_for(attempt(2), what="attempt-2 pods")
    assert not old & {p["metadata"]["uid"] for p in ps.values()}  # the whole gang, new pods
    j = tfj(tfcrd, namespace, "tfg")
    assert j["metadata"]["annotations"]["ctrain.dev/restarts"] == "1"
    assert j["metadata"]["annotations"]["ctrain.dev/attempt"] == "2"
    assert cond(j, "Restarting")  # its reason names the pods' state while they are Pending

    def restart_events():
        return [e["message"] for e in tfcrd.get_json("events", "-n", namespace)["items"]
                if e["reason"] == "TFJobRestarting" and e["involvedObject"]["kind"] == "TFJob"]
    msgs = wait_for(restart_events, what="TFJobRestarting event")
    assert "tfg-worker-2" in msgs[0] and "75" in msgs[0], msgs
    first.stop(signal.SIGTERM)
    second = start_controller("--enable-tfjob", name="second")
    wait_for(lambda: "became leader" in second.logs(), timeout=40, what="leadership")
    set_pod_exit(tfcrd, namespace, "tfg-worker-0", 75)
    wait_for(attempt(3), what="attempt-3 pods")
    j = tfj(tfcrd, namespace, "tfg")
    assert j["metadata"]["annotations"]["ctrain.dev/restarts"] == "2"
    wait_for(lambda: any("gang restart 2 of 3" in m for m in restart_events()),
             what="the second restart, counted from the first controller's")


def test_ps_rejected(tfcrd, namespace, start_controller):
    start_controller("--enable-tfjob")
    create(tfcrd, namespace, tfjob("tfp", workers=2, ps=1))
    j = wait_for(lambda: cond(tfj(tfcrd, namespace, "tfp"), "Failed")
                 and tfj(tfcrd, namespace, "tfp"), what="Failed")
    c = cond(j, "Failed")
    assert c["reason"] == "TFJobFailedValidation"
    assert "parameter servers are not supported" in c["message"]
    wait_for(lambda: [e for e in tfcrd.get_json("events", "-n", namespace)["items"]
                      if e["reason"] == "TFJobFailedValidation"
                      and e["involvedObject"]["name"] == "tfp"], what="event")
    time.sleep(1)
    assert not pods(tfcrd, namespace, "tfp")
    assert tfcrd.kubectl("get", "service", "tfp", "-n", namespace, check=False).returncode != 0


def test_active_deadline_fires(tfcrd, namespace, start_controller):
    start_controller("--enable-tfjob")
    create(tfcrd, namespace, tfjob("tfd", workers=1, activeDeadlineSeconds=3,
                                   cleanPodPolicy="All"))
    wait_for(lambda: len(pods(tfcrd, namespace, "tfd")) == 1, what="1 pod")
    t0 = time.monotonic()
    j = wait_for(lambda: cond(tfj(tfcrd, namespace, "tfd"), "Failed")
                 and tfj(tfcrd, namespace, "tfd"), timeout=30, what="deadline")
    assert time.monotonic() - t0 < 15
    c = cond(j, "Failed")
    assert c["reason"] == "TFJobFailed" and "activeDeadlineSeconds 3" in c["message"]
    wait_for(lambda: not pods(tfcrd, namespace, "tfd"), what="cleanPodPolicy All")


def test_suspend_and_resume(tfcrd, namespace, start_controller):
    start_controller("--enable-tfjob")
    create(tfcrd, namespace, tfjob("tfs", workers=2, suspend=True))
    j = wait_for(lambda: cond(tfj(tfcrd, namespace, "tfs"), "Suspended")
                 and tfj(tfcrd, namespace, "tfs"), what="Suspended")
    assert cond(j, "Suspended")["reason"] == "TFJobSuspended"
    assert not pods(tfcrd, namespace, "tfs")
    tfcrd.kubectl("patch", "tfjobs.kubeflow.org", "tfs", "-n", namespace, "--type=merge",
                  "-p", json.dumps({"spec": {"runPolicy": {"suspend": False}}}))
    wait_for(lambda: len(pods(tfcrd, namespace, "tfs")) == 2, what="pods after resume")
    j = tfj(tfcrd, namespace, "tfs")
    s = [c for c in j["status"]["conditions"] if c["type"] == "Suspended"][0]
    assert (s["status"], s["reason"]) == ("False", "TFJobResumed")


def test_ttl_deletes_the_tfjob(tfcrd, namespace, start_controller):
    start_controller("--enable-tfjob")
    create(tfcrd, namespace, tfjob("tft", workers=1, ttlSecondsAfterFinished=2))
    wait_for(lambda: len(pods(tfcrd, namespace, "tft")) == 1, what="1 pod")
    set_pod_exit(tfcrd, namespace, "tft-worker-0", 0)
    wait_for(lambda: tfcrd.kubectl("get", "tfjobs.kubeflow.org", "tft", "-n", namespace,
                                   check=False).returncode != 0, timeout=30, what="TTL delete")


def test_without_the_flag_tfjobs_are_left_alone(tfcrd, namespace, start_controller):
    # Scoped to the test's namespace: TrainingJobs other tests of the session
    # left elsewhere would count in ctrain_reconcile_total.
    ctl = start_controller(f"--namespace={namespace}")
    create(tfcrd, namespace, tfjob("tfn", workers=1))
    wait_for(lambda: "caches synced" in ctl.logs(), what="sync")
    time.sleep(3)
    assert not pods(tfcrd, namespace, "tfn")
    assert not tfj(tfcrd, namespace, "tfn").get("status")
    assert "ctrain_reconcile_total 0" in ctl.metrics()


def test_pod_the_apiserver_refuses_fails_the_tfjob(tfcrd, namespace, start_controller):
    """In TFJob mode, a template the apiserver always refuses
    (422 Invalid: containerPort -5, which the TFJob CRD's schema admits)
    fails the TFJob with a message naming the field, instead of retrying
    the create forever."""
    start_controller("--enable-tfjob")
    bad = tfjob("tfbad", workers=2)
    bad["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["ports"] = [
        {"containerPort": -5}]
    create(tfcrd, namespace, bad)
    j = wait_for(lambda: cond(tfj(tfcrd, namespace, "tfbad"), "Failed")
                 and tfj(tfcrd, namespace, "tfbad"), timeout=60, what="Failed")
    c = cond(j, "Failed")
    assert "containerPort" in c["message"] and "422" in c["message"], c
    assert "tfbad-worker-0" in c["message"], c
    # The event is sent apart from the status write (the recorder's queue).
    wait_for(lambda: [e for e in tfcrd.get_json("events", "-n", namespace)["items"]
                      if e["involvedObject"]["name"] == "tfbad"
                      and e["reason"] == "FailedCreatePod"], what="FailedCreatePod event")
    time.sleep(2)
    assert pods(tfcrd, namespace, "tfbad") == {}
