#!/usr/bin/env python3
"""bench/chaos: a chaos soak on a fresh two-node local cluster (not in CI).

`--jobs` TrainingJobs (examples/fashion-mnist.yaml with `--epochs`, 150m of
CPU a worker so that all fit on one node, each in its namespace with its own
hostPath claim) run while `--disruptions` disruptions land on their pods within
`--minutes`, every kind about as often, in a random order, each on the least
disrupted job it can hit: SIGKILL of a worker process, `kubectl delete pod`,
`kubectl delete pod --force --grace-period=0`, `kubectl drain` of the node
running a worker (it evicts every job's workers there: all jobs share a name),
and a node's power loss and return (node.sh stop, then start once the
controller has ended the attempt, as a rebooted machine comes back; only the
second node, whose network namespace the script owns). An unbroken job of the
same spec (named `unbroken`, so that drains pass it over, and kept on the first
node, whose power is never cut) runs beside them, in the same cluster under the
same load. At the
end every job must have Succeeded with a final test accuracy within 0.01 of
the unbroken one's.

Prints, per kind: how many landed and the time from the disruption to the job
Running again (median, max), and per job its restarts and disruptions.

  python3 bench/chaos.py [--jobs 5] [--disruptions 20] [--minutes 15] [--seed 1]
"""
import argparse
import json
import os
import pathlib
import random
import re
import signal
import sys
import time

import _paths  # noqa: F401 (the test libraries' path)
from clusterlib import (build_image, control_plane_down, control_plane_up, install, nodes_down,
                        nodes_up)
import e2e_lib as e2e
from e2e_lib import JOB, apply_example, claim_dir, worker_pids

KINDS = ["sigkill", "delete", "force-delete", "drain", "node-stop"]


BASE = "unbroken"  # the unbroken job's name: a drain's selector passes it over


def job(cl, ns, name=JOB):
    return json.loads(cl.kubectl("get", "tj", name, "-n", ns, "-o", "json").stdout)


def state(j):
    c = [c for c in j.get("status", {}).get("conditions", []) if c["status"] == "True"]
    return c[-1]["type"] if c else "Pending"


def accuracy(node, ns, name=JOB):
    """The final test accuracy: the chief's last line, else the last
    val_accuracy of the metrics the chief appended to the claim (the pod's
    log may be gone: its node stopped, or the pod deleted)."""
    m = re.findall(r"test accuracy: ([0-9.]+)", node.pod_log(ns, f"{name}-worker-0"))
    if m:
        return float(m[-1])
    try:
        rows = [json.loads(line) for line in (claim_dir(ns) / "metrics.jsonl").read_text()
                .splitlines() if line.strip()]
    except OSError:
        return None
    vals = [r["val_accuracy"] for r in rows if "val_accuracy" in r]
    return vals[-1] if vals else None


