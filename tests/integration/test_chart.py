"""charts/ctrain: `helm lint` passes, and `helm template` renders the objects kustomize
renders from manifests/ (the cluster-wide install, the namespaced one, TFJob mode), so the
chart cannot drift from the manifests the tests and the demo use. Needs no cluster: Helm
comes from tools/helm/build.sh (built once from its Go module), kubectl's kustomize from the
PATH or the local cluster's build. values.schema.json refuses a wrong type, an out-of-range
or unknown value before anything renders; the pod-level values, the ServiceMonitor, NOTES.txt
and TFJob mode in one namespace are checked here too."""
import shutil
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


def render(helm, *args):
    """`helm template` of the chart in NS with these extra arguments; the finished process."""
    return subprocess.run([helm, "template", "ctrain", str(CHART), "--namespace", NS, *args],
                          capture_output=True, text=True)


def template(helm, *sets, values=None):
    args = [helm, "template", "ctrain", str(CHART), "--namespace", NS, "--include-crds",
            "--set", "image.tag=latest"]
    if values:
        args += ["--values", str(values)]
    for s in sets:
        args += ["--set", s]
    p = subprocess.run(args, capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    # What the chart adds on purpose: the uninstall hook (Helm's only, no manifest has it;
    # test_uninstall_hook checks it) and the TFJob CRD kept on uninstall.
    got = {k: o for k, o in objects(p.stdout).items()
           if "helm.sh/hook" not in o["metadata"].get("annotations", {})}
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
    p = render(helm, "--set", "scope=everything")
    assert p.returncode != 0 and SCHEMA_ERROR in p.stderr and "/scope" in p.stderr \
        and "'cluster', 'namespace'" in p.stderr, p.stderr
    # Without the schema (--skip-schema-validation), the template refuses it itself.
    p = render(helm, "--skip-schema-validation", "--set", "scope=everything")
    assert p.returncode != 0 and "neither cluster nor namespace" in p.stderr, p.stderr


def test_crd_in_chart_is_manifests_crd():
    """crds/ (installed once, never deleted by Helm) holds manifests/crds' CRD unchanged."""
    assert (CHART / "crds/trainingjobs.ctrain.dev.yaml").read_bytes() == \
        (ROOT / "manifests/crds/trainingjobs.ctrain.dev.yaml").read_bytes()
    assert (CHART / "files/kubeflow.org_tfjobs.yaml").read_bytes() == \
        (ROOT / "manifests/crds-tfjob/kubeflow.org_tfjobs.yaml").read_bytes()


# ---- values.schema.json ----------------------------------------------------------------

SCHEMA_ERROR = "values don't meet the specifications of the schema"


@pytest.mark.parametrize("value,names", [
    ("replicas=two", ["/replicas", "got string, want integer"]),
    ("replicas=0", ["/replicas", "minimum"]),
    ("image.pullPolicy=Sometimes", ["/image/pullPolicy", "'IfNotPresent'"]),
    ("resources.limits.memory=lots", ["/resources/limits/memory"]),
    ("podAnnotations.owner=1", ["/podAnnotations/owner", "want string"]),
    ("serviceMonitor.interval=often", ["/serviceMonitor/interval"]),
    ("tolerations[0].effect=NoScheduel", ["/tolerations/0/effect", "'NoSchedule'"]),
])
def test_schema_refuses_a_wrong_value(helm, value, names):
    p = render(helm, "--set", value)
    assert p.returncode != 0 and SCHEMA_ERROR in p.stderr, p.stdout[:300] + p.stderr
    for n in names:
        assert n in p.stderr, f"{n!r} not in: {p.stderr}"


@pytest.mark.parametrize("value,at,key", [
    ("nosuchkey=1", "''", "nosuchkey"),                     # top level
    ("tfjob.enable=true", "'/tfjob'", "enable"),            # a typo in our own object
    ("image.name=x", "'/image'", "name"),
    ("serviceMonitor.enable=true", "'/serviceMonitor'", "enable"),
    ("affinity.nodeAfinity.x=y", "'/affinity'", "nodeAfinity"),
])
def test_schema_refuses_an_unknown_key(helm, value, at, key):
    p = render(helm, "--set", value)
    assert p.returncode != 0 and SCHEMA_ERROR in p.stderr, p.stdout[:300] + p.stderr
    assert f"at {at}: additional properties '{key}' not allowed" in p.stderr, p.stderr


def test_schema_takes_the_values_yaml_and_helms_global(helm):
    """The defaults and `global` (which Helm hands a subchart) pass the schema."""
    p = render(helm, "--set", "global.imageRegistry=r.example")
    assert p.returncode == 0, p.stderr


# ---- pod-level values ------------------------------------------------------------------

POD_VALUES = """
imagePullSecrets: [regcred, {name: mirror}]
podAnnotations: {example.com/team: ml-platform, "prometheus.io/scrape": "false"}
priorityClassName: system-cluster-critical
nodeSelector: {kubernetes.io/os: linux, pool: ops}
tolerations:
- {key: dedicated, operator: Equal, value: ops, effect: NoSchedule}
affinity:
  nodeAffinity:
    requiredDuringSchedulingIgnoredDuringExecution:
      nodeSelectorTerms:
      - matchExpressions: [{key: pool, operator: In, values: [ops]}]
"""


def pod_spec(helm, tmp_path, values, *sets):
    f = tmp_path / "values.yaml"
    f.write_text(values)
    return template(helm, *sets, values=f)[("Deployment", NS, "ctrain-controller")]["spec"][
        "template"]


def test_pod_values_reach_the_deployment(helm, tmp_path):
    default = template(helm)[("Deployment", NS, "ctrain-controller")]["spec"]["template"]
    got = pod_spec(helm, tmp_path, POD_VALUES)
    spec = got["spec"]
    assert got["metadata"]["annotations"] == {"example.com/team": "ml-platform",
                                              "prometheus.io/scrape": "false"}
    assert got["metadata"]["labels"] == default["metadata"]["labels"]
    assert spec["imagePullSecrets"] == [{"name": "regcred"}, {"name": "mirror"}]
    assert spec["priorityClassName"] == "system-cluster-critical"
    assert spec["nodeSelector"] == {"kubernetes.io/os": "linux", "pool": "ops"}
    # Tolerations: the chart's two (a lost node's replica moves in 30 s), then the given one.
    assert spec["tolerations"] == default["spec"]["tolerations"] + [
        {"key": "dedicated", "operator": "Equal", "value": "ops", "effect": "NoSchedule"}]
    assert len(default["spec"]["tolerations"]) == 2
    # Affinity: the nodeAffinity given, beside the chart's podAntiAffinity.
    aff = spec["affinity"]
    assert aff["podAntiAffinity"] == default["spec"]["affinity"]["podAntiAffinity"]
    assert aff["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"][0]["matchExpressions"] == [
            {"key": "pool", "operator": "In", "values": ["ops"]}]
    # Nothing else moved.
    for k in ("imagePullSecrets", "priorityClassName", "nodeSelector", "tolerations", "affinity"):
        spec.pop(k)
        default["spec"].pop(k, None)
    assert spec == default["spec"]


def test_pod_anti_affinity_given_replaces_the_charts(helm, tmp_path):
    anti = {"requiredDuringSchedulingIgnoredDuringExecution": [{
        "topologyKey": "topology.kubernetes.io/zone",
        "labelSelector": {"matchLabels": {"app.kubernetes.io/name": "ctrain"}}}]}
    got = pod_spec(helm, tmp_path, yaml.safe_dump({"affinity": {"podAntiAffinity": anti}}))
    assert got["spec"]["affinity"] == {"podAntiAffinity": anti}


def test_pod_values_set_on_the_command_line(helm):
    """--set forms: a list of secret names, a priority class, a nodeSelector with a dotted key."""
    got = template(helm, "imagePullSecrets={a,b}", "priorityClassName=high",
                   r"nodeSelector.kubernetes\.io/arch=amd64", r"podAnnotations.a\.b/c=d")
    t = got[("Deployment", NS, "ctrain-controller")]["spec"]["template"]
    assert t["spec"]["imagePullSecrets"] == [{"name": "a"}, {"name": "b"}]
    assert t["spec"]["priorityClassName"] == "high"
    assert t["spec"]["nodeSelector"] == {"kubernetes.io/arch": "amd64"}
    assert t["metadata"]["annotations"] == {"a.b/c": "d"}


# ---- ServiceMonitor --------------------------------------------------------------------

SM = ("ServiceMonitor", NS, "ctrain-controller")


def test_service_monitor_is_off_by_default(helm):
    assert not [k for k in template(helm) if k[0] == "ServiceMonitor"]


def test_service_monitor_is_the_monitoring_components(helm):
    """serviceMonitor.enabled renders manifests/components/monitoring/servicemonitor.yaml."""
    want = yaml.safe_load((ROOT / "manifests/components/monitoring/servicemonitor.yaml").read_text())
    got = template(helm, "serviceMonitor.enabled=true")
    assert got[SM] == want


def test_service_monitor_labels_and_interval(helm):
    got = template(helm, "serviceMonitor.enabled=true", "serviceMonitor.interval=1m",
                   "serviceMonitor.labels.release=kube-prometheus-stack")[SM]
    assert got["metadata"]["labels"] == {"app.kubernetes.io/name": "ctrain",
                                         "app.kubernetes.io/component": "controller",
                                         "release": "kube-prometheus-stack"}
    assert got["spec"]["endpoints"][0]["interval"] == "1m"
    # It selects the metrics Service, in the release's namespace.
    svc = template(helm)[("Service", NS, "ctrain-controller-metrics")]
    assert got["spec"]["selector"]["matchLabels"] == svc["metadata"]["labels"]
    assert got["spec"]["endpoints"][0]["port"] == svc["spec"]["ports"][0]["name"]
    assert got["spec"]["namespaceSelector"] == {"matchNames": [NS]}


# ---- NOTES.txt -------------------------------------------------------------------------

def notes(helm, tmp_path, *sets):
    """templates/NOTES.txt rendered with these values. `helm install --dry-run` reaches for a
    cluster first, and `helm template` leaves NOTES out; so a copy of the chart carries
    NOTES.txt as a named template that a ConfigMap includes, and `helm template` renders that."""
    chart = tmp_path / "ctrain"
    shutil.copytree(CHART, chart)
    src = chart / "templates/NOTES.txt"
    (chart / "templates/_notes_test.tpl").write_text(
        '{{- define "test.notes" -}}\n' + src.read_text() + "{{- end }}\n")
    src.unlink()
    (chart / "templates/notes_test.yaml").write_text(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: notes\n"
        'data:\n  notes: {{ include "test.notes" . | quote }}\n')
    args = [helm, "template", "ctrain", str(chart), "--namespace", NS,
            "--show-only", "templates/notes_test.yaml"]
    for s in sets:
        args += ["--set", s]
    p = subprocess.run(args, capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    return yaml.safe_load(p.stdout)["data"]["notes"]


def test_notes_say_what_was_installed_and_what_next(helm, tmp_path):
    text = notes(helm, tmp_path)
    for want in [f"in namespace {NS}", "scope       cluster: TrainingJobs in every namespace",
                 "TFJob mode  off", f"kubectl -n {NS} rollout status deployment/ctrain-controller",
                 "kubectl apply -n <namespace> -f examples/fashion-mnist.yaml",
                 "--for=condition=Succeeded trainingjob/fashion-mnist",
                 f"kubectl -n {NS} port-forward service/ctrain-controller-metrics 8080",
                 "serviceMonitor.enabled=true adds a ServiceMonitor"]:
        assert want in text, f"{want!r} not in:\n{text}"
    assert "{{" not in text and "<no value>" not in text, text


def test_notes_follow_the_values(helm, tmp_path):
    text = notes(helm, tmp_path, "scope=namespace", "tfjob.enabled=true",
                 "serviceMonitor.enabled=true", "serviceMonitor.interval=15s")
    for want in [f"scope       namespace: TrainingJobs in {NS} only",
                 f"TFJob mode  on: kubeflow.org/v1 TFJobs are served too (--enable-tfjob), in {NS}",
                 "clustertrainingruntimes.ctrain.dev and tfjobs.kubeflow.org",
                 f"kubectl apply -n {NS} -f examples/fashion-mnist.yaml",
                 "ServiceMonitor ctrain-controller scrapes it every 15s"]:
        assert want in text, f"{want!r} not in:\n{text}"


# ---- TFJob mode in one namespace -------------------------------------------------------

CLUSTER_SCOPED = {"ClusterRole", "ClusterRoleBinding", "CustomResourceDefinition"}


def test_namespaced_tfjob_mode_has_no_cluster_rbac(helm):
    """scope=namespace with tfjob.enabled: the controller lists and watches TFJobs in its own
    namespace only (--namespace), so its rights on them are a Role there, as the
    TrainingJob rights are; the only cluster-scoped objects are the CRDs."""
    got = template(helm, "scope=namespace", "tfjob.enabled=true")
    cluster = sorted(k for k in got if k[0] in CLUSTER_SCOPED)
    assert cluster == [("CustomResourceDefinition", "", "clustertrainingruntimes.ctrain.dev"),
                       ("CustomResourceDefinition", "", "tfjobs.kubeflow.org"),
                       ("CustomResourceDefinition", "", "trainingjobs.ctrain.dev"),
                       ("CustomResourceDefinition", "", "trainingruntimes.ctrain.dev")], cluster
    assert all(k[1] == NS for k in got if k[0] not in CLUSTER_SCOPED), sorted(got)
    role = got[("Role", NS, "ctrain-controller-tfjob")]
    want = template(helm, "tfjob.enabled=true")[("ClusterRole", "", "ctrain-controller-tfjob")]
    assert role["rules"] == want["rules"]
    binding = got[("RoleBinding", NS, "ctrain-controller-tfjob")]
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                                  "name": "ctrain-controller-tfjob"}
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "ctrain-controller",
                                    "namespace": NS}]
    args = got[("Deployment", NS, "ctrain-controller")]["spec"]["template"]["spec"][
        "containers"][0]["args"]
    assert "--namespace=$(POD_NAMESPACE)" in args and "--enable-tfjob" in args
    # Otherwise it is the namespaced install plus those two objects and the TFJob CRD.
    plain = template(helm, "scope=namespace")
    extra = sorted(set(got) - set(plain))
    assert extra == [("CustomResourceDefinition", "", "tfjobs.kubeflow.org"),
                     ("Role", NS, "ctrain-controller-tfjob"),
                     ("RoleBinding", NS, "ctrain-controller-tfjob")], extra


