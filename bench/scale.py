#!/usr/bin/env python3
"""bench/scale: ctrain-controller beside training-operator at the scale of a real cluster,
on fake Nodes.

A local control plane (tools/localcluster), N fake Nodes over Z zones and KWOK as their
kubelet (tools/kwok/run.sh, stages.yaml): pods schedule, go Running, and exit 0 after
--sim-after (the pod template's ctrain.dev/sim-exit / ctrain.dev/sim-after annotations).
Each row runs on a fresh cluster of the same shape (same binaries, flags, node count), one
after the other in the same run; a row's clean-up (the garbage collector deleting 10,000
pods at 20 requests/s) would otherwise load the next row:
  ctrain             ctrain-controller ($CTRAIN_BUILD_DIR/controller/ctrain-controller, or
                     --build) as its ServiceAccount (manifests/ RBAC), TrainingJobs;
  training-operator  Kubeflow training-operator v1.9.3 (bench/baseline_tfop.py: built from
                     its Go module, its TFJob CRD and ClusterRole, out of cluster,
                     --controller-threads 16), TFJobs of the same shape (Worker only,
                     restartPolicy Never, the same annotations, runPolicy.cleanPodPolicy
                     Running as a TrainingJob's default: when worker 0 succeeds, both
                     delete the workers still running; --tfjob-clean-pod-policy);
both with --kube-api-qps/--kube-api-burst 1000 (so the client limiter does not hide the
apiserver).

Shapes (--shape, a comma list, or --jobs/--workers/--nodes):
  1k      250 jobs x 4 workers on 200 nodes       (1,000 pods: the CI smoke's shape)
  small   500 jobs x 4 workers on 200 nodes       (2,000 pods)
  10k     2500 jobs x 4 workers on 1000 nodes     (10,000 pods)
  wide    100 jobs x 64 workers on 1000 nodes     (6,400 pods)
  huge    10 jobs x 1024 workers on 1000 nodes    (10,240 pods)

Per row: seconds from the first job create to every pod Running (and per job, its create
to its last pod Running: p50/p99), to every job Succeeded; the controller's API requests by
verb and resource, from kube-apiserver's audit log (CTRAIN_APISERVER_AUDIT_POLICY: the two
controllers' ServiceAccounts at Metadata level, nothing else); CPU seconds of the controller
and of kube-apiserver; the controller's peak RSS (VmHWM); watch events the apiserver sent
(apiserver_watch_events_total, every watcher). Invariants: every job Succeeded; no duplicate
pod (one uid per pod name and attempt, from a watch of every pod event); after deleting the
jobs, nothing of theirs left within --gc-wait s (--gc-wait 0: each object left has an
ownerReference to a deleted job and no pod is stuck on the ctrain.dev/attempt finalizer).
Plots pods Running over time, both rows, into docs/img/scale-<shape>.png (matplotlib).

--lifecycle (ctrain, on its own cluster of the shape): two replicas with leader election;
  failover: SIGKILL of the leader once half the pods are created: seconds until the standby
    leads and until its first write (pod create, pod delete or status write), duplicate
    pods, jobs restarted;
  restart: with every pod Running, SIGTERM of the leader and a new replica: seconds to its
    first reconcile and to a quiet queue (depth 0, no reconcile for 3 s), its RSS then,
    jobs restarted by it;
  node loss: --lose nodes (100) lost at once (run.sh lose: no more heartbeats): the jobs
    with a pod on them; seconds until each is Running again (a new attempt, every pod
    Running), against kube-controller-manager's node-monitor grace (--life-node-grace)
    plus 60 s; status.disruptions +1 and status.restarts (backoffLimit's count) unchanged
    for each; no other job restarted.

  CTRAIN_BUILD_DIR=build python3 bench/scale.py --shape 10k,wide,huge [--rows ctrain,training-operator]
                                                [--sim-after 30s] [--gc-wait 0] [--lifecycle]
"""
import argparse
import collections
import http.client
import json
import os
import pathlib
import re
import signal
import ssl
import subprocess
import sys
import threading
import time
import urllib.parse
from concurrent.futures import ThreadPoolExecutor

from _paths import ROOT
import clusterlib
from baseline_tfop import Operator
from clusterlib import (Controller, control_plane_down, control_plane_up,
                        install_controller_rbac, sa_kubeconfig)

SHAPES = {"1k": (250, 4, 200), "small": (500, 4, 200), "10k": (2500, 4, 1000),
          "wide": (100, 64, 1000), "huge": (10, 1024, 1000)}
RUN_SH = ROOT / "tools/kwok/run.sh"
TJ = "/apis/ctrain.dev/v1alpha1/namespaces/{ns}/trainingjobs"
TFJ = "/apis/kubeflow.org/v1/namespaces/{ns}/tfjobs"
USERS = {"ctrain": "system:serviceaccount:ctrain-system:ctrain-controller",
         "training-operator": "system:serviceaccount:kubeflow:training-operator",
         "pods": "ctrain-admin"}
