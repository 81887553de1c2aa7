"""include/common/ctrain/contract.h is the one place the controller <-> worker
contract is written: these checks hold the CRDs and the docs to it. The CRD's
group, version, kind, plural and the spec.port / spec.progressPort defaults
equal the header's; every CTRAIN_* variable the docs name is one the header
defines, and docs/jobs.md (the pod's environment) names each of them; the
port defaults the docs state are the header's. Reads the tree only: no
build, no cluster."""
import re

import yaml

from clusterlib import ROOT

HEADER = ROOT / "include/common/ctrain/contract.h"
CRDS = ROOT / "manifests/crds"
DEFINE = re.compile(r"^#define\s+(CTRAIN_\w+)[ \t]+(.+?)\s*(?:/\*.*)?$", re.M)
TOKEN = re.compile(r'\s*(?:"((?:[^"\\]|\\.)*)"|(\d+)|([A-Za-z_]\w*))')


def evaluate(expr, defs):
    """A #define's value: an integer, or string literals and earlier
    macros, concatenated."""
    parts, pos = [], 0
    expr = expr.strip()
    while pos < len(expr):
        m = TOKEN.match(expr, pos)
        assert m, f"contract.h: cannot read {expr!r} at {pos}"
        pos = m.end()
        s, n, name = m.groups()
        if s is not None:
            parts.append(s)
        elif n is not None:
            parts.append(int(n))
        else:
            assert name in defs, f"contract.h: {name} used before its #define"
            parts.append(defs[name])
    if len(parts) == 1:
        return parts[0]
    assert all(isinstance(p, str) for p in parts), f"contract.h: mixed {expr!r}"
    return "".join(parts)


def contract():
    defs = {}
    for name, value in DEFINE.findall(HEADER.read_text()):
        if name.endswith("_H"):
            continue
        defs[name] = evaluate(value, defs)
    return defs


def crd(plural):
    return yaml.safe_load((CRDS / f"{plural}.{contract()['CTRAIN_API_GROUP']}.yaml").read_text())


def env_names(defs):
    return {v for k, v in defs.items() if k.startswith("CTRAIN_ENV_")}


def test_header_reads():
    defs = contract()
    assert defs["CTRAIN_API_GROUP_VERSION"] == f"{defs['CTRAIN_API_GROUP']}/{defs['CTRAIN_API_VERSION']}"
    assert isinstance(defs["CTRAIN_DEFAULT_COLLECTIVE_PORT"], int)
    assert isinstance(defs["CTRAIN_DEFAULT_PROGRESS_PORT"], int)
    assert defs["CTRAIN_DEFAULT_COLLECTIVE_PORT"] != defs["CTRAIN_DEFAULT_PROGRESS_PORT"]
    for name in env_names(defs):
        assert re.fullmatch(r"CTRAIN_[A-Z0-9_]+", name), name
    # The attempt's label, finalizer and annotation are one key.
    assert defs["CTRAIN_LABEL_ATTEMPT"] == defs["CTRAIN_FINALIZER_ATTEMPT"] == defs["CTRAIN_ANN_ATTEMPT"]


def test_crds_match_header():
    defs = contract()
    for key in ("CTRAIN_RESOURCE_TRAININGJOBS", "CTRAIN_RESOURCE_TRAININGRUNTIMES",
                "CTRAIN_RESOURCE_CLUSTERTRAININGRUNTIMES"):
        doc = crd(defs[key])
        assert doc["spec"]["group"] == defs["CTRAIN_API_GROUP"]
        assert doc["spec"]["names"]["plural"] == defs[key]
        assert [v["name"] for v in doc["spec"]["versions"]] == [defs["CTRAIN_API_VERSION"]]
    tj = crd(defs["CTRAIN_RESOURCE_TRAININGJOBS"])
    assert tj["spec"]["names"]["kind"] == defs["CTRAIN_KIND_TRAININGJOB"]
    (version,) = tj["spec"]["versions"]
    spec = version["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
    assert spec["port"]["default"] == defs["CTRAIN_DEFAULT_COLLECTIVE_PORT"]
    assert spec["progressPort"]["default"] == defs["CTRAIN_DEFAULT_PROGRESS_PORT"]


def test_docs_name_the_header_environment():
    names = env_names(contract())
    for doc in ("api.md", "worker.md", "design.md", "jobs.md"):
        named = set(re.findall(r"\bCTRAIN_[A-Z][A-Z0-9_]*\b", (ROOT / "docs" / doc).read_text()))
        assert named <= names, f"docs/{doc} names variables contract.h lacks: {sorted(named - names)}"
    jobs = set(re.findall(r"\bCTRAIN_[A-Z][A-Z0-9_]*\b", (ROOT / "docs/jobs.md").read_text()))
    assert names <= jobs, f"docs/jobs.md does not name {sorted(names - jobs)}"


def test_docs_port_defaults():
    defs = contract()
    api = (ROOT / "docs/api.md").read_text()
    for field, key in (("port", "CTRAIN_DEFAULT_COLLECTIVE_PORT"),
                       ("progressPort", "CTRAIN_DEFAULT_PROGRESS_PORT")):
        m = re.search(rf"^\| `spec\.{field}` \| integer \| `(\d+)` \|", api, re.M)
        assert m and int(m.group(1)) == defs[key], f"docs/api.md: spec.{field}"
    m = re.search(r"the controller sets (\d+)", (ROOT / "docs/worker.md").read_text())
    assert m and int(m.group(1)) == defs["CTRAIN_DEFAULT_PROGRESS_PORT"]


# C's comments, character and string literals, in the order a lexer meets them.
LEXEME = re.compile(
    r"/\*.*?\*/|//[^\n]*" + r"|'(?:[^'\\\n]|\\.)*'" + r'|"((?:[^"\\\n]|\\.)*)"', re.S)
# Keys of ctrain.dev that are not part of the contract: the controller's own.
PRIVATE = {"ctrain.dev/leader"}


def test_sources_do_not_restate_the_contract():
    """No C source but contract.h spells a variable's name, the read label or
    the API group as a string literal: they use the macros."""
    defs = contract()
    names = env_names(defs)
    group = defs["CTRAIN_API_GROUP"]
    label = defs["CTRAIN_PROGRESS_READ_LABEL"]
    bad = []
    for layer in ("common", "controller", "worker", "kube"):
        for path in sorted((ROOT / layer).rglob("*")):
            if path.suffix not in (".c", ".h", ".cu") or path == HEADER:
                continue
            for m in LEXEME.finditer(path.read_text()):
                lit = m.group(1)
                if lit is None:
                    continue
                word = re.match(r"[A-Z0-9_]+", lit)
                if ((word and word.group(0) in names) or lit.startswith(label)
                        or (lit.startswith(group) and lit not in PRIVATE)):
                    bad.append(f"{path.relative_to(ROOT)}: \"{lit}\"")
    assert not bad, "use ctrain/contract.h's macros:\n" + "\n".join(bad)
