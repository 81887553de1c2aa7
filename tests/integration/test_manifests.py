"""manifests/: accepted by a real apiserver (server-side dry run of the
kustomization), the controller Deployment is locked down, and the CRDs live on their own
paths (crds/, crds-tfjob/) so that removing the controller never removes them."""
import os
import pathlib

import pytest
import yaml

from clusterlib import ROOT


def load_all(name):
    with open(ROOT / "manifests" / name) as f:
        return [d for d in yaml.safe_load_all(f) if d]


def test_kustomization_dry_run_server(cluster):
    # The namespace must exist for namespaced objects to dry-run.
    cluster.kubectl("apply", "-f", str(ROOT / "manifests/base/namespace.yaml"))
    p = cluster.kubectl("apply", "--server-side", "--force-conflicts", "-k",
                        str(ROOT / "manifests/crds"), "--dry-run=server", check=False)
    assert p.returncode == 0, p.stderr
    assert "customresourcedefinition" in p.stdout, p.stdout
    p = cluster.kubectl("apply", "--server-side", "-k", str(ROOT / "manifests"),
                        "--dry-run=server", check=False)
    assert p.returncode == 0, p.stderr
    for kind in ("clusterrole", "deployment", "serviceaccount", "service", "role"):
        assert kind in p.stdout, p.stdout


def test_no_install_path_holds_a_crd(cluster):
    """Uninstall (`kubectl delete -k` of an install path) never deletes a CRD, and with it
    every job: the CRDs are only under crds/ and crds-tfjob/."""
    for path in ("manifests", "manifests/namespaced", "manifests/with-tfjob"):
        kinds = {d["kind"] for d in rendered(cluster, ROOT / path)}
        assert "CustomResourceDefinition" not in kinds, path
    assert {d["metadata"]["name"] for d in rendered(cluster, ROOT / "manifests/crds")} == \
        {"trainingjobs.ctrain.dev", "trainingruntimes.ctrain.dev",
         "clustertrainingruntimes.ctrain.dev"}
    assert {d["metadata"]["name"] for d in rendered(cluster, ROOT / "manifests/crds-tfjob")} == \
        {"trainingjobs.ctrain.dev", "trainingruntimes.ctrain.dev",
         "clustertrainingruntimes.ctrain.dev", "tfjobs.kubeflow.org"}


def test_client_side_apply_of_the_crd_is_too_big(cluster):
    """Why every install command says --server-side: with the generated PodSpec schema the
    CRD exceeds what client-side apply's last-applied annotation holds (256 KiB)."""
    p = cluster.kubectl("apply", "-k", str(ROOT / "manifests/crds"), "--dry-run=server",
                        check=False)
    assert p.returncode != 0 and "Too long" in p.stderr, p.stdout + p.stderr


def test_namespaced_variant_dry_run_server(cluster):
    cluster.kubectl("apply", "-f", str(ROOT / "manifests/base/namespace.yaml"))
    p = cluster.kubectl("apply", "--server-side", "-k", str(ROOT / "manifests/namespaced"),
                        "--dry-run=server", check=False)
    assert p.returncode == 0, p.stderr
    assert "clusterrole" not in p.stdout, p.stdout
    rendered = cluster.kubectl("kustomize", str(ROOT / "manifests/namespaced")).stdout
    docs = list(yaml.safe_load_all(rendered))
    (dep,) = [d for d in docs if d["kind"] == "Deployment"]
    assert "--namespace=$(POD_NAMESPACE)" in dep["spec"]["template"]["spec"]["containers"][0]["args"]
    roles = [d for d in docs if d["kind"] == "Role" and d["metadata"]["name"] == "ctrain-controller"]
    cluster_rules = [d for d in load_all("rbac/clusterrole.yaml") if d["kind"] == "ClusterRole"][0]["rules"]
    # All of them but the cluster-scoped ClusterTrainingRuntimes, which a Role cannot grant.
    assert roles and roles[0]["rules"] == [r for r in cluster_rules
                                           if r["resources"] != ["clustertrainingruntimes"]]


def test_kustomization_lists_every_manifest():
    for d, extra in (("manifests", {"rbac/", "base/"}), ("manifests/base", set()),
                     ("manifests/rbac", set()), ("manifests/crds", set()),
                     ("manifests/crds-tfjob", {"../crds"})):
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
    docs = load_all("rbac/clusterrole.yaml")
    (cr,) = [d for d in docs if d["kind"] == "ClusterRole"]
    for rule in cr["rules"]:
        assert "*" not in rule["verbs"] and "*" not in rule["resources"], rule
        if "secrets" in rule["resources"]:
            # Users' Secrets stay unread: in job namespaces Secrets are created, never read or updated.
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


# ---- the optional TFJob component ------------------------------------------------

