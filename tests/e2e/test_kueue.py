"""Gang admission by Kueue (sigs.k8s.io/kueue v0.17.0, built from its Go module
by tools/kueue/build.sh, run out of cluster by tools/kueue/install.sh).

The quota is 4 CPU "slots" of 100m (nominalQuota cpu: 400m): the local node
has 2 cores, so a slot is 100m, not a core. Each group or TrainingJob needs 3
slots: one runs, the other waits whole, and starts whole when the first
finishes; at no moment do pods of both run (no partial admission, so no
deadlock).

1. Plain pods, no ctrain controller, through Kueue's plain-pod group
   integration: pods labelled `kueue.x-k8s.io/queue-name` and
   `kueue.x-k8s.io/pod-group-name` and annotated
   `kueue.x-k8s.io/pod-group-total-count` get a scheduling gate from Kueue's
   webhook and are admitted as one Workload. The waiting group's pods exist,
   gated.
2. Two TrainingJobs of 3 workers, each with the one label
   `kueue.x-k8s.io/queue-name: lq` on the job: Kueue runs with
   `externalFrameworks: [TrainingJob.v1alpha1.ctrain.dev]` and the controller
   writes each job's Workload itself (controller/kueue.h). The waiting job
   has ZERO pods (sampled every half second for as long as it waits), is
   Suspended with reason WaitingForAdmission naming its LocalQueue, and runs
   whole when the first Succeeds; both Workloads end Finished.
"""
import json
import subprocess
import time
import uuid

import pytest

from e2e_lib import EXISTING, ROOT, dump

INSTALL = ROOT / "tools" / "kueue" / "install.sh"
NS_LABEL = "ctrain.dev/kueue=enabled"
GATE = "kueue.x-k8s.io/admission"
SLOT = "100m"
QUOTA = "400m"  # 4 slots
GROUP = 3  # slots each group / job needs


@pytest.fixture(scope="module")
def kueue(cluster, node):
    """Kueue installed on the session's cluster for this module, removed after."""
    if EXISTING:
        if cluster.kubectl("get", "crd", "clusterqueues.kueue.x-k8s.io", check=False).returncode:
            pytest.skip("no Kueue installed in the cluster of $KUBECONFIG")
        yield cluster
        return
    d = cluster.state_dir
    up = subprocess.run(["bash", str(INSTALL), "up", "--dir", d], capture_output=True, text=True,
                        timeout=3600)
    try:
        assert up.returncode == 0, f"install.sh up failed:\n{up.stderr[-6000:]}"
        yield cluster
    finally:
        down = subprocess.run(["bash", str(INSTALL), "down", "--dir", d], capture_output=True,
                              text=True, timeout=600)
        assert down.returncode == 0, down.stderr[-3000:]
        left = cluster.kubectl("get", "crd", "-o", "name").stdout
        assert "kueue.x-k8s.io" not in left, left
        assert not cluster.kubectl("get", "mutatingwebhookconfigurations,"
                                   "validatingwebhookconfigurations", "-o", "name"
                                   ).stdout.count("ctrain-kueue"), "webhooks left"


@pytest.fixture
def queue(kueue, cluster):
    """A namespace Kueue manages, with a LocalQueue `lq` on a ClusterQueue of
    4 slots (cpu 400m) of one ResourceFlavor. Yields the namespace."""
    ns = "kq-" + uuid.uuid4().hex[:8]
    cq = f"cq-{ns}"
    cluster.kubectl("create", "namespace", ns)
    cluster.kubectl("label", "namespace", ns, NS_LABEL)
    objs = [
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor",
         "metadata": {"name": f"rf-{ns}"}},
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue",
         "metadata": {"name": cq},
         "spec": {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": ns}},
                  "resourceGroups": [{"coveredResources": ["cpu"], "flavors": [
                      {"name": f"rf-{ns}",
                       "resources": [{"name": "cpu", "nominalQuota": QUOTA}]}]}]}},
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue",
         "metadata": {"name": "lq", "namespace": ns}, "spec": {"clusterQueue": cq}},
    ]
    cluster.kubectl("apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List",
                                                          "items": objs}))
    wait(lambda: cond_status(cluster.get_json("clusterqueue", cq), "Active") == "True", 60,
         lambda: cluster.kubectl("get", "clusterqueue", cq, "-o", "yaml").stdout)
    try:
        yield ns
    finally:
        cluster.kubectl("delete", "namespace", ns, "--wait=true", "--timeout=120s", check=False,
                        timeout=150)
        cluster.kubectl("delete", "clusterqueue", cq, "--wait=false", check=False)
        cluster.kubectl("delete", "resourceflavor", f"rf-{ns}", "--wait=false", check=False)


