#!/usr/bin/env python3
"""bench/scale: ctrain-controller at the scale of a real cluster (issue 41), on fake Nodes.

A local control plane (tools/localcluster), N fake Nodes over Z zones and KWOK as their
kubelet (tools/kwok/run.sh, stages.yaml): pods schedule, go Running, and exit 0 after
--sim-after (the pod template's ctrain.dev/sim-exit / ctrain.dev/sim-after annotations).
ctrain-controller ($CTRAIN_BUILD_DIR/controller/ctrain-controller, or --build) runs here
as its ServiceAccount (manifests/ RBAC), --kube-api-qps/--kube-api-burst 1000 by default
as bench/controller.py (so the client limiter does not hide the apiserver). ctrain only:
training-operator v1.9.3 on the same fake cluster is a later step of issue 41.

Shapes (--shape, or --jobs/--workers/--nodes):
  small   500 jobs x 4 workers on 200 nodes       (2,000 pods)
  10k     2500 jobs x 4 workers on 1000 nodes     (10,000 pods)
  wide    100 jobs x 64 workers on 1000 nodes     (6,400 pods)
  huge    10 jobs x 1024 workers on 1000 nodes    (10,240 pods)

Per run: seconds from the first job create to every pod Running (and per job, its create
to its last pod Running: p50/p99), to every job Succeeded; kube-apiserver requests by
verb/resource (apiserver_request_total diffed; every client, since the metric has no
user label) beside the controller's own count (ctrain_kube_requests_total); CPU seconds
of the controller and of kube-apiserver; the controller's peak RSS (VmHWM); watch events
the apiserver sent (apiserver_watch_events_total, every watcher). Invariants: every job
Succeeded; no duplicate pod (one uid per pod name and attempt, from a watch of every pod
event); after deleting the jobs, nothing of theirs left (pods, Services, Secrets,
ConfigMaps, NetworkPolicies) within --gc-wait s (kube-controller-manager's garbage
collector deletes at its client's 20 requests/s: ~15 min for the 10k shape, so
--gc-wait 0 checks only that each object left has an ownerReference to a deleted job
and no pod is stuck on the ctrain.dev/attempt finalizer, then deletes the namespace).
Plots pods Running over time into docs/img/scale-<shape>.png (matplotlib, if importable).

  CTRAIN_BUILD_DIR=build python3 bench/scale.py --shape small [--sim-after 30s]
                                                [--qps 1000] [--gc-wait 300] [--keep]
"""
import argparse
import collections
import http.client
import json
import os
import pathlib
import re
import ssl
import subprocess
import sys
import threading
import time
import urllib.parse
from concurrent.futures import ThreadPoolExecutor

from _paths import ROOT
import clusterlib
from clusterlib import (Controller, control_plane_down, control_plane_up,
                        install_controller_rbac, sa_kubeconfig)

SHAPES = {"small": (500, 4, 200), "10k": (2500, 4, 1000), "wide": (100, 64, 1000),
          "huge": (10, 1024, 1000)}
RUN_SH = ROOT / "tools/kwok/run.sh"
TJ = "/apis/ctrain.dev/v1alpha1/namespaces/{ns}/trainingjobs"


class Api:
    """A small client of the admin kubeconfig (client certificate), one connection a
    thread, for the load generator, the watches and /metrics."""

    def __init__(self, kubeconfig):
        text = pathlib.Path(kubeconfig).read_text()

        def field(name):
            return re.search(rf"^\s*{name}: (.*)$", text, re.M).group(1).strip()
        u = urllib.parse.urlparse(field("server"))
        self.host, self.port = u.hostname, u.port
        self.ctx = ssl.create_default_context(cafile=field("certificate-authority"))
        self.ctx.load_cert_chain(field("client-certificate"), field("client-key"))
        self.local = threading.local()

    def conn(self, timeout=60):
        return http.client.HTTPSConnection(self.host, self.port, context=self.ctx,
                                           timeout=timeout)

    def call(self, method, path, body=None, ctype="application/json"):
        c = getattr(self.local, "c", None)
        for attempt in range(3):
            if c is None:
                c = self.local.c = self.conn()
            try:
                c.request(method, path, body=json.dumps(body) if body is not None else None,
                          headers={"Content-Type": ctype} if body is not None else {})
                r = c.getresponse()
                data = r.read()
                return r.status, data
            except (OSError, http.client.HTTPException):
                c.close()
                c = self.local.c = None
                if attempt == 2:
                    raise
        return None, b""

    def json(self, path):
        st, data = self.call("GET", path)
        if st != 200:
            raise RuntimeError(f"GET {path}: {st} {data[:300]!r}")
        return json.loads(data)

    def items(self, path):
        """Every item of a list, in pages of 500."""
        out, cont = [], ""
        while True:
            sep = "&" if "?" in path else "?"
            d = self.json(f"{path}{sep}limit=500" + (f"&continue={cont}" if cont else ""))
            out += d["items"]
            cont = d["metadata"].get("continue")
            if not cont:
                return out