AUDIT_POLICY = """apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived, ResponseStarted]
rules:
- level: Metadata
  users: [%s]
- level: None
""" % ", ".join(f'"{u}"' for u in USERS.values())


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
    Running; per job its Succeeded and its status counters; per job and attempt, when its
    last pod went Running; pods Running over time."""

    def __init__(self, job_label, attempt_label=None, workers=0, pods_are_jobs=False):
        self.job_label, self.attempt_label, self.workers = job_label, attempt_label, workers
        self.pods_are_jobs = pods_are_jobs  # no job object: a job ends when its pods do
        self.done_by = collections.Counter()
        self.done_uids = set()
        self.lock = threading.Lock()
        self.uids = collections.defaultdict(set)
        self.running = {}        # uid -> t
        self.job_of = {}         # uid -> job
        self.done_jobs = {}      # job -> t (Succeeded)
        self.failed_jobs = {}
        self.status = {}         # job -> (attempt, restarts, disruptions)
        self.run_by = collections.Counter()  # (job, attempt) -> pods Running
        self.full_at = {}        # (job, attempt) -> t its last pod went Running
        self.nodes_of = collections.defaultdict(set)  # (job, attempt) -> nodes of its pods
        self.series = []         # (t, pods running)
        self.n_running = 0
        self.pod_events = 0

    def pod(self, typ, pod, t):
        md = pod["metadata"]
        lab = md.get("labels", {})
        att = lab.get(self.attempt_label, "?") if self.attempt_label else "?"
        key = (md["name"], att)
        with self.lock:
            self.pod_events += 1
            self.uids[key].add(md["uid"])
            job = lab.get(self.job_label)
            self.job_of[md["uid"]] = job
            if pod.get("spec", {}).get("nodeName"):
                self.nodes_of[(job, att)].add(pod["spec"]["nodeName"])
            if pod.get("status", {}).get("phase") == "Running" and md["uid"] not in self.running:
                self.running[md["uid"]] = t
                self.n_running += 1
                self.series.append((t, self.n_running))
                self.run_by[(job, att)] += 1
                if self.run_by[(job, att)] == self.workers:
                    self.full_at[(job, att)] = t
            if (self.pods_are_jobs and pod.get("status", {}).get("phase") == "Succeeded"
                    and md["uid"] not in self.done_uids):
                self.done_uids.add(md["uid"])
                self.done_by[job] += 1
                if self.done_by[job] == self.workers:
                    self.done_jobs[job] = t

    def job(self, typ, job, t):
        name = job["metadata"]["name"]
        st = job.get("status") or {}
        with self.lock:
            self.status[name] = (st.get("attempt", 0), st.get("restarts", 0),
                                 st.get("disruptions", 0))
        for c in st.get("conditions") or []:
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


def sim_annotations(sim_exit, sim_after):
    return {"ctrain.dev/sim-exit": str(sim_exit), "ctrain.dev/sim-after": sim_after}


class CtrainRow:
    """ctrain-controller as its ServiceAccount, TrainingJobs."""
    name = "ctrain"
    path = TJ
    job_label, attempt_label = "ctrain.dev/job-name", "ctrain.dev/attempt"

    def __init__(self, a, cl, log_dir):
        self.a, self.cl, self.log_dir = a, cl, log_dir
        install_controller_rbac(cl)
        self.kc = sa_kubeconfig(cl, pathlib.Path(cl.state_dir) / "controller.kubeconfig")
        self.ctl = None

    def replica(self, tag):
        a = self.a
        return Controller(self.cl, self.kc, self.log_dir / f"controller-{tag}.log",
                          [f"--kube-api-qps={a.qps}", f"--kube-api-burst={a.qps}",
                           "--log-level=info"] +
                          ([f"--workers={a.ctl_workers}"] if a.ctl_workers else []) +
                          getattr(a, "ctl_flags", "").split())

    def start(self):
        self.ctl = self.replica("a").start()
        wait_leading(self.ctl, 60)

    @property
    def pid(self):
        return self.ctl.proc.pid

    def counters(self):
        m = self.ctl.metrics()
        return {k: sum(prom(m, f"ctrain_{k}_total").values()) for k in
                ("kube_requests", "reconcile", "pods_created", "status_updates",
                 "status_conflicts", "events", "gang_restarts", "pods_deleted")}

    def progress(self):
        return f"pods created {int(self.counters()['pods_created'])}"

    def extra(self):
        return ctl_extra(self.ctl)

    def body(self, name, workers, sim_exit, sim_after):
        return {"apiVersion": "ctrain.dev/v1alpha1", "kind": "TrainingJob",
                "metadata": {"name": name},
                "spec": {"replicaSpecs": {"Worker": {"replicas": workers, "template": {
                    "metadata": {"annotations": sim_annotations(sim_exit, sim_after)},
                    "spec": {"containers": [{"name": "worker", "image": "ctrain:latest"}]}}}}}}

    def stop(self):
        if self.ctl:
            self.ctl.stop()


def ctl_extra(ctl):
    """What a ctrain-controller says of its memory and watches: heap (glibc), objects
    cached, watch events received."""
    m = ctl.metrics()
    return {"heap_mib": {dict(k).get("state"): v / 2**20
                         for k, v in prom(m, "ctrain_heap_bytes").items()},
            "cached": {dict(k).get("resource"): int(v)
                       for k, v in prom(m, "ctrain_cache_objects").items()},
            "watch_events_received": {k[0]: int(v) for k, v in by(
                prom(m, "ctrain_watch_events_total"), "resource").items()}}


class TfopRow:
    """Kubeflow training-operator v1.9.3 (bench/baseline_tfop.Operator), TFJobs."""
    name = "training-operator"
    path = TFJ
    job_label, attempt_label = "training.kubeflow.org/job-name", None

    def __init__(self, a, cl, log_dir):
        self.a, self.cl, self.log_dir = a, cl, log_dir
        self.op = None

    def start(self):
        self.op = Operator(self.cl, threads=16, qps=self.a.qps, burst=self.a.qps,
                           log=str(self.log_dir / "training-operator.log")).start()

    @property
    def pid(self):
        return self.op.proc.pid

    def counters(self):
        return {"kube_requests": sum(self.op.requests().values())}

    def progress(self):
        return f"API requests {int(self.counters()['kube_requests'])}"

    def extra(self):
        return {}

    def body(self, name, workers, sim_exit, sim_after):
        spec = {}
        if self.a.tfjob_clean_pod_policy != "default":
            spec["runPolicy"] = {"cleanPodPolicy": self.a.tfjob_clean_pod_policy}
        return {"apiVersion": "kubeflow.org/v1", "kind": "TFJob", "metadata": {"name": name},
                "spec": {**spec, "tfReplicaSpecs": {"Worker": {
                    "replicas": workers, "restartPolicy": "Never",
                    "template": {
                        "metadata": {"annotations": sim_annotations(sim_exit, sim_after)},
                        "spec": {"containers": [{"name": "tensorflow",
                                                 "image": "ctrain:latest"}]}}}}}}

    def stop(self):
        if self.op:
            self.op.stop(clean=False)  # each row's cluster is torn down after it


class PodsRow:
    """The floor: no controller; the bench creates each job's pods itself (the pods a
    4-worker job gets, with the same simulation annotations), 8 connections, as the admin.
    What the cluster alone takes to run them: no controller can be faster."""
    name = "pods"
    path = "/api/v1/namespaces/{ns}/pods"
    job_label, attempt_label = "bench.ctrain.dev/job", None
    pods_are_jobs = True
    pid = None

    def __init__(self, a, cl, log_dir):
        self.a = a
        self.sent = 0

    def start(self):
        pass

    def counters(self):
        return {"kube_requests": self.sent}

    def progress(self):
        return f"pods created {self.sent}"

    def extra(self):
        return {}

    def create(self, api, ns, name, sim_after):
        for i in range(self.a.workers):
            body = {"apiVersion": "v1", "kind": "Pod", "metadata": {
                "name": f"{name}-worker-{i}", "labels": {self.job_label: name},
                "annotations": sim_annotations(0, sim_after)},
                "spec": {"restartPolicy": "Never",
                         "containers": [{"name": "worker", "image": "ctrain:latest"}]}}
            st, data = api.call("POST", self.path.format(ns=ns), body)
            if st != 201:
                raise RuntimeError(f"create pod {name}-worker-{i}: {st} {data[:300]!r}")
            self.sent += 1

    def stop(self):
        pass


ROWS = {"ctrain": CtrainRow, "training-operator": TfopRow, "pods": PodsRow}


def wait_leading(ctl, limit_s):
    deadline = time.monotonic() + limit_s
    while True:
        try:
            if re.search(r"^ctrain_leader 1", ctl.metrics(), re.M):
                return time.monotonic()
        except OSError:
            pass
        if time.monotonic() > deadline or ctl.proc.poll() is not None:
            raise RuntimeError(f"controller not leading in {limit_s} s: {ctl.log_path}")
        time.sleep(0.1)


class Audit:
    """kube-apiserver's audit log (AUDIT_POLICY): the requests of one user from mark() on,
    by verb/resource/subresource."""

    def __init__(self, cl):
        self.path = pathlib.Path(cl.state_dir) / "logs/audit.log"
        self.offset = 0

    def mark(self):
        self.offset = self.path.stat().st_size if self.path.exists() else 0

    def count(self, user):
        out = collections.Counter()
        if not self.path.exists():
            return out
        with open(self.path, "rb") as f:
            f.seek(self.offset)
            for line in f:
                try:
                    e = json.loads(line)
                except ValueError:
                    continue
                if e.get("user", {}).get("username") != user:
                    continue
                o = e.get("objectRef") or {}
                out["/".join(x for x in (e.get("verb", "?"), o.get("resource", ""),
                                         o.get("subresource", "")) if x)] += 1
        return out


def kube_time(ts):
    """Seconds since the epoch of an RFC 3339 UTC time as the apiserver writes it."""
    import calendar
    return calendar.timegm(time.strptime(ts, "%Y-%m-%dT%H:%M:%SZ"))


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


def start_watches(api, ns, row, obs):
    watches = [Watch(api, f"/api/v1/namespaces/{ns}/pods", obs.pod)]
    if not getattr(row, "pods_are_jobs", False):
        watches.append(Watch(api, row.path.format(ns=ns), obs.job))
    for w in watches:
        w.start()
        w.ready.wait(30)
    return watches


def make_namespace(api, ns):
    st, data = api.call("POST", "/api/v1/namespaces",
                        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
    if st not in (201, 409):
        raise RuntimeError(f"namespace {ns}: {st} {data[:200]!r}")


def create_jobs(api, row, ns, a, sim_after):
    """Every job created at once, 8 connections: {name: time created}."""
    created = {}

    def make(i):
        name = f"s-{i}"
        if hasattr(row, "create"):
            row.create(api, ns, name, sim_after)
            created[name] = time.monotonic()
            return
        st, data = api.call("POST", row.path.format(ns=ns),
                            row.body(name, a.workers, 0, sim_after))
        if st != 201:
            raise RuntimeError(f"create {name}: {st} {data[:300]!r}")
        created[name] = time.monotonic()
    with ThreadPoolExecutor(8) as ex:
        list(ex.map(make, range(a.jobs)))
    return created


def run(a, cl, api, row, ns, audit, on_figures=None):
    """One shape, one row (started), on a cluster with kwok nodes up: the figures."""
    n_pods = a.jobs * a.workers
    make_namespace(api, ns)
    obs = Observer(row.job_label, row.attempt_label, a.workers,
                   getattr(row, "pods_are_jobs", False))
    watches = start_watches(api, ns, row, obs)
    try:
        apid = pid_of(cl, "kube-apiserver")
        am0 = api.call("GET", "/metrics")[1].decode()
        cm0 = row.counters()
        ccpu0, acpu0 = cpu_seconds(row.pid) if row.pid else 0.0, cpu_seconds(apid)
        audit.mark()

        t0 = time.monotonic()
        created = create_jobs(api, row, ns, a, a.sim_after)
        t_created = time.monotonic() - t0
        print(f"  {a.jobs} jobs created in {t_created:.1f} s", flush=True)

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
                print(f"  t={now - t0:6.1f} s: {row.progress()}, Running {nr}/{n_pods}, jobs "
                      f"Succeeded {nd}/{a.jobs}", flush=True)
                last_print = now
            time.sleep(0.5)
        ccpu1, acpu1 = cpu_seconds(row.pid) if row.pid else 0.0, cpu_seconds(apid)
        rss_peak = proc_status(row.pid, "VmHWM") / 1024 if row.pid else 0.0
        rss_now = proc_status(row.pid, "VmRSS") / 1024 if row.pid else 0.0
        time.sleep(2)  # the last status writes
        cm1 = row.counters()
        am1 = api.call("GET", "/metrics")[1].decode()
        by_req = audit.count(USERS[row.name])
        if row.name == "pods":  # kwok writes as the same admin: only the bench's creates
            by_req = collections.Counter({k: v for k, v in by_req.items() if k == "create/pods"})
        f = figures(a, row, obs, t0, created, t_created, t_running, t_done, cm0, cm1, am0, am1,
                    ccpu0, ccpu1, acpu0, acpu1, rss_peak, rss_now, by_req)
        f.update(row.extra())
        if on_figures:  # before the clean-up, which may be slow or fail at 10,000 pods
            on_figures(f)
        f.update(cleanup(a, api, row, ns))
        f["ctl_requests_cleanup"] = row.counters()["kube_requests"] - cm1["kube_requests"]
        return f
    finally:
        for w in watches:
            w.stop.set()


def cleanup(a, api, row, ns):
    """Deletes the jobs (the apiserver deletes 2,500 in minutes: the call may time out while
    it goes on) and checks what is left of theirs."""
    tdel = time.monotonic()
    c = api.conn(timeout=600)
    try:
        c.request("DELETE", row.path.format(ns=ns), body=json.dumps(
            {"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": "Background"}),
            headers={"Content-Type": "application/json"})
        c.getresponse().read()
    except (OSError, http.client.HTTPException) as e:
        print(f"  DELETE jobs: {e} (the apiserver goes on deleting)", flush=True)
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
    jobs_left = len(api.items(row.path.format(ns=ns)))
    # What is left must be collectable: an ownerReference (the deleted jobs'), and no
    # pod held by our finalizer long after its deletion.
    orphans = {k: sum(1 for o in v if not o["metadata"].get("ownerReferences"))
               for k, v in left.items()}
    # (30 s after its deletion: the controller releases a pod it sees going in a pass.)
    now = time.time()
    stuck = sum(1 for p in left["pods"] if p["metadata"].get("deletionTimestamp") and
                "ctrain.dev/attempt" in p["metadata"].get("finalizers", []) and
                now - kube_time(p["metadata"]["deletionTimestamp"]) > 30)
    return {"gc_seconds": t_gc, "jobs_left": jobs_left,
            "left": {k: len(v) for k, v in left.items()}, "orphans": orphans, "stuck": stuck}


def figures(a, row, obs, t0, created, t_created, t_running, t_done, cm0, cm1, am0, am1,
            ccpu0, ccpu1, acpu0, acpu1, rss_peak, rss_now, by_req):
    """The run's figures, up to every job's end (the clean-up's are added by run)."""
    n_pods = a.jobs * a.workers
    last_run = collections.defaultdict(float)
    with obs.lock:
        for uid, t in obs.running.items():
            j = obs.job_of.get(uid)
            last_run[j] = max(last_run[j], t)
    per_job = [last_run[j] - created[j] for j in created if j in last_run]
    dups = {k: v for k, v in obs.uids.items() if len(v) > 1}
    req0, req1 = prom(am0, "apiserver_request_total"), prom(am1, "apiserver_request_total")
    reqs = by(req1, "verb", "resource", "subresource")
    reqs.subtract(by(req0, "verb", "resource", "subresource"))
    wev = by(prom(am1, "apiserver_watch_events_total"), "resource", "kind")
    wev.subtract(by(prom(am0, "apiserver_watch_events_total"), "resource", "kind"))
    r = {
        "row": row.name, "jobs": a.jobs, "workers": a.workers, "pods": n_pods, "nodes": a.nodes,
        "t_created": t_created, "t_running": t_running, "t_done": t_done,
        "per_job_p50": pct(per_job, 0.5), "per_job_p99": pct(per_job, 0.99),
        "running": obs.n_running, "succeeded": len(obs.done_jobs), "failed": len(obs.failed_jobs),
        "duplicates": len(dups), "dup_examples": [f"{k[0]}#{k[1]}" for k in list(dups)[:5]],
        "ctl_requests_metric": cm1["kube_requests"] - cm0["kube_requests"],
        "ctl_requests": sum(by_req.values()),
        "ctl_requests_by": dict(by_req.most_common()),
        "ctl_cpu": ccpu1 - ccpu0, "api_cpu": acpu1 - acpu0,
        "rss_peak_mib": rss_peak, "rss_now_mib": rss_now,
        "apiserver_requests": {"/".join(x for x in k if x): int(v)
                               for k, v in reqs.most_common() if v > 0},
        "watch_events": {"/".join(x for x in k if x): int(v)
                         for k, v in wev.most_common() if v > 0},
        "pod_events_seen": obs.pod_events,
        "series": [(t - t0, n) for t, n in obs.series],
    }
    for k in ("reconcile", "pods_created", "status_updates", "status_conflicts", "events",
              "gang_restarts", "pods_deleted"):
        if k in cm1:
            r[k] = cm1[k] - cm0[k]
    return r


def report(label, r):
    j = r["jobs"]
    print(f"== {label}, {r['row']}: {j} jobs x {r['workers']} workers = {r['pods']} pods on "
          f"{r['nodes']} fake nodes (KWOK)")
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
        ("controller API requests (audit log)", f"{r['ctl_requests']:.0f} "
         f"({r['ctl_requests'] / j:.2f} per job; its own count {r['ctl_requests_metric']:.0f})"),
    ]
    if "reconcile" in r:
        rows += [
            ("reconciles", f"{r['reconcile']:.0f} ({r['reconcile'] / j:.1f} per job)"),
            ("pods created / status writes / conflicts / events",
             f"{r['pods_created']:.0f} / {r['status_updates']:.0f} / "
             f"{r['status_conflicts']:.0f} / {r['events']:.0f}"),
            ("gang restarts / pods deleted by the controller",
             f"{r['gang_restarts']:.0f} / {r['pods_deleted']:.0f}")]
    rows += [
        ("controller CPU", f"{r['ctl_cpu']:.1f} s ({1000 * r['ctl_cpu'] / r['pods']:.2f} ms "
         "per pod)"),
        ("kube-apiserver CPU (all clients)", f"{r['api_cpu']:.1f} s"),
        ("controller peak RSS", f"{r['rss_peak_mib']:.1f} MiB (now {r['rss_now_mib']:.1f}); "
         f"{1024 * 1024 * r['rss_peak_mib'] / r['pods']:.0f} bytes per cached pod"),
    ]
    if r.get("heap_mib"):
        rows.append(("its heap (glibc): in use / free but held / mmapped",
                     " / ".join(f"{r['heap_mib'].get(k, 0):.1f}" for k in
                                ("in_use", "free", "mmapped")) + " MiB"))
    if r.get("cached"):
        rows.append(("objects cached", ", ".join(f"{k} {v}" for k, v in r["cached"].items())))
    if r.get("watch_events_received"):
        rows.append(("watch events it received", ", ".join(
            f"{k} {v}" for k, v in r["watch_events_received"].items())))
    for k, v in rows:
        print(f"  {k:<46} {v}")
    print("  the controller's requests by verb/resource/subresource (audit log):")
    for k, v in list(r["ctl_requests_by"].items())[:14]:
        print(f"    {v:8d}  {k}  ({v / j:.2f} per job)")
    print("  kube-apiserver requests (every client), by verb/resource/subresource:")
    for k, v in list(r["apiserver_requests"].items())[:12]:
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