def running_workers(cl, ns):
    out = []
    for p in cl.get_json("pods", "-n", ns, "-l", f"ctrain.dev/job-name={JOB}")["items"]:
        if p["status"].get("phase") == "Running" and not p["metadata"].get("deletionTimestamp"):
            out.append(p)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, default=5)
    ap.add_argument("--disruptions", type=int, default=20)
    ap.add_argument("--minutes", type=float, default=15)
    ap.add_argument("--epochs", type=int, default=100,
                    help="long enough that the jobs run through the disruptions")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--kinds", default=",".join(KINDS),
                    help="the disruptions to draw from (e.g. node-stop alone, with --jobs 1 "
                         "--disruptions 3, gives the median node-loss recovery)")
    a = ap.parse_args()
    kinds = [k for k in a.kinds.split(",") if k]
    if not kinds or set(kinds) - set(KINDS):
        raise SystemExit(f"chaos: --kinds from {KINDS}")
    rnd = random.Random(a.seed)
    image = build_image("ctrain")
    cl = control_plane_up(env={"CTRAIN_NODE_MONITOR_GRACE": os.environ.get(
        "CTRAIN_NODE_MONITOR_GRACE", "20s")}, prefix="bench-chaos-")
    state_dir = cl.state_dir
    try:
        nodes_up(cl, 2, image)
        e2e._CLUSTER["c"] = cl
        names = e2e.node_names(cl)
        node = e2e.Node(cl, names[0], pathlib.Path(state_dir) / "node", names)
        install(cl, "manifests/crds", "manifests")
        e2e.Deployment(cl).rollout()

        def small(d):
            # 150m a worker: every job fits on one node while the other is
            # powered off (2 cores here; the example asks 500m).
            c = d["spec"]["replicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]
            c["resources"]["requests"]["cpu"] = "150m"
            d["spec"]["maxDisruptions"] = a.disruptions

        def new_ns(name, job_name=JOB):
            def mutate(d):
                small(d)
                d["metadata"]["name"] = job_name
                if job_name == BASE:
                    # On the first node, whose power is never cut.
                    d["spec"]["replicaSpecs"]["Worker"]["template"]["spec"]["nodeSelector"] = {
                        "kubernetes.io/hostname": names[0]}
            cl.kubectl("create", "namespace", name)
            apply_example(cl, name, epochs=a.epochs, mutate=mutate)
            return name

        # The unbroken run beside the others, in the same cluster under the
        # same load: the accuracy every disrupted job must reach.
        base = new_ns("chaos-base", BASE)
        nss = [new_ns(f"chaos-{i}") for i in range(a.jobs)]
        hits = {n: 0 for n in nss}
        # Every kind about as often, in a random order.
        deck = [kinds[i % len(kinds)] for i in range(a.disruptions)]
        rnd.shuffle(deck)
        gap = a.minutes * 60 / a.disruptions
        recov = {k: [] for k in KINDS}
        t_start = time.monotonic()
        t_end = t_start + a.minutes * 60
        landed = 0
        while deck and time.monotonic() < t_end + 600:
            live = [n for n in nss if state(job(cl, n)) == "Running"]
            if not live:
                if all(state(job(cl, n)) in ("Succeeded", "Failed") for n in nss):
                    break
                time.sleep(2)
                continue
            # The first kind in the deck that can hit a live job now (after a
            # node's power loss the pods may all sit on the other node until
            # a drain moves them), on the least disrupted job it can hit.
            rnd.shuffle(live)
            live.sort(key=lambda n: hits[n])
            kind, ns, pods = None, None, []
            for k in dict.fromkeys(deck):
                for n in live:
                    pods = running_workers(cl, n)
                    if k == "node-stop":
                        # Only the second node's power is ours to cut.
                        pods = [p for p in pods if p["spec"].get("nodeName") == names[-1]]
                    if pods:
                        kind, ns = k, n
                        break
                if kind:
                    break
            if not kind:
                time.sleep(1)
                continue
            deck.remove(kind)
            hits[ns] += 1
            victim = rnd.choice(pods)
            name, where = victim["metadata"]["name"], victim["spec"]["nodeName"]
            attempt = job(cl, ns)["status"].get("attempt", 1)
            t0 = time.monotonic()
            if kind == "sigkill":
                idx = int(victim["metadata"]["labels"]["ctrain.dev/replica-index"])
                for pid in worker_pids(ns, idx):
                    os.kill(pid, signal.SIGKILL)
            elif kind == "delete":
                cl.kubectl("delete", "pod", name, "-n", ns, "--wait=false")
            elif kind == "force-delete":
                cl.kubectl("delete", "pod", name, "-n", ns, "--force", "--grace-period=0",
                           "--wait=false")
            elif kind == "drain":
                e2e.drain(cl, where, selector=f"ctrain.dev/job-name={JOB}")
                e2e.uncordon(cl, where)
            else:
                e2e.stop_node(where, cl)
            landed += 1
            # Recovery: this job Running again in a later attempt. A stopped
            # node is powered on once the controller has ended the attempt
            # (the node's capacity comes back, as a rebooted machine's does);
            # the new attempt may land anywhere.
            deadline = time.monotonic() + 600
            powered = kind != "node-stop"
            while True:
                j = job(cl, ns)
                if not powered and j["status"].get("attempt", 1) > attempt:
                    e2e.start_node(where, cl)
                    powered = True
                if state(j) == "Succeeded" or (j["status"].get("attempt", 1) > attempt
                                               and state(j) == "Running"):
                    break
                if state(j) == "Failed" or time.monotonic() > deadline:
                    raise SystemExit(f"chaos: {ns} did not recover from {kind} of {name}: "
                                     f"{json.dumps(j.get('status'))[:2000]}")
                time.sleep(0.5)
            took = time.monotonic() - t0
            recov[kind].append(took)
            print(f"chaos: {landed:2d} {kind:12s} {ns}/{name} on {where}: Running again "
                  f"after {took:.1f} s", flush=True)
            if not powered:
                e2e.start_node(where, cl)
            time.sleep(max(0.0, gap - took))
        ok = True
        print("\nchaos: recovery time (disruption -> job Running again)")
        print(f"{'kind':14s}{'n':>4s}{'median s':>10s}{'max s':>8s}")
        for k in KINDS:
            xs = sorted(recov[k])
            if xs:
                print(f"{k:14s}{len(xs):4d}{xs[len(xs) // 2]:10.1f}{xs[-1]:8.1f}")
        span = time.monotonic() - t_start
        e2e.wait_job(cl, node, base, lambda j: state(j) in ("Succeeded", "Failed"), 1800,
                     "finished", name=BASE)
        ref = accuracy(node, base, BASE)
        b = job(cl, base, BASE)
        print(f"\nchaos: {landed} disruptions in {span / 60:.1f} min; the unbroken run "
              f"(chaos-base): {state(b)}, {b['status'].get('disruptions', 0)} disruptions, "
              f"test accuracy {ref}")
        print(f"\n{'job':11s}{'state':>10s}{'restarts':>9s}{'disrupt':>8s}{'accuracy':>9s}")
        for n in nss:
            e2e.wait_job(cl, node, n, lambda j: state(j) in ("Succeeded", "Failed"), 1800,
                         "finished")
            j = job(cl, n)
            acc = accuracy(node, n)
            good = (state(j) == "Succeeded" and acc is not None and ref is not None
                    and abs(acc - ref) <= 0.01)
            ok &= good
            print(f"{n:11s}{state(j):>10s}{j['status'].get('restarts', 0):9d}"
                  f"{j['status'].get('disruptions', 0):8d}{acc if acc else 0:9.4f}"
                  f"{'' if good else '  <- FAIL'}")
        print(f"\nchaos: {landed} disruptions, every job Succeeded within 0.01 of {ref}: {ok}")
        for n in nss + [base]:
            cl.kubectl("delete", "pv", f"e2e-{n}", "--wait=false", check=False)
            import shutil
            shutil.rmtree(claim_dir(n), ignore_errors=True)
        return 0 if ok else 1
    finally:
        nodes_down(cl)
        control_plane_down(cl)


if __name__ == "__main__":
    sys.exit(main())