class Watch(threading.Thread):
    """Watches `path` from a list's resourceVersion, calling on_event(type, obj, t) with
    time.monotonic(); reconnects from the last version seen."""

    def __init__(self, api, path, on_event):
        super().__init__(daemon=True)
        self.api, self.path, self.on_event = api, path, on_event
        self.stop = threading.Event()
        self.rv = api.json(path + "?limit=1")["metadata"]["resourceVersion"]
        self.ready = threading.Event()

    def run(self):
        while not self.stop.is_set():
            c = self.api.conn(timeout=30)
            try:
                c.request("GET", f"{self.path}?watch=1&resourceVersion={self.rv}"
                          "&allowWatchBookmarks=true&timeoutSeconds=600")
                r = c.getresponse()
                self.ready.set()
                while not self.stop.is_set():
                    line = r.readline()
                    if not line:
                        break
                    ev = json.loads(line)
                    obj = ev["object"]
                    if ev["type"] == "ERROR":
                        self.rv = self.api.json(self.path + "?limit=1")["metadata"][
                            "resourceVersion"]
                        break
                    self.rv = obj["metadata"].get("resourceVersion", self.rv)
                    if ev["type"] != "BOOKMARK":
                        self.on_event(ev["type"], obj, time.monotonic())
            except (OSError, http.client.HTTPException, ValueError):
                time.sleep(0.2)
            finally:
                c.close()


class Observer:
    """What the watches saw: per pod name and attempt, its uids; per pod its first
    Running; per job its Succeeded; pods Running over time."""

    def __init__(self):
        self.lock = threading.Lock()
        self.uids = collections.defaultdict(set)
        self.running = {}        # uid -> t
        self.job_of = {}         # uid -> job
        self.done_jobs = {}      # job -> t (Succeeded)
        self.failed_jobs = {}
        self.series = []         # (t, pods running)
        self.n_running = 0
        self.pod_events = 0

    def pod(self, typ, pod, t):
        md = pod["metadata"]
        lab = md.get("labels", {})
        key = (md["name"], lab.get("ctrain.dev/attempt", "?"))
        with self.lock:
            self.pod_events += 1
            self.uids[key].add(md["uid"])
            self.job_of[md["uid"]] = lab.get("ctrain.dev/job-name")
            if pod.get("status", {}).get("phase") == "Running" and md["uid"] not in self.running:
                self.running[md["uid"]] = t
                self.n_running += 1
                self.series.append((t, self.n_running))

    def job(self, typ, job, t):
        name = job["metadata"]["name"]
        for c in job.get("status", {}).get("conditions", []):
            if c.get("status") != "True":
                continue
            with self.lock:
                if c["type"] == "Succeeded" and name not in self.done_jobs:
                    self.done_jobs[name] = t
                elif c["type"] == "Failed" and name not in self.failed_jobs:
                    self.failed_jobs[name] = t


def prom(text, name):
    """{labels-dict-as-tuple: value} of one metric family."""
    out = {}
    for m in re.finditer(rf"^{name}(?:{{(.*?)}})? ([0-9.e+-]+)$", text, re.M):
        labels = tuple(sorted(re.findall(r'(\w+)="([^"]*)"', m.group(1) or "")))
        out[labels] = out.get(labels, 0) + float(m.group(2))
    return out


def by(counts, *keys):
    out = collections.Counter()
    for labels, v in counts.items():
        d = dict(labels)
        out[tuple(d.get(k, "") for k in keys)] += v
    return out


def cpu_seconds(pid):
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def proc_status(pid, key):
    for line in open(f"/proc/{pid}/status"):
        if line.startswith(key + ":"):
            return int(line.split()[1])
    return 0


def pid_of(cl, name):
    p = pathlib.Path(cl.state_dir) / "pids" / f"{name}.pid"
    if p.exists():
        return int(p.read_text().split()[0])
    out = subprocess.run(["pgrep", "-n", "-x", name], capture_output=True, text=True).stdout
    return int(out.split()[0]) if out.strip() else None


