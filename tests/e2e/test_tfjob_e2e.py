"""kubeflow.org/v1 TFJob served by ctrain (--enable-tfjob, manifests/components/tfjob), on
the real node, against training-operator's known bugs, and training-operator v1.9.3's own
TensorFlow examples applied unchanged but for the image.

The training jobs run the ctrain image's ctrain-worker (as tests/e2e/test_e2e.py's
TrainingJobs); the examples run the stock TensorFlow image with the examples' scripts
(`tools/image/build.sh tf-examples`: no registry is reachable from the pods, and MNIST is
not available offline: the image's ~/.keras/datasets/mnist.npz is Fashion-MNIST).
"""
import json
import os
import pathlib
import re
import shutil
import signal
import threading
import time

import pytest
import yaml

from clusterlib import cond
from e2e_lib import dump as e2e_dump
from e2e_lib import (EXAMPLES, EXISTING, build_image, controller_rss_kib, events, host_only,
                     task_pids, wait_log)
JOB_LABEL = "training.kubeflow.org/job-name"

MODEL = {"name": "fashion-mnist", "input_shape": [28, 28],
         "layers": [{"type": "Flatten"}, {"type": "Dense", "units": 64, "activation": "relu"},
                    {"type": "Dense", "units": 10}]}


# ---- helpers --------------------------------------------------------------------------------

def tfjob(cluster, ns, name):
    return cluster.get_json("tfjob", name, "-n", ns)


def restarts(job):
    return int(job["metadata"].get("annotations", {}).get("ctrain.dev/restarts", "0"))


def pods(cluster, ns, name):
    return cluster.get_json("pods", "-n", ns, "-l", f"{JOB_LABEL}={name}")["items"]


def dump(cluster, node, ns):
    return e2e_dump(cluster, node, ns, kinds="tfjob,pods,svc", yaml_kind="tfjob")


def wait_tfjob(cluster, node, ns, name, pred, timeout, what):
    deadline = time.monotonic() + timeout
    while True:
        j = tfjob(cluster, ns, name)
        if pred(j):
            return j
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}:\n{dump(cluster, node, ns)}")
        time.sleep(0.5)


def kubectl_wait(cluster, node, ns, name, condition, timeout):
    p = cluster.kubectl("wait", f"--for=condition={condition}", f"tfjob/{name}", "-n", ns,
                        f"--timeout={timeout}s", check=False, timeout=timeout + 30)
    assert p.returncode == 0, f"tfjob/{name} not {condition}:\n{dump(cluster, node, ns)}"
    return tfjob(cluster, ns, name)




class PodWatch:
    """Every pod name -> the set of its UIDs, and the phases each UID went through."""

    def __init__(self, cluster, ns, name):
        self.cluster, self.ns, self.name = cluster, ns, name
        self.uids, self.phases, self.stop = {}, {}, False
        self.t = threading.Thread(target=self.run, daemon=True)
        self.t.start()

    def run(self):
        while not self.stop:
            try:
                for p in pods(self.cluster, self.ns, self.name):
                    uid = p["metadata"]["uid"]
                    self.uids.setdefault(p["metadata"]["name"], set()).add(uid)
                    self.phases.setdefault(uid, set()).add(p["status"].get("phase"))
            except Exception:
                pass
            time.sleep(0.3)

    def close(self):
        self.stop = True
        self.t.join()
        return self.uids


