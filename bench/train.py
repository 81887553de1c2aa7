#!/usr/bin/env python3
"""bench/train: training throughput and time to 0.87 test accuracy, ctrain
against TensorFlow and against the GEMM-bound rate of the model.

Model: examples/fashion-mnist-model.json (Flatten -> Dense 128 relu -> Dense 10),
Adam, per-replica batch 32, Fashion-MNIST from Debian's dataset-fashion-mnist.
Runs in one go, on this machine, so the figures share its noise:
  1-worker        ctrain, 1 worker (batch 32, lr 0.001)
  2-workers       ctrain, 2 workers x batch 32 on loopback (TCP ring), lr scaled
                  by replicas (--scale-lr)
  1-worker-cpu2   ctrain, 1 worker x cpu:2 (two CPU replicas on two threads; with --pin
                  the process has two CPUs, as a pod with limits.cpu 2), lr likewise
  2x-1-worker-alone  two 1-worker jobs at once, sharing nothing but the machine (each on
                  a CPU of its own with --pin), their samples/s summed: the most 2 workers
                  could do here if their collectives cost nothing (the machine's ceiling;
                  the ratios line says how near 2-workers comes)
  tf-1-worker     TensorFlow 2.21 + tf-keras, the same model, optimizer, batch and
                  data (bench/baselines/tf_train.py)
  tf-2-workers    the same with MultiWorkerMirroredStrategy, 2 workers on loopback
  before-*        --compare-build: another build of ctrain-worker (e.g. main's)
                  for 1 and 2 workers, interleaved with ours in every round
and prints samples/s of each (and per replica), the ratios (ctrain/TF, 2 workers
/1 worker, ours/--compare-build), and for each run the wall time (from process
start: TensorFlow's import and rendezvous included) until the end of the first
epoch whose test accuracy reached 0.87. Samples/s are the training epochs'
(the test-set evaluation after each epoch is outside the timing, in both).

The sgemm bound: bench/baselines/sgemm_bound.c, built with cc against the
OpenBLAS the worker links and run on one thread with the kernels the worker
runs (OPENBLAS_CORETYPE, from the worker's log), times the step's GEMMs at the
model's shapes (batch 32) in thread CPU time; the bound is the rate of a step
that did nothing but them, in samples per CPU-second, against which ctrain's
1-worker samples per CPU-second (after the first epoch) are compared: both
hold on a machine shared with other work, where samples/s do not.

TensorFlow runs from a venv made once in ~/.cache/ctrain/bench-tf-venv-2.21.0
from tools/image/tf/requirements.txt (pinned, hashed): from the wheels of
tools/image/build.sh tf (~/.cache/ctrain/images/wheels-*) when they are there,
else from PyPI (about 250 MB). --no-tf skips it.

  python3 bench/train.py [--epochs 5] [--tf-epochs N] [--rounds 1] [--build build]
                         [--compare-build /work/main/build] [--no-tf] [--json]
                         [--no-mlp | --no-cnn] [--cnn-epochs 2] [--cnn-samples 8192] [--pin]

--pin puts every worker process, ctrain's and TensorFlow's, on a CPU of its own
(worker r on CPU r, sched_setaffinity): 1 worker has one CPU, 2 workers have two.
That holds the CPUs a worker has fixed, as pods with resources.limits.cpu 1
would, so 2 workers / 1 worker measures what the second worker and the
all-reduce cost and give, rather than how one worker uses the machine's spare
cores (without --pin, 1 worker already runs its large GEMMs on both of this
machine's cores).

The CNN rows (--no-cnn skips them, --no-mlp runs only them): the CNN of
examples/fashion-mnist-cnn.yaml (Conv2D 32 -> BatchNorm -> MaxPool -> Conv2D 64
-> BatchNorm -> MaxPool -> Flatten -> Dropout -> Dense 128 -> Dense 10) from
tests/data/keras/cnn-tf_keras.json, the same model as tf-keras writes it (tf-keras
cannot read the example's Keras 3 JSON): ctrain-worker reads the file and
TensorFlow builds it with tf.keras.models.model_from_json, Adam, batch 32 per
replica, lr 0.001 (scaled by replicas, as above), on the first --cnn-samples
(8192) training images and the first 2000 test images (IDX files written to the
temporary directory, read by both), --cnn-epochs (2) epochs:
  cnn-1-worker, cnn-2-workers        ctrain (2 workers: --overlap auto, the default)
  cnn-1-worker-cpu2x16               ctrain, 1 worker x cpu:2 at batch 16 a replica: the
                                     same global batch (32) as TF's 1 worker, on both
                                     cores through local replicas (synchronized batch
                                     normalization) rather than OpenBLAS's threads
                                     (with --pin: on two CPUs, as the cpu:2 row)
  cnn-2x-1-worker-alone              two 1-worker jobs at once (as 2x-1-worker-alone)
  cnn-2-workers-no-overlap           ctrain, 2 workers with --no-overlap: the gradients
                                     all-reduced after the backward pass, not during it
                                     (docs/worker.md, "Overlapping the all-reduce")
  cnn-tf-1-worker, cnn-tf-2-workers  TensorFlow, 1 process and MWMS 2 processes
Their samples/s are those of the epochs after the first (TensorFlow traces and
compiles its step in the first); each ctrain row runs just before its TensorFlow
row, in every round (--rounds: medians). The conv efficiency: bench/bench_conv.c (built
in --build, `cmake --build BUILD --target bench_conv`) runs the worker's own
Conv2D forward and backward (dmodel_cnn_fwd/bwd) on a training step's
activations, interleaved with the GEMMs those layers issue run alone (same
shapes, buffers and OpenBLAS threads: the sgemm bound on their FLOPs), wall
time, medians over ~4 s of rounds: efficiency = GEMM-alone time / conv time,
per layer and for all conv layers, and their share of the whole step; then the
same on one OpenBLAS thread in CPU time (bench_conv --cpu-time), which a machine
loaded by other work leaves nearly intact.

  python3 bench/train.py --no-mlp --build build   # the CNN rows alone (~4 min)

cpu:2 steps its two replicas on two threads of one process, one OpenBLAS thread
each (docs/worker.md, "CPU threads"). With several rounds each figure is the
median over the rounds; the load average is printed before and after.
"""
import argparse
import json
import os
import pathlib
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time

