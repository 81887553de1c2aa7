#!/usr/bin/env python3
"""bench/overlap: what overlapping the gradients' all-reduce with the backward
pass gives when the link between two workers is slower than loopback, as
between nodes (docs/worker.md, "Overlapping the all-reduce").

Two network namespaces joined by a veth pair, each end shaped by tc's token
bucket filter (tbf: this VM's kernel has no netem) to --rates (e.g. 2gbit,
1gbit; "none": the veth unshaped); a ctrain-worker in each (rank r on CPU r, as pods with
resources.limits.cpu 1 on nodes of their own), training on the first
--samples training images for 2 epochs (Adam, batch 32 a worker, --scale-lr):
samples/s after the first epoch, with the overlap (--overlap on) and without
(--overlap off), each --rounds times in alternating order; medians. One worker
alone, in the host's namespace on CPU 0, is the baseline of the scaling
ratio. Two models:
  cnn        the CNN of examples/fashion-mnist-cnn.yaml
             (tests/data/keras/cnn-tf_keras.json: 422k parameters, 1.7 MB of
             gradients a step, 98% of them the Dense kernel's, with two
             synchronized BatchNormalization layers)
  cnn-no-bn  the same without its BatchNormalization layers
Synchronized BatchNormalization's backward all-reduces its sums and waits for
them, so a part is queued after the BatchNormalization next below it
(docs/worker.md): in the CNN the Dense kernel's gradients overlap the second
convolution's backward, and the first BatchNormalization's all-reduce then waits
for them; without BatchNormalization they overlap both convolutions' backward.

The namespaces, the veth, the qdiscs and the /run/netns mount that `ip netns`
made are removed at the end (also on failure or Ctrl-C). Root (ip netns, tc) is needed.

  python3 bench/overlap.py [--rates none,2gbit,1gbit] [--rounds 3]
                           [--samples 8192] [--build build-bench]
"""
import argparse
import json
import os
import pathlib
import statistics
import subprocess
import sys
import tempfile

from _paths import ROOT

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from train import CNN_MODEL, cnn_data  # noqa: E402

NS = ["ctrain-ov0", "ctrain-ov1"]
IF = ["ctrain-ov0", "ctrain-ov1"]
IP = ["10.213.7.1", "10.213.7.2"]
PORT = 29600


def sh(*args, check=True):
    return subprocess.run(list(args), check=check, capture_output=True, text=True)


def netns_mounted():
    """Whether /run/netns is a mount point (`ip netns add` makes it one)."""
    with open("/proc/self/mountinfo") as f:
        return any(line.split()[4] == "/run/netns" for line in f)


def down(unmount=False):
    for ns in NS:
        sh("ip", "netns", "del", ns, check=False)  # takes its veth end with it
    # The mount `ip netns add` made, when the host had none and no namespace is left.
    if unmount and netns_mounted() and not os.listdir("/run/netns"):
        sh("umount", "/run/netns", check=False)


def up():
    down()
    for ns in NS:
        sh("ip", "netns", "add", ns)
    sh("ip", "link", "add", IF[0], "type", "veth", "peer", "name", IF[1])
    for r in range(2):
        sh("ip", "link", "set", IF[r], "netns", NS[r])
        sh("ip", "-n", NS[r], "addr", "add", f"{IP[r]}/30", "dev", IF[r])
        sh("ip", "-n", NS[r], "link", "set", IF[r], "up")
        sh("ip", "-n", NS[r], "link", "set", "lo", "up")


def shape(rate):
    """Both ends at `rate` ("none": no qdisc)."""
    for r in range(2):
        sh("tc", "-n", NS[r], "qdisc", "del", "dev", IF[r], "root", check=False)
        if rate != "none":
            sh("tc", "-n", NS[r], "qdisc", "add", "dev", IF[r], "root", "tbf", "rate", rate,
               "burst", "256kb", "latency", "50ms")


def models(tmp):
    """{name: model JSON path}: the CNN, and the CNN without BatchNormalization."""
    m = json.loads(CNN_MODEL.read_text())
    m["config"]["layers"] = [x for x in m["config"]["layers"]
                             if x["class_name"] != "BatchNormalization"]
    nobn = pathlib.Path(tmp) / "cnn-no-bn.json"
    nobn.write_text(json.dumps(m))
    return {"cnn": CNN_MODEL, "cnn-no-bn": nobn}


