#!/usr/bin/env python3
"""bench/controller: 200 TrainingJobs x 4 workers created at once.

On a fresh local control plane (tools/localcluster), in one run:
  baseline  a tight create loop of 800 pods with the same C client the
            controller uses (bench_create, 8 parallel, no client rate limit)
  measured  ctrain-controller (ServiceAccount token, manifests/ RBAC, default
            flags but --kube-api-qps/--kube-api-burst raised to 1000 so the
            client limiter does not hide the apiserver) reconciling 200 jobs
            created at once by bench_create
Prints the time until every pod exists and every job shows Created, the
controller's pod-create rate against the baseline (ratio), API requests per
job (the controller's ctrain_kube_requests_total from just before the jobs
are created until it has settled: queue empty, events written, no request
for 2 s), split by what they were, and its peak RSS (VmHWM) and CPU time.

  python3 bench/controller.py [--jobs 200] [--workers 4] [--ctl-workers N]
                              [--build build]
"""
import argparse
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
from conftest import Cluster, _local_kubectl, install_controller_rbac, sa_kubeconfig, free_port  # noqa: E402


def metric(port, name):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        text = r.read().decode()
    m = re.search(rf"^{name} ([0-9.e+]+)$", text, re.M)
    return float(m.group(1)) if m else None


def metrics(port):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        text = r.read().decode()
    return {m.group(1): float(m.group(2))
            for m in re.finditer(r"^([a-z_]+) ([0-9.e+-]+)$", text, re.M)}


