#!/usr/bin/env python3
"""bench/crossnode: ctrain's ring all-reduce between two pods on different
nodes against two pods on one node, in the same run, on the local cluster
(tools/localcluster/node.sh --nodes 2: node 1 in the host's network
namespace, node 2 in its own behind a veth, pods routed by the host).

Each pod runs the ctrain image with this build's bench/bench_allreduce
mounted from the host (hostPath: the nodes share the host's files), one rank
per pod (CTRAIN_BENCH_ADDRS/CTRAIN_BENCH_RANK: see bench_allreduce.c),
started with `kubectl exec`. Pairs, each --rounds times in a rotating order:
  same-1  both pods on ctrain-node (bridge ctrain0 on the host: the baseline)
  same-2  both pods on ctrain-node-2 (its bridge, inside its namespace)
  cross   one pod on each (pod veth, node 2's bridge and routing, the veth
          pair, the host's routing and iptables, ctrain0, pod veth)
Prints per size the median busbw (nccl-tests' size/time x 2(n-1)/n) and the
median latency of each pair, and the ratio cross/same-1 (target >= 0.8).

  python3 bench/crossnode.py [--rounds 3] [--max-mib 64] [--dir CLUSTER_DIR]

Without --dir it starts a control plane and two nodes of its own and stops
them at the end; with --dir it uses that cluster (two nodes up, the ctrain
image imported).
"""
import argparse
import json
import pathlib
import statistics
import subprocess
import sys
import time

import _paths  # noqa: F401 (the test libraries' path)
from clusterlib import (BUILD, Cluster, build_image, control_plane_down, control_plane_up,
                        local_kubectl, nodes_up)

NS = "bench-crossnode"
PORT = 29500


def pod(name, node):
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": NS},
            "spec": {"nodeName": node, "terminationGracePeriodSeconds": 0,
                     "containers": [{"name": "bench", "image": "ctrain:latest",
                                     "imagePullPolicy": "IfNotPresent",
                                     "command": ["sleep", "infinity"],
                                     "volumeMounts": [{"name": "bench", "mountPath": "/bench",
                                                       "readOnly": True}]}],
                     "volumes": [{"name": "bench", "hostPath": {
                         "path": str(BUILD / "bench"), "type": "Directory"}}]}}


def run_pair(cl, pods, ips, max_mib):
    """One all-reduce run over the two pods: {bytes: (busbw GB/s, median us)}."""
    addrs = ",".join(f"{ip}:{PORT}" for ip in ips)
    procs = []
    for r, p in enumerate(pods):
        procs.append(subprocess.Popen(
            [cl.kubectl_bin, "exec", "-n", NS, p, "--", "env", f"CTRAIN_BENCH_ADDRS={addrs}",
             f"CTRAIN_BENCH_RANK={r}", "/bench/bench_allreduce", str(max_mib), "2", "4096"],
            env=cl.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    outs = [p.communicate(timeout=600) for p in procs]
    for p, (out, err) in zip(procs, outs):
        if p.returncode != 0:
            raise SystemExit(f"bench/crossnode: a rank failed ({p.returncode}):\n{out}\n{err}")
    rows = {}
    for line in outs[0][0].splitlines():
        f = line.split()
        if len(f) == 5 and f[0].isdigit():
            rows[int(f[0])] = (float(f[3]), float(f[2]))
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--max-mib", type=int, default=64)
    ap.add_argument("--dir", help="a local cluster with two nodes up (default: start one)")
    a = ap.parse_args()
    if not (BUILD / "bench/bench_allreduce").exists():
        subprocess.run(["ninja", "-C", str(BUILD), "bench_allreduce"], check=True)
    own = a.dir is None
    if own:
        image = build_image("ctrain")
        cl = control_plane_up(prefix="bench-crossnode-")
    else:
        cl = Cluster(pathlib.Path(a.dir) / "kubeconfig", local_kubectl(), a.dir)
    try:
        if own:
            nodes_up(cl, 2, image)
        nodes = sorted(n["metadata"]["name"] for n in cl.get_json("nodes")["items"])
        if len(nodes) < 2:
            raise SystemExit(f"bench/crossnode: needs two nodes, the cluster has {nodes}")
        n1, n2 = nodes[0], nodes[1]
        cl.kubectl("create", "namespace", NS, check=False)
        layout = {"a": n1, "b": n1, "c": n2, "d": n2}
        items = [pod(f"bench-{k}", n) for k, n in layout.items()]
        cl.kubectl("apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List",
                                                          "items": items}))
        cl.kubectl("wait", "--for=condition=Ready", "pod", "--all", "-n", NS, "--timeout=180s",
                   timeout=240)
        ip = {k: cl.get_json("pod", f"bench-{k}", "-n", NS)["status"]["podIP"] for k in layout}
        pairs = {"same-1": ("a", "b"), "same-2": ("c", "d"), "cross": ("a", "c")}
        print(f"bench/crossnode: pods {json.dumps({k: [layout[k], ip[k]] for k in layout})}")
        got = {name: [] for name in pairs}
        order = list(pairs)
        for rnd in range(a.rounds):
            for name in order[rnd % len(order):] + order[:rnd % len(order)]:
                x, y = pairs[name]
                t0 = time.monotonic()
                got[name].append(run_pair(cl, [f"bench-{x}", f"bench-{y}"], [ip[x], ip[y]],
                                          a.max_mib))
                print(f"bench/crossnode: round {rnd + 1} {name} in "
                      f"{time.monotonic() - t0:.1f} s", file=sys.stderr)
        sizes = sorted(got["cross"][0])
        med = {name: {s: (statistics.median(r[s][0] for r in runs),
                          statistics.median(r[s][1] for r in runs)) for s in sizes}
               for name, runs in got.items()}
        print(f"\n# ring all-reduce, 2 pods, median of {a.rounds} rounds "
              f"(busbw GB/s, median latency us); same-1: both on {n1}, same-2: both on {n2}, "
              f"cross: {n1} + {n2}")
        print(f"{'bytes':>10} {'same-1':>8} {'same-2':>8} {'cross':>8} {'cross/s1':>9} "
              f"{'lat-s1':>9} {'lat-s2':>9} {'lat-x':>9}")
        for s in sizes:
            s1, s2, x = med["same-1"][s], med["same-2"][s], med["cross"][s]
            print(f"{s:>10} {s1[0]:>8.3f} {s2[0]:>8.3f} {x[0]:>8.3f} {x[0] / s1[0]:>9.3f} "
                  f"{s1[1]:>9.1f} {s2[1]:>9.1f} {x[1]:>9.1f}")
        big = sizes[-1]
        ratio = med["cross"][big][0] / med["same-1"][big][0]
        print(f"ratio cross-node/same-node busbw at {big >> 20} MiB: {ratio:.3f} "
              f"(cross/same-2: {med['cross'][big][0] / med['same-2'][big][0]:.3f}; target >= 0.8)")
        print(f"latency at {sizes[0]} B: cross {med['cross'][sizes[0]][1]:.1f} us, "
              f"same node {med['same-1'][sizes[0]][1]:.1f} us")
        cl.kubectl("delete", "namespace", NS, "--wait=true", "--timeout=120s", check=False,
                   timeout=150)
    finally:
        if own:
            control_plane_down(cl)


if __name__ == "__main__":
    main()