def worker_job(ns, name, replicas=2, epochs=2, extra_args=(), run_policy=None,
               restart_policy="OnFailure", command=None):
    """A TFJob of ctrain-worker replicas (the model in a ConfigMap) as a TFJob user writes
    it: container `tensorflow`, no port (TFJob's default 2222)."""
    c = {"name": "tensorflow", "image": "ctrain:latest", "imagePullPolicy": "IfNotPresent",
         "resources": {"requests": {"cpu": "100m", "memory": "256Mi"}}}
    if command:
        c["command"] = command
    else:
        c["command"] = ["ctrain-worker"]
        c["args"] = ["train", "--model=/etc/ctrain/model.json",
                     "--data=/usr/share/datasets/fashion-mnist/train",
                     "--test-data=/usr/share/datasets/fashion-mnist/t10k",
                     f"--epochs={epochs}", "--batch=64", "--device=cpu", *extra_args]
        c["volumeMounts"] = [{"name": "model", "mountPath": "/etc/ctrain", "readOnly": True}]
    spec = {"tfReplicaSpecs": {"Worker": {
        "replicas": replicas, "restartPolicy": restart_policy,
        "template": {"spec": {"containers": [c], "volumes": [
            {"name": "model", "configMap": {"name": f"{name}-model"}}]}}}}}
    if run_policy:
        spec["runPolicy"] = run_policy
    return [{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": f"{name}-model"},
             "data": {"model.json": json.dumps(MODEL)}},
            {"apiVersion": "kubeflow.org/v1", "kind": "TFJob", "metadata": {"name": name},
             "spec": spec}]


def apply(cluster, ns, docs):
    cluster.kubectl("apply", "-n", ns, "-f", "-",
                    input=json.dumps({"apiVersion": "v1", "kind": "List", "items": docs}))


def tf_config(cluster, ns, pod):
    """TF_CONFIG as the kubelet gives it to the container: the pod spec holds
    `{"cluster":$(CTRAIN_TF_CLUSTER),...}`, and CTRAIN_TF_CLUSTER comes from
    the attempt's ConfigMap (configMapKeyRef)."""
    for c in pod["spec"]["containers"]:
        env = {e["name"]: e for e in c.get("env", [])}
        if "TF_CONFIG" not in env:
            continue
        value = env["TF_CONFIG"]["value"]
        ref = env.get("CTRAIN_TF_CLUSTER", {}).get("valueFrom", {}).get("configMapKeyRef")
        if ref:
            cm = cluster.get_json("configmap", ref["name"], "-n", ns)
            value = value.replace("$(CTRAIN_TF_CLUSTER)", cm["data"][ref["key"]])
        return json.loads(value)
    return None


# ---- the training-operator bugs, with ctrain-worker ---------------------------------------

def test_tfjob_pods_labels_and_one_headless_service(cluster, node, tfjob_controller, namespace):
    """training-operator #1030 (one Service per replica: N Services per job). ctrain: one
    headless Service per job, TF_CONFIG names `<pod>.<job>.<ns>.svc:2222`; the pods carry
    training-operator's labels; the TFJob status has TFJob's shape."""
    ns, name = namespace, "tf-svc"
    apply(cluster, ns, worker_job(ns, name, replicas=3, epochs=1))
    j = kubectl_wait(cluster, node, ns, name, "Succeeded", 600)
    svcs = cluster.get_json("services", "-n", ns)["items"]
    assert [s["metadata"]["name"] for s in svcs] == [name], [s["metadata"]["name"] for s in svcs]
    assert svcs[0]["spec"]["clusterIP"] == "None"
    ps = {p["metadata"]["name"]: p for p in pods(cluster, ns, name)}
    assert set(ps) == {f"{name}-worker-{i}" for i in range(3)}, list(ps)
    for i in range(3):
        p = ps[f"{name}-worker-{i}"]
        lab = p["metadata"]["labels"]
        assert lab[JOB_LABEL] == name and lab["training.kubeflow.org/replica-type"] in (
            "worker", "Worker") and lab["training.kubeflow.org/replica-index"] == str(i), lab
        tc = tf_config(cluster, ns, p)
        assert tc["task"] == {"type": "worker", "index": i}, tc
        assert tc["cluster"]["worker"] == [f"{name}-worker-{k}.{name}.{ns}.svc:2222"
                                           for k in range(3)], tc
        own = p["metadata"]["ownerReferences"][0]
        assert (own["apiVersion"], own["kind"], own["name"]) == ("kubeflow.org/v1", "TFJob", name)
    st = j["status"]
    assert st["replicaStatuses"]["Worker"].get("succeeded", 0) >= 1, st
    assert st.get("startTime") and st.get("completionTime"), st
    assert cond(j, "Succeeded")["reason"] == "TFJobSucceeded", st
    assert restarts(j) == 0
    print(f"e2e tfjob: 3 workers, {len(svcs)} Service(s): {svcs[0]['metadata']['name']}")