# ---- helpers ------------------------------------------------------------------------------

def cond_status(obj, type_):
    for c in obj.get("status", {}).get("conditions", []):
        if c["type"] == type_:
            return c["status"]
    return None


def wait(pred, timeout, show=lambda: ""):
    deadline = time.monotonic() + timeout
    while True:
        v = pred()
        if v:
            return v
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s\n{show()}")
        time.sleep(1)


def kueue_keys(group, count):
    return ({"kueue.x-k8s.io/queue-name": "lq", "kueue.x-k8s.io/pod-group-name": group},
            {"kueue.x-k8s.io/pod-group-total-count": str(count)})


def pod_group(ns, group, seconds):
    """GROUP pods of one Kueue pod group, each `sleep seconds` on one slot."""
    labels, annotations = kueue_keys(group, GROUP)
    return [{"apiVersion": "v1", "kind": "Pod",
             "metadata": {"name": f"{group}-{i}", "namespace": ns,
                          "labels": dict(labels, app=group), "annotations": annotations},
             "spec": {"restartPolicy": "Never", "terminationGracePeriodSeconds": 1,
                      "containers": [{"name": "c", "image": "ctrain:latest",
                                      "imagePullPolicy": "IfNotPresent",
                                      "command": ["sleep", str(seconds)],
                                      "resources": {"requests": {"cpu": SLOT}}}]}}
            for i in range(GROUP)]


class Pods:
    """The namespace's pods by group: snapshot() gives {group: [(name, phase,
    gated, node)]}; every snapshot taken is checked for the gang property."""

    def __init__(self, cluster, ns, key):
        self.cluster, self.ns, self.key = cluster, ns, key
        self.seen_running_together = []

    def snapshot(self):
        out = {}
        for p in self.cluster.get_json("pods", "-n", self.ns)["items"]:
            g = p["metadata"].get("labels", {}).get(self.key)
            if g is None:
                continue
            gates = [x["name"] for x in p["spec"].get("schedulingGates", [])]
            out.setdefault(g, []).append((p["metadata"]["name"], p["status"].get("phase"),
                                          GATE in gates, p["spec"].get("nodeName")))
        running = {g for g, ps in out.items() if any(ph == "Running" for _, ph, _, _ in ps)}
        if len(running) > 1:
            self.seen_running_together.append(out)
        return out

    def all_running(self, group):
        ps = self.snapshot().get(group, [])
        return len(ps) == GROUP and all(ph == "Running" for _, ph, _, _ in ps)

    def waiting_whole(self, group):
        """Every pod of the group exists, gated, unscheduled, none Running."""
        ps = self.snapshot().get(group, [])
        return len(ps) == GROUP and all(g and not n and ph == "Pending" for _, ph, g, n in ps)


def workloads(cluster, ns):
    return {w["metadata"]["name"]: w for w in cluster.get_json("workloads", "-n", ns)["items"]}


def admitted(w):
    return cond_status(w, "Admitted") == "True"


def show(cluster, node, ns):
    return lambda: (dump(cluster, node, ns) + "\n"
                    + cluster.kubectl("get", "workloads", "-n", ns, "-o", "yaml",
                                      check=False).stdout[-6000:])


def check_gang(cluster, node, ns, pods, first, second, first_done, second_done, hold_s):
    """first runs whole; second waits whole while first runs (checked for at
    least hold_s seconds); then second runs whole; never both at once."""
    s = show(cluster, node, ns)
    wait(lambda: pods.all_running(first), 180, s)
    wait(lambda: pods.waiting_whole(second), 60, s)
    # The second group's Workload is queued, not admitted: the quota (4 slots)
    # cannot hold 3 more. It stays so, whole, while the first runs.
    w2 = wait(lambda: [w for w in workloads(cluster, ns).values()
                       if cond_status(w, "QuotaReserved") == "False" and not admitted(w)], 60, s)
    assert len(w2) == 1, s()
    msg = [c.get("message", "") for c in w2[0]["status"]["conditions"]
           if c["type"] == "QuotaReserved"]
    t_end = time.monotonic() + hold_s
    while time.monotonic() < t_end and not first_done():
        assert pods.waiting_whole(second), s()
        time.sleep(1)
    # The first finishes; the second is admitted whole and runs.
    wait(first_done, 300, s)
    wait(lambda: pods.all_running(second) or second_done(), 180, s)
    wait(second_done, 300, s)
    assert not pods.seen_running_together, (pods.seen_running_together, s())
    return msg


