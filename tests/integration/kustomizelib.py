"""What kustomize renders from manifests/, as objects keyed by (kind, namespace, name): the
reference the Helm chart (test_chart.py) and the release's install YAML (test_release.py) are
compared with. kubectl is the `kubectl` fixture of conftest.py."""
import subprocess

import yaml

from clusterlib import ROOT


def objects(text):
    """{(kind, namespace, name): object} of a multi-document YAML stream."""
    out = {}
    for d in yaml.safe_load_all(text):
        if not d:
            continue
        md = d["metadata"]
        key = (d["kind"], md.get("namespace", ""), md["name"])
        assert key not in out, f"{key} twice"
        out[key] = d
    return out


def kustomize(kubectl, *paths):
    out = {}
    for p in paths:
        path = ROOT / p
        if path.is_dir():
            text = subprocess.run([kubectl, "kustomize", str(path)], capture_output=True,
                                  text=True, check=True).stdout
        else:
            text = path.read_text()
        out.update(objects(text))
    # The chart installs into the release's namespace, which Helm makes (--create-namespace)
    # or the admin does; it does not own a Namespace object.
    return {k: v for k, v in out.items() if k[0] != "Namespace"}
