#!/usr/bin/env python3
"""bench/plot_checkpoint.py - the backup save (ckpt_save of a ~100 MB Adam model: SHA-256 tree,
temp file, fsync, rename, directory fsync) against write()+fsync of the same bytes, run by run:
runs build/bench/bench_checkpoint DIR MiB REPS (the documented bench: REPS rounds, each one
plain write+fsync then one save, same directory; it prints their medians and minima) --runs
times, prints each run and plots per run both medians (the minima faint) and their ratio.
Default docs/img/checkpoint.png.

  python3 bench/plot_checkpoint.py [--build DIR] [--dir DIR] [--mib 100] [--runs 6] [--reps 9]
                                   [--plot FILE|none] [--note TEXT] [--save FILE] [--from FILE]

A point is one process's median, not one save: bench_checkpoint prints single rounds only
with --uri (BENCH_SAMPLES=1), and a process of one rep times a cold first save (a new backup
dir, first-touch pages), about 30% slower than the later ones here. The headline is the median over the
runs of save/plain (medians), as the table in docs/benchmarks.md counts it. --save FILE keeps
the runs as JSON, --from FILE plots such a file without running."""
import json
import pathlib
import re
import statistics
import subprocess
import sys
import tempfile

import _plot
MEDIAN = re.compile(r"^median of \d+: ckpt_save ([0-9.]+) s .*write\+fsync ([0-9.]+) s", re.M)
MINIMA = re.compile(r"^min of \d+: ckpt_save ([0-9.]+) s, write\+fsync ([0-9.]+) s", re.M)
SIZE = re.compile(r"([0-9.]+) MiB file")


def one_run(exe, d, mib, reps):
    """{save, plain, save_min, plain_min (s), file_mib} of one bench_checkpoint run."""
    out = subprocess.run([str(exe), str(d), str(mib), str(reps)], capture_output=True,
                         text=True)
    if out.returncode:
        sys.exit(f"bench_checkpoint failed: rc {out.returncode}\n{out.stdout}{out.stderr}")
    med, mn, size = MEDIAN.search(out.stdout), MINIMA.search(out.stdout), SIZE.search(out.stdout)
    if not med or not mn:
        sys.exit(f"bench_checkpoint: no times in\n{out.stdout}")
    return {"save": float(med.group(1)), "plain": float(med.group(2)),
            "save_min": float(mn.group(1)), "plain_min": float(mn.group(2)),
            "file_mib": float(size.group(1)) if size else float(mib)}


def summary(res):
    runs = res["runs"]
    ratios = [r["save"] / r["plain"] for r in runs]
    return {"runs": len(runs), "ratios": ratios, "median_ratio": statistics.median(ratios),
            "min_ratios": [r["save_min"] / r["plain_min"] for r in runs],
            "median_save": statistics.median(r["save"] for r in runs),
            "median_plain": statistics.median(r["plain"] for r in runs)}


def plot(res, path, note):
    plt = _plot.pyplot(path)
    if not plt:
        return
    s, runs, reps = summary(res), res["runs"], res["reps"]
    xs = list(range(1, s["runs"] + 1))
    fig, (ax, ax2) = plt.subplots(2, 1, figsize=(7, 4.8), sharex=True,
                                  gridspec_kw={"height_ratios": [3, 2]})
    ax.plot(xs, [r["save"] for r in runs], marker="o", ms=4, color="C0",
            label=f"backup save, ckpt_save: median of {reps}")
    ax.plot(xs, [r["save_min"] for r in runs], marker="o", ms=3, color="C0", alpha=0.35,
            lw=0.8, label="its minimum")
    ax.plot(xs, [r["plain"] for r in runs], marker="s", ms=4, color="gray", ls="--",
            label=f"write()+fsync, same bytes: median of {reps}")
    ax.plot(xs, [r["plain_min"] for r in runs], marker="s", ms=3, color="gray", ls="--",
            alpha=0.35, lw=0.8, label="its minimum")
    ax.set_ylabel("seconds")
    ax.set_ylim(bottom=0)
    ax.set_title(f"backup save of a {runs[0]['file_mib']:.0f} MiB checkpoint vs write+fsync "
                 "(bench_checkpoint)", fontsize=10)
    ax.legend(fontsize=7, ncol=2, loc="lower center")
    ax.grid(alpha=0.3)
    ax2.plot(xs, s["ratios"], marker="o", ms=4, color="C1", label="save / write+fsync, medians")
    ax2.plot(xs, s["min_ratios"], marker="o", ms=3, color="C1", alpha=0.35, lw=0.8,
             label="minima")
    ax2.axhline(1.0, color="gray", lw=0.8)
    ax2.axhline(s["median_ratio"], color="C1", ls=":", lw=1,
                label=f"median over the runs {s['median_ratio']:.2f}x")
    ax2.set_ylabel("ratio")
    ax2.set_xlabel(f"run (one bench_checkpoint process, {reps} rounds alternating plain, save)")
    ax2.set_xticks(xs)
    ax2.set_ylim(bottom=0)
    ax2.legend(fontsize=7, ncol=3, loc="lower center")
    ax2.grid(alpha=0.3)
    _plot.save_figure(fig, path, note)


def main():
    ap = _plot.parser(__doc__)
    ap.add_argument("--dir", help="where to write (default: a temporary dir in the build dir)")
    ap.add_argument("--mib", type=int, default=100, help="model size, MiB (default 100)")
    ap.add_argument("--runs", type=int, default=6, help="bench_checkpoint runs (default 6)")
    ap.add_argument("--reps", type=int, default=9, help="rounds per run (default 9)")
    a = _plot.parse(ap, "checkpoint.png", save_help="write the runs here (JSON)",
                    from_help="plot this --save file instead of running")
    if a.src:
        res = json.loads(pathlib.Path(a.src).read_text())
    else:
        exe = _plot.bench_exe(a.build, "bench_checkpoint")
        res = {"mib": a.mib, "reps": a.reps, "runs": []}
        with tempfile.TemporaryDirectory(dir=a.dir or a.build, prefix="plot_checkpoint.") as d:
            for k in range(a.runs):
                r = one_run(exe, d, a.mib, a.reps)
                res["runs"].append(r)
                print(f"run {k + 1}/{a.runs}: median of {a.reps}: ckpt_save {r['save']:.3f} s, "
                      f"write+fsync {r['plain']:.3f} s, ratio {r['save'] / r['plain']:.2f} "
                      f"(minima {r['save_min'] / r['plain_min']:.2f})", flush=True)
        if a.save:
            pathlib.Path(a.save).write_text(json.dumps(res, indent=1))
    if not res["runs"]:
        sys.exit("no runs")
    s = summary(res)
    print(f"headline: {s['runs']} runs of {res['reps']} rounds, ckpt_save / write+fsync "
          f"(medians): median over the runs {s['median_ratio']:.2f} (range "
          f"{min(s['ratios']):.2f}-{max(s['ratios']):.2f}; {s['median_save']:.3f} vs "
          f"{s['median_plain']:.3f} s); of the minima {statistics.median(s['min_ratios']):.2f}")
    if a.plot != "none":
        plot(res, pathlib.Path(a.plot), a.note)


if __name__ == "__main__":
    main()