# ---- tests --------------------------------------------------------------------------------

@pytest.mark.skipif(EXISTING, reason="uses the local node's ctrain:latest image")
def test_plain_pod_groups_are_admitted_whole(cluster, node, queue):
    """Two pod groups of 3 slots on a 4-slot queue: A runs, B waits whole
    (created, gated, none Running), then B runs when A's pods succeed."""
    ns = queue
    pods = Pods(cluster, ns, "kueue.x-k8s.io/pod-group-name")
    cluster.kubectl("apply", "-f", "-", input=json.dumps(
        {"apiVersion": "v1", "kind": "List", "items": pod_group(ns, "group-a", 40)}))
    wait(lambda: pods.all_running("group-a"), 180, show(cluster, node, ns))
    cluster.kubectl("apply", "-f", "-", input=json.dumps(
        {"apiVersion": "v1", "kind": "List", "items": pod_group(ns, "group-b", 15)}))

    def done(group):
        return lambda: (lambda ps: len(ps) == GROUP and all(ph == "Succeeded"
                                                            for _, ph, _, _ in ps))(
            pods.snapshot().get(group, []))

    msg = check_gang(cluster, node, ns, pods, "group-a", "group-b", done("group-a"),
                     done("group-b"), hold_s=10)
    print("group-b waited with:", msg)
    # Kueue marks a pod group's Workload Finished after it sees the last pod
    # Succeed, a moment after the test does.
    wait(lambda: (lambda w: len(w) == 2 and all(cond_status(x, "Finished") == "True"
                                                for x in w.values()))(workloads(cluster, ns)),
         60, lambda: json.dumps({n: w.get("status") for n, w in workloads(cluster, ns).items()},
                                indent=1)[:4000])


def training_job(name, workers=GROUP, epochs=1):
    """A TrainingJob gated by Kueue: the LocalQueue label on the job, nothing
    Kueue-specific in its pod template."""
    return {
        "apiVersion": "ctrain.dev/v1alpha1", "kind": "TrainingJob",
        "metadata": {"name": name, "labels": {"kueue.x-k8s.io/queue-name": "lq"}},
        "spec": {"replicaSpecs": {"Worker": {"replicas": workers, "template": {
            "spec": {"containers": [{
                "name": "worker", "image": "ctrain:latest", "imagePullPolicy": "IfNotPresent",
                "command": ["ctrain-worker"],
                "args": ["train", "--model=/etc/ctrain/model.json",
                         "--data=/usr/share/datasets/fashion-mnist/train",
                         "--test-data=/usr/share/datasets/fashion-mnist/t10k",
                         f"--epochs={epochs}", "--batch=64", "--device=cpu"],
                "resources": {"requests": {"cpu": SLOT}}}]}}}}}}


