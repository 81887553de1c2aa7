"""The TrainingJob CRD against a real kube-apiserver: defaults, validation
messages that name the field, printer columns and kubectl explain."""
import copy
import json
import subprocess
import sys

import pytest
import yaml

from clusterlib import ROOT
from ctllib import columns

VALID = {
    "apiVersion": "ctrain.dev/v1alpha1",
    "kind": "TrainingJob",
    "metadata": {"name": "valid"},
    "spec": {
        "replicaSpecs": {
            "Chief": {"template": {"spec": {"containers": [{"name": "w", "image": "x"}]}}},
            "Worker": {"replicas": 2,
                       "template": {"spec": {"containers": [{"name": "w", "image": "x"}]}}},
        },
    },
}


def apply(cluster, ns, obj):
    return cluster.kubectl("apply", "-n", ns, "-f", "-", input=json.dumps(obj), check=False)


def test_server_is_real_and_versioned(crd):
    v = crd.server_version()
    assert v.startswith("v1."), v
    print(f"kube-apiserver {v}")


def test_valid_job_gets_defaults(crd, namespace):
    p = apply(crd, namespace, VALID)
    assert p.returncode == 0, p.stderr
    job = crd.get_json("trainingjob", "valid", "-n", namespace)
    spec = job["spec"]
    assert spec["port"] == 2222
    assert spec["restartPolicy"] == "OnFailure"
    # No schema default: a runtime's (spec.runtimeRef) may give them, else the controller's 3, 10.
    assert "backoffLimit" not in spec and "maxDisruptions" not in spec
    assert "progressDeadlineSeconds" not in spec
    assert spec["cleanPodPolicy"] == "Running"
    assert spec["successPolicy"] == "ChiefOrWorker0"
    assert spec["suspend"] is False
    assert spec["replicaSpecs"]["Chief"]["replicas"] == 1
    assert spec["replicaSpecs"]["Worker"]["replicas"] == 2
    # The short name and printer columns work.
    names, rows = columns(crd.kubectl("get", "tj", "-n", namespace).stdout)
    assert names == ["NAME", "STATE", "REASON", "WORKERS", "RESTARTS", "EPOCH", "ACCURACY",
                     "AGE"], names
    assert rows[0]["NAME"] == "valid" and rows[0]["WORKERS"] == "2", rows
    assert spec["progressPort"] == 8471
    names, _ = columns(crd.kubectl("get", "tj", "-n", namespace, "-o", "wide").stdout)
    assert names == ["NAME", "STATE", "REASON", "WORKERS", "ACTIVE", "RESTARTS",
                     "DISRUPTIONS", "EPOCH", "ACCURACY", "TRAIN-ACCURACY", "SAMPLES/S", "RUNTIME",
                     "AGE"], names


def test_status_is_a_subresource(crd, namespace):
    assert apply(crd, namespace, VALID).returncode == 0
    # A status in the main resource is ignored (status subresource).
    obj = copy.deepcopy(VALID)
    obj["status"] = {"restarts": 7}
    crd.kubectl("replace", "-n", namespace, "-f", "-", input=json.dumps(
        dict(obj, metadata=dict(name="valid",
             resourceVersion=crd.get_json("tj", "valid", "-n", namespace)["metadata"]["resourceVersion"]))))
    assert "restarts" not in crd.get_json("tj", "valid", "-n", namespace).get("status", {})
    # Through the subresource it is stored.
    crd.kubectl("patch", "tj", "valid", "-n", namespace, "--subresource=status", "--type=merge",
                "-p", json.dumps({"status": {"restarts": 2, "conditions": [
                    {"type": "Created", "status": "True", "reason": "JobCreated",
                     "lastTransitionTime": "2026-01-01T00:00:00Z"}]}}))
    job = crd.get_json("tj", "valid", "-n", namespace)
    assert job["status"]["restarts"] == 2
    _, rows = columns(crd.kubectl("get", "tj", "valid", "-n", namespace).stdout)
    assert rows[0]["STATE"] == "Created" and rows[0]["RESTARTS"] == "2", rows


