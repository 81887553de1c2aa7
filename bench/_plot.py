"""bench/_plot.py - what the plot_*.py benches share: their common flags (--build first;
--plot, --note, --save and --from last), the figure's footnote (date, cores, load at the
start), the bench binary looked up in the build dir, and the figure written with its note.
A plot bench started as `python3 bench/plot_x.py` has bench/ on sys.path and imports it
by name (`import _plot`)."""
import argparse
import datetime
import os
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]


def default_note():
    """The footnote unless --note says otherwise: when, how many cores, how loaded."""
    load = pathlib.Path("/proc/loadavg").read_text().split()[0]
    return (f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC, "
            f"{os.cpu_count()} cores, load {load} at the start")


def parser(doc):
    """The bench's parser, its description the first paragraph of `doc`, with --build."""
    ap = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    ap.add_argument("--build", default=os.environ.get("CTRAIN_BUILD_DIR", str(ROOT / "build")),
                    help="the build dir (default $CTRAIN_BUILD_DIR, else build)")
    return ap


def parse(ap, png, save_help, from_help):
    """Adds --plot (default docs/img/<png>), --note, --save and --from, and parses; the
    note is default_note() unless given (--note '' for none)."""
    ap.add_argument("--plot", default=str(ROOT / "docs/img" / png),
                    help=f"the PNG (default docs/img/{png}), none: no plot")
    ap.add_argument("--note", help="the figure's footnote (default: date, cores, load)")
    ap.add_argument("--save", help=save_help)
    ap.add_argument("--from", dest="src", help=from_help)
    a = ap.parse_args()
    if a.note is None:
        a.note = default_note()
    return a


def bench_exe(build, name):
    """<build>/bench/<name>, or exit saying how to build it."""
    exe = pathlib.Path(build) / "bench" / name
    if not exe.exists():
        sys.exit(f"no {exe}: build it (ninja -C {build} {name}), or --build")
    return exe


def pyplot(path):
    """matplotlib.pyplot on the Agg backend, or None (said, naming `path`) without it."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print(f"no plot: matplotlib is not importable (pip install matplotlib) -> {path}")
        return None
    return plt


def save_figure(fig, path, note):
    """Writes `fig` to `path` (its folder made) with `note` at its bottom right."""
    if note:
        fig.text(0.99, 0.01, note, ha="right", va="bottom", fontsize=7, color="dimgray")
    fig.tight_layout(rect=(0, 0.03, 1, 1))
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    print(f"plot: {path}")
