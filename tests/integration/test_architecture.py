"""docs/ARCHITECTURE.md's inventory is the build graph: its
libraries are the add_library(... STATIC) calls of the layer folders, each
named with its folder as CMake builds it there; every C/CUDA source a
library globs is named in its layer diagram and every file the diagram
names exists; the fuzz targets its section 3 lists (and counts) are the
tests/fuzz/fuzz_*.c that tests/fuzz/CMakeLists.txt builds, as
docs/development.md counts them; the layer rule lists every library.
And the C names README.md and docs/*.md give are the code's (see "The names
the docs give" below), and no doc cites an issue number for a reason.
Reads the tree and the CMake files only: no build, no cluster."""
import re
import subprocess

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



# --- The names the docs give are the code's -----------------------------------
#
# README.md and docs/*.md are read outside their fenced blocks for two kinds
# of claim about the C code:
#   (a) a pair, `symbol` (`path`), `symbol` in `path`, `symbol` of `path` or
#       `path`'s `symbol`, the path a C/CUDA file: the path exists (spelled
#       from the root, or a file name exactly one file has) and the symbol is
#       an identifier of that file's code (its comments and strings left out);
#   (b) a lone code span that is a C name of ours: an identifier with an
#       underscore whose first word is a prefix of our API (the first word of
#       three or more functions that the library and program headers declare:
#       kube_, recon_, ckpt_, ..., derived, not listed). a.b and a->b are
#       checked part by part, a trailing () and a metric's {labels} dropped,
#       _{x,y} expanded, * a wildcard. It must be an identifier or a string
#       word of the C sources (a metric name is a string), a CMake target, or
#       a tracked file's or folder's name (a module, `kube_watch`; a package,
#       `ctrain_keras`); an ALL-CAPS one may instead be an environment
#       variable of the scripts and tests (their words are looked up too).
#       A lower-case snake_case name of no such prefix (`backup_save`) must
#       at least be a word of the tree: C, scripts, tests, JSON or YAML.
# FOREIGN lists the few names of other projects that read as ours.
# Flags (--unit), JSON paths (status.progress), commands and any span with a
# space, = or / are not names: not checked.

C_FILES = ("*.c", "*.h", "*.cu")
SCRIPTS = ("*.py", "*.sh", "*.yaml", "*.yml", "*CMakeLists.txt", "*.cmake", ".ci/*")
COMMENT_OR_STRING = re.compile(
    r'//[^\n]*|/\*.*?\*/|"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'', re.S)
WORD = re.compile(r"[A-Za-z_]\w*")
FENCE = re.compile(r"^```.*?^```", re.M | re.S)
C_PATH = r"[\w./-]+\.(?:c|h|cu)"
PAIR = re.compile(
    rf"`(?P<sym>[A-Za-z_]\w*)(?:\(\))?`\**\s+(?:\(|in\s+|of\s+)`(?P<path>{C_PATH})`"
    rf"|`(?P<path2>{C_PATH})`'s\s+`(?P<sym2>[A-Za-z_]\w*)(?:\(\))?`")
SPAN = re.compile(r"`([^`\n]+)`")
NAME = re.compile(r"[A-Za-z_][\w*]*(?:(?:\.|->)[A-Za-z_][\w*]*)*")
BRACES = re.compile(r"_\{([\w,]+)\}")
NOT_A_SUFFIX = {"c", "h", "cu", "py", "sh", "md", "txt", "yaml", "yml", "json", "tsv",
                "toml", "ckpt", "npy", "npz", "gz", "safetensors", "cmake", "so", "a", "log"}
ISSUE = re.compile(r"\bissues?\s*#?\d+", re.I)
ISSUES_ALLOWED = {"CHANGELOG.md"}   # history
# Names of other projects that read as ours, each with what it is.
FOREIGN = {
    "kube_job_*": "kube-state-metrics' series (docs/operations.md)",
    "file_version": "TensorBoard's Event proto field, written by number (docs/data.md)",
}


def docs():
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def tracked(*patterns):
    """Tracked files and new ones git does not ignore (a header being added
    is code already), as paths from the root."""
    out = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard",
                          "--", *patterns], cwd=ROOT, capture_output=True, text=True,
                         check=True).stdout
    return sorted({p for p in out.splitlines() if (ROOT / p).is_file()})


_CODE = {}