@pytest.mark.parametrize("scope", ["cluster", "namespace"])
def test_tfjob_crd_can_be_left_to_the_cluster(helm, scope):
    """tfjob.installCRD=false: the TFJob CRD already there (training-operator's) is not
    rendered, so Helm does not refuse it as an object it does not own; the rights stay."""
    got = template(helm, f"scope={scope}", "tfjob.enabled=true", "tfjob.installCRD=false")
    assert ("CustomResourceDefinition", "", "tfjobs.kubeflow.org") not in got
    kind = "ClusterRole" if scope == "cluster" else "Role"
    assert (kind, "" if scope == "cluster" else NS, "ctrain-controller-tfjob") in got


# ---- the uninstall hook ------------------------------------------------------------------

def hooks(helm, *sets):
    p = render(helm, "--show-only", "templates/uninstall-hook.yaml", *(a for s in sets
                                                                     for a in ("--set", s)))
    return p, (objects(p.stdout) if p.returncode == 0 else None)


@pytest.mark.parametrize("scope", ["cluster", "namespace"])
def test_uninstall_hook(helm, scope):
    """On by default: a post-delete Job running --release-finalizers with its own
    ServiceAccount, allowed get/list/patch on pods and nothing else, in the controller's scope,
    as restricted as the Deployment's pod; all of it deleted once it succeeded."""
    p, got = hooks(helm, f"scope={scope}", "image.tag=v9", "imagePullSecrets={regcred}")
    assert p.returncode == 0, p.stderr
    cluster = scope == "cluster"
    role, binding = ("ClusterRole", "ClusterRoleBinding") if cluster else ("Role", "RoleBinding")
    rns = "" if cluster else NS
    assert sorted(got) == sorted([("ServiceAccount", NS, "ctrain-uninstall"),
                                  (role, rns, "ctrain-uninstall"),
                                  (binding, rns, "ctrain-uninstall"),
                                  ("Job", NS, "ctrain-uninstall")]), sorted(got)
    weights = {}
    for k, o in got.items():
        ann = o["metadata"]["annotations"]
        assert ann["helm.sh/hook"] == "post-delete", k
        assert ann["helm.sh/hook-delete-policy"] == "hook-succeeded,before-hook-creation", k
        weights[k[0]] = int(ann["helm.sh/hook-weight"])
    # The rights exist before the Job that needs them.
    assert weights[role] < weights[binding] < weights["Job"], weights
    assert got[(role, rns, "ctrain-uninstall")]["rules"] == [
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "patch"]}]
    assert got[(binding, rns, "ctrain-uninstall")]["subjects"] == [
        {"kind": "ServiceAccount", "name": "ctrain-uninstall", "namespace": NS}]
    pod = got[("Job", NS, "ctrain-uninstall")]["spec"]["template"]["spec"]
    dep = template(helm, f"scope={scope}", "image.tag=v9",
                   "imagePullSecrets={regcred}")[("Deployment", NS, "ctrain-controller")]
    dpod = dep["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == "ctrain-uninstall"
    assert pod["restartPolicy"] == "Never"
    assert pod["securityContext"] == dpod["securityContext"]
    assert pod["imagePullSecrets"] == dpod["imagePullSecrets"] == [{"name": "regcred"}]
    c, dc = pod["containers"][0], dpod["containers"][0]
    assert c["image"] == dc["image"] == "ctrain:v9"
    assert c["securityContext"] == dc["securityContext"]
    assert c["command"] == ["ctrain-controller"]
    assert "--release-finalizers" in c["args"]
    assert ("--namespace=$(POD_NAMESPACE)" in c["args"]) == (not cluster), c["args"]


def test_uninstall_hook_can_be_turned_off(helm):
    p, got = hooks(helm, "uninstall.releaseFinalizers=false")
    # --show-only of a template that renders nothing is an error in Helm 3.
    assert p.returncode != 0 or not got, p.stdout
    assert not any("helm.sh/hook" in o["metadata"].get("annotations", {})
                   for o in objects(render(helm, "--set",
                                           "uninstall.releaseFinalizers=false").stdout).values())
    p = render(helm, "--set", "uninstall.releaseFinalizers=yes")
    assert p.returncode != 0 and "releaseFinalizers" in p.stderr, p.stderr
