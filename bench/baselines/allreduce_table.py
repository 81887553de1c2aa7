#!/usr/bin/env python3
"""bench/baselines/allreduce_table.py - the table of bench/allreduce.sh.

Reads the rounds' outputs (one file per round): bench_allreduce's tables
after an "IMPL <label>" line, and the baselines' lines
"RESULT <impl> <world> <bytes> <mean_us> <median_us> <busbw_GBps>". Prints,
per rank count and size, the median over the rounds of busbw and of the
median latency of every implementation, and ctrain's ratios to the others.
"""
import re
import statistics
import sys

HDR = re.compile(r"# ring all-reduce, (\d+) ranks")


def parse(path, acc, cpu):
    label, world = None, None
    round_cpu = {}
    with open(path) as f:
        for line in f:
            w = line.split()
            if line.startswith("IMPL "):
                label, world = w[1], None
            elif HDR.match(line):
                world = int(HDR.match(line).group(1))
            elif w and w[0] == "CPU":
                key = (w[1], int(w[2]), int(w[3]))
                round_cpu[key] = round_cpu.get(key, 0.0) + float(w[4])
            elif w and w[0] == "RESULT":
                key = (w[1], int(w[2]), int(w[3]))
                acc.setdefault(key, []).append((float(w[6]), float(w[5])))
            elif label and world and len(w) in (6, 7) and w[0].isdigit():
                # bytes time_us median_us busbw memcpy ratio [cpu_us]
                key = (label, world, int(w[0]))
                acc.setdefault(key, []).append((float(w[3]), float(w[2])))
                if len(w) == 7:
                    round_cpu[key] = float(w[6])
    for key, v in round_cpu.items():
        cpu.setdefault(key, []).append(v)


def med(acc, key, i):
    v = acc.get(key)
    return statistics.median(x[i] for x in v) if v else None


def fmt(x, spec):
    return format(x, spec) if x is not None else "-"


def ratio(a, b):
    return a / b if a is not None and b else None


def table(title, impls, others, worlds, sizes, value, spec):
    """One table: per rank count and size, value((impl, world, size)) of
    every implementation, then ctrain's ratio to each of the others."""
    print(f"\n# {title}")
    cols = list(impls) + [f"ctrain/{o}" for o in others]
    print(f"{'ranks':>5} {'bytes':>10} " + " ".join(f"{c:>13}" for c in cols))
    for w in worlds:
        for s in sizes:
            v = {i: value((i, w, s)) for i in impls}
            vals = [fmt(v[i], spec) for i in impls]
            vals += [fmt(ratio(v["ctrain"], v[o]), ".2f") for o in others]
            print(f"{w:>5} {s:>10} " + " ".join(f"{x:>13}" for x in vals))


def main():
    acc, cpu = {}, {}
    for path in sys.argv[1:]:
        parse(path, acc, cpu)
    impls = [i for i in ("ctrain", "gloo", "mpi", "before") if any(k[0] == i for k in acc)]
    others = [i for i in impls if i != "ctrain"]
    rounds = max((len(v) for v in acc.values()), default=0)
    worlds = sorted({k[1] for k in acc})
    sizes = sorted({k[2] for k in acc})
    table(f"all-reduce busbw GB/s (median of {rounds} rounds; nccl-tests formula)",
          impls, others, worlds, sizes, lambda k: med(acc, k, 0), ".3f")
    table("all-reduce latency us (median of the rounds' median repetition)",
          impls, others, worlds, [s for s in sizes if s <= (256 << 10)],
          lambda k: med(acc, k, 1), ".1f")
    table("CPU us per all-reduce, all ranks together (median of the rounds)",
          impls, others, worlds, sizes,
          lambda k: statistics.median(cpu[k]) if k in cpu else None, ".0f")
    print("\n(busbw ratio > 1: ctrain faster; latency and CPU ratios < 1: ctrain faster/cheaper)")


if __name__ == "__main__":
    main()