def test_progress_and_result_status_and_columns(crd, namespace):
    """status.progress and status.result are stored as written (nothing
    pruned: the controller compares what it reads back); the columns show
    epoch, accuracy and, with -o wide, samples/s."""
    assert apply(crd, namespace, VALID).returncode == 0
    progress = {"epoch": 2, "epochs": 5, "step": 19, "stepsPerEpoch": 1875, "globalStep": 3769,
                "samplesPerSec": 16500.5, "loss": 0.4012, "accuracy": 0.8412, "valLoss": 0.44,
                "valAccuracy": 0.83, "shownAccuracy": 0.83, "replicasInSync": 3, "backupStep": 1800,
                "slowestWorker": {"pod": "valid-worker-1", "ratio": 2.12},
                "lastPollTime": "2026-01-01T00:00:10Z"}
    result = {"state": "Succeeded", "accuracy": 0.877, "loss": 0.35, "valAccuracy": 0.86,
              "valLoss": 0.41, "samplesPerSec": 16000.25, "epochs": 5, "steps": 9375,
              "model": "/ckpt/model", "replicasInSync": 3, "error": "x"}
    crd.kubectl("patch", "tj", "valid", "-n", namespace, "--subresource=status", "--type=merge",
                "-p", json.dumps({"status": {"progress": progress, "result": result, "conditions": [
                    {"type": "Straggler", "status": "True", "reason": "SlowWorker",
                     "lastTransitionTime": "2026-01-01T00:00:00Z"},
                    {"type": "Running", "status": "True", "reason": "TrainingJobRunning",
                     "lastTransitionTime": "2026-01-01T00:00:00Z"}]}}))
    st = crd.get_json("tj", "valid", "-n", namespace)["status"]
    assert st["progress"] == progress
    assert st["result"] == result
    _, rows = columns(crd.kubectl("get", "tj", "valid", "-n", namespace).stdout)
    assert rows[0]["STATE"] == "Running" and rows[0]["EPOCH"] == "2", rows
    assert rows[0]["ACCURACY"] == "0.83", rows  # the validation accuracy, when there is one
    _, rows = columns(crd.kubectl("get", "tj", "valid", "-n", namespace, "-o", "wide").stdout)
    assert rows[0]["SAMPLES/S"] == "16500.5" and rows[0]["TRAIN-ACCURACY"] == "0.8412", rows


def mutate(fn):
    obj = copy.deepcopy(VALID)
    fn(obj["spec"])
    return obj