def cpu_seconds(pid):
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def settle(port, quiet_s=2.0, limit_s=120):
    """Waits until the controller is idle: no queued key or event and no API
    request for quiet_s. Returns its metrics then."""
    end = time.monotonic() + limit_s
    last, since = None, time.monotonic()
    while time.monotonic() < end:
        m = metrics(port)
        busy = m.get("ctrain_workqueue_depth", 0) or m.get("ctrain_events_queued", 0)
        if busy or m.get("ctrain_kube_requests_total") != last:
            last, since = m.get("ctrain_kube_requests_total"), time.monotonic()
        elif time.monotonic() - since >= quiet_s:
            return m
        time.sleep(0.2)
    return metrics(port)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, default=200)
    ap.add_argument("--workers", type=int, default=4, help="worker replicas per job")
    ap.add_argument("--ctl-workers", type=int, default=None,
                    help="the controller's --workers (default: its own default)")
    ap.add_argument("--build", default=str(ROOT / "build"))
    ap.add_argument("--log", help="keep the controller's log here")
    a = ap.parse_args()
    build = pathlib.Path(a.build)
    create = build / "bench/bench_create"
    state = tempfile.mkdtemp(prefix="bench-controller-")
    script = ROOT / "tools/localcluster/cluster.sh"
    subprocess.run(["bash", str(script), "up", "--dir", state], check=True,
                   stdout=subprocess.DEVNULL)
    ctl = gen = None
    try:
        cl = Cluster(pathlib.Path(state) / "kubeconfig", _local_kubectl(), state)
        install_controller_rbac(cl)
        kc = sa_kubeconfig(cl, pathlib.Path(state) / "controller.kubeconfig")
        n_pods = a.jobs * a.workers
        tmp = pathlib.Path(state)

        # Baseline: raw pod creates with the same client, before the
        # controller runs and again after it stopped (the machine is shared:
        # the ratio uses their mean, and both are printed).
        (tmp / "pod.json").write_text(json.dumps({
            "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p-%d"},
            "spec": {"restartPolicy": "Never",
                     "containers": [{"name": "worker", "image": "ctrain:latest"}]}}))

        def baseline(ns):
            cl.kubectl("create", "namespace", ns)
            out = subprocess.run([str(create), "--kubeconfig", cl.kubeconfig, "--ns", ns,
                                  "--count", str(n_pods), "--parallel", "8", "--template",
                                  str(tmp / "pod.json")], capture_output=True, text=True,
                                 check=True)
            # Its pods are deleted before anything else is measured, not during.
            cl.kubectl("delete", "namespace", ns, "--wait=true", "--timeout=300s", timeout=330)
            return float(re.search(r": ([0-9.]+)/s", out.stdout).group(1))
        base_before = baseline("baseline")

        # The controller.
        port = free_port()
        ctl = subprocess.Popen([str(build / "controller/ctrain-controller"), "--kubeconfig", kc,
                                "--leader-elect=false", "--log-format=text",
                                "--log-level=debug" if a.log else "--log-level=info",
                                "--kube-api-qps=1000", "--kube-api-burst=1000",
                                f"--metrics-bind-address=127.0.0.1:{port}"] +
                               ([f"--workers={a.ctl_workers}"] if a.ctl_workers else []),
                               stdout=open(tmp / "controller.log", "w"), stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 30
        while metric_or_none(port) is None:
            if time.monotonic() > deadline:
                sys.exit("controller did not serve /metrics; see " + str(tmp / "controller.log"))
            time.sleep(0.2)
        m0 = settle(port, quiet_s=1.0)
        cpu0 = cpu_seconds(ctl.pid)
        cl.kubectl("create", "namespace", "bench")
        tmpl = {"apiVersion": "ctrain.dev/v1alpha1", "kind": "TrainingJob",
                "metadata": {"name": "j-%d"},
                "spec": {"replicaSpecs": {"Worker": {"replicas": a.workers, "template": {
                    "spec": {"containers": [{"name": "worker", "image": "ctrain:latest"}]}}}}}}
        (tmp / "tj.json").write_text(json.dumps(tmpl))
        t0 = time.monotonic()
        gen = subprocess.Popen([str(create), "--kubeconfig", cl.kubeconfig, "--ns", "bench",
                                "--count", str(a.jobs), "--parallel", "8", "--group", "ctrain.dev",
                                "--version", "v1alpha1", "--resource", "trainingjobs",
                                "--template", str(tmp / "tj.json")], stdout=subprocess.DEVNULL)
        t_created_jobs = t_pods = t_first = None
        while True:
            if time.monotonic() - t0 > 600:
                sys.exit("timed out after 600 s")
            if t_created_jobs is None and gen.poll() is not None:
                if gen.returncode:
                    sys.exit(f"bench_create (TrainingJobs) failed: {gen.returncode}")
                t_created_jobs = time.monotonic() - t0
            made = metric(port, "ctrain_pods_created_total") or 0
            if t_first is None and made > 0:
                t_first = time.monotonic() - t0
            if t_pods is None and made >= n_pods:
                t_pods = time.monotonic() - t0
            if t_pods is not None and t_created_jobs is not None:
                jobs = cl.get_json("tj", "-n", "bench")["items"]
                created = sum(1 for j in jobs if any(
                    c["type"] == "Created" and c["status"] == "True"
                    for c in j.get("status", {}).get("conditions", [])))
                if created == a.jobs:
                    break
            time.sleep(0.2)
        t_all = time.monotonic() - t0
        pods = len(cl.get_json("pods", "-n", "bench")["items"])
        m1 = settle(port)
        cpu1 = cpu_seconds(ctl.pid)
        rss_kb = None
        for line in open(f"/proc/{ctl.pid}/status"):
            if line.startswith("VmHWM:"):
                rss_kb = int(line.split()[1])
        ctl.terminate()
        ctl.wait()
        cl.kubectl("delete", "namespace", "bench", "--wait=true", "--timeout=300s", timeout=330)
        base_after = baseline("baseline-after")
        base_rate = (base_before + base_after) / 2
        ctl_rate = n_pods / t_pods
        print(f"jobs: {a.jobs} x {a.workers} workers = {n_pods} pods ({pods} exist)")
        print(f"TrainingJobs created by the load generator (8 parallel) in "
              f"{t_created_jobs:.2f} s (0.2 s polling)")
        print(f"time until every pod exists: {t_pods:.2f} s; every job Created: {t_all:.2f} s")
        print(f"baseline (tight create loop, same client, 8 parallel): {base_rate:.1f} pods/s "
              f"(before {base_before:.1f}, after {base_after:.1f})")
        print(f"controller: {ctl_rate:.1f} pods/s; ratio controller/baseline: "
              f"{ctl_rate / base_rate:.2f}")
        if t_pods > t_first:
            print(f"  (from its first pod to its last, {t_pods - t_first:.2f} s: "
                  f"{n_pods / (t_pods - t_first):.1f} pods/s, ratio "
                  f"{n_pods / (t_pods - t_first) / base_rate:.2f}; first pod after "
                  f"{t_first:.2f} s, 0.2 s polling)")

        def d(name):
            return int(m1.get(name, 0) - m0.get(name, 0))
        req = d("ctrain_kube_requests_total")
        if "ctrain_kube_requests_total" in m1:
            parts = {"pod creates": d("ctrain_pods_created_total") +
                     d("ctrain_pod_create_errors_total"),
                     "status writes": d("ctrain_status_updates_total") +
                     d("ctrain_status_conflicts_total"),
                     "events": d("ctrain_events_total"),
                     "secret GETs": d("ctrain_secret_reads_total")}
            parts["other (service, secret writes, retries)"] = req - sum(parts.values())
            print(f"API requests per job: {req / a.jobs:.2f} (total {req}: " +
                  ", ".join(f"{k} {v}" for k, v in parts.items()) + ")")
        else:
            print("API requests per job: n/a (controller has no ctrain_kube_requests_total)")
        print(f"reconciles: {d('ctrain_reconcile_total')} "
              f"({d('ctrain_reconcile_total') / a.jobs:.1f} per job); "
              f"controller CPU {cpu1 - cpu0:.2f} s")
        print(f"controller peak RSS: {rss_kb / 1024:.1f} MiB")
    finally:
        if gen and gen.poll() is None:
            gen.kill()
            gen.wait()
        if ctl:
            ctl.terminate()
            ctl.wait()
            if a.log:
                shutil.copy(pathlib.Path(state) / "controller.log", a.log)
        subprocess.run(["bash", str(script), "down", "--dir", state], stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL)


def metric_or_none(port):
    try:
        return metric(port, "ctrain_reconcile_total")
    except Exception:
        return None


if __name__ == "__main__":
    main()
