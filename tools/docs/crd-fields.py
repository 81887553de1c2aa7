#!/usr/bin/env python3
"""tools/docs/crd-fields.py - the TrainingJob field table of docs/api.md, from
manifests/crd.yaml (the one source of each field's type, default and description).

    python3 tools/docs/crd-fields.py            print the table
    python3 tools/docs/crd-fields.py --write    replace it in docs/api.md (between the
                                                <!-- fields:begin --> and end markers)

tests/integration/test_docs.py fails when docs/api.md's table is not what this prints."""
import pathlib
import re
import sys

import yaml

ROOT = pathlib.Path(__file__).resolve().parents[2]
BEGIN, END = "<!-- fields:begin -->", "<!-- fields:end -->"


def rows(node, path, out):
    for k, v in (node.get("properties") or {}).items():
        p = f"{path}.{k}" if path else k
        if p in ("apiVersion", "kind", "metadata"):
            continue
        typ = v.get("type", "")
        if typ == "array":
            typ = f"[]{v.get('items', {}).get('type', '')}"
        if "enum" in v:
            typ += " (" + ", ".join(str(e) for e in v["enum"]) + ")"
        d = v.get("default")
        default = "" if d is None else f"`{str(d).lower() if isinstance(d, bool) else d}`"
        desc = re.sub(r"\s+", " ", v.get("description", "")).replace("|", "\\|")
        out.append(f"| `{p}` | {typ} | {default} | {desc} |")
        if k == "template":
            continue  # a PodTemplateSpec: Kubernetes' own fields
        rows(v, p, out)
        if isinstance(v.get("items"), dict):
            rows(v["items"], p + "[]", out)
        if isinstance(v.get("additionalProperties"), dict):
            rows(v["additionalProperties"], p + ".<type>", out)
    return out


def table():
    crd = yaml.safe_load((ROOT / "manifests/crd.yaml").read_text())
    schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    lines = ["| field | type | default | description |", "|---|---|---|---|"]
    return "\n".join(rows(schema, "", lines)) + "\n"


def main():
    t = table()
    if sys.argv[1:] == ["--write"]:
        doc = ROOT / "docs/api.md"
        text = doc.read_text()
        a, b = text.index(BEGIN) + len(BEGIN), text.index(END)
        doc.write_text(text[:a] + "\n" + t + text[b:])
    else:
        sys.stdout.write(t)


if __name__ == "__main__":
    main()