from _paths import ROOT
from workerlib import free_ports
DATA = pathlib.Path("/usr/share/datasets/fashion-mnist")
TARGET = 0.87
CNN_MODEL = ROOT / "tests/data/keras/cnn-tf_keras.json"
MLP_MODEL = ROOT / "examples/fashion-mnist-model.json"


TF_VERSION = "2.21.0"
TF_VENV = pathlib.Path.home() / ".cache/ctrain" / f"bench-tf-venv-{TF_VERSION}"
TF_REQS = ROOT / "tools/image/tf/requirements.txt"


def tf_venv():
    """The venv's python, made on first use (Python 3.11: the pinned wheels' ABI)."""
    py, done = TF_VENV / "bin/python", TF_VENV / ".ctrain-complete"
    if done.exists():
        return py
    base = sys.executable if sys.version_info[:2] == (3, 11) else "python3.11"
    wheels = sorted(pathlib.Path.home().glob(".cache/ctrain/images/wheels-*/"
                                             f"tensorflow_cpu-{TF_VERSION}-*.whl"))
    src = ["--no-index", "--find-links", str(wheels[-1].parent)] if wheels else []
    print(f"bench/train: installing TensorFlow {TF_VERSION} into {TF_VENV} "
          f"({'from ' + str(wheels[-1].parent) if wheels else 'from PyPI'})", file=sys.stderr)
    shutil.rmtree(TF_VENV, ignore_errors=True)
    try:
        subprocess.run([base, "-m", "venv", str(TF_VENV)], check=True)
        subprocess.run([str(TF_VENV / "bin/pip"), "install", "-q", "--no-deps",
                        "--require-hashes", *src, "-r", str(TF_REQS)], check=True)
    except (OSError, subprocess.CalledProcessError):
        shutil.rmtree(TF_VENV, ignore_errors=True)
        raise
    done.touch()
    return py


def worker_blas_core(worker):
    """The OpenBLAS kernels ctrain-worker runs here (its log; docs/worker.md, "CPU
    threads": it asks for the CPU's widest where OpenBLAS took it for an older
    CPU), so that the sgemm bound is timed on the same kernels."""
    p = subprocess.run([str(worker), "evaluate", "--model", "/nonexistent-model", "--test-data",
                        "/nonexistent-data"], capture_output=True, text=True)
    m = re.search(r"OpenBLAS: (\S+) kernels", p.stderr)
    return m.group(1) if m else None


