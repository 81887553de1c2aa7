"""manifests/: accepted by a real apiserver (server-side dry run of the
kustomization), and the controller Deployment is locked down."""
import json
import subprocess

import yaml

from conftest import ROOT


def load_all(name):
    with open(ROOT / "manifests" / name) as f:
        return [d for d in yaml.safe_load_all(f) if d]


def test_kustomization_dry_run_server(cluster):
    # The namespace must exist for namespaced objects to dry-run.
    cluster.kubectl("apply", "-f", str(ROOT / "manifests/base/namespace.yaml"))
    p = cluster.kubectl("apply", "-k", str(ROOT / "manifests"), "--dry-run=server", check=False)
    assert p.returncode == 0, p.stderr
    for kind in ("customresourcedefinition", "clusterrole", "deployment", "serviceaccount",
                 "service", "role"):
        assert kind in p.stdout, p.stdout


def test_namespaced_variant_dry_run_server(cluster):
    cluster.kubectl("apply", "-f", str(ROOT / "manifests/base/namespace.yaml"))
    p = cluster.kubectl("apply", "-k", str(ROOT / "manifests/namespaced"), "--dry-run=server",
                        check=False)
    assert p.returncode == 0, p.stderr
    assert "clusterrole" not in p.stdout, p.stdout
    rendered = cluster.kubectl("kustomize", str(ROOT / "manifests/namespaced")).stdout
    docs = list(yaml.safe_load_all(rendered))
    (dep,) = [d for d in docs if d["kind"] == "Deployment"]
    assert "--namespace=$(POD_NAMESPACE)" in dep["spec"]["template"]["spec"]["containers"][0]["args"]
    roles = [d for d in docs if d["kind"] == "Role" and d["metadata"]["name"] == "ctrain-controller"]
    cluster_rules = [d for d in load_all("rbac.yaml") if d["kind"] == "ClusterRole"][0]["rules"]
    assert roles and roles[0]["rules"] == cluster_rules


def test_kustomization_lists_every_manifest():
    for d, extra in (("manifests", {"base/"}), ("manifests/base", set())):
        with open(ROOT / d / "kustomization.yaml") as f:
            listed = set(yaml.safe_load(f)["resources"])
        present = {p.name for p in (ROOT / d).glob("*.yaml")} - {"kustomization.yaml"}
        assert listed == present | extra, (d, listed, present)


def test_deployment_security_context():
    (dep,) = load_all("base/deployment.yaml")
    pod = dep["spec"]["template"]["spec"]
    assert dep["spec"]["replicas"] == 2
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"]["type"] == "RuntimeDefault"
    (c,) = pod["containers"]
    sc = c["securityContext"]
    assert sc["readOnlyRootFilesystem"] is True
    assert sc["allowPrivilegeEscalation"] is False
    assert sc["capabilities"]["drop"] == ["ALL"]
    assert c["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert c["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert c["resources"]["requests"] and c["resources"]["limits"]
    assert "--leader-elect=true" in c["args"]


def test_rbac_is_least_privilege():
    docs = load_all("rbac.yaml")
    (cr,) = [d for d in docs if d["kind"] == "ClusterRole"]
    for rule in cr["rules"]:
        assert "*" not in rule["verbs"] and "*" not in rule["resources"], rule
        if "secrets" in rule["resources"]:
            # Issue 20: job namespaces' Secrets are created, never read or updated.
            assert rule["verbs"] == ["create"], rule
    roles = {d["metadata"]["name"]: d for d in load_all("base/leader-election.yaml")
             if d["kind"] == "Role"}
    assert roles["ctrain-controller-leader-election"]["rules"] == [
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"],
         "verbs": ["get", "create", "update"]}]
    # In its own namespace: get on the key Secret by name only, and create.
    assert roles["ctrain-controller-key"]["rules"] == [
        {"apiGroups": [""], "resources": ["secrets"], "resourceNames": ["ctrain-controller-key"],
         "verbs": ["get"]},
        {"apiGroups": [""], "resources": ["secrets"], "verbs": ["create"]}]
    bindings = {d["metadata"]["name"]: d for d in load_all("base/leader-election.yaml")
                if d["kind"] == "RoleBinding"}
    assert bindings["ctrain-controller-key"]["roleRef"]["name"] == "ctrain-controller-key"