TFOP_MODULE = pathlib.Path(os.environ.get("GOMODCACHE", pathlib.Path.home() / "go/pkg/mod")) / \
    "github.com/kubeflow/training-operator@v1.9.3"
TFJOB_DIR = ROOT / "manifests/components/tfjob"
TFJOB_CRD = ROOT / "manifests/crds-tfjob/kubeflow.org_tfjobs.yaml"


def test_tfjob_crd_is_training_operators_unchanged():
    """TFJob mode's CRD is training-operator v1.9.3's, byte for byte."""
    theirs = TFOP_MODULE / "manifests/base/crds/kubeflow.org_tfjobs.yaml"
    if not theirs.exists():
        pytest.skip(f"{theirs} is not in the Go module cache")
    assert TFJOB_CRD.read_bytes() == theirs.read_bytes()


def test_tfjob_component_lists_every_manifest():
    with open(TFJOB_DIR / "kustomization.yaml") as f:
        k = yaml.safe_load(f)
    assert k["kind"] == "Component"
    present = {p.name for p in TFJOB_DIR.glob("*.yaml")} - {"kustomization.yaml"}
    assert set(k["resources"]) == present


def rendered(cluster, path):
    return [d for d in yaml.safe_load_all(cluster.kubectl("kustomize", str(path)).stdout) if d]


def deployment_args(docs):
    (dep,) = [d for d in docs if d["kind"] == "Deployment"]
    return dep["spec"]["template"]["spec"]["containers"][0]["args"]


def check_with_tfjob(docs, base_args):
    """What the component adds: its RBAC and `--enable-tfjob` once, after the base's
    arguments (the TFJob CRD is crds-tfjob's)."""
    assert deployment_args(docs) == base_args + ["--enable-tfjob"]
    assert not [d for d in docs if d["kind"] == "CustomResourceDefinition"]
    (role,) = [d for d in docs if d["kind"] == "ClusterRole"
               and d["metadata"]["name"] == "ctrain-controller-tfjob"]
    assert role["rules"] == [
        {"apiGroups": ["kubeflow.org"], "resources": ["tfjobs"],
         "verbs": ["get", "list", "watch", "update", "patch", "delete"]},
        {"apiGroups": ["kubeflow.org"], "resources": ["tfjobs/status"],
         "verbs": ["get", "update", "patch"]}]
    (binding,) = [d for d in docs if d["kind"] == "ClusterRoleBinding"
                  and d["metadata"]["name"] == "ctrain-controller-tfjob"]
    assert binding["roleRef"]["name"] == "ctrain-controller-tfjob"
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "ctrain-controller",
                                    "namespace": "ctrain-system"}]


def test_with_tfjob_renders(cluster):
    base_args = deployment_args(rendered(cluster, ROOT / "manifests"))
    docs = rendered(cluster, ROOT / "manifests/with-tfjob")
    check_with_tfjob(docs, base_args)
    with open(TFJOB_CRD) as f:
        assert [d for d in rendered(cluster, ROOT / "manifests/crds-tfjob")
                if d["metadata"]["name"] == "tfjobs.kubeflow.org"] == [yaml.safe_load(f)]


def test_users_kustomization_with_the_component(cluster, tmp_path):
    """How a user adds the component to the whole install, from a kustomization of their
    own (relative paths: kustomize refuses absolute ones)."""
    rel = os.path.relpath(ROOT / "manifests", tmp_path)
    (tmp_path / "kustomization.yaml").write_text(
        "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n"
        f"resources:\n- {rel}\ncomponents:\n- {rel}/components/tfjob\n")
    base = rendered(cluster, ROOT / "manifests")
    docs = rendered(cluster, tmp_path)
    check_with_tfjob(docs, deployment_args(base))
    # Everything of manifests/ is still there, and only the component's objects are added.
    names = {(d["kind"], d["metadata"]["name"]) for d in docs}
    assert names - {(d["kind"], d["metadata"]["name"]) for d in base} == {
        ("ClusterRole", "ctrain-controller-tfjob"),
        ("ClusterRoleBinding", "ctrain-controller-tfjob")}


def test_with_tfjob_dry_run_server(cluster):
    cluster.kubectl("apply", "-f", str(ROOT / "manifests/base/namespace.yaml"))
    p = cluster.kubectl("apply", "--server-side", "--force-conflicts", "-k",
                        str(ROOT / "manifests/crds-tfjob"), "--dry-run=server", check=False)
    assert p.returncode == 0, p.stderr
    assert "customresourcedefinition.apiextensions.k8s.io/tfjobs.kubeflow.org" in p.stdout, p.stdout
    p = cluster.kubectl("apply", "--server-side", "-k", str(ROOT / "manifests/with-tfjob"),
                        "--dry-run=server", check=False)
    assert p.returncode == 0, p.stderr
    assert "clusterrole.rbac.authorization.k8s.io/ctrain-controller-tfjob" in p.stdout, p.stdout