def sgemm_bound(tmp, core=None):
    """bench/baselines/sgemm_bound.c's JSON for the model's shapes at batch 32, on
    OpenBLAS's `core` kernels (OPENBLAS_CORETYPE) when given."""
    model = json.load(open(ROOT / "examples/fashion-mnist-model.json"))
    dims = [1]
    for d in model["input_shape"]:
        dims[0] *= d
    dims += [l["units"] for l in model["layers"] if l["type"] == "Dense"]
    exe = f"{tmp}/sgemm_bound"
    flags = subprocess.run(["pkg-config", "--cflags", "--libs", "openblas"], check=True,
                           capture_output=True, text=True).stdout.split()
    subprocess.run(["cc", "-O2", "-o", exe, str(ROOT / "bench/baselines/sgemm_bound.c"), *flags],
                   check=True)
    env = dict(os.environ, OPENBLAS_CORETYPE=core) if core else None
    out = subprocess.run([exe, "32", *map(str, dims)], check=True, capture_output=True, text=True,
                         env=env)
    return json.loads(out.stdout)


def idx_subset(src, dst, n):
    """The first n samples of IDX file src (gzip), written gzip'd to dst."""
    import gzip
    with gzip.open(src) as f:
        raw = f.read()
    nd = raw[3]
    dims = [int.from_bytes(raw[4 + 4 * i:8 + 4 * i], "big") for i in range(nd)]
    per = 1
    for d in dims[1:]:
        per *= d
    n = min(n, dims[0])
    head = raw[:4] + n.to_bytes(4, "big") + raw[8:4 + 4 * nd]
    with gzip.open(dst, "wb", compresslevel=1) as f:
        f.write(head + raw[4 + 4 * nd:4 + 4 * nd + n * per])


def cnn_data(tmp, n_train, n_test):
    """A directory with the first n_train / n_test Fashion-MNIST samples."""
    d = pathlib.Path(tmp) / "cnn-data"
    d.mkdir(exist_ok=True)
    for split, n in (("train", n_train), ("t10k", n_test)):
        for kind in ("images-idx3", "labels-idx1"):
            name = f"{split}-{kind}-ubyte.gz"
            idx_subset(DATA / name, d / name, n)
    return d