def compare(shape, rs):
    """ctrain against training-operator, one shape: the goal's ratios."""
    c, t, f = rs.get("ctrain"), rs.get("training-operator"), rs.get("pods")
    out = {"shape": shape}
    if f and f["t_running"]:
        # The floor: the same pods created by the bench, no controller.
        for name, r in rs.items():
            if name != "pods" and r["t_running"]:
                out[f"{name}_over_floor"] = r["t_running"] / f["t_running"]
        print(f"== {shape}: every pod Running, over the floor (pods without a controller, "
              f"{f['t_running']:.1f} s): " + ", ".join(
                  f"{k[:-len('_over_floor')]} {v:.2f}x" for k, v in out.items()
                  if k.endswith("_over_floor")), flush=True)
    if not c or not t:
        return out if len(out) > 1 else None
    if c["t_running"] and t["t_running"]:
        out["running_ratio"] = t["t_running"] / c["t_running"]
    out["requests_ratio"] = (c["ctl_requests"] / c["jobs"]) / max(1, t["ctl_requests"] / t["jobs"])
    out["rss_ratio"] = c["rss_peak_mib"] / t["rss_peak_mib"]
    out["cpu_ratio"] = c["ctl_cpu"] / max(1e-9, t["ctl_cpu"])
    print(f"== {shape}: training-operator/ctrain time to every pod Running "
          f"{out.get('running_ratio', float('nan')):.2f}x (>1: ctrain faster; goal >= 2); "
          f"ctrain/training-operator API requests per job {out['requests_ratio']:.2f} "
          f"(goal <= 0.5); peak RSS {out['rss_ratio']:.2f}; CPU {out['cpu_ratio']:.2f}",
          flush=True)
    return out


