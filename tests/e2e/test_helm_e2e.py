"""The Helm chart on the local cluster: a real `helm install --set replicas=two`
is refused with values.schema.json's message and leaves nothing behind; and `helm upgrade`
from the v0.2.0 release's chart to the current one (charts/ctrain) while a TrainingJob runs
replaces both controller replicas and hands the Lease over, and the job goes on: the same
pods (same uids), attempt 1, no restart or disruption, then Succeeded.

The v0.2.0 chart comes from git: the commit v0.2.0 was cut at is the last one before
CHANGELOG.md opened its "## Unreleased" section above "## v0.2.0" (there are no tags), its
charts/ctrain taken with `git archive`; CI's checkout must hold the history (a shallow clone
fails here, naming the fix). The repository keeps no v0.2.0 image, so both releases run the
nodes' ctrain:latest; the upgrade also sets image.pullPolicy=Never (a value both charts
have): with the same values the two charts render the same Deployment, and nothing would
roll. The CRD is the tree's (manifests/crds, applied before the install: Helm installs a
chart's crds/ only where the CRD is missing and never upgrades it, docs/operations.md).

The module's own install: the kustomize controller of the other modules (their `controller`
fixture) is not running here, and what manifests/ made (less the CRD and the namespace,
which hold the jobs) is removed first, as Helm refuses objects it does not own; the
module's end applies manifests/ again and removes its Deployment, the state the other
modules leave."""
import re
import subprocess
import time

import pytest
import yaml

from clusterlib import install
from e2e_lib import (CONTROLLER_NS, EXISTING, JOB, ROOT, W1, Deployment, HelmSlot, PodWatch,
                     apply_example, cond, dump, job_json, job_pods, leader_metrics,
                     release_held, run_helm, wait_succeeded)

pytestmark = pytest.mark.skipif(EXISTING, reason="installs and removes the controller")

CHART = ROOT / "charts/ctrain"
FROM = "0.2.0"  # the release the upgrade starts from
SCHEMA_ERROR = "values don't meet the specifications of the schema"

# Worker 1 waits for /tmp/go before it starts (release_held), so the gang stays Running,
# worker 0 in its rendezvous (300 s), across the whole upgrade; then it trains to the end.
HOLD_WORKER_1 = (
    'if [[ "$TF_CONFIG" == *\'"index":1\'* ]]; then'
    " for _ in $(seq 600); do [ -e /tmp/go ] && break; sleep 0.5; done; fi;"
    ' exec ctrain-worker "$@"')


def git(*args):
    return subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True,
                          timeout=120)


def release_commit(version):
    """The commit v<version> was cut at: the parent of the first commit whose CHANGELOG.md
    has "## Unreleased" above "## v<version>"; its VERSION says <version>."""
    p = git("rev-parse", "--is-shallow-repository")
    if p.returncode != 0:
        pytest.fail(f"the v{version} chart comes from git history, and {ROOT} is not a git "
                    f"checkout: {p.stderr.strip()}")
    if p.stdout.strip() == "true":
        pytest.fail(f"the v{version} chart comes from git history, and this clone is shallow: "
                    "check out with the full history (actions/checkout fetch-depth: 0, or "
                    "git fetch --unshallow)")
    for c in git("log", "--format=%H", "--reverse", "--", "CHANGELOG.md").stdout.split():
        heads = re.findall(r"^## (\S+)", git("show", f"{c}:CHANGELOG.md").stdout, re.M)
        if heads[:1] == ["Unreleased"] and f"v{version}" in heads:
            sha = git("rev-parse", f"{c}^").stdout.strip()
            break
    else:
        pytest.fail(f"no commit of CHANGELOG.md opens '## Unreleased' above '## v{version}'")
    assert git("show", f"{sha}:VERSION").stdout.strip() == version, sha
    heads = re.findall(r"^## (\S+)", git("show", f"{sha}:CHANGELOG.md").stdout, re.M)
    assert heads[:1] == [f"v{version}"], (sha, heads)
    return sha


@pytest.fixture(scope="module")
def old_chart(tmp_path_factory):
    """charts/ctrain as released in v<FROM> (git archive of its commit)."""
    sha = release_commit(FROM)
    out = tmp_path_factory.mktemp(f"chart-v{FROM}")
    a = subprocess.run(["git", "-C", str(ROOT), "archive", sha, "charts/ctrain"],
                       capture_output=True, timeout=120)
    assert a.returncode == 0, a.stderr.decode()[-2000:]
    subprocess.run(["tar", "-x", "-C", str(out)], input=a.stdout, check=True, timeout=120)
    chart = out / "charts/ctrain"
    meta = yaml.safe_load((chart / "Chart.yaml").read_text())
    assert (meta["version"], meta["appVersion"]) == (FROM, f"v{FROM}"), meta
    print(f"e2e: the v{FROM} chart from commit {sha[:12]}")
    return chart


@pytest.fixture(scope="module")
def helm_slot(cluster, node):
    """ctrain-system without the kustomize install (the CRD and the namespace stay, the
    namespace made and labelled as the docs say where it is missing); at the end the Helm
    releases are uninstalled and manifests/ applied again, less its Deployment."""
    install(cluster, "manifests/crds")
    cluster.wait_established("trainingjobs.ctrain.dev")
    with HelmSlot(cluster, ("ctrain", "ctrain-typo")):
        yield


