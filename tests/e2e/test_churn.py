"""A shared, churning cluster, on the session's real nodes with the controller
Deployment: bench/churn.py's soak, short (2 namespaces x 3 cycles, its hostile tenant's
decoys there throughout, the same invariants), and `kubectl delete -f` then `kubectl
apply -f` of a running job whose old pods still terminate. The steps and checks are
bench/churn.py's (imported from bench/, as tools/test.sh imports bench/train.py)."""

import json
import sys
import time
import uuid

import e2e_lib as e2e

sys.path.insert(0, str(e2e.ROOT / "bench"))
import churn  # noqa: E402  (bench/churn.py)


def test_churn_with_a_hostile_tenant(cluster, node, controller):
    """2 namespaces x 3 cycles at once: a finished job deleted and re-applied at once, its
    run deleted while running and re-applied at once (or, in the third cycle, suspended and
    resumed at once), Succeeded within 120 s; no decoy written, nothing left behind."""
    names = [f"churn-{uuid.uuid4().hex[:6]}-{i}" for i in range(2)]
    lines = []
    with churn.tenant_namespaces(cluster, names):
        c = churn.Churn(
            cluster,
            names,
            controller,
            cycles=3,
            run_s=8,
            term_s=3,
            bound=120,
            suspend_every=3,
            out=lambda s: (lines.append(s), print(s)),
        )
        ok = c.run()
        c.report()
    assert ok, "\n".join(c.violations)
    assert c.n["cycles"] == 2 * 3 and not c.leaked, "\n".join(lines[-12:])


def test_delete_f_then_apply_f_of_a_running_job(cluster, node, controller, namespace, tmp_path):
    """`kubectl delete -f job.yaml` of a running 2-worker job, then `kubectl apply -f
    job.yaml` while its pods still terminate (10 s on SIGTERM): the new job waits on the old
    pods' names (Blocked, NameTaken, False again once they go), gets new pods and Succeeds;
    nothing is left after its own delete."""
    manifest = tmp_path / "job.json"
    manifest.write_text(json.dumps(churn.job_manifest(run_s=8, term_s=10)))
    m = churn.Mirror(cluster, [namespace])
    try:
        cluster.kubectl("apply", "-n", namespace, "-f", str(manifest))
        old = cluster.get_json("tj", churn.JOB, "-n", namespace)["metadata"]["uid"]
        assert m.wait(lambda: m.state(old), 120) == "Running", e2e.dump(cluster, node, namespace)
        cluster.kubectl("delete", "-n", namespace, "-f", str(manifest))
        # The garbage collector deletes the job's pods: Terminating for 10 s.
        assert m.wait(
            lambda: (
                (ps := m.pods_of(old)) and all(p["metadata"].get("deletionTimestamp") for p in ps)
            ),
            30,
        )
        going = cluster.get_json("pods", "-n", namespace, "-l", f"ctrain.dev/job-name={churn.JOB}")[
            "items"
        ]
        assert len(going) == churn.WORKERS and all(
            p["metadata"].get("deletionTimestamp") for p in going
        ), going
        t0 = time.monotonic()
        cluster.kubectl("apply", "-n", namespace, "-f", str(manifest))
        new = cluster.get_json("tj", churn.JOB, "-n", namespace)["metadata"]["uid"]
        assert new != old
        assert m.wait(lambda: m.state(new), 120) == "Running", e2e.dump(cluster, node, namespace)
        running = time.monotonic() - t0
        with m.cv:
            pods = m.pods_of(new)
            still = [p["metadata"]["name"] for p in m.pods_of(old)]
        assert not {p["metadata"]["uid"] for p in pods} & {p["metadata"]["uid"] for p in going}
        print(
            f"delete -f, apply -f of a running job (its {len(going)} pods terminating): the "
            f"new job Running {running:.1f} s after the apply (old pods left then: {still})"
        )
        assert (
            m.wait(lambda: m.state(new) in ("Succeeded", "Failed") and m.state(new), 120)
            == "Succeeded"
        ), e2e.dump(cluster, node, namespace)
        print(f"... Succeeded {time.monotonic() - t0:.1f} s after the apply")
        j = cluster.get_json("tj", churn.JOB, "-n", namespace)
        blocked = [c for c in j["status"]["conditions"] if c["type"] == "Blocked"]
        # It waited on the names of the old pods, which were still there, and said so.
        assert m.blocked.get(new) == {"NameTaken"}, j["status"]
        assert blocked and blocked[0]["status"] == "False", j["status"]
        assert j["status"].get("attempt", 1) == 1 and not j["status"].get("restarts"), j["status"]
    finally:
        m.close()
    cluster.kubectl("delete", "-n", namespace, "-f", str(manifest), "--wait=false")
    left, _ = churn.wait_no_leftovers(cluster, [namespace], bound=120)
    assert not left, left
