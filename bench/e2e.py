#!/usr/bin/env python3
"""bench/e2e: the user's path, timed, on a fresh local cluster with a real
node (tools/localcluster/node.sh) and the controller installed as its
Deployment (`kubectl apply --server-side -k manifests/crds`, then `-k manifests/`).

  A) `kubectl apply -f examples/fashion-mnist.yaml` -> both worker pods
     training (each has joined the collective: "rendezvous: rank i of 2
     connected" in its `kubectl logs`), over --runs runs;
  B) SIGKILL of worker 1's process (after the first backup) -> training
     resumed (both attempt-2 worker pods joined, and the chief restored the
     backup: "backup: resuming from"), over --runs runs.
Baseline for A, measured in the same run: the same two ctrain-worker
processes started directly (no Kubernetes), until both have joined.

  python3 bench/e2e.py [--runs 5]
"""
import argparse
import json
import os
import pathlib
import signal
import subprocess
import tempfile
import time

import _paths  # noqa: F401 (the test libraries' path)
from clusterlib import build_image, control_plane_down, control_plane_up, install, nodes_up
import e2e_lib as e2e
from e2e_lib import apply_example, claim_dir, worker_pids
from workerlib import free_ports, start as start_worker

JOINED = "of 2 connected"


def wait(pred, timeout, what):
    t = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > t:
            raise SystemExit(f"bench/e2e: timed out waiting for {what}")
        time.sleep(0.05)


def stats(xs):
    xs = sorted(xs)
    return f"median {xs[len(xs) // 2]:.2f} s, min {xs[0]:.2f}, max {xs[-1]:.2f} (n={len(xs)})"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=5)
    a = ap.parse_args()
    image = build_image("ctrain")
    cl = control_plane_up(prefix="bench-e2e-")
    try:
        nodes_up(cl, 1, image)
        node = e2e.Node(cl, "ctrain-node", pathlib.Path(cl.state_dir) / "node")
        install(cl, "manifests/crds", "manifests")
        e2e.Deployment(cl).rollout()
        to_training, to_resumed, direct = [], [], []
        for run in range(a.runs):
            # Baseline: the two processes started by hand.
            tmp = pathlib.Path(tempfile.mkdtemp(prefix="bench-e2e-direct-"))
            ports = free_ports(2)
            t0 = time.monotonic()
            procs = [start_worker(tmp, ports, r, chief=False, epochs=1) for r in range(2)]
            wait(lambda: all(JOINED in (tmp / f"rank{r}.log").read_text() for r in range(2)),
                 120, "direct workers")
            direct.append(time.monotonic() - t0)
            for p in procs:
                p.kill()
                p.wait()
            subprocess.run(["rm", "-rf", str(tmp)])

            ns = f"bench-{run}"
            cl.kubectl("create", "namespace", ns)
            log = lambda i: node.pod_log(ns, f"fashion-mnist-worker-{i}")  # noqa: E731
            t0 = time.monotonic()
            apply_example(cl, ns, epochs=3)
            wait(lambda: all(JOINED in log(i) for i in (0, 1)), 300, "workers training")
            to_training.append(time.monotonic() - t0)

            wait(lambda: "backup: wrote" in log(0), 300, "a backup")
            pids = worker_pids(ns, 1)
            t0 = time.monotonic()
            for pid in pids:
                os.kill(pid, signal.SIGKILL)

            def resumed():
                # The attempt-2 pods (new pods, new logs) both joined, and the
                # chief restored the backup.
                pods = cl.get_json("pods", "-n", ns, "-l", "ctrain.dev/job-name=fashion-mnist")
                att = {p["metadata"]["name"]: p["metadata"]["labels"]["ctrain.dev/attempt"]
                       for p in pods["items"]}
                return (len(att) == 2 and set(att.values()) == {"2"} and
                        all(JOINED in log(i) for i in (0, 1)) and
                        "backup: resuming from" in log(0))
            wait(resumed, 300, "training resumed")
            to_resumed.append(time.monotonic() - t0)
            cl.kubectl("delete", "namespace", ns, "--wait=false")
            cl.kubectl("delete", "pv", f"e2e-{ns}", "--wait=false")
            subprocess.run(["rm", "-rf", str(claim_dir(ns))])
            print(f"run {run + 1}: apply->training {to_training[-1]:.2f} s, "
                  f"kill->resumed {to_resumed[-1]:.2f} s, direct start {direct[-1]:.2f} s",
                  flush=True)
        print(f"apply -> both workers training: {stats(to_training)}")
        print(f"baseline, the same workers started directly: {stats(direct)}")
        print(f"ratio (median, Kubernetes path / direct): "
              f"{sorted(to_training)[len(to_training) // 2] / sorted(direct)[len(direct) // 2]:.1f}")
        print(f"SIGKILL of a worker -> training resumed from the backup: {stats(to_resumed)}")
        print(json.dumps({"apply_to_training": to_training, "kill_to_resumed": to_resumed,
                          "direct_start": direct}))
    finally:
        control_plane_down(cl)  # cluster.sh down takes the node down first


if __name__ == "__main__":
    main()