@host_only()
def test_tfjob_sigkilled_worker_restarts_the_gang(cluster, node, tfjob_controller, namespace):
    """A worker's process SIGKILLed mid-training: every pod of the attempt is replaced (new
    UIDs for all, not only the failed one's container restarted in place), one restart is
    counted, and the job then succeeds."""
    ns, name = namespace, "tf-gang"
    w0, w1 = f"{name}-worker-0", f"{name}-worker-1"
    # 10 epochs: an epoch takes a second or two, the kill must land mid-run.
    apply(cluster, ns, worker_job(ns, name, epochs=10, run_policy={"backoffLimit": 3}))
    watch = PodWatch(cluster, ns, name)
    try:
        wait_log(node, ns, w0, "Epoch 1/10")
        first = {p["metadata"]["name"]: p["metadata"]["uid"] for p in pods(cluster, ns, name)}
        pids = task_pids(ns, 1, b"ctrain-worker")
        assert pids, "worker 1's ctrain-worker not found"
        for pid in pids:
            os.kill(pid, signal.SIGKILL)
        j = wait_tfjob(cluster, node, ns, name, lambda j: restarts(j) == 1, 120, "a restart")
        j = kubectl_wait(cluster, node, ns, name, "Succeeded", 900)
    finally:
        seen = watch.close()
    assert restarts(j) == 1, j["metadata"].get("annotations")
    last = {p["metadata"]["name"]: p["metadata"]["uid"] for p in pods(cluster, ns, name)}
    assert set(last) == {w0, w1}
    for n in (w0, w1):
        assert last[n] != first[n], f"{n} was not replaced: {first} {last}"
        assert len(seen[n]) == 2, seen
    # Nothing of the first attempt restarted in place.
    for p in pods(cluster, ns, name):
        assert p["status"]["containerStatuses"][0]["restartCount"] == 0, p["status"]
    msgs = [e["message"] for e in events(cluster, ns) if "Restart" in e["reason"]]
    assert msgs and any(w1 in m or w0 in m for m in msgs), msgs
    print(f"e2e tfjob: SIGKILL of worker 1: both pods replaced, restarts={restarts(j)}")


def test_tfjob_active_deadline_fails_the_job(cluster, node, tfjob_controller, namespace):
    """training-operator #3358: activeDeadlineSeconds did not end the job. ctrain: Failed
    (DeadlineExceeded) about the deadline after startTime, and the running pods go
    (cleanPodPolicy Running)."""
    ns, name, deadline_s = namespace, "tf-deadline", 20
    apply(cluster, ns, worker_job(ns, name, epochs=1000, run_policy={
        "activeDeadlineSeconds": deadline_s, "cleanPodPolicy": "Running"}))
    j = wait_tfjob(cluster, node, ns, name, lambda j: cond(j, "Failed"), 180, "Failed")
    c = cond(j, "Failed")
    assert "DeadlineExceeded" in c["reason"] or "activeDeadlineSeconds" in c["message"], c
    from datetime import datetime
    t0 = datetime.fromisoformat(j["status"]["startTime"].replace("Z", "+00:00"))
    t1 = datetime.fromisoformat(c["lastTransitionTime"].replace("Z", "+00:00"))
    took = (t1 - t0).total_seconds()
    assert deadline_s <= took <= deadline_s + 15, (took, j["status"])
    deadline = time.monotonic() + 120
    while [p for p in pods(cluster, ns, name) if p["status"].get("phase") in ("Running", "Pending")
           and not p["metadata"].get("deletionTimestamp")]:
        assert time.monotonic() < deadline, dump(cluster, node, ns)
        time.sleep(1)
    assert not cond(tfjob(cluster, ns, name), "Succeeded")
    print(f"e2e tfjob: activeDeadlineSeconds={deadline_s}: Failed after {took:.0f} s "
          f"({c['reason']}: {c['message']})")