def kwok(cmd, cl, *args):
    subprocess.run(["bash", str(RUN_SH), cmd, "--kubeconfig", cl.kubeconfig, *map(str, args)],
                   check=True, env=dict(os.environ, KUBECTL=cl.kubectl_bin), timeout=900)


def job_body(name, workers, sim_exit, sim_after):
    return {"apiVersion": "ctrain.dev/v1alpha1", "kind": "TrainingJob",
            "metadata": {"name": name},
            "spec": {"replicaSpecs": {"Worker": {"replicas": workers, "template": {
                "metadata": {"annotations": {"ctrain.dev/sim-exit": str(sim_exit),
                                             "ctrain.dev/sim-after": sim_after}},
                "spec": {"containers": [{"name": "worker", "image": "ctrain:latest"}]}}}}}}


def pct(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(q * (len(xs) - 1))))] if xs else float("nan")


LEFTOVER = [("pods", "/api/v1/namespaces/{ns}/pods"),
            ("services", "/api/v1/namespaces/{ns}/services"),
            ("secrets", "/api/v1/namespaces/{ns}/secrets"),
            ("configmaps", "/api/v1/namespaces/{ns}/configmaps"),
            ("networkpolicies", "/apis/networking.k8s.io/v1/namespaces/{ns}/networkpolicies")]


def leftovers(api, ns):
    out = {}
    for kind, path in LEFTOVER:
        items = [o for o in api.items(path.format(ns=ns))
                 if o["metadata"]["name"] != "kube-root-ca.crt"]
        out[kind] = items
    return out


