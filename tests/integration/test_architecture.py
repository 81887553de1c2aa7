"""docs/ARCHITECTURE.md's inventory is the build graph (issue 31): its
libraries are the add_library(... STATIC) calls of the layer folders, each
named with its folder as CMake builds it there; every C/CUDA source a
library globs is named in its layer diagram and every file the diagram
names exists; the fuzz targets its section 3 lists (and counts) are the
tests/fuzz/fuzz_*.c that tests/fuzz/CMakeLists.txt builds, as
docs/development.md counts them; the layer rule lists every library.
Reads the tree and the CMake files only: no build, no cluster."""
import re

from clusterlib import ROOT

ARCH = ROOT / "docs/ARCHITECTURE.md"
NUMBERS = {w: i for i, w in enumerate(
    "zero one two three four five six seven eight nine ten eleven twelve".split())}
ADD_LIBRARY = re.compile(r"add_library\(\s*(ctrain_\w+)\s+STATIC\b")
GLOB_DIRS = re.compile(r"\$\{CMAKE_CURRENT_SOURCE_DIR\}/((?:\w+/)?)\*\.(c|cu)\b")


def arch():
    return ARCH.read_text()


def layers_block():
    """The diagram of section 1: the first fenced block after '## 1. Layers'."""
    section = arch().split("## 1. Layers", 1)[1]
    return section.split("```", 2)[1]


def libraries():
    """{library: folder} from the add_library(... STATIC) calls of the
    top-level folders' CMakeLists.txt (tests and bench build no library)."""
    libs = {}
    for cm in sorted(ROOT.glob("*/CMakeLists.txt")):
        folder = cm.parent.name
        if folder in ("tests", "bench") or folder.startswith("build"):
            continue
        for name in ADD_LIBRARY.findall(cm.read_text()):
            libs[name] = folder
    return libs


def sources(folder):
    """The C/CUDA files a library's CMakeLists.txt globs (main.c included:
    the program beside it), as paths from the project root."""
    text = (ROOT / folder / "CMakeLists.txt").read_text()
    files = set()
    for sub, ext in GLOB_DIRS.findall(text):
        files |= {p.relative_to(ROOT).as_posix()
                  for p in (ROOT / folder / sub).glob(f"*.{ext}")}
    if (ROOT / folder / "main.c").exists():
        files.add(f"{folder}/main.c")
    return files


def expand(block):
    """The diagram's words: file names (a.c, a.cu) and bare names (a module
    named by its stem, "kube_watch"). Every file is spelled out whole: no
    "a/b/c.c" shorthand, which two side-by-side columns would garble."""
    return set(re.findall(r"[A-Za-z0-9_]+(?:\.cu|\.c)?", block))


def test_the_libraries_are_the_build():
    libs = libraries()
    assert set(libs.values()) >= {"common", "kube", "controller", "worker"}, libs
    named = dict(re.findall(r"\b(\w+)/\s+\((ctrain_\w+)\)", layers_block()))
    assert {lib: folder for folder, lib in named.items()} == libs, (
        "docs/ARCHITECTURE.md section 1 names each library as 'folder/  (ctrain_name)'")
    m = re.search(r"^(\w+) static libraries", arch(), re.M)
    assert m and NUMBERS.get(m.group(1).lower()) == len(libs), (
        f"docs/ARCHITECTURE.md counts {m and m.group(1)} static libraries, the build has {len(libs)}")
    rule = arch().split("**Rule: a lower layer never includes a higher one.**", 1)[1]
    rule = rule.split("\n\n", 1)[0]
    for lib in libs:
        assert f"`{lib}`" in rule, f"the layer rule does not say what {lib} links"


def test_every_source_is_in_the_diagram():
    words = expand(layers_block())
    missing = []
    for folder in sorted(set(libraries().values())):
        for path in sorted(sources(folder)):
            name = path.rsplit("/", 1)[1]
            if name not in words and name.rsplit(".", 1)[0] not in words:
                missing.append(path)
    assert not missing, f"docs/ARCHITECTURE.md section 1 does not name: {missing}"


def test_every_file_in_the_diagram_exists():
    have = set()
    for folder in set(libraries().values()):
        have |= {p.rsplit("/", 1)[1] for p in sources(folder)}
        have |= {p.name for p in (ROOT / folder).rglob("*.c")}
    named = {w for w in expand(layers_block()) if re.fullmatch(r"\w+\.(c|cu)", w)}
    assert not named - have, f"docs/ARCHITECTURE.md names files that are not there: {named - have}"


def fuzz_targets():
    cm = (ROOT / "tests/fuzz/CMakeLists.txt").read_text()
    assert "${CMAKE_CURRENT_SOURCE_DIR}/fuzz_*.c" in cm, "tests/fuzz builds fuzz_*.c no longer"
    return {p.stem[len("fuzz_"):] for p in (ROOT / "tests/fuzz").glob("fuzz_*.c")}


def test_fuzz_targets_are_the_build():
    para = arch().split("**`tests/fuzz/fuzz_*.c`:**", 1)[1].split("\n- ", 1)[0]
    m = re.match(r"\s*libFuzzer on (\d+) parsers:(.*?)\. Flags", para, re.S)
    assert m, para
    listed = re.sub(r"\([^()]*\)", "", m.group(2))
    names = {n.strip() for n in listed.split(",")}
    targets = fuzz_targets()
    assert names == targets, (
        f"docs/ARCHITECTURE.md lists {sorted(names - targets)} that tests/fuzz lacks, "
        f"lacks {sorted(targets - names)}")
    assert int(m.group(1)) == len(targets)
    dev = (ROOT / "docs/development.md").read_text()
    counts = re.findall(r"on the (\d+) parsers in tests/fuzz/", dev)
    assert counts and all(int(c) == len(targets) for c in counts), counts


def test_the_diagram_parser_sees_what_it_should():
    # The readers above, on a made-up diagram, so a doc edit that they
    # misread fails here rather than passing for the wrong reason.
    block = "  a/  (ctrain_a)     b/  (ctrain_b)\n    x.c (y.cu)  kube_config (+ kube_yaml)\n"
    assert dict(re.findall(r"\b(\w+)/\s+\((ctrain_\w+)\)", block)) == {"a": "ctrain_a",
                                                                        "b": "ctrain_b"}
    assert {"x.c", "y.cu", "kube_config", "kube_yaml"} <= expand(block)
    assert "x" not in expand(block)