def test_tfjob_succeeded_pod_is_not_recreated(cluster, node, tfjob_controller, namespace):
    """training-operator #1186/#1997: a worker that Succeeded while its job still ran was
    recreated. ctrain: worker 1 exits 0 at once, worker 0 keeps running for a while; worker 1's
    pod stays Succeeded with its UID, nothing is recreated, the job succeeds with worker 0."""
    ns, name = namespace, "tf-done"
    w0, w1 = f"{name}-worker-0", f"{name}-worker-1"
    script = ('case "$TF_CONFIG" in *\'"index":1}\'*) echo "worker 1 done"; exit 0;; esac; '
              'echo "worker 0 working"; sleep 25; echo "worker 0 done"')
    apply(cluster, ns, worker_job(ns, name, command=["sh", "-c", script]))
    watch = PodWatch(cluster, ns, name)
    try:
        deadline = time.monotonic() + 180
        while True:
            ps = {p["metadata"]["name"]: p for p in pods(cluster, ns, name)}
            if w1 in ps and ps[w1]["status"].get("phase") == "Succeeded":
                break
            assert time.monotonic() < deadline, dump(cluster, node, ns)
            time.sleep(0.5)
        uid1 = ps[w1]["metadata"]["uid"]
        assert not cond(tfjob(cluster, ns, name), "Succeeded"), "worker 0 should still run"
        j = kubectl_wait(cluster, node, ns, name, "Succeeded", 300)
        time.sleep(5)  # a recreate would come within passes of the success
    finally:
        seen = watch.close()
    assert seen[w1] == {uid1}, seen
    assert seen[w0] and len(seen[w0]) == 1, seen
    p1 = cluster.get_json("pod", w1, "-n", ns)
    assert p1["metadata"]["uid"] == uid1 and p1["status"]["phase"] == "Succeeded", p1["status"]
    assert "worker 1 done" in node.pod_log(ns, w1)
    assert restarts(j) == 0
    assert j["status"]["replicaStatuses"]["Worker"].get("succeeded") == 2, j["status"]
    print(f"e2e tfjob: Succeeded worker 1 kept (uid {uid1}), nothing recreated")


def test_tfjob_survives_peer_dns_not_there_yet(cluster, node, tfjob_controller, namespace):
    """training-operator #1458: workers that start before their peers' DNS names resolve
    crash. Here the job's headless Service cannot be created for a while (a ResourceQuota of
    zero Services in the namespace), so the workers start while `<job>-worker-0.<job>.<ns>.svc`
    resolves to nothing (ctrain-worker's rank 1 dials rank 0); once the quota is removed the
    controller creates the Service and the run succeeds without a restart."""
    ns, name, hold_s = namespace, "tf-dns", 20
    w0, w1 = f"{name}-worker-0", f"{name}-worker-1"
    quota = {"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "no-services"},
             "spec": {"hard": {"services": "0"}}}
    cluster.kubectl("apply", "-n", ns, "-f", "-", input=json.dumps(quota))
    deadline = time.monotonic() + 30  # in force once its status says so
    while not cluster.get_json("resourcequota", "no-services", "-n", ns).get(
            "status", {}).get("hard"):
        assert time.monotonic() < deadline
        time.sleep(0.5)
    apply(cluster, ns, worker_job(ns, name, epochs=1))
    deadline = time.monotonic() + 180
    while len([p for p in pods(cluster, ns, name) if p["status"].get("phase") == "Running"]) < 2:
        assert time.monotonic() < deadline, dump(cluster, node, ns)
        time.sleep(0.5)
    time.sleep(hold_s)
    # Both workers ran hold_s seconds with no Service: no DNS name for the peer.
    assert not cluster.get_json("services", "-n", ns)["items"]
    got = cluster.kubectl("exec", "-n", ns, w1, "--", "getent", "hosts",
                          f"{w0}.{name}.{ns}.svc", check=False)
    assert got.returncode != 0, got.stdout
    assert {p["status"]["phase"] for p in pods(cluster, ns, name)} == {"Running"}
    cluster.kubectl("delete", "resourcequota", "no-services", "-n", ns)
    j = kubectl_wait(cluster, node, ns, name, "Succeeded", 600)
    assert restarts(j) == 0, j["metadata"].get("annotations")
    assert [s["metadata"]["name"] for s in cluster.get_json("services", "-n", ns)["items"]] == \
        [name]
    log1 = node.pod_log(ns, w1)
    assert "of 2 connected" in log1, log1[-3000:]
    print(f"e2e tfjob: workers ran {hold_s}+ s before their peers' DNS names existed; "
          f"succeeded, 0 restarts")


