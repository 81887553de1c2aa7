#!/ usr / bin / env python3
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
job (the controller's ctrain_kube_requests_total), and its peak RSS (VmHWM).

  python3 bench/controller.py [--jobs 200] [--workers 4] [--build build]
"""
import argparse
import json
import os
import pathlib
import re
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


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, default=200)
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--build", default=str(ROOT / "build"))
    a = ap.parse_args()
    build = pathlib.Path(a.build)
    create = build / "bench/bench_create"
    state = tempfile.mkdtemp(prefix="bench-controller-")
    script = ROOT / "tools/localcluster/cluster.sh"
    subprocess.run(["bash", str(script), "up", "--dir", state], check=True,
                   stdout=subprocess.DEVNULL)
    ctl = None
    try:
        cl = Cluster(pathlib.Path(state) / "kubeconfig", _local_kubectl(), state)
        install_controller_rbac(cl)
        kc = sa_kubeconfig(cl, pathlib.Path(state) / "controller.kubeconfig")
        n_pods = a.jobs * a.workers
        tmp = pathlib.Path(state)

#Baseline : raw pod creates with the same client.
        cl.kubectl("create", "namespace", "baseline")
        (tmp / "pod.json").write_text(json.dumps({
            "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p-%d"},
            "spec": {"restartPolicy": "Never",
                     "containers": [{"name": "worker", "image": "ctrain:latest"}]}}))
        out = subprocess.run([str(create), "--kubeconfig", cl.kubeconfig, "--ns", "baseline",
                              "--count", str(n_pods), "--parallel", "8", "--template",
                              str(tmp / "pod.json")], capture_output=True, text=True, check=True)
        base_rate = float(re.search(r": ([0-9.]+)/s", out.stdout).group(1))
        cl.kubectl("delete", "namespace", "baseline", "--wait=false")

#The controller.
        port = free_port()
        ctl = subprocess.Popen([str(build / "controller/ctrain-controller"), "--kubeconfig", kc,
                                "--leader-elect=false", "--log-format=text",
                                "--kube-api-qps=1000", "--kube-api-burst=1000",
                                f"--metrics-bind-address=127.0.0.1:{port}"],
                               stdout=open(tmp / "controller.log", "w"), stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 30
        while metric_or_none(port) is None:
            if time.monotonic() > deadline:
                sys.exit("controller did not serve /metrics; see " + str(tmp / "controller.log"))
            time.sleep(0.2)
        time.sleep(1)
        req0 = metric(port, "ctrain_kube_requests_total")
        cl.kubectl("create", "namespace", "bench")
        tmpl = {"apiVersion": "ctrain.dev/v1alpha1", "kind": "TrainingJob",
                "metadata": {"name": "j-%d"},
                "spec": {"replicaSpecs": {"Worker": {"replicas": a.workers, "template": {
                    "spec": {"containers": [{"name": "worker", "image": "ctrain:latest"}]}}}}}}
        (tmp / "tj.json").write_text(json.dumps(tmpl))
        t0 = time.monotonic()
        subprocess.run([str(create), "--kubeconfig", cl.kubeconfig, "--ns", "bench", "--count",
                        str(a.jobs), "--parallel", "8", "--group", "ctrain.dev", "--version",
                        "v1alpha1", "--resource", "trainingjobs", "--template",
                        str(tmp / "tj.json")], check=True, stdout=subprocess.DEVNULL)
        t_created_jobs = time.monotonic() - t0
        t_pods = None
        while True:
            if time.monotonic() - t0 > 600:
                sys.exit("timed out after 600 s")
            if t_pods is None and (metric(port, "ctrain_pods_created_total") or 0) >= n_pods:
                t_pods = time.monotonic() - t0
            if t_pods is not None:
                jobs = cl.get_json("tj", "-n", "bench")["items"]
                created = sum(1 for j in jobs if any(
                    c["type"] == "Created" and c["status"] == "True"
                    for c in j.get("status", {}).get("conditions", [])))
                if created == a.jobs:
                    break
            time.sleep(0.2)
        t_all = time.monotonic() - t0
        pods = len(cl.get_json("pods", "-n", "bench")["items"])
        req1 = metric(port, "ctrain_kube_requests_total")
        rss_kb = None
        for line in open(f"/proc/{ctl.pid}/status"):
            if line.startswith("VmHWM:"):
                rss_kb = int(line.split()[1])
        ctl_rate = n_pods / t_pods
        print(f"jobs: {a.jobs} x {a.workers} workers = {n_pods} pods ({pods} exist)")
        print(f"TrainingJobs created by the load generator in {t_created_jobs:.2f} s")
        print(f"time until every pod exists: {t_pods:.2f} s; every job Created: {t_all:.2f} s")
        print(f"baseline (tight create loop, same client, 8 parallel): {base_rate:.1f} pods/s")
        print(f"controller: {ctl_rate:.1f} pods/s; ratio controller/baseline: "
              f"{ctl_rate / base_rate:.2f}")
        if req0 is not None and req1 is not None:
            print(f"API requests per job: {(req1 - req0) / a.jobs:.1f} "
                  f"(total {int(req1 - req0)})")
        else:
            print("API requests per job: n/a (controller has no ctrain_kube_requests_total)")
        print(f"controller peak RSS: {rss_kb / 1024:.1f} MiB")
    finally:
        if ctl:
            ctl.terminate()
            ctl.wait()
        subprocess.run(["bash", str(script), "down", "--dir", state], stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL)


def metric_or_none(port):
    try:
        return metric(port, "ctrain_reconcile_total")
    except Exception:
        return None


if __name__ == "__main__":
    main()
