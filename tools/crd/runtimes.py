#!/usr/bin/env python3
"""tools/crd/runtimes.py - writes the CRDs of TrainingRuntime (namespaced) and
ClusterTrainingRuntime (cluster-scoped) from the TrainingJob's, so a runtime's fields have the
job's very schema (the pod template's PodSpec, checkpoint, limits) and never drift from it:

    python3 tools/crd/runtimes.py [--check]

Writes manifests/crds/{trainingruntimes,clustertrainingruntimes}.ctrain.dev.yaml and the chart's
copies (charts/ctrain/crds/). Run it after tools/crd/podspec.py or any edit of the job's CRD.
--check writes nothing and exits 1 when a file differs from what would be written
(tests/integration/test_runtime.py runs it).
"""
import argparse
import copy
import pathlib
import sys

import yaml

ROOT = pathlib.Path(__file__).resolve().parents[2]
JOB_CRD = ROOT / "manifests/crds/trainingjobs.ctrain.dev.yaml"
OUT_DIRS = [ROOT / "manifests/crds", ROOT / "charts/ctrain/crds"]
# The job's spec fields a runtime gives (docs/api.md "Runtimes"), beside replicaSpecs' templates.
FIELDS = ["checkpoint", "progressDeadlineSeconds", "backoffLimit", "maxDisruptions"]
TYPES = ["Chief", "Worker", "Evaluator"]

KINDS = {
    "TrainingRuntime": dict(scope="Namespaced", plural="trainingruntimes", short=["trt"],
                            who="the TrainingJobs of its namespace"),
    "ClusterTrainingRuntime": dict(scope="Cluster", plural="clustertrainingruntimes",
                                   short=["ctrt"], who="the TrainingJobs of every namespace"),
}

COLUMNS = [
    dict(name="Image", type="string", description="The Worker template's first container image.",
         jsonPath=".spec.replicaSpecs.Worker.template.spec.containers[0].image"),
    dict(name="Queue", type="string", description="The Kueue LocalQueue of its jobs.",
         jsonPath=".spec.queueName"),
    dict(name="Claim", type="string", description="The checkpoint claim of its jobs.",
         jsonPath=".spec.checkpoint.volume.persistentVolumeClaim.claimName"),
    dict(name="Backup-URI", type="string", priority=1,
         description="The checkpoint's object-storage URI.", jsonPath=".spec.checkpoint.uri"),
    dict(name="Backoff", type="integer", description="backoffLimit of its jobs.",
         jsonPath=".spec.backoffLimit"),
    dict(name="Progress-Deadline", type="integer", priority=1,
         description="progressDeadlineSeconds of its jobs.",
         jsonPath=".spec.progressDeadlineSeconds"),
    dict(name="Age", type="date", jsonPath=".metadata.creationTimestamp"),
]


def runtime_crd(job, kind):
    k = KINDS[kind]
    jspec = job["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    template = jspec["properties"]["replicaSpecs"]["properties"]["Worker"]["properties"]["template"]
    types = {}
    for t in TYPES:
        types[t] = {"type": "object",
                    "description": f"The {t} pods' defaults.",
                    "properties": {"template": template}}
    props = {"replicaSpecs": {
        "type": "object",
        "description": ("Pod templates by replica type; a job's template of the type is merged over "
                        "it (containers, env, volumes and volume mounts by name: the job's win)."),
        "properties": types}}
    for f in FIELDS:
        props[f] = copy.deepcopy(jspec["properties"][f])
    props["queueName"] = {
        "type": "string", "maxLength": 63,
        "pattern": r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$",
        "description": ("The Kueue LocalQueue of its jobs (their kueue.x-k8s.io/queue-name label, "
                        "unless a job has its own)."),
    }
    # The job's checkpoint rules name spec.checkpoint; so do the runtime's.
    spec = {"type": "object",
            "description": (f"The defaults of {k['who']} that name it in spec.runtimeRef; each job "
                            "records the spec as it is when the job is admitted."),
            "properties": props}
    schema = {"type": "object",
              "description": (f"{kind}: the defaults of a TrainingJob (pod templates, checkpoint, "
                              "limits, queue) set once by an admin for {k['who']}."),
              "required": ["spec"],
              "properties": {
                  "apiVersion": {"type": "string", "description": "ctrain.dev/v1alpha1."},
                  "kind": {"type": "string", "description": f"{kind}."},
                  "metadata": {"type": "object"},
                  "spec": spec}}
    schema["description"] = schema["description"].replace("{k['who']}", k["who"])
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{k['plural']}.ctrain.dev",
                     "labels": {"app.kubernetes.io/name": "ctrain",
                                "app.kubernetes.io/part-of": "ctrain"}},
        "spec": {
            "group": "ctrain.dev",
            "scope": k["scope"],
            "names": {"kind": kind, "listKind": f"{kind}List", "plural": k["plural"],
                      "singular": kind.lower(), "shortNames": k["short"],
                      "categories": ["ctrain"]},
            "versions": [{"name": "v1alpha1", "served": True, "storage": True,
                          "additionalPrinterColumns": COLUMNS,
                          "schema": {"openAPIV3Schema": schema}}],
        },
    }


def render(kind):
    job = yaml.safe_load(JOB_CRD.read_text())
    head = (f"# {kind}: a TrainingJob's defaults, set once (docs/api.md \"Runtimes\").\n"
            "# Generated by tools/crd/runtimes.py from trainingjobs.ctrain.dev.yaml; do not edit.\n")
    return head + yaml.safe_dump(runtime_crd(job, kind), sort_keys=False, width=100)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="exit 1 when a file differs; write nothing")
    args = ap.parse_args()
    stale = []
    for kind, k in KINDS.items():
        text = render(kind)
        for d in OUT_DIRS:
            path = d / f"{k['plural']}.ctrain.dev.yaml"
            if path.exists() and path.read_text() == text:
                continue
            if args.check:
                stale.append(str(path.relative_to(ROOT)))
            else:
                path.write_text(text)
    if stale:
        sys.exit("runtimes.py: out of date (run python3 tools/crd/runtimes.py): " + ", ".join(stale))


if __name__ == "__main__":
    main()