def run(a, cl, api, kc, ns, log_dir, on_figures=None):
    """One shape on a cluster with kwok nodes up: returns the figures (a dict)."""
    n_pods = a.jobs * a.workers
    st, data = api.call("POST", "/api/v1/namespaces",
                        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
    if st not in (201, 409):
        raise RuntimeError(f"namespace {ns}: {st} {data[:200]!r}")
    obs = Observer()
    watches = [Watch(api, f"/api/v1/namespaces/{ns}/pods", obs.pod),
               Watch(api, TJ.format(ns=ns), obs.job)]
    for w in watches:
        w.start()
        w.ready.wait(30)
    ctl = Controller(cl, kc, log_dir / f"controller-{ns}.log",
                     [f"--kube-api-qps={a.qps}", f"--kube-api-burst={a.qps}",
                      "--log-level=info"] +
                     ([f"--workers={a.ctl_workers}"] if a.ctl_workers else []))
    ctl.start()
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                m = ctl.metrics()
                if re.search(r"^ctrain_leader 1", m, re.M):
                    break
            except OSError:
                pass
            if time.monotonic() > deadline or ctl.proc.poll() is not None:
                raise RuntimeError(f"controller not leading in 60 s: {ctl.log_path}")
            time.sleep(0.3)
        apid = pid_of(cl, "kube-apiserver")
        am0 = api.call("GET", "/metrics")[1].decode()
        cm0 = ctl.metrics()
        ccpu0, acpu0 = cpu_seconds(ctl.proc.pid), cpu_seconds(apid)

        # The load: every job created at once, 8 connections.
        created = {}
        t0 = time.monotonic()

        def make(i):
            name = f"s-{i}"
            st, data = api.call("POST", TJ.format(ns=ns),
                                job_body(name, a.workers, 0, a.sim_after))
            if st != 201:
                raise RuntimeError(f"create {name}: {st} {data[:300]!r}")
            created[name] = time.monotonic()
        with ThreadPoolExecutor(8) as ex:
            list(ex.map(make, range(a.jobs)))
        t_created = time.monotonic() - t0
        print(f"  {a.jobs} TrainingJobs created in {t_created:.1f} s", flush=True)

        t_running = t_done = None
        last_print = 0.0
        while True:
            now = time.monotonic()
            with obs.lock:
                nr, nd, nf = obs.n_running, len(obs.done_jobs), len(obs.failed_jobs)
            if t_running is None and nr >= n_pods:
                t_running = max(obs.running.values()) - t0
            if nd + nf >= a.jobs:
                t_done = max(list(obs.done_jobs.values()) + list(obs.failed_jobs.values())) - t0
                break
            if now - t0 > a.timeout:
                print(f"  TIMEOUT after {a.timeout} s: {nr}/{n_pods} pods Running, "
                      f"{nd}/{a.jobs} jobs Succeeded, {nf} Failed", flush=True)
                break
            if now - last_print > 15:
                m = ctl.metrics()
                made = prom(m, "ctrain_pods_created_total")
                print(f"  t={now - t0:6.1f} s: pods created {int(sum(made.values()))}, Running "
                      f"{nr}/{n_pods}, jobs Succeeded {nd}/{a.jobs}", flush=True)
                last_print = now
            time.sleep(0.5)
        ccpu1, acpu1 = cpu_seconds(ctl.proc.pid), cpu_seconds(apid)
        rss_peak = proc_status(ctl.proc.pid, "VmHWM") / 1024
        rss_now = proc_status(ctl.proc.pid, "VmRSS") / 1024
        cm1 = ctl.metrics()
        am1 = api.call("GET", "/metrics")[1].decode()

        if on_figures:  # before the clean-up, which may be slow or fail at 10,000 pods
            on_figures(figures(a, obs, t0, created, t_created, t_running, t_done, cm0, cm1,
                               am0, am1, ccpu0, ccpu1, acpu0, acpu1, rss_peak, rss_now))
        # Clean-up: delete the jobs (the apiserver deletes 2,500 in minutes: the call may
        # time out while it goes on), then what is left of theirs.
        tdel = time.monotonic()
        c = api.conn(timeout=600)
        try:
            c.request("DELETE", TJ.format(ns=ns), body=json.dumps(
                {"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": "Background"}),
                headers={"Content-Type": "application/json"})
            c.getresponse().read()
        except (OSError, http.client.HTTPException) as e:
            print(f"  DELETE trainingjobs: {e} (the apiserver goes on deleting)", flush=True)
        finally:
            c.close()
        left = None
        while time.monotonic() - tdel < a.gc_wait + 5:
            left = leftovers(api, ns)
            if not any(left.values()):
                break
            time.sleep(3)
        t_gc = time.monotonic() - tdel
        left = left if left is not None else leftovers(api, ns)
        jobs_left = len(api.items(TJ.format(ns=ns)))
        # What is left must be collectable: an ownerReference (the deleted jobs'), and no
        # pod held by our finalizer long after its deletion.
        orphans = {k: sum(1 for o in v if not o["metadata"].get("ownerReferences"))
                   for k, v in left.items()}
        stuck = sum(1 for p in left["pods"] if p["metadata"].get("deletionTimestamp") and
                    "ctrain.dev/attempt" in p["metadata"].get("finalizers", []))
        cm2 = ctl.metrics()
    finally:
        for w in watches:
            w.stop.set()
        ctl.stop()
    r = figures(a, obs, t0, created, t_created, t_running, t_done, cm0, cm1, am0, am1,
                ccpu0, ccpu1, acpu0, acpu1, rss_peak, rss_now)
    r["ctl_requests_cleanup"] = sum(prom(cm2, "ctrain_kube_requests_total").values()) - \
        sum(prom(cm1, "ctrain_kube_requests_total").values())
    r.update({"gc_seconds": t_gc, "jobs_left": jobs_left, "left": {k: len(v) for k, v in
                                                                 left.items()},
              "orphans": orphans, "stuck": stuck})
    return r


def figures(a, obs, t0, created, t_created, t_running, t_done, cm0, cm1, am0, am1,
            ccpu0, ccpu1, acpu0, acpu1, rss_peak, rss_now):
    """The run's figures, up to every job's end (the clean-up's are added by run)."""
    n_pods = a.jobs * a.workers
    last_run = collections.defaultdict(float)
    with obs.lock:
        for uid, t in obs.running.items():
            j = obs.job_of.get(uid)
            last_run[j] = max(last_run[j], t)
    per_job = [last_run[j] - created[j] for j in created if j in last_run]
    dups = {k: v for k, v in obs.uids.items() if len(v) > 1}

    def cdiff(name, m0=cm0, m1=cm1):
        return sum(prom(m1, name).values()) - sum(prom(m0, name).values())
    req0, req1 = prom(am0, "apiserver_request_total"), prom(am1, "apiserver_request_total")
    reqs = by(req1, "verb", "resource", "subresource")
    reqs.subtract(by(req0, "verb", "resource", "subresource"))
    wev = by(prom(am1, "apiserver_watch_events_total"), "resource", "kind")
    wev.subtract(by(prom(am0, "apiserver_watch_events_total"), "resource", "kind"))
    return {
        "jobs": a.jobs, "workers": a.workers, "pods": n_pods, "nodes": a.nodes,
        "t_created": t_created, "t_running": t_running, "t_done": t_done,
        "per_job_p50": pct(per_job, 0.5), "per_job_p99": pct(per_job, 0.99),
        "running": obs.n_running, "succeeded": len(obs.done_jobs), "failed": len(obs.failed_jobs),
        "duplicates": len(dups), "dup_examples": [f"{k[0]}#{k[1]}" for k in list(dups)[:5]],
        "ctl_requests": cdiff("ctrain_kube_requests_total"),
        "reconciles": cdiff("ctrain_reconcile_total"),
        "pods_created": cdiff("ctrain_pods_created_total"),
        "status_writes": cdiff("ctrain_status_updates_total"),
        "conflicts": cdiff("ctrain_status_conflicts_total"),
        "events": cdiff("ctrain_events_total"),
        "gang_restarts": cdiff("ctrain_gang_restarts_total"),
        "pods_deleted": cdiff("ctrain_pods_deleted_total"),
        "ctl_cpu": ccpu1 - ccpu0, "api_cpu": acpu1 - acpu0,
        "rss_peak_mib": rss_peak, "rss_now_mib": rss_now,
        "apiserver_requests": {"/".join(x for x in k if x): int(v)
                               for k, v in reqs.most_common() if v > 0},
        "watch_events": {"/".join(x for x in k if x): int(v)
                         for k, v in wev.most_common() if v > 0},
        "pod_events_seen": obs.pod_events,
        "series": [(t - t0, n) for t, n in obs.series],
    }


def report(label, r):
    j = r["jobs"]
    print(f"== {label}: {j} jobs x {r['workers']} workers = {r['pods']} pods on {r['nodes']} "
          "fake nodes (KWOK)")
    rows = [
        ("jobs created (8 connections)", f"{r['t_created']:.1f} s"),
        ("first create -> every pod Running", f"{r['t_running']:.1f} s" if r["t_running"]
         else f"not reached ({r['running']} Running)"),
        ("per job, create -> its pods Running", f"p50 {r['per_job_p50']:.1f} s, "
         f"p99 {r['per_job_p99']:.1f} s"),
        ("first create -> every job Succeeded", f"{r['t_done']:.1f} s" if r["t_done"]
         else "not reached"),
        ("jobs Succeeded / Failed", f"{r['succeeded']} / {r['failed']}"),
        ("duplicate pods (name+attempt, 2+ uids)", f"{r['duplicates']} {r['dup_examples']}"),
        ("controller API requests", f"{r['ctl_requests']:.0f} ({r['ctl_requests'] / j:.2f} "
         "per job)"),
        ("reconciles", f"{r['reconciles']:.0f} ({r['reconciles'] / j:.1f} per job)"),
        ("pods created / status writes / conflicts / events",
         f"{r['pods_created']:.0f} / {r['status_writes']:.0f} / {r['conflicts']:.0f} / "
         f"{r['events']:.0f}"),
        ("gang restarts / pods deleted by the controller",
         f"{r['gang_restarts']:.0f} / {r['pods_deleted']:.0f}"),
        ("controller CPU", f"{r['ctl_cpu']:.1f} s ({1000 * r['ctl_cpu'] / r['pods']:.2f} ms "
         "per pod)"),
        ("kube-apiserver CPU (all clients)", f"{r['api_cpu']:.1f} s"),
        ("controller peak RSS", f"{r['rss_peak_mib']:.1f} MiB (now {r['rss_now_mib']:.1f}); "
         f"{1024 * 1024 * r['rss_peak_mib'] / r['pods']:.0f} bytes per cached pod"),
    ]
    for k, v in rows:
        print(f"  {k:<46} {v}")
    print("  kube-apiserver requests (every client), by verb/resource/subresource:")
    for k, v in list(r["apiserver_requests"].items())[:18]:
        print(f"    {v:8d}  {k}  ({v / j:.2f} per job)")
    print("  watch events sent by kube-apiserver (every watcher): " +
          ", ".join(f"{k} {v}" for k, v in list(r["watch_events"].items())[:8]))
    print(f"  pod watch events seen by this bench's own watch: {r['pod_events_seen']}",
          flush=True)


def report_cleanup(r):
    print(f"  after deleting the jobs ({r['gc_seconds']:.0f} s): left {r['left']}, jobs "
          f"{r['jobs_left']}, without ownerReferences {r['orphans']}, pods stuck on the "
          f"finalizer {r['stuck']}; controller API requests meanwhile "
          f"{r['ctl_requests_cleanup']:.0f}", flush=True)


def plot(r, shape, path):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print(f"  no plot: matplotlib is not importable (pip install matplotlib) -> {path}")
        return
    xs = [0.0] + [t for t, _ in r["series"]]
    ys = [0] + [n for _, n in r["series"]]
    fig, ax = plt.subplots(figsize=(7, 3.5))
    ax.step(xs, ys, where="post")
    ax.set_xlabel("seconds since the first TrainingJob create")
    ax.set_ylabel("pods Running")
    ax.set_title(f"ctrain-controller on KWOK: {r['jobs']} jobs x {r['workers']} workers "
                 f"({shape}), {r['nodes']} nodes")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    print(f"  plot: {path}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shape", choices=sorted(SHAPES), default="small")
    ap.add_argument("--jobs", type=int)
    ap.add_argument("--workers", type=int)
    ap.add_argument("--nodes", type=int)
    ap.add_argument("--zones", type=int, default=4)
    ap.add_argument("--sim-after", default="30s", help="pods exit 0 this long after Running")
    ap.add_argument("--lease-seconds", type=int, default=120,
                    help="fake nodes' Lease duration (kwok renews every quarter of it)")
    ap.add_argument("--node-grace", type=int, default=300,
                    help="kube-controller-manager's node-monitor grace, s: a fake node whose "
                         "renewal lags (a starved machine) must not turn NotReady")
    ap.add_argument("--qps", type=int, default=1000, help="controller --kube-api-qps/-burst")
    ap.add_argument("--ctl-workers", type=int, help="controller --workers")
    ap.add_argument("--timeout", type=int, default=900, help="seconds for the jobs to end")
    ap.add_argument("--gc-wait", type=int, default=300,
                    help="seconds to wait for the garbage collector after deleting the jobs")
    ap.add_argument("--build", help="the build dir (default $CTRAIN_BUILD_DIR, else build)")
    ap.add_argument("--json", help="write the figures here")
    ap.add_argument("--plot", default="auto", help="PNG path, auto: docs/img/scale-<shape>.png, "
                    "none: no plot")
    ap.add_argument("--keep", action="store_true", help="leave the cluster up (prints its dir)")
    a = ap.parse_args()
    j, w, n = SHAPES[a.shape]
    a.jobs, a.workers, a.nodes = a.jobs or j, a.workers or w, a.nodes or n
    if a.build:
        clusterlib.CONTROLLER = pathlib.Path(a.build) / "controller/ctrain-controller"
    if not clusterlib.CONTROLLER.exists():
        sys.exit(f"no controller at {clusterlib.CONTROLLER}: build it, or --build/CTRAIN_BUILD_DIR")
    if subprocess.run(["bash", str(ROOT / "tools/kwok/build.sh")], stdout=subprocess.DEVNULL
                      ).returncode:
        sys.exit("tools/kwok/build.sh failed")
    r = None
    cl = control_plane_up(prefix="bench-scale-",
                          env={"CTRAIN_NODE_MONITOR_GRACE": f"{a.node_grace}s"})
    try:
        install_controller_rbac(cl)
        kc = sa_kubeconfig(cl, pathlib.Path(cl.state_dir) / "controller.kubeconfig")
        t = time.monotonic()
        kwok("up", cl, "--nodes", a.nodes, "--zones", a.zones, "--lease-seconds", a.lease_seconds)
        print(f"{a.nodes} fake nodes Ready in {time.monotonic() - t:.1f} s; load average "
              f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs (shared machine: noisy)",
              flush=True)
        api = Api(cl.kubeconfig)
        def on_figures(f):
            report(a.shape, f)
            if a.json:
                pathlib.Path(a.json).write_text(json.dumps(f, indent=1))
            if a.plot != "none":
                plot(f, a.shape, pathlib.Path(a.plot) if a.plot != "auto"
                     else ROOT / f"docs/img/scale-{a.shape}.png")
        r = run(a, cl, api, kc, "scale", pathlib.Path(cl.state_dir), on_figures)
        report_cleanup(r)
        if a.json:
            pathlib.Path(a.json).write_text(json.dumps(r, indent=1))
    finally:
        if a.keep:
            print(f"cluster kept: {cl.state_dir} (tools/kwok/run.sh down, cluster.sh down)")
        else:
            kwok("down", cl)
            control_plane_down(cl)
    ok = r and r["succeeded"] == a.jobs and not r["duplicates"] and not any(r["orphans"].values()) \
        and not r["stuck"]
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