def run(worker, model, data, tmp, tag, world, extra):
    """One training run; samples/s of the epochs after the first (rank 0's metrics)."""
    procs = []
    addrs = [f"{IP[r]}:{PORT}" for r in range(world)]
    for r in range(world):
        env = dict(os.environ, CTRAIN_JOB_TOKEN="bench", CTRAIN_JOB_NAME="bench",
                   CTRAIN_ATTEMPT="0")
        if world > 1:
            env["TF_CONFIG"] = json.dumps({"cluster": {"worker": addrs},
                                           "task": {"type": "worker", "index": r}})
        else:
            env.pop("TF_CONFIG", None)
        args = [str(worker), "train", "--model", str(model), "--data", str(data / "train"),
                "--test-data", str(data / "t10k"), "--epochs", "2", "--batch", "32",
                "--optimizer", "adam", "--metrics", f"{tmp}/{tag}-r{r}.jsonl",
                "--termination-log", "", *extra]
        if world > 1:
            args = ["ip", "netns", "exec", NS[r], *args]
        procs.append(subprocess.Popen(
            args, env=env, stdout=subprocess.DEVNULL, stderr=open(f"{tmp}/{tag}-r{r}.log", "w"),
            preexec_fn=lambda r=r: os.sched_setaffinity(0, {r})))
    codes = [p.wait() for p in procs]
    if codes != [0] * world:
        for r in range(world):
            print(open(f"{tmp}/{tag}-r{r}.log").read()[-2000:], file=sys.stderr)
        sys.exit(f"bench/overlap: {tag} failed {codes}")
    rows = [json.loads(line) for line in open(f"{tmp}/{tag}-r0.jsonl") if line.strip()]
    rows = [x for x in rows if "epoch" in x and "val_accuracy" in x][1:]
    return sum(x["samples_per_sec"] * x["seconds"] for x in rows) / sum(x["seconds"] for x in rows)


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rates", default="none,2gbit,1gbit")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--samples", type=int, default=8192)
    ap.add_argument("--build", default=str(ROOT / "build"))
    a = ap.parse_args()
    worker = pathlib.Path(a.build) / "worker/ctrain-worker"
    if os.geteuid() != 0:
        sys.exit("bench/overlap: needs root (ip netns, tc)")
    with tempfile.TemporaryDirectory(prefix="bench-overlap-") as tmp:
        data = cnn_data(tmp, a.samples, 2000)
        had_mount = netns_mounted()
        try:
            up()
            for name, model in models(tmp).items():
                one = [run(worker, model, data, tmp, f"{name}-one-{i}", 1, [])
                       for i in range(a.rounds)]
                base = statistics.median(one)
                print(f"{name}: 1 worker (CPU 0, no network): {base:.0f} samples/s after epoch 1 "
                      f"(rounds {[round(x) for x in one]})")
                for rate in a.rates.split(","):
                    shape(rate)
                    res = {"overlap": [], "after": []}
                    for i in range(a.rounds):
                        order = ("overlap", "after") if i % 2 == 0 else ("after", "overlap")
                        for how in order:
                            extra = ["--scale-lr", "--overlap",
                                     "off" if how == "after" else "on"]
                            res[how].append(run(worker, model, data, tmp,
                                                f"{name}-{rate}-{how}-{i}", 2, extra))
                    ov, af = statistics.median(res["overlap"]), statistics.median(res["after"])
                    link = f"veth at {rate}" if rate != "none" else "veth, unshaped"
                    print(f"{name}: 2 workers over a {link}: overlap {ov:.0f} samples/s "
                          f"(rounds {[round(x) for x in res['overlap']]}), --no-overlap {af:.0f} "
                          f"(rounds {[round(x) for x in res['after']]}); overlap / --no-overlap "
                          f"{ov / af:.2f}; 2 workers / 1 worker {ov / base:.2f} (overlap), "
                          f"{af / base:.2f} (--no-overlap)")
        finally:
            down(unmount=not had_mount)


if __name__ == "__main__":
    main()