INVALID = [
    ("two chiefs", mutate(lambda s: s["replicaSpecs"]["Chief"].__setitem__("replicas", 2)),
     "spec.replicaSpecs.Chief.replicas"),
    ("zero workers", mutate(lambda s: s["replicaSpecs"]["Worker"].__setitem__("replicas", 0)),
     "spec.replicaSpecs.Worker.replicas"),
    ("no Worker", mutate(lambda s: s["replicaSpecs"].pop("Worker")),
     "spec.replicaSpecs.Worker"),
    ("two evaluators", mutate(lambda s: s["replicaSpecs"].__setitem__(
        "Evaluator", {"replicas": 2, "template": {"spec": {"containers": [{"name": "e"}]}}})),
     "spec.replicaSpecs.Evaluator.replicas"),
    ("unknown restartPolicy", mutate(lambda s: s.__setitem__("restartPolicy", "Always")),
     "spec.restartPolicy"),
    ("negative backoffLimit", mutate(lambda s: s.__setitem__("backoffLimit", -1)),
     "spec.backoffLimit"),
    ("missing template", mutate(lambda s: s["replicaSpecs"]["Worker"].pop("template")),
     "spec.replicaSpecs: every replica type needs a template, unless spec.runtimeRef"),
    ("template without containers", mutate(
        lambda s: s["replicaSpecs"]["Worker"]["template"]["spec"].__setitem__("containers", [])),
     "spec.replicaSpecs.Worker.template.spec.containers"),
    ("unknown cleanPodPolicy", mutate(lambda s: s.__setitem__("cleanPodPolicy", "Some")),
     "spec.cleanPodPolicy"),
    ("port out of range", mutate(lambda s: s.__setitem__("port", 70000)), "spec.port"),
    ("progressPort out of range", mutate(lambda s: s.__setitem__("progressPort", 0)),
     "spec.progressPort"),
    ("progressPort is the collective port (CEL)", mutate(lambda s: s.update(port=2300,
                                                                           progressPort=2300)),
     "spec.progressPort"),
    ("relative checkpoint mountPath (CEL)", mutate(lambda s: s.__setitem__(
        "checkpoint", {"mountPath": "ckpt", "volume": {"emptyDir": {}}})),
     "spec.checkpoint.mountPath"),
    # Object-storage backups (spec.checkpoint.uri).
    ("checkpoint uri not s3/gs", mutate(lambda s: s.__setitem__(
        "checkpoint", {"uri": "http://bucket/p", "credentialsSecret": "c"})),
     "spec.checkpoint.uri"),
    ("checkpoint uri without a bucket", mutate(lambda s: s.__setitem__(
        "checkpoint", {"uri": "s3://", "credentialsSecret": "c"})),
     "spec.checkpoint.uri"),
    ("checkpoint volume and uri (CEL)", mutate(lambda s: s.__setitem__(
        "checkpoint", {"uri": "s3://bucket/p", "credentialsSecret": "c",
                       "volume": {"emptyDir": {}}})),
     "exactly one of volume or uri"),
    ("checkpoint uri without credentialsSecret (CEL)", mutate(lambda s: s.__setitem__(
        "checkpoint", {"uri": "s3://bucket/p"})),
     "spec.checkpoint.credentialsSecret"),
    ("checkpoint endpoint not a URL", mutate(lambda s: s.__setitem__(
        "checkpoint", {"uri": "s3://bucket/p", "credentialsSecret": "c",
                       "endpoint": "minio:9000"})),
     "spec.checkpoint.endpoint"),
    ("checkpoint endpoint with a path (the worker takes none)", mutate(lambda s: s.__setitem__(
        "checkpoint", {"uri": "s3://bucket/p", "credentialsSecret": "c",
                       "endpoint": "https://s3.example.com/storage"})),
     "spec.checkpoint.endpoint"),
    ("checkpoint endpoint with credentials", mutate(lambda s: s.__setitem__(
        "checkpoint", {"uri": "s3://bucket/p", "credentialsSecret": "c",
                       "endpoint": "http://user@minio:9000"})),
     "spec.checkpoint.endpoint"),
    ("checkpoint endpoint without uri (CEL)", mutate(lambda s: s.__setitem__(
        "checkpoint", {"mountPath": "/c", "volume": {"emptyDir": {}},
                       "endpoint": "http://minio:9000"})),
     "spec.checkpoint.endpoint"),
    ("checkpoint volume without mountPath (CEL)", mutate(lambda s: s.__setitem__(
        "checkpoint", {"volume": {"emptyDir": {}}})),
     "spec.checkpoint.mountPath"),
    # A deadline shorter than two default progress polls (it could expire before a healthy
    # job's progress is polled), a negative limit.
    ("progressDeadlineSeconds under two polls", mutate(lambda s: s.update(
        progressDeadlineSeconds=5)), "spec.progressDeadlineSeconds"),
    ("negative maxDisruptions", mutate(lambda s: s.update(maxDisruptions=-1)),
     "spec.maxDisruptions"),
]


def test_checkpoint_uri_accepted(crd, namespace):
    for uri, endpoint in (("s3://bucket/runs/a", "http://minio.storage:9000"),
                          ("s3://bucket", "https://s3.example.com/"),
                          ("gs://my.bucket", None)):
        obj = copy.deepcopy(VALID)
        ck = {"uri": uri, "credentialsSecret": "s3-creds"}
        if endpoint:
            ck["endpoint"] = endpoint
        obj["spec"]["checkpoint"] = ck
        p = apply(crd, namespace, obj)
        assert p.returncode == 0, (uri, p.stderr)
        got = crd.get_json("trainingjob", "valid", "-n", namespace)["spec"]["checkpoint"]
        assert got == ck
        crd.kubectl("delete", "trainingjob", "valid", "-n", namespace, "--wait=true")


@pytest.mark.parametrize("what,obj,field", INVALID, ids=[i[0] for i in INVALID])
def test_invalid_job_rejected_naming_field(crd, namespace, what, obj, field):
    p = apply(crd, namespace, obj)
    assert p.returncode != 0, f"{what}: accepted\n{p.stdout}"
    assert "is invalid" in p.stderr or "Invalid value" in p.stderr or "Required value" in p.stderr, p.stderr
    assert field in p.stderr, f"{what}: error does not name {field}:\n{p.stderr}"
    # Nothing was stored.
    got = crd.kubectl("get", "tj", "-n", namespace, "-o", "name").stdout
    assert got.strip() == ""


def test_explain_documents_fields(crd):
    out = crd.kubectl("explain", "trainingjob.spec.restartPolicy").stdout
    assert "OnFailure" in out and "ExitCode" in out


def test_example_manifest_is_accepted(crd, namespace):
    p = crd.kubectl("apply", "--dry-run=server", "-n", namespace, "-f",
                    str(ROOT / "examples/fashion-mnist.yaml"), check=False)
    assert p.returncode == 0, p.stderr
    with open(ROOT / "examples/fashion-mnist.yaml") as f:
        kinds = [d["kind"] for d in yaml.safe_load_all(f)]
    assert kinds == ["ConfigMap", "PersistentVolumeClaim", "TrainingJob"]


