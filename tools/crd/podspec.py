#!/usr/bin/env python3
"""tools/crd/podspec.py - writes the pod template's PodSpec schema into the CRD, generated from
the apiserver's own OpenAPI (never by hand):

    python3 tools/crd/podspec.py [--kubectl PATH] [--check]
    python3 tools/crd/podspec.py --openapi FILE --version vX.Y.Z [--check]

The schema is kube-apiserver's `/openapi/v3/api/v1` (read with kubectl from $KUBECONFIG, e.g.
the control plane of `tools/localcluster/cluster.sh up`, or from FILE) of the Kubernetes
version pinned in tools/localcluster/versions.sh (another version is refused, exit 2),
turned into a structural CRD schema as controller-gen turns the Go types:
  - every `$ref` is inlined (a CRD schema has no references); a field's own description wins
    over its type's;
  - Quantity and IntOrString become `x-kubernetes-int-or-string` (Quantity with its pattern);
  - the strategic-merge-patch and GVK extensions, which a CRD schema does not take, are
    dropped; list types, list-map keys and map types are kept;
  - defaults: the zero values openapi-gen writes for every non-pointer field ({}, "", 0,
    false) are dropped where the field is required, an object, a list's item or a map's
    value (defaulting a required `containerPort` to 0 would hide its absence; an item is
    never absent); the scalar defaults Kubernetes declares for optional fields (a port's
    protocol TCP, a list-map key's "") are kept;
  - descriptions are kept for the fields of PodSpec and of a container (what `kubectl
    explain trainingjob.spec.replicaSpecs.Worker.template.spec` shows) and dropped deeper
    down, where they would triple the CRD (three templates) past what etcd takes in one
    object; `kubectl explain pod.spec...` has them all.
The generated text replaces what lies between the `# BEGIN podspec` and `# END podspec` lines
of manifests/crds/trainingjobs.ctrain.dev.yaml, and the chart's copy (charts/ctrain/crds/) is written the same.
--check writes nothing and exits 1 when either file differs from what would be generated
(tests/integration/test_crd.py runs it against the test session's apiserver).
"""
import argparse
import json
import pathlib
import re
import subprocess
import sys

import yaml

ROOT = pathlib.Path(__file__).resolve().parents[2]
CRD = ROOT / "manifests/crds/trainingjobs.ctrain.dev.yaml"
CHART_CRD = ROOT / "charts/ctrain/crds/trainingjobs.ctrain.dev.yaml"
PREFIX = "#/components/schemas/"
QUANTITY = "io.k8s.apimachinery.pkg.api.resource.Quantity"
INT_OR_STRING = "io.k8s.apimachinery.pkg.util.intstr.IntOrString"
# controller-gen's pattern for resource.Quantity.
QUANTITY_PATTERN = (r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|"
                    r"([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$")
KEEP = {"type", "format", "description", "required", "properties", "items", "additionalProperties",
        "enum", "default", "x-kubernetes-list-type", "x-kubernetes-list-map-keys",
        "x-kubernetes-map-type", "minItems", "maxItems", "minimum", "maximum", "pattern",
        "minLength", "maxLength", "nullable"}
ORDER = ["description", "type", "format", "required", "properties", "items",
         "additionalProperties"]
# Our own words where the apiserver's say less than a TrainingJob's user needs.
OVERLAY = {
    "containers": {"minItems": 1, "description": (
        "The pod's containers; each gets TF_CONFIG, CTRAIN_* and the checkpoint mount. "
        "At least one.")},
    "containers[].image": {"description": "The container's image (for ctrain-worker: the ctrain image)."},
}
# Descriptions at depth <= DESC_DEPTH (PodSpec's fields: 1, a container's fields: 3 counting
# the list's items) are kept.
DESC_DEPTH = 3


class Gen:
    def __init__(self, schemas):
        self.schemas = schemas
        self.stack = []

    def ref(self, name, depth):
        if name == QUANTITY:
            return {"anyOf": [{"type": "integer"}, {"type": "string"}],
                    "pattern": QUANTITY_PATTERN, "x-kubernetes-int-or-string": True}
        if name == INT_OR_STRING:
            return {"anyOf": [{"type": "integer"}, {"type": "string"}],
                    "x-kubernetes-int-or-string": True}
        if name in self.stack:
            sys.exit(f"podspec.py: {name} refers to itself ({' > '.join(self.stack)})")
        self.stack.append(name)
        out = self.node(self.schemas[name], depth)
        self.stack.pop()
        return out

    def node(self, s, depth):
        if "$ref" in s:
            out = self.ref(s["$ref"].removeprefix(PREFIX), depth)
        elif len(s.get("allOf", [])) == 1:
            out = self.ref(s["allOf"][0]["$ref"].removeprefix(PREFIX), depth)
            out.pop("description", None)
            out.pop("default", None)
        else:
            out = {}
        for k, v in s.items():
            if k not in KEEP:
                continue
            if k == "properties":
                req = set(s.get("required", []))
                props = {}
                for name, p in v.items():
                    child = self.node(p, depth + 1)
                    d = child.get("default")
                    if "default" in child and (name in req or isinstance(d, (dict, list)) or
                                               child.get("type") == "object"):
                        del child["default"]
                    props[name] = child
                out[k] = props
            elif k in ("items", "additionalProperties") and isinstance(v, dict):
                child = self.node(v, depth + 1)
                child.pop("default", None)  # a list's item or a map's value: never absent
                out[k] = child
            elif k == "description":
                if depth <= DESC_DEPTH:
                    out[k] = v
            else:
                out[k] = v
        if depth > DESC_DEPTH:
            out.pop("description", None)
        return out