def plot(rs, shape, path):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print(f"  no plot: matplotlib is not importable (pip install matplotlib) -> {path}")
        return
    fig, ax = plt.subplots(figsize=(7, 3.5))
    r = None
    for name, r in rs.items():
        xs = [0.0] + [t for t, _ in r["series"]]
        ys = [0] + [n for _, n in r["series"]]
        ax.step(xs, ys, where="post",
                label="the same pods, no controller" if name == "pods" else name)
    ax.set_xlabel("seconds since the first job create")
    ax.set_ylabel("pods Running")
    ax.set_title(f"{r['jobs']} jobs x {r['workers']} workers ({shape}), {r['nodes']} KWOK "
                 "nodes")
    ax.legend()
    ax.grid(alpha=0.3)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    print(f"  plot: {path}")


def metric(ctl, name):
    try:
        return sum(prom(ctl.metrics(), name).values())
    except OSError:
        return None


def writes(ctl):
    try:
        m = ctl.metrics()
    except OSError:
        return None
    return sum(sum(prom(m, n).values()) for n in
               ("ctrain_pods_created_total", "ctrain_pods_deleted_total",
                "ctrain_status_updates_total"))


def lifecycle(a, cl, api, log_dir):
    """Failover under load, a restart with every pod cached, node loss (see the docstring)."""
    n_pods = a.jobs * a.workers
    ns = "life"
    row = CtrainRow(a, cl, log_dir)
    make_namespace(api, ns)
    obs = Observer(row.job_label, row.attempt_label, a.workers,
                   getattr(row, "pods_are_jobs", False))
    watches = start_watches(api, ns, row, obs)
    reps = []
    out = {"jobs": a.jobs, "workers": a.workers, "pods": n_pods, "nodes": a.nodes}
    try:
        first = row.replica("life-a").start()
        reps.append(first)
        wait_leading(first, 60)
        standby = row.replica("life-b").start()
        reps.append(standby)
        time.sleep(3)
        if metric(standby, "ctrain_leader") != 0:
            raise RuntimeError("the second replica leads: no standby")
        # -- failover under load
        t0 = time.monotonic()
        creator = threading.Thread(target=create_jobs, args=(api, row, ns, a, a.life_after),
                                   daemon=True)
        creator.start()
        while (metric(first, "ctrain_pods_created_total") or 0) < n_pods * a.kill_at:
            if time.monotonic() - t0 > a.timeout:
                raise RuntimeError("failover: the leader did not create half the pods")
            time.sleep(0.2)
        created_then = metric(first, "ctrain_pods_created_total")
        first.proc.send_signal(signal.SIGKILL)
        t_kill = time.monotonic()
        first.proc.wait()
        t_lead = t_write = None
        while t_write is None:
            now = time.monotonic()
            if t_lead is None and metric(standby, "ctrain_leader") == 1:
                t_lead = now - t_kill
            w = writes(standby)
            if w:
                t_write = now - t_kill
            if now - t_kill > 120:
                break
            time.sleep(0.05)
        print(f"  failover: leader SIGKILLed at t={t_kill - t0:.1f} s with {created_then:.0f} "
              f"pods created; the standby led after {t_lead} s, first write after "
              f"{t_write} s", flush=True)
        creator.join()
        while obs.n_running < n_pods and time.monotonic() - t0 < a.timeout:
            time.sleep(0.5)
        with obs.lock:
            dups = sum(1 for v in obs.uids.values() if len(v) > 1)
            restarted = sorted(j for j, s in obs.status.items() if s[0] > 1)
        out["failover"] = {"t_kill": t_kill - t0, "pods_created_at_kill": created_then,
                           "lead_s": t_lead, "first_write_s": t_write,
                           "t_all_running": time.monotonic() - t0, "running": obs.n_running,
                           "duplicates": dups, "jobs_restarted": len(restarted),
                           "restarted_examples": restarted[:5],
                           "gang_restarts": metric(standby, "ctrain_gang_restarts_total")}
        print(f"  failover: all {obs.n_running}/{n_pods} Running at t="
              f"{out['failover']['t_all_running']:.1f} s; duplicate pods {dups}; jobs "
              f"restarted {len(restarted)} {restarted[:5]}", flush=True)

        # -- restart with every pod cached
        standby.stop()
        t_start = time.monotonic()
        fresh = row.replica("life-c").start()
        reps.append(fresh)
        t_lead = wait_leading(fresh, 120) - t_start
        t_first = t_quiet = None
        last, since = None, None
        while time.monotonic() - t_start < 300:
            now = time.monotonic()
            m = fresh.metrics()
            rec = sum(prom(m, "ctrain_reconcile_total").values())
            depth = sum(prom(m, "ctrain_workqueue_depth").values())
            if t_first is None and rec > 0:
                t_first = now - t_start
            if rec != last or depth > 0:
                last, since = rec, now
            elif t_first is not None and now - since >= 3:
                t_quiet = since - t_start
                break
            time.sleep(0.1)
        with obs.lock:
            restarted2 = sorted(j for j, s in obs.status.items() if s[0] > 1)
        out["restart"] = {"lead_s": t_lead, "first_reconcile_s": t_first, "quiet_s": t_quiet,
                          "rss_mib": proc_status(fresh.proc.pid, "VmRSS") / 1024,
                          "rss_peak_mib": proc_status(fresh.proc.pid, "VmHWM") / 1024,
                          "reconciles": last, "writes": writes(fresh),
                          "gang_restarts": metric(fresh, "ctrain_gang_restarts_total"),
                          "jobs_restarted": len(restarted2) - len(restarted),
                          **ctl_extra(fresh)}
        print(f"  restart: new replica led after {t_lead:.1f} s, first reconcile "
              f"{t_first} s, quiet queue {t_quiet} s after its start; RSS "
              f"{out['restart']['rss_mib']:.1f} MiB (peak {out['restart']['rss_peak_mib']:.1f}); "
              f"writes {out['restart']['writes']}, gang restarts "
              f"{out['restart']['gang_restarts']}", flush=True)

        # -- node loss, once per size in --lose (other nodes each time)
        out["node_loss"], first_node = [], 0
        for count in (int(x) for x in str(a.lose).split(",")):
            out["node_loss"].append(node_loss(a, cl, api, ns, obs, count, first_node))
            first_node += count
    finally:
        for w in watches:
            w.stop.set()
        for r in reps:
            r.stop()
    return out