@host_only()
def test_tfjob_controller_memory(cluster, node, tfjob_controller):
    """training-operator #1661: its Deployment's 30Mi memory limit OOMKilled it. ctrain's
    controller Deployment: a 256Mi limit, and its resident memory after this module's jobs
    (reported) is a fraction of it; no controller container was ever OOMKilled."""
    dep = cluster.get_json("deployment", "ctrain-controller", "-n", "ctrain-system")
    c = dep["spec"]["template"]["spec"]["containers"][0]
    assert "--enable-tfjob" in c["args"], c["args"]
    limit = c["resources"]["limits"]["memory"]
    assert limit == "256Mi", limit
    for p in tfjob_controller.pods():
        for st in p["status"]["containerStatuses"]:
            last = st.get("lastState", {}).get("terminated", {})
            assert last.get("reason") != "OOMKilled", st
    rss = controller_rss_kib()
    assert rss, "no ctrain-controller process of a pod found"
    assert max(rss) < 256 * 1024 // 2, rss
    print(f"e2e tfjob: controller RSS {', '.join(f'{r / 1024:.1f} MiB' for r in rss)} "
          f"(limit {limit}; training-operator's was 30Mi)")


# ---- training-operator's own examples, only the image replaced ----------------------------

EX_IMAGE = "ctrain-tf-examples:2.21.0"


@pytest.fixture(scope="module")
def examples_image(node):
    if not (EXAMPLES / "simple.yaml").exists():
        pytest.skip(f"{EXAMPLES} is not in the Go module cache")
    if not EXISTING:
        node.import_image(build_image("tf-examples"))
    return EX_IMAGE


def module_docs(rel, image):
    """A manifest of the module with only the image of every container replaced."""
    docs = [d for d in yaml.safe_load_all((EXAMPLES / rel).read_text()) if d]
    for d in docs:
        if d["kind"] == "TFJob":
            for spec in d["spec"]["tfReplicaSpecs"].values():
                for c in spec["template"]["spec"]["containers"]:
                    c["image"] = image
    return docs


def apply_module(cluster, docs, ns):
    """Creates the namespace the manifest names (kubeflow), else applies in `ns`."""
    named = {d["metadata"].get("namespace") for d in docs} - {None}
    for n in named:
        cluster.kubectl("create", "namespace", n, check=False)
    target = named.pop() if named else ns
    cluster.kubectl("apply", "-n", target, "-f", "-",
                    input=json.dumps({"apiVersion": "v1", "kind": "List", "items": docs}))
    return target


def drop_namespace(cluster, ns):
    cluster.kubectl("delete", "namespace", ns, "--wait=true", "--timeout=120s", check=False,
                    timeout=150)


def test_example_simple(cluster, node, tfjob_controller, examples_image):
    """examples/tensorflow/simple.yaml: two workers, each `python
    /var/tf_mnist/mnist_with_summaries.py` (5 epochs of the image's mnist.npz)."""
    docs = module_docs("simple.yaml", examples_image)
    name = docs[0]["metadata"]["name"]
    ns = apply_module(cluster, docs, None)
    try:
        t0 = time.monotonic()
        kubectl_wait(cluster, node, ns, name, "Succeeded", 1200)
        took = time.monotonic() - t0
        log = node.pod_log(ns, f"{name}-worker-0")
        assert "Epoch 5/5" in log, log[-3000:]
        acc = re.findall(r"val_accuracy: ([0-9.]+)", log)
        assert acc and float(acc[-1]) >= 0.75, log[-3000:]
        print(f"e2e tfjob example simple.yaml: Succeeded in {took:.0f} s, "
              f"val_accuracy {acc[-1]} (Fashion-MNIST as mnist.npz)")
    finally:
        drop_namespace(cluster, ns)


