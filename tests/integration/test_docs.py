"""The docs say what the code does: docs/api.md's field table is what
tools/docs/crd-fields.py makes of manifests/crds/trainingjobs.ctrain.dev.yaml; the flag tables of docs/worker.md and
docs/operations.md list exactly the flags `ctrain-worker --help` and
`ctrain-controller --help` print; every relative link in README.md and docs/ resolves.
Needs no cluster (the binaries of the build)."""
import re
import subprocess

import pytest

from clusterlib import BUILD, ROOT

FLAG = re.compile(r"(?<![\w-])(--?[a-z][a-z0-9-]*)")


def help_flags(binary):
    p = subprocess.run([str(binary), "--help"], capture_output=True, text=True)
    out = p.stdout + p.stderr
    flags = set()
    for line in out.splitlines():
        if line.startswith("  -"):
            flags |= {f.split("[")[0] for f in FLAG.findall(line[2:].split("  ")[0])}
    assert flags, out
    return flags


def table_flags(doc, heading):
    text = (ROOT / doc).read_text()
    section = text.split(heading, 1)[1].split("\n## ", 1)[0]
    flags = set()
    for line in section.splitlines():
        if line.startswith("| `-"):
            first = line.split("|")[1]
            flags |= {f.split("[")[0] for f in FLAG.findall(first)}
    return flags


def test_api_field_table_is_the_crd():
    doc = (ROOT / "docs/api.md").read_text()
    got = doc.split("<!-- fields:begin -->\n", 1)[1].split("<!-- fields:end -->", 1)[0]
    want = subprocess.run(["python3", str(ROOT / "tools/docs/crd-fields.py")],
                          capture_output=True, text=True, check=True).stdout
    assert got == want, "run: python3 tools/docs/crd-fields.py --write"


@pytest.mark.parametrize("binary,doc,heading", [
    ("worker/ctrain-worker", "docs/worker.md", "## Flags"),
    ("controller/ctrain-controller", "docs/operations.md", "## Controller flags"),
])
def test_flag_tables_are_the_help(binary, doc, heading):
    b = BUILD / binary
    if not b.exists():
        pytest.fail(f"{b} not built")
    assert table_flags(doc, heading) == help_flags(b)


def test_relative_links_resolve():
    bad = []
    for md in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for target in re.findall(r"\]\(([^)#:]+)(?:#[^)]*)?\)", md.read_text()):
            if not (md.parent / target).exists():
                bad.append(f"{md.relative_to(ROOT)}: {target}")
    assert not bad, bad