def ordered(s):
    if isinstance(s, list):
        return [ordered(v) for v in s]
    if not isinstance(s, dict):
        return s
    keys = [k for k in ORDER if k in s] + sorted(k for k in s if k not in ORDER)
    return {k: (dict((n, ordered(p)) for n, p in s[k].items()) if k == "properties" else ordered(s[k]))
            for k in keys}


def overlay(spec):
    for path, add in OVERLAY.items():
        node = spec
        for part in path.split("."):
            node = node["properties"][part.removesuffix("[]")]
            if part.endswith("[]"):
                node = node["items"]
        node.update(add)
    return spec


class Dumper(yaml.SafeDumper):
    pass


def _str(dumper, s):
    style = "|" if "\n" in s else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", s, style=style)


Dumper.add_representer(str, _str)


def generate(openapi, indent):
    schemas = openapi["components"]["schemas"]
    spec = Gen(schemas).node(schemas["io.k8s.api.core.v1.PodSpec"], 0)
    spec = overlay(spec)
    spec["description"] = "A PodSpec (Kubernetes core/v1), the schema of the apiserver this CRD was generated from."
    spec = ordered(spec)
    text = yaml.dump(spec, Dumper=Dumper, sort_keys=False, width=100, default_flow_style=False)
    # Trailing spaces inside block scalars would be lost by editors and formatters.
    text = "\n".join(line.rstrip() for line in text.splitlines())
    return "".join(" " * indent + line + "\n" if line else "\n" for line in text.splitlines())


def rewrite(path, openapi, version):
    old = path.read_text()
    m = re.search(r"^( *)# BEGIN podspec[^\n]*\n(.*?)^ *# END podspec[^\n]*\n", old, re.M | re.S)
    if not m:
        sys.exit(f"podspec.py: {path}: no '# BEGIN podspec' ... '# END podspec' block")
    ind = len(m.group(1))
    begin = (f"{m.group(1)}# BEGIN podspec: generated by tools/crd/podspec.py from kube-apiserver "
             f"{version}; do not edit\n")
    new = old[:m.start()] + begin + generate(openapi, ind) + f"{m.group(1)}# END podspec\n" + old[m.end():]
    return old, new


def pinned():
    text = (ROOT / "tools/localcluster/versions.sh").read_text()
    return re.search(r"^K8S_VERSION=(v[0-9.]+)$", text, re.M).group(1)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--openapi", help="the apiserver's /openapi/v3/api/v1 as a file")
    ap.add_argument("--version", help="the apiserver's version (with --openapi)")
    ap.add_argument("--kubectl", default="kubectl", help="the kubectl to read the apiserver with")
    ap.add_argument("--check", action="store_true", help="exit 1 when a file differs; write nothing")
    a = ap.parse_args()
    if a.openapi:
        openapi = json.loads(pathlib.Path(a.openapi).read_text())
        version = a.version
    else:
        def get(*args):
            return json.loads(subprocess.run([a.kubectl, *args], check=True, capture_output=True,
                                             text=True).stdout)
        openapi = get("get", "--raw", "/openapi/v3/api/v1")
        version = get("version", "-o", "json")["serverVersion"]["gitVersion"]
    if version != pinned():
        print(f"podspec.py: the apiserver is {version}, tools/localcluster/versions.sh pins "
              f"{pinned()}", file=sys.stderr)
        return 2
    bad = 0
    for path in (CRD, CHART_CRD):
        old, new = rewrite(path, openapi, version)
        if a.check:
            if old != new:
                print(f"podspec.py: {path.relative_to(ROOT)} is not what tools/crd/podspec.py "
                      f"generates from {version}", file=sys.stderr)
                bad = 1
        elif old != new:
            path.write_text(new)
            print(f"podspec.py: wrote {path.relative_to(ROOT)}")
    return bad


if __name__ == "__main__":
    sys.exit(main())
