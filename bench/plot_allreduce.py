#!/usr/bin/env python3
"""bench/plot_allreduce.py - runs build/bench/bench_allreduce (ctrain's ring all-reduce on
loopback, 2 and 4 ranks, 4 KiB .. 256 MiB, beside memcpy of the same sizes in the same run),
prints its tables as they come and plots busbw (GB/s) against the message size (log x): one
line per rank count, memcpy's bandwidth as the reference line (log y: memcpy of the small
sizes runs from the CPU caches). Default docs/img/allreduce.png.

  python3 bench/plot_allreduce.py [--build DIR] [--max-mib M] [--worlds 2,4]
                                  [--plot FILE|none] [--note TEXT] [--save FILE] [--from FILE]

--from FILE plots a saved bench_allreduce output (`--save FILE` keeps this run's) without
running it. The headline is the bench's own: busbw/memcpy at the largest size, per rank count.
bench/allreduce.sh is the same bench beside Gloo and Open MPI (they are not plotted here)."""
import pathlib
import re
import subprocess
import sys

import _plot
HEAD = re.compile(r"^# ring all-reduce, (\d+) ranks")
COLS = ("bytes", "time_us", "median_us", "busbw", "memcpy", "ratio", "cpu_us")


def parse(text):
    """{ranks: [row dict, ...]} from bench_allreduce's tables (the loopback form)."""
    tables, cur = {}, None
    for line in text.splitlines():
        m = HEAD.match(line)
        if m:
            cur = tables.setdefault(int(m.group(1)), [])
            continue
        f = line.split()
        if cur is not None and len(f) == len(COLS) and f[0].isdigit():
            cur.append(dict(zip(COLS, (float(x) for x in f))))
    return {w: rows for w, rows in tables.items() if rows}


def size_label(b):
    b = int(b)
    for unit, k in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if b >= 1 << k and b % (1 << k) == 0:
            return f"{b >> k} {unit}"
    return f"{b} B"


def headline(tables):
    out = []
    for w, rows in sorted(tables.items()):
        r = rows[-1]
        out.append(f"{w} ranks at {size_label(r['bytes'])}: busbw {r['busbw']:.2f} GB/s, memcpy "
                   f"{r['memcpy']:.2f} GB/s, ratio {r['busbw'] / r['memcpy']:.3f}")
    return out


def plot(tables, path, note):
    plt = _plot.pyplot(path)
    if not plt:
        return
    fig, ax = plt.subplots(figsize=(7, 3.5))
    for w, rows in sorted(tables.items()):
        last = rows[-1]
        ax.plot([r["bytes"] for r in rows], [r["busbw"] for r in rows], marker="o", ms=3,
                label=f"ctrain ring, {w} ranks ({last['busbw'] / last['memcpy']:.2f}x memcpy "
                      f"at {size_label(last['bytes'])})")
    # memcpy is measured once per table; the reference is their mean per size.
    sizes = sorted({r["bytes"] for rows in tables.values() for r in rows})
    mc = [sum(r["memcpy"] for rows in tables.values() for r in rows if r["bytes"] == b)
          / sum(1 for rows in tables.values() for r in rows if r["bytes"] == b) for b in sizes]
    ax.plot(sizes, mc, color="gray", ls="--", label="memcpy, same sizes (same run)")
    ax.set_xscale("log", base=2)
    ax.set_xticks(sizes)
    ax.set_xticklabels([size_label(b) if i % 2 == 0 else "" for i, b in enumerate(sizes)],
                       fontsize=8)
    ax.set_xlabel("message size (float32, sum)")
    # log y: memcpy of the small sizes runs from cache, 30-100x the ring's busbw
    ax.set_yscale("log")
    ax.set_ylabel("busbw, GB/s (log)")
    ax.set_title("ring all-reduce on loopback TCP vs memcpy (bench_allreduce)", fontsize=10)
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    _plot.save_figure(fig, path, note)


def main():
    ap = _plot.parser(__doc__)
    ap.add_argument("--max-mib", type=int, default=256, help="largest size, MiB (default 256)")
    ap.add_argument("--worlds", default="2,4", help="rank counts (default 2,4)")
    a = _plot.parse(ap, "allreduce.png", save_help="write bench_allreduce's output here too",
                    from_help="plot this saved output instead of running")
    if a.src:
        text = pathlib.Path(a.src).read_text()
    else:
        exe = _plot.bench_exe(a.build, "bench_allreduce")
        cmd = [str(exe), str(a.max_mib), a.worlds]
        print("$ " + " ".join(cmd), flush=True)
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
        lines = []
        for line in p.stdout:
            print(line, end="", flush=True)
            lines.append(line)
        if p.wait():
            sys.exit(f"bench_allreduce failed: rc {p.returncode}")
        text = "".join(lines)
        if a.save:
            pathlib.Path(a.save).write_text(text)
    tables = parse(text)
    if not tables:
        sys.exit("no bench_allreduce table in the output")
    for h in headline(tables):
        print("headline: " + h)
    if a.plot != "none":
        plot(tables, pathlib.Path(a.plot), a.note)


if __name__ == "__main__":
    main()
