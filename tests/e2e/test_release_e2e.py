"""Installing a release as a cluster admin does, on the local nodes: tools/release.sh
writes dist/ (the image ctrain:v<V> with it), `kubectl apply --server-side -f
dist/ctrain-v<V>-install.yaml`, and the example job Succeeds; the metrics Service reaches
the leader only and counts the job; then the same with `helm install` of the chart from
dist/, and `helm uninstall` leaves the CRD and the jobs."""
import json
import re
import subprocess
import time

import pytest

from e2e_lib import (CONTROLLER_NS, EXAMPLES, EXISTING, ROOT, Deployment, apply_example,
                     build_image, helm, remove_install_docs, wait_succeeded)

pytestmark = pytest.mark.skipif(EXISTING, reason="installs and removes the controller")
VERSION = (ROOT / "VERSION").read_text().strip()
TAG = f"v{VERSION}"


@pytest.fixture(scope="module")
def dist(tmp_path_factory, cluster, node):
    out = tmp_path_factory.mktemp("dist")
    p = subprocess.run(["bash", str(ROOT / "tools/release.sh"), "--out", str(out)],
                       capture_output=True, text=True, timeout=3600)
    assert p.returncode == 0, p.stderr[-4000:]
    node.import_image(str(out / f"ctrain-{TAG}-image.tar"))
    return out


@pytest.fixture(scope="module", autouse=True)
def prefetch_tfjob_examples_image(node, dist):
    """The TFJob examples' image (1.7 GB, over a minute into two nodes) loads in
    the background, after the release image, while this module and the next
    ones run: no test after test_multinode stops a node. test_tfjob_e2e's
    import_image waits for it."""
    if not EXISTING and (EXAMPLES / "simple.yaml").exists():
        node.prefetch_image(build_image("tf-examples"))


def metrics_through_service(cluster):
    return cluster.kubectl("get", "--raw", f"/api/v1/namespaces/{CONTROLLER_NS}/services/"
                           "ctrain-controller-metrics:8080/proxy/metrics").stdout


def service_pods(cluster):
    slices = cluster.get_json("endpointslices", "-n", CONTROLLER_NS, "-l",
                              "kubernetes.io/service-name=ctrain-controller-metrics")["items"]
    return sorted(e["targetRef"]["name"] for s in slices for e in s.get("endpoints") or []
                  if e.get("conditions", {}).get("ready"))


def check_running(cluster, node, ns):
    d = Deployment(cluster)
    d.rollout()
    leader = d.wait_leader()
    for p in d.pods():
        assert p["spec"]["containers"][0]["image"] == f"ctrain:{TAG}"
    deadline = time.monotonic() + 60
    while service_pods(cluster) != [leader["metadata"]["name"]]:
        assert time.monotonic() < deadline, (service_pods(cluster), leader["metadata"]["name"])
        time.sleep(1)
    apply_example(cluster, ns, epochs=1)
    wait_succeeded(cluster, node, ns)
    text = metrics_through_service(cluster)
    assert "\nctrain_leader 1\n" in text
    assert f'ctrain_build_info{{version="{TAG}"}} 1' in text
    m = re.search(rf'^ctrain_jobs_successful_total{{kind="TrainingJob",namespace="{ns}"}} (\d+)$',
                  text, re.M)
    assert m and int(m.group(1)) == 1, text[-3000:]


def test_install_yaml_from_dist(cluster, node, dist, ns):
    install = dist / f"ctrain-{TAG}-install.yaml"
    cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(install))
    try:
        check_running(cluster, node, ns)
    finally:
        remove_install_docs(cluster, install.read_text())


def test_helm_install_from_dist_and_uninstall_keeps_the_crd(cluster, node, dist, ns):
    h = helm()
    chart = dist / f"ctrain-{VERSION}.tgz"
    p = subprocess.run([h, "install", "ctrain", str(chart), "-n", CONTROLLER_NS, "--wait",
                        "--timeout", "5m", "--kubeconfig", cluster.kubeconfig],
                       capture_output=True, text=True, timeout=400)
    assert p.returncode == 0, p.stdout + p.stderr
    try:
        check_running(cluster, node, ns)
    finally:
        p = subprocess.run([h, "uninstall", "ctrain", "-n", CONTROLLER_NS, "--wait",
                            "--kubeconfig", cluster.kubeconfig],
                           capture_output=True, text=True, timeout=400)
    assert p.returncode == 0, p.stdout + p.stderr
    assert cluster.kubectl("get", "crd", "trainingjobs.ctrain.dev", check=False).returncode == 0
    job = json.loads(cluster.kubectl("get", "tj", "fashion-mnist", "-n", ns, "-o", "json").stdout)
    assert job["metadata"]["name"] == "fashion-mnist"
