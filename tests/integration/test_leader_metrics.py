"""Metrics from the leader only, against a real kube-apiserver: the replica
that holds the Lease labels its own pod ctrain.dev/leader=true (what the
metrics Service selects), the standby's pod carries no such label, and the
label moves with the Lease; the standby's caches are warm (it watches, writes nothing).
Job outcome counters by kind and namespace on
the leader's /metrics. The controllers run on this host; their "own pods"
are pod objects made for them (POD_NAME, POD_NAMESPACE as the downward API
gives them), which no node runs."""
import re

from ctllib import cond, create, job, pods, set_pod_exit, tj, wait_for

LABEL = "ctrain.dev/leader"


def own_pod(cluster, ns, name):
    create(cluster, ns, {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
                         "spec": {"containers": [{"name": "c", "image": "ctrain:latest"}]}})


def leader_label(cluster, ns, name):
    p = cluster.get_json("pod", name, "-n", ns)
    return p["metadata"].get("labels", {}).get(LABEL)


def test_leader_labels_its_pod_and_the_label_moves(crd, namespace, start_controller):
    ns = namespace
    for name in ("ctl-a", "ctl-b"):
        own_pod(crd, ns, name)
    # ctl-b's pod carries a stale mark, as after its container lost the Lease and restarted.
    crd.kubectl("label", "pod", "ctl-b", "-n", ns, f"{LABEL}=true")
    a = start_controller(name="a", env={"POD_NAME": "ctl-a", "POD_NAMESPACE": ns})
    wait_for(lambda: "became leader" in a.logs(), timeout=20, what="a leads")
    b = start_controller(name="b", env={"POD_NAME": "ctl-b", "POD_NAMESPACE": ns})
    wait_for(lambda: leader_label(crd, ns, "ctl-a") == "true", timeout=20, what="a's label")
    wait_for(lambda: leader_label(crd, ns, "ctl-b") is None, timeout=20,
             what="the standby removes its stale label")
    assert "\nctrain_leader 1\n" in a.metrics() and "\nctrain_leader 0\n" in b.metrics()
    # What the Service selects: exactly the leader's pod.
    sel = crd.get_json("pods", "-n", ns, "-l", f"{LABEL}=true")["items"]
    assert [p["metadata"]["name"] for p in sel] == ["ctl-a"]
    # A warm standby: b caches the job and its pod that a made, and writes nothing.
    create(crd, ns, job("warm", workers=1))
    wait_for(lambda: len(pods(crd, ns, "warm")) == 1, what="the leader's pod")

    def cached(ctl, resource):
        m = re.search(rf'^ctrain_cache_objects{{resource="{resource}"}} (\d+)$', ctl.metrics(),
                      re.M)
        return int(m.group(1)) if m else None
    wait_for(lambda: cached(b, "pods") == 1 and cached(b, "trainingjobs") == 1, timeout=20,
             what="the standby's caches hold the job and its pod")
    assert re.search(r"^ctrain_pods_created_total 0$", b.metrics(), re.M)
    assert a.stop() == 0
    wait_for(lambda: leader_label(crd, ns, "ctl-b") == "true", timeout=30, what="b's label")
    assert "\nctrain_leader 1\n" in b.metrics()


def counter(text, name, ns):
    m = re.search(rf'^{name}{{kind="TrainingJob",namespace="{ns}"}} (\d+)$', text, re.M)
    return int(m.group(1)) if m else None


def test_job_outcome_counters_by_namespace(crd, namespace, start_controller):
    ns = namespace
    ctl = start_controller()
    create(crd, ns, job("ok", workers=1))
    create(crd, ns, job("again", workers=1, backoffLimit=1))
    create(crd, ns, job("bad", workers=1, restartPolicy="Never"))
    wait_for(lambda: len(pods(crd, ns, "ok")) == 1 and len(pods(crd, ns, "bad")) == 1
             and len(pods(crd, ns, "again")) == 1, what="the three jobs' pods")
    set_pod_exit(crd, ns, "ok-worker-0", 0)
    set_pod_exit(crd, ns, "bad-worker-0", 1)
    set_pod_exit(crd, ns, "again-worker-0", 75)
    for name, c in (("ok", "Succeeded"), ("bad", "Failed")):
        wait_for(lambda: cond(tj(crd, ns, name), c), what=f"{name} {c}")
    wait_for(lambda: tj(crd, ns, "again").get("status", {}).get("restarts") == 1,
             what="again restarted")
    want = {"ctrain_jobs_created_total": 3, "ctrain_jobs_successful_total": 1,
            "ctrain_jobs_failed_total": 1, "ctrain_jobs_restarted_total": 1}
    text = wait_for(lambda: all(counter(ctl.metrics(), k, ns) == v for k, v in want.items())
                    and ctl.metrics(), what=f"counters {want}")
    assert "# TYPE ctrain_jobs_created_total counter" in text