def code(path):
    """(identifiers of a C file's code, words of its string literals)."""
    if path not in _CODE:
        strings = set()

        def blank(m):
            s = m.group(0)
            if s[0] == '"':
                strings.update(WORD.findall(s))
            return " "
        text = COMMENT_OR_STRING.sub(blank, (ROOT / path).read_text(errors="replace"))
        _CODE[path] = (set(WORD.findall(text)), strings)
    return _CODE[path]


def api_prefixes(c_files):
    """The first words of the functions declared in the headers of the
    libraries and programs, each the first word of three or more."""
    count = {}
    for p in c_files:
        if not p.endswith(".h") or p.startswith(("tests/", "bench/")):
            continue
        text = COMMENT_OR_STRING.sub(" ", (ROOT / p).read_text(errors="replace"))
        for fn in set(re.findall(r"\b([a-z][a-z0-9]*_\w+)\s*\(", text)):
            first = fn.split("_", 1)[0]
            count[first] = count.get(first, 0) + 1
    return {w for w, n in count.items() if n >= 3}


def doc_lines(md):
    """A doc's text, its fenced blocks blanked (the line numbers kept)."""
    text = FENCE.sub(lambda m: "\n" * m.group(0).count("\n"), md.read_text())
    return text


def line_of(text, pos):
    return text.count("\n", 0, pos) + 1


def resolve(path, c_files):
    """The C file a doc's path names: from the root, or by its file name
    alone when exactly one file has it. None if none or several."""
    if path in c_files:
        return path
    if "/" in path:
        return None
    hits = [p for p in c_files if p.rsplit("/", 1)[-1] == path]
    return hits[0] if len(hits) == 1 else None


def span_names(span):
    """The C names a code span claims: [] unless the span is a name (or
    names joined by . or ->), after dropping () and {labels} and expanding
    _{x,y}."""
    s = span.strip()
    if s.endswith("()"):
        s = s[:-2]
    m = BRACES.search(s)
    variants = [s[:m.start()] + "_" + alt + s[m.end():] for alt in m.group(1).split(",")] \
        if m else [s]
    out = []
    for v in variants:
        v = re.sub(r"\{[^{}]*\}$", "", v)              # a metric's labels
        if not NAME.fullmatch(v):
            return []
        parts = re.split(r"\.|->", v)
        if len(parts) > 1 and parts[-1].lower() in NOT_A_SUFFIX:
            return []                                   # a file name
        out += parts
    return out


def test_doc_pairs_name_real_symbols():
    c_files = tracked(*C_FILES)
    bad = []
    for md in docs():
        text = doc_lines(md)
        for m in PAIR.finditer(text):
            sym, path = m.group("sym") or m.group("sym2"), m.group("path") or m.group("path2")
            if re.search(r"[a-z][A-Z]", sym):
                continue                                # camelCase: a field of the API
            where = f"{md.relative_to(ROOT)}:{line_of(text, m.start())}"
            real = resolve(path, c_files)
            if real is None:
                bad.append(f"{where}: `{path}` is no file (or names several): "
                           f"looked for it as a path from the root and as a file name")
            elif sym not in code(real)[0]:
                bad.append(f"{where}: `{sym}` is not an identifier of {real}'s code"
                           f" (found in: {sorted(p for p in c_files if sym in code(p)[0])[:4]})")
    assert not bad, "\n".join(bad)


def name_pools(c_files):
    """(ours, theirs): the names a doc may give as C names of ours (the C
    sources' identifiers and string words, tracked files' and folders' names,
    CMake targets) and, besides those, the words of the scripts, tests, JSON
    and YAML (a Python test, a Keras or Prometheus key), with CMake's
    generated names (layering_${lib}_no_kube) as patterns."""
    ours = set()
    for p in c_files:
        ids, strings = code(p)
        ours |= ids | strings
    for p in tracked("*"):
        ours |= set(re.split(r"[/.]", p))
    theirs, patterns = set(), []
    for p in tracked(*SCRIPTS, "*.json"):
        text = (ROOT / p).read_text(errors="replace")
        theirs |= set(WORD.findall(text))
        if "CMake" in p or p.endswith(".cmake"):
            ours |= set(re.findall(r"add_(?:library|executable)\(\s*(\w+)", text))
            patterns += [re.sub(r"\\\$\\\{\w+\\\}", r"\\w+", re.escape(w))
                         for w in re.findall(r"\b\w*\$\{\w+\}\w*", text)]
    return ours, theirs, [re.compile(p) for p in set(patterns)]