@host_only()
def test_example_mnist_with_summaries(cluster, node, tfjob_controller, examples_image):
    """examples/tensorflow/mnist_with_summaries/: the TFJob and its tfevent-volume PV and PVC
    as shipped. The PV's storageClassName is `standard` and the PVC names none: as on kind,
    a default StorageClass `standard` (no provisioner) is what binds them; the PV's hostPath
    /tmp/data receives the TensorBoard logs."""
    data = pathlib.Path("/tmp/data")
    if data.exists():
        pytest.skip("/tmp/data (the example PV's hostPath) exists on this host")
    sc = {"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
          "metadata": {"name": "standard",
                       "annotations": {"storageclass.kubernetes.io/is-default-class": "true"}},
          "provisioner": "kubernetes.io/no-provisioner", "volumeBindingMode": "Immediate"}
    had_sc = cluster.kubectl("get", "storageclass", "standard", check=False).returncode == 0
    if not had_sc:
        cluster.kubectl("apply", "-f", "-", input=json.dumps(sc))
    vol = EXAMPLES / "mnist_with_summaries/tfevent-volume"
    docs = module_docs("mnist_with_summaries/tf_job_mnist.yaml", examples_image)
    name = docs[0]["metadata"]["name"]
    ns = "kubeflow"
    try:
        data.mkdir()
        cluster.kubectl("create", "namespace", ns, check=False)
        cluster.kubectl("apply", "-f", str(vol / "tfevent-pv.yaml"))
        cluster.kubectl("apply", "-f", str(vol / "tfevent-pvc.yaml"))
        apply_module(cluster, docs, None)
        t0 = time.monotonic()
        kubectl_wait(cluster, node, ns, name, "Succeeded", 1200)
        took = time.monotonic() - t0
        log = node.pod_log(ns, f"{name}-worker-0")
        assert "Epoch 5/5" in log, log[-3000:]
        events_files = list((data / "logs").rglob("events.out.tfevents.*"))
        assert events_files, list(data.rglob("*"))
        acc = re.findall(r"val_accuracy: ([0-9.]+)", log)
        print(f"e2e tfjob example mnist_with_summaries: Succeeded in {took:.0f} s, "
              f"val_accuracy {acc[-1] if acc else '?'}, {len(events_files)} tfevents files")
    finally:
        drop_namespace(cluster, ns)
        cluster.kubectl("delete", "pv", "tfevent-volume", "--wait=false", check=False)
        if not had_sc:
            cluster.kubectl("delete", "storageclass", "standard", check=False)
        shutil.rmtree(data, ignore_errors=True)


def test_example_dist_mnist_with_ps_is_rejected(cluster, node, tfjob_controller, examples_image,
                                                 namespace):
    """examples/tensorflow/dist-mnist/tf_job_mnist.yaml has a PS replica: ctrain runs no
    parameter servers, so the TFJob Fails at once with a message saying so, and no pod or
    Service is created."""
    docs = module_docs("dist-mnist/tf_job_mnist.yaml", examples_image)
    name = docs[0]["metadata"]["name"]
    ns = apply_module(cluster, docs, namespace)
    j = wait_tfjob(cluster, node, ns, name, lambda j: cond(j, "Failed"), 60, "Failed")
    msg = cond(j, "Failed")["message"]
    assert "PS" in msg or "parameter server" in msg.lower(), msg
    time.sleep(3)
    assert not pods(cluster, ns, name)
    assert not cluster.get_json("services", "-n", ns)["items"]
    print(f"e2e tfjob example dist-mnist: Failed: {msg}")


@pytest.mark.skip(reason="examples/tensorflow/distribution_strategy/multi_worker_tfjob.yaml "
                  "asks nvidia.com/gpu: 1 per worker (this node has no GPU) and its script "
                  "downloads MNIST with tensorflow_datasets (tfds.load) at start, which the "
                  "pods cannot reach and no offline copy of exists here; its image is Python "
                  "3.9 + TF 2.11. Running it would need the manifest's GPU limit removed and "
                  "tfds data prepared, i.e. a changed example, which this suite does not do.")
def test_example_multi_worker_strategy():
    pass