def node_loss(a, cl, api, ns, obs, count, first_node):
    """`count` nodes (kwok-<first_node>...) lost at once, with the jobs of a.jobs Running:
    every affected job back (its next attempt Running), how long it took and how often it
    restarted; then the nodes are restored."""
    lost = [f"kwok-{i}" for i in range(first_node, first_node + count)]
    lost_set = set(lost)
    pods = api.items(f"/api/v1/namespaces/{ns}/pods")
    with obs.lock:
        before = dict(obs.status)
    affected = sorted({p["metadata"]["labels"]["ctrain.dev/job-name"] for p in pods
                       if p["spec"].get("nodeName") in lost_set})
    t_lose = time.monotonic()
    kwok("lose", cl, "--nodes-list", " ".join(lost))
    bound = a.life_node_grace + 60
    back = {}  # job -> seconds until every pod of its current attempt Running
    while time.monotonic() - t_lose < a.life_node_grace + 600:
        with obs.lock:
            for j in affected:
                att = obs.status.get(j, (0, 0, 0))[0]
                t = obs.full_at.get((j, str(att)))
                if att > before[j][0] and t is not None:
                    back[j] = t - t_lose
                else:
                    back.pop(j, None)
        if len(back) == len(affected) and time.monotonic() - t_lose > a.life_node_grace + 30:
            break
        time.sleep(1)
    time.sleep(5)
    with obs.lock:
        after = dict(obs.status)
        # A job restarted twice: did its second attempt land on a lost node that the
        # node controller had not noticed yet?
        twice = {j: sorted(obs.nodes_of.get((j, str(before[j][0] + 1)), set()) & lost_set)
                 for j in affected if after.get(j, (0,))[0] > before[j][0] + 1}
    aff = set(affected)
    wrong = {j: (before[j], after.get(j)) for j in affected
             if after.get(j, (0, 0, 0))[0] <= before[j][0]
             or after[j][1] != before[j][1]
             or after[j][2] - before[j][2] != after[j][0] - before[j][0]}
    others = sorted(j for j, s in after.items() if j not in aff and s[0] != before[j][0])
    ts = sorted(back.values())
    n = {"lost": count, "affected": len(affected), "back": len(back),
         "p50_s": pct(ts, 0.5), "max_s": ts[-1] if ts else None,
         "bound_s": bound, "within_bound": sum(1 for t in ts if t <= bound),
         "restarted_once": len(affected) - len(twice),
         "restarted_more": len(twice),
         "more_on_lost_node": sum(1 for v in twice.values() if v),
         "more_examples": list(twice.items())[:5],
         "wrong_counts": len(wrong),
         "wrong_examples": list(wrong.items())[:3],
         "others_restarted": len(others), "others_examples": others[:5]}
    print(f"  node loss: {count} nodes lost: {len(affected)} jobs affected, {len(back)} "
          f"Running again (p50 {pct(ts, 0.5):.1f} s, max "
          f"{(ts[-1] if ts else float('nan')):.1f} s; bound grace+60 = {bound} s: "
          f"{n['within_bound']} within); restarted once {n['restarted_once']}, more than "
          f"once {n['restarted_more']} ({n['more_on_lost_node']} of them: the new attempt "
          f"had a pod on a lost node not yet noticed); each restart a disruption, "
          f"backoffLimit untouched: {len(affected) - len(wrong)}/{len(affected)}; other "
          f"jobs restarted: {len(others)}", flush=True)
    kwok("restore", cl, "--nodes-list", " ".join(lost))
    return n


