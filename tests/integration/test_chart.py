"""charts/ctrain: `helm lint` passes, and `helm template` renders the objects kustomize
renders from manifests/ (the cluster-wide install, the namespaced one, TFJob mode), so the
chart cannot drift from the manifests the tests and the demo use. Needs no cluster: Helm
comes from tools/helm/build.sh (built once from its Go module), kubectl's kustomize from the
PATH or the local cluster's build."""
import subprocess

import pytest
import yaml

from clusterlib import ROOT
from kustomizelib import kustomize, objects

CHART = ROOT / "charts/ctrain"
NS = "ctrain-system"


@pytest.fixture(scope="module")
def helm():
    out = subprocess.run(["bash", str(ROOT / "tools/helm/build.sh")], capture_output=True,
                         text=True, timeout=3600)
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout.strip().splitlines()[-1]


def template(helm, *sets):
    args = [helm, "template", "ctrain", str(CHART), "--namespace", NS, "--include-crds",
            "--set", "image.tag=latest"]
    for s in sets:
        args += ["--set", s]
    p = subprocess.run(args, capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    got = objects(p.stdout)
    # What the chart adds on purpose: the TFJob CRD is kept on uninstall.
    for o in got.values():
        ann = o["metadata"].get("annotations", {})
        ann.pop("helm.sh/resource-policy", None)
        if "annotations" in o["metadata"] and not ann:
            del o["metadata"]["annotations"]
    return got


def assert_same(got, want):
    assert sorted(got) == sorted(want)
    for k in want:
        assert got[k] == want[k], f"{k} differs:\nchart: {got[k]}\nkustomize: {want[k]}"


def test_helm_lint(helm):
    p = subprocess.run([helm, "lint", "--strict", str(CHART)], capture_output=True, text=True)
    assert p.returncode == 0, p.stdout + p.stderr


def test_chart_version_is_the_release():
    version = (ROOT / "VERSION").read_text().strip()
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert chart["version"] == version and chart["appVersion"] == f"v{version}"


def test_cluster_wide_is_manifests(helm, kubectl):
    assert_same(template(helm), kustomize(kubectl, "manifests/crds", "manifests"))


def test_namespaced_is_manifests_namespaced(helm, kubectl):
    assert_same(template(helm, "scope=namespace"),
                kustomize(kubectl, "manifests/crds", "manifests/namespaced"))


def test_tfjob_mode_is_manifests_with_tfjob(helm, kubectl):
    assert_same(template(helm, "tfjob.enabled=true"),
                kustomize(kubectl, "manifests/crds-tfjob", "manifests/with-tfjob"))


def test_values_reach_the_deployment(helm):
    got = template(helm, "replicas=3", "image.repository=registry.example/ctrain",
                   "image.tag=v9.9.9", "resources.limits.memory=1Gi", "extraArgs={--workers=32}")
    dep = got[("Deployment", NS, "ctrain-controller")]
    c = dep["spec"]["template"]["spec"]["containers"][0]
    assert dep["spec"]["replicas"] == 3
    assert c["image"] == "registry.example/ctrain:v9.9.9"
    assert c["resources"]["limits"]["memory"] == "1Gi"
    assert c["args"][-1] == "--workers=32"


def test_default_image_is_the_release(helm):
    p = subprocess.run([helm, "template", "ctrain", str(CHART), "-n", NS], capture_output=True,
                       text=True, check=True)
    dep = objects(p.stdout)[("Deployment", NS, "ctrain-controller")]
    version = (ROOT / "VERSION").read_text().strip()
    assert dep["spec"]["template"]["spec"]["containers"][0]["image"] == f"ctrain:v{version}"


def test_bad_scope_is_refused(helm):
    p = subprocess.run([helm, "template", "ctrain", str(CHART), "--set", "scope=everything"],
                       capture_output=True, text=True)
    assert p.returncode != 0 and "neither cluster nor namespace" in p.stderr, p.stderr


def test_crd_in_chart_is_manifests_crd():
    """crds/ (installed once, never deleted by Helm) holds manifests/crds' CRD unchanged."""
    assert (CHART / "crds/trainingjobs.ctrain.dev.yaml").read_bytes() == \
        (ROOT / "manifests/crds/trainingjobs.ctrain.dev.yaml").read_bytes()
    assert (CHART / "files/kubeflow.org_tfjobs.yaml").read_bytes() == \
        (ROOT / "manifests/crds-tfjob/kubeflow.org_tfjobs.yaml").read_bytes()
