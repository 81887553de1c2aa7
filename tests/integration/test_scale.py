"""The controller at scale, small: 250 TrainingJobs x 4 workers on 200 fake
Nodes (KWOK, tools/kwok), every pod Running, then exiting 0 after 10 s. Every job must
Succeed, no pod be created twice (name and attempt with two uids), and after the jobs are
deleted nothing of theirs may be left. bench/scale.py is the same run at 10,000 pods.
221 s in all (cluster start, 72 s of jobs, 91 s of garbage collection, teardown) on the
2-core VM while another bench ran, 2026-12-06.

Runs on a control plane of its own (fake nodes would run the other tests' pods), so it is
skipped with CTRAIN_TEST_USE_KUBECONFIG=1; skipped when kwok cannot be built
(tools/kwok/build.sh: Go and the module proxy)."""
import argparse
import os
import subprocess
import sys

import pytest

import clusterlib
from clusterlib import ROOT, ClusterError, control_plane_down, control_plane_up

sys.path.insert(0, str(ROOT / "bench"))
import scale  # noqa: E402  (bench/scale.py: the run and its figures)

JOBS, WORKERS, NODES = 250, 4, 200


@pytest.fixture(scope="module")
def kwok_cluster(tmp_path_factory):
    if os.environ.get("CTRAIN_TEST_USE_KUBECONFIG") == "1":
        pytest.skip("the scale smoke adds fake nodes: it runs on its own local control plane")
    b = subprocess.run(["bash", str(ROOT / "tools/kwok/build.sh")], capture_output=True,
                       text=True, timeout=1800)
    if b.returncode:
        pytest.skip(f"kwok could not be built (tools/kwok/build.sh): {b.stderr[-500:]}")
    if not clusterlib.CONTROLLER.exists():
        pytest.fail(f"{clusterlib.CONTROLLER} is not built")
    try:
        # Grace well above the fake nodes' 120 s Lease: a lagging renewal on a loaded
        # machine must not make a node NotReady (its pods' gangs would restart).
        # The audit log counts the controller's requests by verb and resource, as the bench.
        policy = tmp_path_factory.mktemp("audit") / "policy.yaml"
        policy.write_text(scale.AUDIT_POLICY)
        cl = control_plane_up(prefix="ctrain-it-scale-",
                              env={"CTRAIN_NODE_MONITOR_GRACE": "300s",
                                   "CTRAIN_APISERVER_AUDIT_POLICY": str(policy)})
    except ClusterError as e:
        pytest.fail(f"local control plane did not start: {e}")
    try:
        scale.kwok("up", cl, "--nodes", NODES, "--zones", 4, "--lease-seconds", 120)
        yield cl
    finally:
        scale.kwok("down", cl)
        control_plane_down(cl)


def test_scale_small(kwok_cluster, tmp_path):
    cl = kwok_cluster
    a = argparse.Namespace(jobs=JOBS, workers=WORKERS, nodes=NODES, sim_after="10s", qps=1000,
                           ctl_workers=None, timeout=240, gc_wait=150)
    row = scale.CtrainRow(a, cl, tmp_path)
    row.start()
    try:
        r = scale.run(a, cl, scale.Api(cl.kubeconfig), row, "scale-smoke", scale.Audit(cl))
    finally:
        row.stop()
    scale.report("test_scale", r)
    scale.report_cleanup(r)
    # The audit log saw the controller's requests: each job's pods created by it.
    assert r["ctl_requests_by"].get("create/pods") == JOBS * WORKERS, r["ctl_requests_by"]
    assert r["succeeded"] == JOBS, f"{r['succeeded']}/{JOBS} Succeeded, {r['failed']} Failed"
    assert r["running"] == JOBS * WORKERS
    assert not r["duplicates"], f"pods created twice: {r['dup_examples']}"
    # A job's pod events within OWNED_BATCH_NS (1 s, the Job controller's batch period) make
    # one pass: 5.4 passes a job at 250 x 4 alone on the machine (bench/scale.py --shape 1k,
    # 2026-12-06), 8.9 beside CI's e2e tests; with 200 ms, 10.7 alone. A pass per pod event
    # (~4 events a pod) would be over 15.
    assert r["reconcile"] / JOBS < 15, f"{r['reconcile'] / JOBS:.1f} passes a job"
    assert not r["jobs_left"]
    assert not any(r["left"].values()), f"left after deleting the jobs: {r['left']}"