def conv_bound(build, model, one_core=False):
    """bench/bench_conv.c's JSON for the model at batch 32 (built in the build
    directory when it is not there), or None with the reason printed; one_core:
    OpenBLAS on one thread, timed in CPU time."""
    exe = pathlib.Path(build) / "bench/bench_conv"
    if not exe.exists():
        subprocess.run(["cmake", "--build", str(build), "--target", "bench_conv"],
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    if not exe.exists():
        print(f"bench/train: no {exe} (cmake --build {build} --target bench_conv; a build "
              "configured before bench/bench_conv.c existed needs `cmake {build}` first): "
              "no conv efficiency", file=sys.stderr)
        return None
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1") if one_core else None
    out = subprocess.run([str(exe), str(model), "--batch", "32", "--seconds", "4",
                          *(["--cpu-time"] if one_core else [])], check=True,
                         capture_output=True, text=True, env=env)
    return json.loads(out.stdout)


def cpu_s(pid):
    """User + system CPU seconds of a live process (all its threads)."""
    try:
        stat = open(f"/proc/{pid}/stat").read()
        f = stat[stat.rindex(")") + 2:].split()
        return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


def children_cpu_s():
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def lines_in(path):
    try:
        return sum(1 for l in open(path) if l.strip())
    except OSError:
        return 0


def loadavg():
    return "load average " + ", ".join(f"{x:.2f}" for x in os.getloadavg())


def pinned(cpus):
    """A Popen preexec_fn that puts the child on the CPUs `cpus` (one: as a
    pod with resources.limits.cpu 1 on a core of its own): ctrain-worker then
    runs one OpenBLAS thread (docs/worker.md, CPU threads), TensorFlow sizes
    its thread pools to the one CPU."""
    return lambda: os.sched_setaffinity(0, set(cpus))


def run(worker, world, epochs, tmp, extra, device="cpu", tag=None, tf=None, model=MLP_MODEL,
        data=DATA, tf_model=None, pin=False, batch=32, alone=1):
    """One training run; worker is a ctrain-worker, or (tf: the venv's
    python) unused. Returns its summary from rank 0's metrics lines, and
    (polled as each epoch's line appears) the wall time and the CPU time of
    all its processes at each epoch's end: samples per CPU-second over the
    epochs after the first hold up on a shared machine where samples/s do
    not (the CPU between two lines includes that epoch's test evaluation).
    alone=N (world 1): N such 1-worker jobs at once, each on its own CPU with
    --pin, sharing nothing but the machine; their samples/s summed (the rest
    is the first job's)."""
    tag = tag or f"w{world}"
    ports = free_ports(world)
    addrs = [f"127.0.0.1:{p}" for p in ports]
    procs = []
    load0 = loadavg()
    cpu0 = children_cpu_s()
    t0 = time.monotonic()
    for r in range(world * alone):
        env = dict(os.environ, CTRAIN_JOB_TOKEN="bench", CTRAIN_JOB_NAME="bench",
                   CTRAIN_ATTEMPT="0")
        if world > 1:
            env["TF_CONFIG"] = json.dumps({"cluster": {"worker": addrs},
                                           "task": {"type": "worker", "index": r}})
        else:
            env.pop("TF_CONFIG", None)
        if tf:
            env["TF_USE_LEGACY_KERAS"] = "1"
            args = [str(tf), str(ROOT / "bench/baselines/tf_train.py"), "--epochs", str(epochs),
                    "--data", str(data), "--metrics", f"{tmp}/{tag}-r{r}.jsonl",
                    *(["--model", str(tf_model)] if tf_model else [])]
        else:
            args = [str(worker), "train", "--model",
                    str(model), "--data", str(data / "train"),
                    "--test-data", str(data / "t10k"), "--epochs", str(epochs), "--batch", str(batch),
                    "--optimizer", "adam", "--device", device, "--metrics",
                    f"{tmp}/{tag}-r{r}.jsonl", *extra]
        cpus = sorted(os.sched_getaffinity(0))
        # A process of R CPU replicas (--device cpu:R) gets R CPUs, as a pod
        # with resources.limits.cpu R: worker r the CPUs r*R .. r*R+R-1.
        reps = int(device.split(":")[1]) if device.startswith("cpu:") else 1

        def mine(cpus, r):
            return [cpus[(r * reps + k) % len(cpus)] for k in range(reps)]
        procs.append(subprocess.Popen(args, env=env, stdout=subprocess.DEVNULL,
                                      stderr=open(f"{tmp}/{tag}-r{r}.log", "w"),
                                      preexec_fn=pinned(mine(cpus, r)) if pin else None))
    mpath, marks = f"{tmp}/{tag}-r0.jsonl", {}  # lines -> (wall s, cpu s)
    while any(p.poll() is None for p in procs):
        n = lines_in(mpath)
        if n and n not in marks:
            cpus = [cpu_s(p.pid) for p in procs]
            if None not in cpus:
                marks[n] = (time.monotonic() - t0, sum(cpus))
        time.sleep(0.005)
    codes = [p.wait() for p in procs]
    wall = time.monotonic() - t0
    n = lines_in(mpath)
    if n and n not in marks:  # the last line came as the processes ended
        marks[n] = (wall, children_cpu_s() - cpu0)
    if codes != [0] * (world * alone):
        for r in range(world * alone):
            tail = open(f"{tmp}/{tag}-r{r}.log").read()[-2000:]
            print(f"--- {tag} rank {r} stderr (tail):\n{tail}", file=sys.stderr)
        sys.exit(f"bench/train: {tag} run failed {codes}")
    def summary(rank):
        lines = [json.loads(l) for l in open(f"{tmp}/{tag}-r{rank}.jsonl") if l.strip()]
        epochs_rows = [l for l in lines if "epoch" in l and "val_accuracy" in l]
        samples = sum(l["samples_per_sec"] * l["seconds"] for l in epochs_rows)
        secs = sum(l["seconds"] for l in epochs_rows)
        startup = wall - secs
        t_target = None
        acc = 0.0
        for i, l in enumerate(epochs_rows):
            acc = l["val_accuracy"]
            if acc >= TARGET:
                t_target = (marks[i + 1][0]
                            if rank == 0 and i + 1 in marks and len(lines) == len(epochs_rows) else
                            startup + sum(x["seconds"] for x in epochs_rows[:i + 1]))
                break
        per_cpu = None
        last = len(epochs_rows)
        if rank == 0 and alone == 1 and last >= 2 and 1 in marks and last in marks and len(lines) == last:
            later = sum(l["samples_per_sec"] * l["seconds"] for l in epochs_rows[1:])
            per_cpu = later / (marks[last][1] - marks[1][1])
        replicas = epochs_rows[-1].get("replicas", world)
        later = epochs_rows[1:] or epochs_rows
        later_sps = (sum(l["samples_per_sec"] * l["seconds"] for l in later) /
                     sum(l["seconds"] for l in later))
        return {"run": tag, "world": world, "replicas_in_sync": replicas,
                "load": [load0, loadavg()],
                "samples_per_sec": samples / secs, "later_samples_per_sec": later_sps,
                "best_epoch_samples_per_sec": max(l["samples_per_sec"] for l in epochs_rows),
                "samples_per_cpu_s": per_cpu,
                "samples_per_sec_per_replica": samples / secs / replicas, "wall_s": wall,
                "final_val_accuracy": epochs_rows[-1]["val_accuracy"], "time_to_target_s": t_target,
                "epoch_accs": [round(l["val_accuracy"], 4) for l in epochs_rows]}

    out = summary(0)
    for rank in range(1, alone):
        more = summary(rank)
        for k in ("samples_per_sec", "later_samples_per_sec"):
            out[k] += more[k]
    return out


def ceiling(prefix, res, key):
    """The line on two 1-worker jobs run at once (each on a CPU of its own
    with --pin): the most two workers could do on this machine if their
    collectives cost nothing, against 1 worker alone and 2 workers."""
    one, two, alone = (res[f"{prefix}{k}"][key]
                       for k in ("1-worker", "2-workers", "2x-1-worker-alone"))
    return (f"ratio {prefix.upper().strip('-') or 'MLP'} 2 x 1-worker alone/1-worker samples/s "
            f"(two 1-worker jobs at once, sharing only the machine: its ceiling for 2 workers; "
            f"same run): {alone / one:.2f}; 2 workers at {two / alone:.0%} of that ceiling")


def median_run(runs, key="samples_per_sec"):
    """The run with the median samples/s (the lower of the middle two)."""
    runs = sorted(runs, key=lambda r: r[key])
    return dict(runs[(len(runs) - 1) // 2], rounds=[round(r[key]) for r in runs])


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--epochs", type=int, default=5)
    ap.add_argument("--tf-epochs", type=int, help="TensorFlow's epochs (default: --epochs)")
    ap.add_argument("--rounds", type=int, default=1, help="ctrain runs per config (median)")
    ap.add_argument("--build", default=str(ROOT / "build"))
    ap.add_argument("--compare-build", help="another build dir whose ctrain-worker runs too")
    ap.add_argument("--no-tf", action="store_true")
    ap.add_argument("--no-mlp", action="store_true", help="only the CNN rows")
    ap.add_argument("--no-cnn", action="store_true", help="only the MLP rows")
    ap.add_argument("--cnn-epochs", type=int, default=2,
                    help="CNN rows' epochs (samples/s: those after the first)")
    ap.add_argument("--cnn-samples", type=int, default=8192,
                    help="CNN rows: the first N training images")
    ap.add_argument("--json", action="store_true", help="print the JSON summary at the end")
    ap.add_argument("--pin", action="store_true",
                    help="every worker process (ctrain's and TensorFlow's) on a CPU of its own "
                         "(worker r on CPU r): scaling with the CPUs a worker has held fixed")
    a = ap.parse_args()
    worker = pathlib.Path(a.build) / "worker/ctrain-worker"
    before = pathlib.Path(a.compare_build) / "worker/ctrain-worker" if a.compare_build else None
    tf = None if a.no_tf else tf_venv()
    res, bound, conv, conv1 = {}, None, None, None
    with tempfile.TemporaryDirectory(prefix="bench-train-") as tmp:
        if not a.no_mlp:
            bound = sgemm_bound(tmp, worker_blas_core(worker))
        if not a.no_cnn:
            conv = conv_bound(a.build, CNN_MODEL)
            conv1 = conv and conv_bound(a.build, CNN_MODEL, one_core=True)
            cdata = cnn_data(tmp, a.cnn_samples, 2000)
        for rnd in range(a.rounds):
            plan = []
            if not a.no_mlp:
                plan = [("1-worker", worker, 1, [], "cpu"),
                        ("2-workers", worker, 2, ["--scale-lr"], "cpu"),
                        ("1-worker-cpu2", worker, 1, ["--scale-lr"], "cpu:2"),
                        ("2x-1-worker-alone", worker, 1, [], "cpu")]
                if before:
                    plan[1:1] = [("before-1-worker", before, 1, [], "cpu")]
                    plan.append(("before-2-workers", before, 2, ["--scale-lr"], "cpu"))
            for tag, w, world, extra, dev in plan:
                res.setdefault(tag, []).append(
                    run(w, world, a.epochs, tmp, extra, device=dev, tag=f"{tag}-{rnd}", pin=a.pin,
                        alone=2 if tag.startswith("2x-") else 1))
            if tf and rnd == 0 and not a.no_mlp:  # once: TensorFlow's runs take minutes
                for tag, world in (("tf-1-worker", 1), ("tf-2-workers", 2)):
                    res[tag] = [run(None, world, a.tf_epochs or a.epochs, tmp, [], tag=tag, tf=tf,
                                    pin=a.pin)]
            if not a.no_cnn:  # each row beside TensorFlow's, every round (they are short)
                for world in (1, 2):
                    name = f"{world}-worker{'s' if world > 1 else ''}"
                    res.setdefault(f"cnn-{name}", []).append(
                        run(worker, world, a.cnn_epochs, tmp, ["--scale-lr"] if world > 1 else [],
                            tag=f"cnn-{name}-{rnd}", model=CNN_MODEL, data=cdata, pin=a.pin))
                    if world == 2:  # the all-reduce after the backward pass, not during it
                        res.setdefault("cnn-2-workers-no-overlap", []).append(
                            run(worker, 2, a.cnn_epochs, tmp, ["--scale-lr", "--no-overlap"],
                                tag=f"cnn-2-workers-no-overlap-{rnd}", model=CNN_MODEL,
                                data=cdata, pin=a.pin))
                    if world == 2:  # two 1-worker jobs at once: the machine's ceiling
                        res.setdefault("cnn-2x-1-worker-alone", []).append(
                            run(worker, 1, a.cnn_epochs, tmp, [],
                                tag=f"cnn-2x-1-worker-alone-{rnd}", model=CNN_MODEL,
                                data=cdata, pin=a.pin, alone=2))
                    if world == 1:  # the same global batch on both cores
                        res.setdefault("cnn-1-worker-cpu2x16", []).append(
                            run(worker, 1, a.cnn_epochs, tmp, [], device="cpu:2", batch=16,
                                tag=f"cnn-1-worker-cpu2x16-{rnd}", model=CNN_MODEL, data=cdata,
                                pin=a.pin))
                    if tf:
                        res.setdefault(f"cnn-tf-{name}", []).append(
                            run(None, world, a.cnn_epochs, tmp, [], tag=f"cnn-tf-{name}-{rnd}",
                                tf=tf, data=cdata, tf_model=CNN_MODEL, pin=a.pin))
    res = {k: median_run(v, "later_samples_per_sec" if k.startswith("cnn-") else "samples_per_sec")
           for k, v in res.items()}
    for name, r in res.items():
        tt = f"{r['time_to_target_s']:.1f} s" if r["time_to_target_s"] else "not reached"
        later = (f"{r['later_samples_per_sec']:.0f} samples/s after epoch 1, "
                 if name.startswith("cnn-") else "")
        print(f"{name}: {r['replicas_in_sync']} replica(s) in sync, {later}"
              f"{r['samples_per_sec']:.0f} samples/s ({r['samples_per_sec_per_replica']:.0f} per "
              f"replica; rounds {r['rounds']}; best epoch {r['best_epoch_samples_per_sec']:.0f}; "
              f"{r['samples_per_cpu_s'] or 0:.0f} per CPU-second after epoch 1), test accuracy by epoch {r['epoch_accs']}, "
              f"time to {TARGET}: {tt}; {r['load'][0]} before, {r['load'][1]} after")
    if not a.no_mlp:
        base = res["1-worker"]
        for name, key in (("2-worker", "2-workers"), ("cpu:2 x 1 worker", "1-worker-cpu2")):
            print(f"ratio {name}/1-worker samples/s (baseline: 1 worker, same run): "
                  f"{res[key]['samples_per_sec'] / base['samples_per_sec']:.2f}")
        print(ceiling("", res, "samples_per_sec"))
        for ours, theirs, what in (("1-worker", "tf-1-worker", "TF 1 worker"),
                                   ("2-workers", "tf-2-workers", "TF MWMS 2 workers"),
                                   ("1-worker", "before-1-worker", "--compare-build 1 worker"),
                                   ("2-workers", "before-2-workers", "--compare-build 2 workers")):
            if theirs in res:
                a_, b_ = res[ours], res[theirs]
                cpu = (f"; per CPU-second: {a_['samples_per_cpu_s'] / b_['samples_per_cpu_s']:.2f}"
                       if a_["samples_per_cpu_s"] and b_["samples_per_cpu_s"] else "")
                print(f"ratio ctrain {ours}/{what} samples/s (same run): "
                      f"{a_['samples_per_sec'] / b_['samples_per_sec']:.2f}{cpu}")
        shapes = ", ".join(f"{s['M']}x{s['N']}x{s['K']} {s['gflops']:.1f}" for s in bound["shapes"])
        print(f"sgemm bound (OpenBLAS {bound.get('core')} kernels, 1 thread, GFLOP/s at the step's shapes MxNxK: {shapes}; "
              f"{bound['flops_per_sample']:.0f} flops/sample): "
              f"{bound['bound_samples_per_sec']:.0f} samples per CPU-second; ctrain 1-worker at "
              f"{(base['samples_per_cpu_s'] or 0) / bound['bound_samples_per_sec']:.0%} of it per "
              f"CPU-second ({base['samples_per_sec'] / bound['bound_samples_per_sec']:.0%} in "
              f"samples/s, which a loaded machine lowers)")
    if not a.no_cnn:
        sps = {k: v["later_samples_per_sec"] for k, v in res.items() if k.startswith("cnn-")}
        print("ratio CNN 2-worker/1-worker samples/s after epoch 1 (baseline: 1 worker, same "
              f"run): {sps['cnn-2-workers'] / sps['cnn-1-worker']:.2f}")
        print(ceiling("cnn-", res, "later_samples_per_sec"))
        print("ratio CNN 2-worker --no-overlap/1-worker samples/s after epoch 1 (same run): "
              f"{sps['cnn-2-workers-no-overlap'] / sps['cnn-1-worker']:.2f}; --overlap auto "
              f"(the default) {sps['cnn-2-workers'] / sps['cnn-2-workers-no-overlap']:.2f}x "
              "--no-overlap")
        for ours, theirs, what in (("cnn-1-worker", "cnn-tf-1-worker", "TF 1 worker"),
                                   ("cnn-1-worker-cpu2x16", "cnn-tf-1-worker", "TF 1 worker"),
                                   ("cnn-2-workers", "cnn-tf-2-workers", "TF MWMS 2 workers")):
            if theirs in sps and ours in sps:
                print(f"ratio ctrain {ours}/{what} samples/s after epoch 1 (same run): "
                      f"{sps[ours] / sps[theirs]:.2f}")
        for c, how in ((conv, "the worker's OpenBLAS threads, wall time"),
                       (conv1, "OpenBLAS on 1 thread, CPU time")):
            if not c:
                continue
            per = "; ".join(
                f"{l['name']} {l['efficiency']:.0%} ({l['conv_ms']:.2f} vs {l['gemm_ms']:.2f} ms, "
                + ", ".join(f"{g['what']} {g['M']}x{g['N']}x{g['K']}" for g in l["gemms"]) + ")"
                for l in c["layers"])
            print(f"CNN conv layers at {c['efficiency']:.0%} of the sgemm bound on the GEMM "
                  f"FLOPs they issue ({how}; {c['flops'] / 32:.0f} flops/sample; conv "
                  f"{c['conv_ms']:.2f} ms/step at {c['conv_gflops']:.1f} GFLOP/s vs those GEMMs "
                  f"alone {c['gemm_ms']:.2f} ms at {c['gemm_gflops']:.1f}; medians of "
                  f"{c['rounds']} rounds; batch 32): {per}; the conv layers are "
                  f"{c['conv_share_of_step']:.0%} of the step ({c['step_ms']:.2f} ms, "
                  f"{c['step_samples_per_sec']:.0f} samples/s in bench_conv)")
    if a.json:
        print(json.dumps({"runs": res, "sgemm_bound": bound, "conv_bound": conv,
                          "conv_bound_1_thread": conv1}))


if __name__ == "__main__":
    main()