def lifecycle_ok(o):
    f, r = o["failover"], o["restart"]
    return (f["first_write_s"] is not None and not f["duplicates"] and not f["jobs_restarted"]
            and r["quiet_s"] is not None and not r["gang_restarts"] and not r["jobs_restarted"]
            and all(n["back"] == n["affected"] and not n["wrong_counts"]
                    and not n["others_restarted"] and not n["restarted_more"]
                    for n in o["node_loss"]))


def cluster_for(a, grace, lease, fn):
    """A fresh control plane (audit log on) with a.nodes kwok nodes whose Leases last
    `lease` s, a node-monitor grace of `grace` s; fn(cl, api, log_dir)."""
    pol = pathlib.Path(os.environ.get("TMPDIR", "/tmp")) / f"ctrain-audit-{os.getpid()}.yaml"
    pol.write_text(AUDIT_POLICY)
    cl = control_plane_up(prefix="bench-scale-",
                          env={"CTRAIN_NODE_MONITOR_GRACE": f"{grace}s",
                               "CTRAIN_APISERVER_AUDIT_POLICY": str(pol)})
    try:
        t = time.monotonic()
        kwok("up", cl, "--nodes", a.nodes, "--zones", a.zones, "--lease-seconds", lease)
        print(f"{a.nodes} fake nodes Ready in {time.monotonic() - t:.1f} s; load average "
              f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs (shared machine: noisy)",
              flush=True)
        return fn(cl, Api(cl.kubeconfig), pathlib.Path(cl.state_dir))
    finally:
        if a.keep:
            print(f"cluster kept: {cl.state_dir} (tools/kwok/run.sh down, cluster.sh down)")
        else:
            kwok("down", cl)
            control_plane_down(cl)
            pol.unlink(missing_ok=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shape", default="small",
                    help=f"comma list of {', '.join(SHAPES)}")
    ap.add_argument("--rows", default="ctrain,training-operator",
                    help="comma list: ctrain, training-operator, pods (the floor: the same "
                         "pods created by the bench, no controller)")
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
    ap.add_argument("--qps", type=int, default=1000, help="controllers' --kube-api-qps/-burst")
    ap.add_argument("--ctl-workers", type=int, help="ctrain-controller --workers")
    ap.add_argument("--timeout", type=int, default=1200, help="seconds for the jobs to end")
    ap.add_argument("--gc-wait", type=int, default=300,
                    help="seconds to wait for the garbage collector after deleting the jobs")
    ap.add_argument("--lifecycle", action="store_true",
                    help="also: failover, restart and node loss (ctrain, the first shape)")
    ap.add_argument("--lifecycle-only", action="store_true")
    ap.add_argument("--life-after", default="3h", help="lifecycle pods run this long")
    ap.add_argument("--kill-at", type=float, default=0.5,
                    help="failover: SIGKILL once this share of the pods is created")
    ap.add_argument("--lose", default="100",
                    help="nodes lost at once; a comma list runs one loss after another, "
                         "other nodes each time (e.g. 100,10)")
    ap.add_argument("--life-node-grace", type=int, default=120,
                    help="the lifecycle cluster's node-monitor grace, s")
    ap.add_argument("--life-lease-seconds", type=int, default=40,
                    help="the lifecycle cluster's node Leases, s (kwok renews every quarter: "
                         "lost nodes are noticed within that quarter of each other)")
    ap.add_argument("--ctl-flags", default="",
                    help="more ctrain-controller flags, space-separated (e.g. "
                         "--leader-elect-lease-duration=10)")
    ap.add_argument("--tfjob-clean-pod-policy", default="Running",
                    choices=["Running", "All", "None", "default"],
                    help="the TFJobs' runPolicy.cleanPodPolicy: Running (default) as a "
                         "TrainingJob's default, so both controllers delete the same pods when a "
                         "job ends; default: TFJob's own (None: it deletes nothing)")
    ap.add_argument("--build", help="the build dir (default $CTRAIN_BUILD_DIR, else build)")
    ap.add_argument("--json", help="write the figures here")
    ap.add_argument("--plot", default="auto", help="auto: docs/img/scale-<shape>.png, none")
    ap.add_argument("--keep", action="store_true", help="leave each cluster up (prints its dir)")
    a = ap.parse_args()
    shapes = a.shape.split(",")
    rows = a.rows.split(",")
    for x in shapes:
        if x not in SHAPES:
            sys.exit(f"--shape: no shape {x!r} ({', '.join(SHAPES)})")
    for x in rows:
        if x not in ROWS:
            sys.exit(f"--rows: no row {x!r} ({', '.join(ROWS)})")
    if a.build:
        clusterlib.CONTROLLER = pathlib.Path(a.build) / "controller/ctrain-controller"
    if not clusterlib.CONTROLLER.exists():
        sys.exit(f"no controller at {clusterlib.CONTROLLER}: build it, or --build/CTRAIN_BUILD_DIR")
    if subprocess.run(["bash", str(ROOT / "tools/kwok/build.sh")], stdout=subprocess.DEVNULL
                      ).returncode:
        sys.exit("tools/kwok/build.sh failed")
    if "training-operator" in rows:
        from baseline_tfop import build_training_operator
        build_training_operator()  # before any cluster: the first build takes minutes
    results, ok = {"shapes": {}, "compare": [], "lifecycle": None}, True
    overrides = (a.jobs, a.workers, a.nodes)

    def save():
        if a.json:
            pathlib.Path(a.json).write_text(json.dumps(results, indent=1))

    for shape in ([] if a.lifecycle_only else shapes):
        j, w, n = SHAPES[shape]
        a.jobs, a.workers, a.nodes = overrides[0] or j, overrides[1] or w, overrides[2] or n
        rs = results["shapes"][shape] = {}
        for name in rows:
            def one(cl, api, log_dir, name=name):
                row = ROWS[name](a, cl, log_dir)
                row.start()
                try:
                    return run(a, cl, api, row, "scale", Audit(cl),
                               lambda f: report(shape, f))
                finally:
                    row.stop()
            r = rs[name] = cluster_for(a, a.node_grace, a.lease_seconds, one)
            report_cleanup(r)
            save()
            ok &= (r["succeeded"] == a.jobs and not r["duplicates"]
                   and (name != "ctrain" or (not any(r["orphans"].values()) and not r["stuck"])))
        c = compare(shape, rs)
        if c:
            results["compare"].append(c)
        if a.plot != "none":
            plot({k: v for k, v in rs.items()}, shape,
                 pathlib.Path(a.plot) if a.plot != "auto" and len(shapes) == 1
                 else ROOT / f"docs/img/scale-{shape}.png")
        save()
    if a.lifecycle or a.lifecycle_only:
        j, w, n = SHAPES[shapes[0]]
        a.jobs, a.workers, a.nodes = overrides[0] or j, overrides[1] or w, overrides[2] or n
        print(f"== lifecycle ({shapes[0]}): failover, restart, {a.lose} nodes lost "
              f"(node grace {a.life_node_grace} s)", flush=True)
        o = results["lifecycle"] = cluster_for(a, a.life_node_grace, a.life_lease_seconds,
                                               lambda cl, api, d: lifecycle(a, cl, api, d))
        ok &= lifecycle_ok(o)
        save()
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
