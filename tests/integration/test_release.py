"""tools/release.sh --no-images: dist/ holds the install YAML (what kustomize renders from
manifests/, with the release's image), the namespaced one with the CRD, the TFJob add-on
(over the install: exactly what manifests/with-tfjob installs), the Helm chart, and
SHA256SUMS that check. Needs no cluster."""
import subprocess
import tarfile

import pytest
import yaml

from clusterlib import ROOT
from kustomizelib import kustomize

VERSION = (ROOT / "VERSION").read_text().strip()
TAG = f"v{VERSION}"


@pytest.fixture(scope="module")
def dist(tmp_path_factory):
    out = tmp_path_factory.mktemp("dist")
    p = subprocess.run(["bash", str(ROOT / "tools/release.sh"), "--no-images", "--out", str(out)],
                       capture_output=True, text=True, timeout=3600)
    assert p.returncode == 0, p.stderr[-3000:]
    assert p.stdout.strip().splitlines()[-1] == str(out)
    return out


def objs(path):
    return {(d["kind"], d["metadata"].get("namespace", ""), d["metadata"]["name"]): d
            for d in yaml.safe_load_all(path.read_text()) if d}


def with_image(objects, image):
    for o in objects.values():
        if o["kind"] == "Deployment":
            o["spec"]["template"]["spec"]["containers"][0]["image"] = image
    return objects


def test_files_and_checksums(dist):
    names = sorted(p.name for p in dist.iterdir())
    assert names == sorted([f"ctrain-{TAG}-install.yaml", f"ctrain-{TAG}-install-namespaced.yaml",
                            f"ctrain-{TAG}-tfjob.yaml", f"ctrain-{VERSION}.tgz", "SHA256SUMS"])
    p = subprocess.run(["sha256sum", "-c", "SHA256SUMS"], cwd=dist, capture_output=True, text=True)
    assert p.returncode == 0, p.stdout + p.stderr
    assert len(p.stdout.splitlines()) == 4


def test_install_is_the_kustomization_with_the_release_image(dist, kubectl):
    got = objs(dist / f"ctrain-{TAG}-install.yaml")
    want = with_image(kustomize(kubectl, "manifests/crds", "manifests"), f"ctrain:{TAG}")
    got.pop(("Namespace", "", "ctrain-system"))  # kustomize() leaves the Namespace out
    assert got == want


def test_namespaced_install_carries_the_crd(dist, kubectl):
    got = objs(dist / f"ctrain-{TAG}-install-namespaced.yaml")
    got.pop(("Namespace", "", "ctrain-system"))
    want = with_image(kustomize(kubectl, "manifests/crds", "manifests/namespaced"),
                      f"ctrain:{TAG}")
    assert got == want


def test_tfjob_addon_over_the_install_is_with_tfjob(dist, kubectl):
    install = objs(dist / f"ctrain-{TAG}-install.yaml")
    addon = objs(dist / f"ctrain-{TAG}-tfjob.yaml")
    assert ("CustomResourceDefinition", "", "tfjobs.kubeflow.org") in addon
    assert all(k[0] != "CustomResourceDefinition" or k[2] == "tfjobs.kubeflow.org" for k in addon)
    merged = {**install, **addon}
    merged.pop(("Namespace", "", "ctrain-system"))
    want = with_image(kustomize(kubectl, "manifests/crds-tfjob", "manifests/with-tfjob"), f"ctrain:{TAG}")
    assert merged == want


def test_chart_archive(dist):
    with tarfile.open(dist / f"ctrain-{VERSION}.tgz") as t:
        names = t.getnames()
        chart = yaml.safe_load(t.extractfile("ctrain/Chart.yaml"))
    assert "ctrain/crds/trainingjobs.ctrain.dev.yaml" in names
    assert chart["version"] == VERSION and chart["appVersion"] == TAG
