"""Two tenants on the session's real nodes: users with only the default `edit`
role, each in a namespace of her own, and the controller as its Deployment. Nothing one
does in hers (a job of the other's job's name, pods, ConfigMaps, labels and ownerReferences
naming the other's job) makes the controller write or delete in the other's namespace, or
write in hers what she could not write herself (tests/tenantlib.py; the integration lane
runs the same check against the controller as a process)."""
import sys
import uuid

import e2e_lib as e2e
from tenantlib import two_tenants

sys.path.insert(0, str(e2e.ROOT / "bench"))
import churn  # noqa: E402  (bench/churn.py: its cheap TrainingJob)


def long_job(name, workers=2):
    """Workers that sleep (10 minutes) instead of training: the test only reads what the
    controller writes."""
    j = churn.job_manifest(name, run_s=600, term_s=1)
    j["spec"]["replicaSpecs"]["Worker"]["replicas"] = workers
    return j


def test_two_tenants_with_edit_roles(cluster, node, controller):
    names = [f"tenant-{uuid.uuid4().hex[:6]}-{who}" for who in ("a", "b")]
    with churn.tenant_namespaces(cluster, names):
        try:
            two_tenants(cluster, names[0], names[1], controller.logs, make_job=long_job,
                        running=True)
        finally:
            for ns in names:
                cluster.kubectl("delete", "tj", "--all", "-n", ns, "--wait=false", check=False)