def test_helm_install_with_replicas_two_fails_with_the_schemas_message(cluster, helm_slot):
    p = run_helm(cluster, "install", "ctrain-typo", str(CHART), "--set", "replicas=two",
                 "--wait", "--timeout", "2m")
    assert p.returncode != 0, p.stdout + p.stderr
    # values.schema.json's words, naming the value and both types.
    for words in (SCHEMA_ERROR, "at '/replicas'", "got string, want integer"):
        assert words in p.stderr, f"{words!r} not in: {p.stderr}"
    # Refused before anything was made: no release, no controller.
    assert run_helm(cluster, "status", "ctrain-typo").returncode != 0
    assert not cluster.get_json("secrets", "-n", CONTROLLER_NS, "-l",
                                "owner=helm,name=ctrain-typo")["items"]
    assert cluster.kubectl("get", "deployment", "ctrain-controller", "-n", CONTROLLER_NS,
                           check=False).returncode != 0
    print(f"e2e: helm install --set replicas=two: {p.stderr.strip()}")


def hold(job):
    c = job["spec"]["replicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]
    c["command"] = ["bash", "-c", HOLD_WORKER_1, "ctrain-worker"]


def test_helm_upgrade_from_v020_while_a_job_runs_keeps_the_job(cluster, node, helm_slot,
                                                               old_chart, ns):
    t0 = time.monotonic()
    p = run_helm(cluster, "install", "ctrain", str(old_chart), "--set", "image.tag=latest",
                 "--wait", "--timeout", "5m")
    assert p.returncode == 0, p.stdout + p.stderr
    d = Deployment(cluster)
    d.rollout()
    old_leader = d.wait_leader()
    old = {p["metadata"]["uid"] for p in d.pods()}
    assert len(old) == 2, d.pods()

    # A job under the v0.2.0 controller: both pods Running, held before training.
    apply_example(cluster, ns, epochs=2, mutate=hold)
    watch = PodWatch(cluster, ns)
    try:
        deadline = time.monotonic() + 300
        while True:
            j = job_json(cluster, ns)
            pods = job_pods(cluster, ns)
            if cond(j, "Running") and len(pods) == 2 and \
                    all(p["status"].get("phase") == "Running" for p in pods):
                break
            assert time.monotonic() < deadline, f"never Running:\n{dump(cluster, node, ns)}"
            time.sleep(0.5)
        before = {p["metadata"]["name"]: p["metadata"]["uid"] for p in pods}
        t1 = time.monotonic()

        # The upgrade: the Deployment rolls, both replicas are replaced, the Lease moves.
        p = run_helm(cluster, "upgrade", "ctrain", str(CHART), "--set", "image.tag=latest",
                     "--set", "image.pullPolicy=Never", "--wait", "--timeout", "5m")
        assert p.returncode == 0, p.stdout + p.stderr
        d.rollout()
        deadline = time.monotonic() + 120
        while True:
            new_leader = d.wait_leader(not_uid=old_leader["metadata"]["uid"])
            if new_leader["metadata"]["uid"] not in old:
                break
            assert time.monotonic() < deadline, d.lease_json()
            time.sleep(0.5)
        pods_now = d.pods()
        assert len(pods_now) == 2 and not {p["metadata"]["uid"] for p in pods_now} & old
        assert {p["spec"]["containers"][0]["imagePullPolicy"] for p in pods_now} == {"Never"}
        upgrade_s = time.monotonic() - t1
        # The new leader has taken the job up as it is: Running (its own /metrics).
        series = (f'ctrain_job_phase{{namespace="{ns}",job_name="{JOB}",kind="TrainingJob",'
                  'phase="Running"} 1')
        deadline = time.monotonic() + 60
        while series not in leader_metrics(cluster).splitlines():
            assert time.monotonic() < deadline, leader_metrics(cluster)[-3000:]
            time.sleep(1)
        j = job_json(cluster, ns)
        assert cond(j, "Running") and not cond(j, "Succeeded"), j["status"]
        assert j["status"].get("attempt") == 1 and not j["status"].get("restarts"), j["status"]
        assert {p["metadata"]["name"]: p["metadata"]["uid"] for p in job_pods(cluster, ns)} \
            == before

        # Then it trains, under the new controller, to the end.
        release_held(cluster, node, ns, W1)
        job = wait_succeeded(cluster, node, ns, timeout=400)
    finally:
        seen = watch.close()
    st = job["status"]
    assert st.get("attempt") == 1, st
    assert not st.get("restarts") and not st.get("disruptions"), st
    # Every pod the job ever had: the two of attempt 1, never replaced.
    assert {k: len(v) for k, v in seen.items()} == {(n, "1"): 1 for n in before}, seen
    assert {k[0]: next(iter(v)) for k, v in seen.items()} == before, (seen, before)
    hist = yaml.safe_load(run_helm(cluster, "history", "ctrain", "-o", "yaml").stdout)
    assert [h["status"] for h in hist] == ["superseded", "deployed"], hist
    assert [h["app_version"] for h in hist] == [f"v{FROM}", f"v{FROM}"], hist
    print(f"e2e: helm upgrade from v{FROM} in {upgrade_s:.1f} s (new leader "
          f"{new_leader['metadata']['name']}); the job Succeeded "
          f"{time.monotonic() - t0:.1f} s after the install, pods {sorted(before)} kept")