def test_doc_names_are_in_the_code():
    """(b) above; and a lone lower-case snake_case name of no API prefix
    (`train_backup_save` spelled `backup_save`) must at least be a word of
    the tree: the C sources, scripts, tests, JSON or YAML."""
    c_files = tracked(*C_FILES)
    prefixes = api_prefixes(c_files)
    ours, theirs, patterns = name_pools(c_files)
    bad, foreign_seen = [], set()
    for md in docs():
        text = doc_lines(md)
        for m in SPAN.finditer(text):
            for name in span_names(m.group(1)):
                if name in FOREIGN:
                    foreign_seen.add(name)
                    continue
                if "_" not in name.strip("_*"):
                    continue
                if name.split("_", 1)[0].lower() in prefixes:
                    loose = name.isupper()              # or an environment variable
                elif name.islower():
                    loose = True                        # or a Python test, a Keras key
                else:
                    continue                            # FLT_MIN, KERAS_HOME: not ours
                pool = ours | theirs if loose else ours
                where = ("C sources, CMake, file names, scripts, tests, JSON, YAML" if loose
                         else "C sources (identifiers and strings), CMake targets, file names")
                if "*" in name:
                    pat = re.compile(name.replace("*", r"\w*"))
                    if any(pat.fullmatch(n) for n in pool):
                        continue
                elif name in pool or (loose and any(p.fullmatch(name) for p in patterns)):
                    continue
                bad.append(f"{md.relative_to(ROOT)}:{line_of(text, m.start())}: `{name}` "
                           f"(in `{m.group(1)}`) is not in the tree; looked in: {where} "
                           f"(git ls-files {' '.join(C_FILES)} for the C)")
    assert not bad, "\n".join(bad)
    assert foreign_seen == set(FOREIGN), f"FOREIGN lists names no doc has: {set(FOREIGN) - foreign_seen}"


def test_docs_give_reasons_not_issue_numbers():
    bad = []
    for rel in tracked("*.md"):
        if rel in ISSUES_ALLOWED:
            continue
        text = (ROOT / rel).read_text()
        bad += [f"{rel}:{line_of(text, m.start())}: {m.group(0)!r}" for m in ISSUE.finditer(text)]
    assert not bad, ("say the reason, not the issue that asked for it "
                     "(issue numbers are history: CHANGELOG.md):\n" + "\n".join(bad))


def test_the_doc_name_readers_see_what_they_should():
    assert span_names("kube_client_{get,list}") == ["kube_client_get", "kube_client_list"]
    assert span_names("ctrain_build_info{version}") == ["ctrain_build_info"]
    assert span_names("recon_input.progress_interval_s") == ["recon_input",
                                                             "progress_interval_s"]
    assert span_names("ring_create()") == ["ring_create"]
    for not_a_name in ("--unit", "CTRAIN_TEST_USE_KUBECONFIG=1", "kubectl apply -k x",
                       "controller/ctl_pass.c", "recon_kueue.c", "ctrain_leader 0",
                       "increase(ctrain_job_restarts_total[1h])"):
        assert span_names(not_a_name) == [], not_a_name
    text = "`a_b` (`x/y.c`) and `c_d` in\n`z.h`, `q.c`'s `e_f`, `g` (`--flag`)"
    assert [(m.group("sym") or m.group("sym2"), m.group("path") or m.group("path2"))
            for m in PAIR.finditer(text)] == [("a_b", "x/y.c"), ("c_d", "z.h"), ("e_f", "q.c")]
    assert ISSUE.search("(issue 27)") and ISSUE.search("issues 3 and 4")
    assert not ISSUE.search("GitHub issues") and not ISSUE.search("tissue 3x")


RAW_LOCK = re.compile(r"\bpthread_(?:mutex_(?:lock|unlock)|cond_(?:wait|timedwait|signal|broadcast))\(")
PRODUCT_DIRS = ("common/", "kube/", "objstore/", "controller/", "worker/")


def test_locks_go_through_the_checked_wrappers():
    """Every lock, wait and signal in the product goes through ctrain/thread.h
    (a failed call aborts naming it, as libuv's uv_mutex_lock does); only
    common/thread.c calls pthread's own."""
    bad = []
    for rel in tracked("*.c", "*.h", "*.cu"):
        if not rel.startswith(PRODUCT_DIRS) or rel == "common/thread.c":
            continue
        text = COMMENT_OR_STRING.sub(" ", (ROOT / rel).read_text(errors="replace"))
        bad += [f"{rel}:{line_of(text, m.start())}: {m.group(0)}" for m in RAW_LOCK.finditer(text)]
    assert not bad, "use ctrain_mutex_lock & co. (ctrain/thread.h):\n" + "\n".join(bad)