@pytest.mark.skipif(EXISTING, reason="uses the local node's ctrain:latest image")
def test_training_jobs_are_admitted_whole(cluster, node, kueue, controller, queue):
    """Two TrainingJobs of 3 workers (3 slots each) on a 4-slot queue: one
    trains; the other has no pod at all while it waits (its Workload is
    queued, not admitted), then trains whole when the first Succeeds; both
    Succeed and both Workloads are Finished."""
    ns = queue
    s = show(cluster, node, ns)
    pods = Pods(cluster, ns, "ctrain.dev/job-name")

    def tj(name):
        return cluster.get_json("tj", name, "-n", ns)

    def succeeded(name):
        return lambda: cond_status(tj(name), "Succeeded") == "True"

    def pod_names(name):
        return cluster.kubectl("get", "pods", "-n", ns, "-l", f"ctrain.dev/job-name={name}",
                               "-o", "name").stdout.split()

    # job-a trains long enough for job-b to be seen waiting (6 epochs took 13 s on a
    # fast VM: job-b's wait was sampled 4 times).
    cluster.kubectl("apply", "-n", ns, "-f", "-", input=json.dumps(training_job("job-a", epochs=20)))
    wait(lambda: pods.all_running("job-a"), 240, s)
    # Admitted by its own Workload: the pods carry no Kueue gate.
    assert not any(g for _, _, g, _ in pods.snapshot()["job-a"]), s()
    cluster.kubectl("apply", "-n", ns, "-f", "-", input=json.dumps(training_job("job-b")))
    t_b = time.monotonic()

    # job-b waits with zero pods for as long as job-a runs: sampled every
    # half second from its creation. A pod of job-b may only show once job-a
    # Succeeded (its status is written before its Workload is Finished).
    samples, waiting_seen, msg, a_done = 0, False, None, None
    while True:
        names = pod_names("job-b")
        if names:
            assert succeeded("job-a")(), (f"job-b has pods {names} while job-a runs", s())
            break
        samples += 1
        b = tj("job-b")
        c = [x for x in b.get("status", {}).get("conditions", []) if x["type"] == "Suspended"]
        if c and c[0]["status"] == "True":
            assert c[0]["reason"] == "WaitingForAdmission", c
            assert "LocalQueue lq" in c[0]["message"], c
            waiting_seen, msg = True, c[0]["message"]
        if a_done is None and succeeded("job-a")():
            a_done = time.monotonic()
        assert a_done is None or time.monotonic() - a_done < 180, \
            "job-a Succeeded 180 s ago and job-b has no pod\n" + s()
        assert time.monotonic() - t_b < 900, "timed out\n" + s()
        time.sleep(0.5)
    wait_s = time.monotonic() - t_b
    assert waiting_seen and samples >= 5, (samples, s())
    wls = workloads(cluster, ns)
    assert set(wls) == {"trainingjob-job-a", "trainingjob-job-b"}, list(wls)
    for w in wls.values():
        (ref,) = w["metadata"]["ownerReferences"]
        assert ref["kind"] == "TrainingJob" and ref["controller"] is True, ref
    assert cond_status(wls["trainingjob-job-a"], "Finished") == "True", s()

    # job-b is admitted and runs whole, then Succeeds.
    wait(lambda: pods.all_running("job-b") or succeeded("job-b")(), 240, s)
    wait(succeeded("job-b"), 400, s)
    assert not pods.seen_running_together, (pods.seen_running_together, s())
    wait(lambda: all(cond_status(w, "Finished") == "True" for w in workloads(cluster, ns).values()),
         60, s)
    for name in ("job-a", "job-b"):
        st = tj(name)["status"]
        assert st.get("restarts", 0) == 0, json.dumps(st)
    print(f"job-b waited {wait_s:.0f}s with 0 pods ({samples} samples): {msg}")


@pytest.mark.skipif(EXISTING, reason="uses the local node's ctrain:latest image")
def test_deactivated_workload_stops_the_job_and_reactivated_resumes_it(cluster, node, kueue,
                                                                         controller, queue):
    """Kueue evicts a running job's Workload (spec.active false): the
    controller deletes the pods, releases the quota (QuotaReserved False) and
    the job waits with zero pods; reactivated, Kueue admits it again and the
    same attempt's pods come back (no restart counted)."""
    ns = queue
    s = show(cluster, node, ns)
    pods = Pods(cluster, ns, "ctrain.dev/job-name")
    wl = "trainingjob-job-c"

    def tj():
        return cluster.get_json("tj", "job-c", "-n", ns)

    def suspended_reason():
        c = [x for x in tj().get("status", {}).get("conditions", []) if x["type"] == "Suspended"]
        return c[0]["reason"] if c and c[0]["status"] == "True" else None

    def n_pods():
        return len(cluster.kubectl("get", "pods", "-n", ns, "-l", "ctrain.dev/job-name=job-c",
                                   "-o", "name").stdout.split())

    cluster.kubectl("apply", "-n", ns, "-f", "-",
                    input=json.dumps(training_job("job-c", epochs=20)))
    wait(lambda: pods.all_running("job-c"), 240, s)
    cluster.kubectl("patch", "workload", wl, "-n", ns, "--type=merge",
                    "-p", '{"spec":{"active":false}}')
    wait(lambda: suspended_reason() == "EvictedByKueue", 60, s)
    wait(lambda: n_pods() == 0, 120, s)
    w = wait(lambda: (lambda x: x if cond_status(x, "QuotaReserved") == "False" else None)(
        cluster.get_json("workload", wl, "-n", ns)), 60, s)
    assert "admission" not in w["status"], json.dumps(w["status"])
    for _ in range(6):  # inactive: it stays without pods
        assert n_pods() == 0, s()
        time.sleep(0.5)
    cluster.kubectl("patch", "workload", wl, "-n", ns, "--type=merge",
                    "-p", '{"spec":{"active":true}}')
    wait(lambda: admitted(cluster.get_json("workload", wl, "-n", ns)), 120, s)
    wait(lambda: pods.all_running("job-c"), 240, s)
    st = tj()["status"]
    assert st.get("restarts", 0) == 0 and st.get("attempt", 1) == 1, json.dumps(st)
    assert suspended_reason() is None, json.dumps(st)