@pytest.mark.parametrize("example", ["fashion-mnist.yaml", "fashion-mnist-gpu.yaml", "local-pv.yaml",
                                     "tensorflow-mwms.yaml"])
def test_every_example_dry_runs(crd, namespace, example):
    p = crd.kubectl("apply", "--dry-run=server", "-n", namespace, "-f",
                    str(ROOT / "examples" / example), check=False)
    assert p.returncode == 0, p.stderr


def test_every_field_has_a_description():
    """`kubectl explain trainingjob.<path>` says something for every field of the schema,
    status included (metadata, whose schema the apiserver restricts, excepted)."""
    crd = yaml.safe_load(open(ROOT / "manifests/crds/trainingjobs.ctrain.dev.yaml"))
    missing = []

    def walk(node, path):
        for k, v in (node.get("properties") or {}).items():
            p = f"{path}.{k}"
            if "description" not in v and p != ".metadata":
                missing.append(p)
            if p == ".metadata":
                continue
            if k == "template":
                # Kubernetes' PodSpec, generated (tools/crd/podspec.py): described down to a
                # container's fields, test_template_is_the_apiservers_podspec.
                if "description" not in v["properties"]["spec"]:
                    missing.append(p + ".spec")
                continue
            walk(v, p)
            if isinstance(v.get("items"), dict):
                walk(v["items"], p + "[]")
            if isinstance(v.get("additionalProperties"), dict):
                walk(v["additionalProperties"], p + "{}")
    for version in crd["spec"]["versions"]:
        walk(version["schema"]["openAPIV3Schema"], "")
    assert not missing, missing


def test_explain_status_progress_accuracy(crd):
    p = crd.kubectl("explain", "trainingjob.status.progress.accuracy")
    assert "Training accuracy" in p.stdout, p.stdout


def test_template_typo_is_refused_naming_the_field(crd, namespace):
    """The template is the full PodSpec schema: a misspelt field is refused, named, and
    nothing is stored."""
    obj = copy.deepcopy(VALID)
    obj["spec"]["replicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["resouces"] = {
        "limits": {"cpu": "1"}}
    p = apply(crd, namespace, obj)
    assert p.returncode != 0, p.stdout
    assert 'unknown field "spec.replicaSpecs.Worker.template.spec.containers[0].resouces"' in \
        p.stderr, p.stderr
    assert crd.kubectl("get", "tj", "-n", namespace, "-o", "name").stdout.strip() == ""
    # Typed: a wrong type in a PodSpec field is refused too, and the right one is kept whole.
    obj["spec"]["replicaSpecs"]["Worker"]["template"]["spec"]["containers"][0] = {
        "name": "w", "image": "x", "ports": [{"containerPort": "http"}]}
    p = apply(crd, namespace, obj)
    assert p.returncode != 0 and "containerPort" in p.stderr, p.stderr
    c = {"name": "w", "image": "x", "resources": {"limits": {"cpu": "1", "memory": "1Gi"}},
         "env": [{"name": "A", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}]}
    obj["spec"]["replicaSpecs"]["Worker"]["template"]["spec"]["containers"][0] = c
    p = apply(crd, namespace, obj)
    assert p.returncode == 0, p.stderr
    got = crd.get_json("trainingjob", "valid", "-n", namespace)
    assert got["spec"]["replicaSpecs"]["Worker"]["template"]["spec"]["containers"][0] == c
    crd.kubectl("delete", "trainingjob", "valid", "-n", namespace, "--wait=true")


def test_template_is_the_apiservers_podspec(crd):
    """The template's PodSpec schema is what tools/crd/podspec.py generates from this very
    apiserver (of the pinned version), in the CRD and in the chart alike: generated, never
    edited by hand."""
    p = subprocess.run([sys.executable, str(ROOT / "tools/crd/podspec.py"), "--check",
                        "--kubectl", crd.kubectl_bin], env=crd.env, capture_output=True, text=True)
    if p.returncode == 2:
        pytest.skip(p.stderr.strip())  # $KUBECONFIG's cluster is another version
    assert p.returncode == 0, p.stderr
    out = crd.kubectl("explain", "trainingjob.spec.replicaSpecs.Worker.template.spec.containers.resources").stdout
    assert "Compute Resources required by this container" in out, out
