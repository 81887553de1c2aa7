#!/usr/bin/env python3
"""bench/controller: 200 TrainingJobs x 4 workers created at once, for the
controller before a change and after it, in one run.

On a fresh local control plane (tools/localcluster), in one run:
  raw       a tight create loop of 800 pods with the same C client the
            controller uses (bench_create, 8 parallel, no client rate limit),
            before the controllers run and after
  before    ctrain-controller built from --baseline-rev (default b9119cb,
            built once in a git worktree under /tmp and cached; or
            --baseline-bin), reconciling 200 jobs created at once
  after     ctrain-controller from --build, the same load
Both controllers run with the ServiceAccount token and manifests/ RBAC,
default flags but --kube-api-qps/--kube-api-burst raised to 1000 so the
client limiter does not hide the apiserver, one at a time, each on its own
namespace (deleted before the next starts). --rounds N alternates them
(before, after, after, before, ...) and reports the mean and median of
each: on a shared machine one run of either varies by 2x or more.
Prints for each the time until every pod exists and every job shows
Created, its pod-create rate (pods/s) against the raw loop, API requests per
job (ctrain_kube_requests_total from just before the jobs are created until
it has settled: queue empty, events written, no request for 2 s), split by
what they were, its peak RSS (VmHWM) and CPU time; then pods/s before and
after and their ratio.

--apiserver-profile DIR starts kube-apiserver with /debug/pprof on and takes
a CPU profile of it (--profile-seconds, default 3) from the moment the jobs are
created in each `after` run (and the raw loop before them), into DIR/*.pprof,
then prints where its CPU went by stage (`go tool pprof -top`): what stands in
the way of the controller targets.

Each controller is stopped before its namespace is deleted; its pods keep the
ctrain.dev/attempt finalizer then, which the bench removes (release_pods) as an admin
would after uninstalling the controller. bench/scale.py runs jobs to their end on fake
nodes (KWOK) instead.

The pods never schedule (a nodeSelector no node has), so --jobs 1000
(4,000 pods) measures the controller's memory at that scale without a
node to run them: the peak RSS line compares before and after.

With --kind tfjob the load is 200 kubeflow.org/v1 TFJobs x 4 workers instead,
the same objects as training-operator's row (baseline_tfop.tfjob_template): ctrain-controller
from --build runs with --enable-tfjob, the TFJob CRD and the ClusterRole of
manifests/components/tfjob, and is compared with training-operator v1.9.3 on that load
(no `before` row: older revisions serve no TFJob). --rounds N alternates ctrain and
training-operator; the ratio is of the medians of the time until every pod exists.

  python3 bench/controller.py [--jobs 200] [--workers 4] [--ctl-workers N]
                              [--build build] [--baseline-rev REV |
                              --baseline-bin PATH] [--rounds 1] [--kind trainingjob|tfjob]
"""
import argparse
import json
import os
import pathlib
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

from _paths import ROOT
from clusterlib import (control_plane_down, control_plane_up, free_port,
                        install_controller_rbac, sa_kubeconfig)
from baseline_tfop import (NODE_SELECTOR, run_training_operator, tfjob_template,
                           report as tfop_report)

TFJOB_DIR = ROOT / "manifests/components/tfjob"
# What each kind's row creates and reads: bench_create's group/version/resource, the
# template file, the resource kubectl lists, the controller's extra flags.
KINDS = {
    "trainingjob": {"gvr": ("ctrain.dev", "v1alpha1", "trainingjobs"), "template": "tj.json",
                    "get": "tj", "flags": []},
    "tfjob": {"gvr": ("kubeflow.org", "v1", "tfjobs"), "template": "tfjob.json",
              "get": "tfjobs", "flags": ["--enable-tfjob"]},
}


def install_tfjob_component(cl):
    """The TFJob CRD and the controller's ClusterRole on TFJobs, as the component adds them."""
    for f in (ROOT / "manifests/crds-tfjob/kubeflow.org_tfjobs.yaml", TFJOB_DIR / "rbac.yaml"):
        cl.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(f))
    cl.wait_established("tfjobs.kubeflow.org")


def remove_tfjob_component(cl):
    """Before training-operator's row, which installs (and refuses) the same CRD."""
    cl.kubectl("delete", "crd", "tfjobs.kubeflow.org", "--ignore-not-found", "--wait=true",
               "--timeout=300s", timeout=330)


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


def machine_cpu():
    """(busy, total) jiffies of the whole machine from /proc/stat."""
    f = [int(x) for x in open("/proc/stat").readline().split()[1:]]
    idle = f[3] + f[4]
    return sum(f) - idle, sum(f)


def plane_pids():
    """pid -> name of the control plane's processes (etcd, kube-apiserver)."""
    out = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                name = open(f"/proc/{d}/comm").read().strip()
            except OSError:
                continue
            if name in ("etcd", "kube-apiserver"):
                out[int(d)] = name
    return out


def plane_cpu(pids):
    tot = {}
    for pid, name in pids.items():
        try:
            tot[name] = tot.get(name, 0.0) + cpu_seconds(pid)
        except OSError:
            pass
    return tot


def settle(port, quiet_s=2.0, limit_s=300):
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


def baseline_binary(a):
    """The controller to compare against: --baseline-bin, or built from
    --baseline-rev in a worktree of its own (cached by revision)."""
    if a.baseline_bin:
        return pathlib.Path(a.baseline_bin)
    rev = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", a.baseline_rev],
                         capture_output=True, text=True, check=True).stdout.strip()
    tree = pathlib.Path(tempfile.gettempdir()) / f"ctrain-bench-baseline-{rev}"
    binary = tree / "build/controller/ctrain-controller"
    if binary.exists():
        return binary
    if not tree.exists():
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(tree), rev],
                       check=True, stdout=subprocess.DEVNULL)
    subprocess.run(["cmake", "-S", str(tree), "-B", str(tree / "build"), "-G", "Ninja",
                    "-DCTRAIN_CUDA=OFF"], check=True, stdout=subprocess.DEVNULL)
    subprocess.run(["ninja", "-C", str(tree / "build"), "-j2", "controller/ctrain-controller"],
                   check=True, stdout=subprocess.DEVNULL)
    return binary


class ApiserverProfile:
    """A CPU profile of kube-apiserver taken while something runs: started
    with start(), written to `path` when wait() returns."""

    def __init__(self, cl, path, seconds):
        self.path = pathlib.Path(path)
        self.proc = subprocess.Popen(
            [cl.kubectl_bin, "get", "--raw", f"/debug/pprof/profile?seconds={seconds}"],
            env=cl.env, stdout=open(self.path, "wb"), stderr=subprocess.PIPE)

    def wait(self):
        _, err = self.proc.communicate(timeout=120)
        if self.proc.returncode:
            sys.exit(f"apiserver profile {self.path}: kubectl get --raw failed: {err.decode()}")
        return self.path


# Where kube-apiserver's CPU goes: each sampled stack counts once, in the
# first stage whose frame it holds (Go runs a request's storage call in a
# goroutine of its own, so a request's cost is spread over several stacks);
# the parts say what the request stages spend on.
PROFILE_STAGES = [
    ("Go garbage collector (background marking and sweeping)", r"runtime\.(?:gcBgMarkWorker|bgsweep)$"),
    ("creates of custom resources (the TrainingJobs)", r"crdHandler\)\.serveResource\.CreateResource"),
    ("status writes of custom resources", r"crdHandler\)\.serveStatus\.UpdateResource"),
    ("creates of built-in objects (pods, services, secrets, policies, events)",
     r"^k8s\.io/apiserver/pkg/endpoints/handlers\.CreateResource"),
    ("watches (events encoded and sent to informers)", r"WatchServer|watchEncoder|cacheWatcher"),
    ("other requests (reads, updates, patches, deletes)", r"^k8s\.io/apiserver/pkg/endpoints/handlers\."),
    ("watch cache and etcd client", r"storage/cacher|etcd3\.\(\*watchChan\)|go\.etcd\.io/etcd/client"),
    ("request plumbing (TLS, HTTP/1.1 and HTTP/2, authn, authz, priority and fairness)",
     r"^net/http\.|x/net/http2|crypto/tls|apiserver/pkg/(?:server/filters|endpoints/filters)"),
]
PROFILE_PARTS = [
    ("body decode", r"serializer/versioning\.\(\*codec\)\.Decode$"),
    ("managedFields tracking", r"\(\*FieldManager\)\.Update"),
    ("admission and validation", r"admission\.|rest\.BeforeCreate|rest\.BeforeUpdate"),
    ("etcd write (encode, transaction)", r"etcd3\.\(\*store\)\.(?:Create|GuaranteedUpdate)$"),
    ("response encode and write", r"responsewriters\."),
]


def profile_stages(path):
    """{"total": seconds, "stages": [(stage, share)], "parts": [(part, share)]}
    of a CPU profile, from its stacks (`go tool pprof -traces`)."""
    out = subprocess.run(["go", "tool", "pprof", "-traces", str(path)],
                         capture_output=True, text=True)
    if out.returncode:
        return None
    stacks = []
    for block in re.split(r"-+\+-+\n", out.stdout)[1:]:
        lines = [ln.strip() for ln in block.strip().splitlines() if ln.strip()]
        m = re.match(r"([0-9.]+)(m?s)\s+(.*)", lines[0]) if lines else None
        if m:
            frames = [m.group(3)] + lines[1:]
            frames = [re.sub(r" \((?:partial-)?inline\)$", "", f) for f in frames]
            stacks.append((float(m.group(1)) / (1000 if m.group(2) == "ms" else 1), frames))
    total = sum(v for v, _ in stacks) or 1.0

    def share(pats, only=None):
        got = [0.0] * len(pats)
        for v, frames in stacks:
            if only and not only(frames):
                continue
            for i, (_, pat) in enumerate(pats):
                if any(re.search(pat, f) for f in frames):
                    got[i] += v
                    break
        return [(name, 100 * g / total) for (name, _), g in zip(pats, got)]
    stages = share(PROFILE_STAGES)
    stages.append(("other", 100 - sum(v for _, v in stages)))
    handler = re.compile(PROFILE_STAGES[5][1])
    parts = share(PROFILE_PARTS, lambda fr: any(handler.search(f) for f in fr))
    return {"total": total, "stages": stages, "parts": parts}


def print_profile(label, path):
    p = profile_stages(path)
    if not p:
        print(f"  kube-apiserver CPU profile {path}: go tool pprof could not read it")
        return
    print(f"  kube-apiserver CPU profile ({label}, {path}): {p['total']:.2f} CPU-s sampled")
    for name, v in p["stages"]:
        print(f"    {v:5.1f}%  {name}")
    print("    of which, inside the request handlers (all kinds):")
    for name, v in p["parts"]:
        print(f"    {v:5.1f}%    {name}")


def raw_creates(cl, create, tmp, ns, n_pods, profile=None):
    """Pods/s of a tight create loop; its pods are deleted before anything
    else is measured, not during."""
    cl.kubectl("create", "namespace", ns)
    prof = ApiserverProfile(cl, profile[0], profile[1]) if profile else None
    out = subprocess.run([str(create), "--kubeconfig", cl.kubeconfig, "--ns", ns,
                          "--count", str(n_pods), "--parallel", "8", "--template",
                          str(tmp / "pod.json")], capture_output=True, text=True, check=True)
    if prof:
        prof.wait()
    cl.kubectl("delete", "namespace", ns, "--wait=true", "--timeout=300s", timeout=330)
    return float(re.search(r": ([0-9.]+)/s", out.stdout).group(1))


def release_pods(cl, ns):
    """The pods carry the ctrain.dev/attempt finalizer, which only a running controller
    removes; its pods never schedule, so its jobs never end. With the controller stopped,
    the finalizers go as an admin removes them after uninstalling it (one merge patch a
    pod, 200 pods a kubectl), or deleting the namespace waits for them forever."""
    names = [p["metadata"]["name"] for p in cl.get_json("pods", "-n", ns)["items"]
             if p["metadata"].get("finalizers")]
    for i in range(0, len(names), 200):
        cl.kubectl("patch", "pods", "-n", ns, *names[i:i + 200], "--type=merge",
                   "-p", '{"metadata":{"finalizers":null}}', timeout=300)


def run_controller(a, cl, kc, binary, create, tmp, ns, label, profile=None):
    """Starts `binary`, creates a.jobs TrainingJobs in `ns` and measures
    until every pod exists and every job is Created. Returns the figures."""
    n_pods = a.jobs * a.workers
    port = free_port()
    log = tmp / f"controller-{label}.log"
    kind = KINDS[a.kind]
    ctl = subprocess.Popen([str(binary), "--kubeconfig", kc, *kind["flags"],
                            "--leader-elect=false", "--log-format=text",
                            "--log-level=debug" if a.log else "--log-level=info",
                            "--kube-api-qps=1000", "--kube-api-burst=1000",
                            f"--metrics-bind-address=127.0.0.1:{port}"] +
                           ([f"--workers={a.ctl_workers}"] if a.ctl_workers else []),
                           stdout=open(log, "w"), stderr=subprocess.STDOUT)
    gen = None
    try:
        deadline = time.monotonic() + 30
        while metric_or_none(port) is None:
            if time.monotonic() > deadline:
                sys.exit(f"controller {label} did not serve /metrics; see {log}")
            time.sleep(0.2)
        m0 = settle(port, quiet_s=1.0)
        cpu0 = cpu_seconds(ctl.pid)
        cl.kubectl("create", "namespace", ns)
        pids = plane_pids()
        w0, p0, c0 = machine_cpu(), plane_cpu(pids), cpu_seconds(ctl.pid)
        t0 = time.monotonic()
        prof = ApiserverProfile(cl, profile[0], profile[1]) if profile else None
        group, version, resource = kind["gvr"]
        gen = subprocess.Popen([str(create), "--kubeconfig", cl.kubeconfig, "--ns", ns,
                                "--count", str(a.jobs), "--parallel", "8", "--group",
                                group, "--version", version, "--resource",
                                resource, "--template", str(tmp / kind["template"])],
                               stdout=subprocess.DEVNULL)
        t_created_jobs = t_pods = t_first = None
        while True:
            if time.monotonic() - t0 > 900:
                sys.exit(f"controller {label}: timed out after 900 s; see {log}")
            if t_created_jobs is None and gen.poll() is not None:
                if gen.returncode:
                    sys.exit(f"bench_create ({resource}) failed: {gen.returncode}")
                t_created_jobs = time.monotonic() - t0
            made = metric(port, "ctrain_pods_created_total") or 0
            if t_first is None and made > 0:
                t_first = time.monotonic() - t0
            if t_pods is None and made >= n_pods:
                t_pods = time.monotonic() - t0
                w1, p1, c1 = machine_cpu(), plane_cpu(pids), cpu_seconds(ctl.pid)
                window = {"busy": (w1[0] - w0[0]) / max(1, w1[1] - w0[1]),
                          "ctl": c1 - c0, **{k: p1[k] - p0.get(k, 0) for k in p1}}
            if t_pods is not None and t_created_jobs is not None:
                jobs = cl.get_json(kind["get"], "-n", ns)["items"]
                created = sum(1 for j in jobs if any(
                    c["type"] == "Created" and c["status"] == "True"
                    for c in j.get("status", {}).get("conditions", [])))
                if created == a.jobs:
                    break
            time.sleep(0.2)
        t_all = time.monotonic() - t0
        if prof:
            prof.wait()
        pods = len(cl.get_json("pods", "-n", ns)["items"])
        m1 = settle(port)
        cpu1 = cpu_seconds(ctl.pid)
        rss_kb = rss_now_kb = None
        for line in open(f"/proc/{ctl.pid}/status"):
            if line.startswith("VmHWM:"):
                rss_kb = int(line.split()[1])
            elif line.startswith("VmRSS:"):
                rss_now_kb = int(line.split()[1])
    finally:
        if gen and gen.poll() is None:
            gen.kill()
            gen.wait()
        ctl.terminate()
        ctl.wait()
        if a.log:
            shutil.copy(log, f"{a.log}.{label}")
    release_pods(cl, ns)
    cl.kubectl("delete", "namespace", ns, "--wait=true", "--timeout=300s", timeout=330)

    def d(name):
        return int(m1.get(name, 0) - m0.get(name, 0))
    req = d("ctrain_kube_requests_total")
    parts = {"pod creates": d("ctrain_pods_created_total") + d("ctrain_pod_create_errors_total"),
             "status writes": d("ctrain_status_updates_total") +
             d("ctrain_status_conflicts_total"),
             "events": d("ctrain_events_total"),
             "secret GETs": d("ctrain_secret_reads_total")}
    parts["other (service, secret writes, retries)"] = req - sum(parts.values())
    return {"pods": pods, "t_jobs": t_created_jobs, "t_pods": t_pods, "t_all": t_all,
            "t_first": t_first, "rate": n_pods / t_pods, "requests": req, "parts": parts,
            "reconciles": d("ctrain_reconcile_total"), "cpu": cpu1 - cpu0, "rss_kb": rss_kb,
            "rss_now_kb": rss_now_kb, "window": window, "profile": prof and prof.path}


def report(a, label, binary, r, raw_rate):
    n_pods = a.jobs * a.workers
    print(f"[{label}] {binary}")
    what = "TFJobs" if a.kind == "tfjob" else "TrainingJobs"
    print(f"  jobs: {a.jobs} x {a.workers} workers = {n_pods} pods ({r['pods']} exist); "
          f"{what} created by the load generator in {r['t_jobs']:.2f} s")
    print(f"  time until every pod exists: {r['t_pods']:.2f} s; every job Created: "
          f"{r['t_all']:.2f} s")
    print(f"  controller: {r['rate']:.1f} pods/s; ratio controller/raw loop: "
          f"{r['rate'] / raw_rate:.2f}")
    if r["t_pods"] > r["t_first"]:
        span = r["t_pods"] - r["t_first"]
        print(f"    (first pod to last, {span:.2f} s: {n_pods / span:.1f} pods/s; first pod "
              f"after {r['t_first']:.2f} s, 0.2 s polling)")
    w = r["window"]
    print(f"  until every pod existed: machine CPU {100 * w['busy']:.0f}% busy; CPU seconds: "
          f"kube-apiserver {w.get('kube-apiserver', 0):.2f}, etcd {w.get('etcd', 0):.2f}, "
          f"controller {w['ctl']:.2f}")
    print(f"  API requests per job: {r['requests'] / a.jobs:.2f} (total {r['requests']}: " +
          ", ".join(f"{k} {v}" for k, v in r["parts"].items()) + ")")
    print(f"  reconciles: {r['reconciles']} ({r['reconciles'] / a.jobs:.1f} per job); "
          f"CPU {r['cpu']:.2f} s; peak RSS {r['rss_kb'] / 1024:.1f} MiB "
          f"(RSS once settled {r['rss_now_kb'] / 1024:.1f} MiB)")
    if r.get("profile"):
        print_profile(f"{r['profile_seconds']} s from the jobs' creation", r["profile"])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, default=200)
    ap.add_argument("--workers", type=int, default=4, help="worker replicas per job")
    ap.add_argument("--ctl-workers", type=int, default=None,
                    help="the controllers' --workers (default: their own default)")
    ap.add_argument("--build", default=str(ROOT / "build"))
    ap.add_argument("--baseline-rev", default="b9119cb",
                    help="the revision whose controller is 'before' (built once, cached)")
    ap.add_argument("--baseline-bin", help="a ctrain-controller binary to use as 'before'")
    ap.add_argument("--rounds", type=int, default=1,
                    help="measure each controller this many times, alternating")
    ap.add_argument("--log", help="keep the controllers' logs here (.before-N, .after-N)")
    ap.add_argument("--kind", choices=sorted(KINDS), default="trainingjob",
                    help="tfjob: ctrain --enable-tfjob against training-operator on TFJobs")
    ap.add_argument("--apiserver-profile", metavar="DIR",
                    help="CPU-profile kube-apiserver during each 'after' run and the first raw "
                         "loop (pprof files into DIR) and print where its time went")
    ap.add_argument("--profile-seconds", type=int, default=3)
    ap.add_argument("--no-training-operator", action="store_true",
                    help="skip the Kubeflow training-operator v1.9.3 baseline (bench/baseline_tfop.py)")
    a = ap.parse_args()
    build = pathlib.Path(a.build)
    create = build / "bench/bench_create"
    after = build / "controller/ctrain-controller"
    if a.kind == "tfjob":
        if a.no_training_operator:
            sys.exit("--kind tfjob compares with training-operator: drop --no-training-operator")
        binaries = {"after": after}
    else:
        binaries = {"before": baseline_binary(a), "after": after}
    prof_dir = pathlib.Path(a.apiserver_profile) if a.apiserver_profile else None
    if prof_dir:
        prof_dir.mkdir(parents=True, exist_ok=True)
    cl = control_plane_up(env={"CTRAIN_APISERVER_PROFILING": "true"} if prof_dir else None,
                          prefix="bench-controller-")
    state = cl.state_dir
    try:
        install_controller_rbac(cl)
        kc = sa_kubeconfig(cl, pathlib.Path(state) / "controller.kubeconfig")
        n_pods = a.jobs * a.workers
        tmp = pathlib.Path(state)
        (tmp / "pod.json").write_text(json.dumps({
            "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p-%d"},
            "spec": {"restartPolicy": "Never", "nodeSelector": NODE_SELECTOR,
                     "containers": [{"name": "worker", "image": "ctrain:latest"}]}}))
        (tmp / "tj.json").write_text(json.dumps({
            "apiVersion": "ctrain.dev/v1alpha1", "kind": "TrainingJob",
            "metadata": {"name": "j-%d"},
            "spec": {"replicaSpecs": {"Worker": {"replicas": a.workers, "template": {
                "spec": {"nodeSelector": NODE_SELECTOR,
                         "containers": [{"name": "worker", "image": "ctrain:latest"}]}}}}}}))
        (tmp / "tfjob.json").write_text(json.dumps(tfjob_template(a.workers)))

        # The machine is shared: the raw loop runs before and after the
        # controllers, and the ratios use their mean.
        raw_prof = (prof_dir / "apiserver-raw.pprof", a.profile_seconds) if prof_dir else None
        raw_before = raw_creates(cl, create, tmp, "raw-before", n_pods, raw_prof)
        if a.kind == "tfjob":
            tfjob_rows(a, cl, kc, binaries["after"], create, tmp, raw_before, n_pods)
            return
        order = []
        for i in range(a.rounds):
            order += [("before", i), ("after", i)] if i % 2 == 0 else [("after", i),
                                                                     ("before", i)]
        results = {"before": [], "after": []}
        for label, i in order:
            prof = ((prof_dir / f"apiserver-{label}-{i}.pprof", a.profile_seconds)
                    if prof_dir and label == "after" else None)
            r = run_controller(a, cl, kc, binaries[label], create, tmp, f"bench-{label}-{i}",
                               f"{label}-{i}", prof)
            r["profile_seconds"] = a.profile_seconds
            results[label].append(r)
        tfop = None if a.no_training_operator else run_training_operator(
            cl, jobs=a.jobs, workers=a.workers, create=create)
        raw_after = raw_creates(cl, create, tmp, "raw-after", n_pods)
        raw_rate = (raw_before + raw_after) / 2
        print(f"raw create loop (same client, 8 parallel): {raw_rate:.1f} pods/s "
              f"(before {raw_before:.1f}, after {raw_after:.1f})")
        if raw_prof:
            print_profile(f"raw loop, {a.profile_seconds} s from its start", raw_prof[0])
        for label in ("before", "after"):
            for i, r in enumerate(results[label]):
                report(a, f"{label} {i + 1}/{a.rounds}", binaries[label], r, raw_rate)
        mean = {k: sum(r["rate"] for r in v) / len(v) for k, v in results.items()}
        med = {k: statistics.median(r["rate"] for r in v) for k, v in results.items()}
        print(f"pods/s before {mean['before']:.1f} ({a.baseline_bin or a.baseline_rev}), "
              f"after {mean['after']:.1f}: ratio after/before {mean['after'] / mean['before']:.2f}"
              + (f" (mean of {a.rounds} rounds each; median before {med['before']:.1f}, "
                 f"after {med['after']:.1f}, ratio {med['after'] / med['before']:.2f})"
                 if a.rounds > 1 else ""))
        rss = {k: max(r["rss_kb"] for r in v) / 1024 for k, v in results.items()}
        print(f"peak RSS at {a.jobs} jobs x {a.workers} workers (the largest of the rounds): "
              f"before {rss['before']:.1f} MiB, after {rss['after']:.1f} MiB: ratio "
              f"after/before {rss['after'] / rss['before']:.2f}")
        if tfop:
            print(tfop_report(tfop))
            after = results["after"]
            t_after = statistics.median(r["t_pods"] for r in after)
            rss = max(r["rss_kb"] for r in after) / 1024
            print(f"ctrain (after) vs training-operator: {tfop['seconds_to_all_pods'] / t_after:.2f}x "
                  f"faster to every pod ({t_after:.2f} s vs {tfop['seconds_to_all_pods']:.2f} s); "
                  f"peak RSS {rss:.1f} vs {tfop['peak_rss_mib']:.1f} MiB")
    finally:
        control_plane_down(cl)


def tfjob_rows(a, cl, kc, binary, create, tmp, raw_before, n_pods):
    """--kind tfjob: ctrain (--enable-tfjob) and training-operator on the same TFJobs,
    alternating for --rounds; the ratio of the medians of the time until every pod exists."""
    ours, theirs = [], []
    for i in range(a.rounds):
        for who in (("ctrain", "tfop") if i % 2 == 0 else ("tfop", "ctrain")):
            if who == "ctrain":
                install_tfjob_component(cl)
                ours.append(run_controller(a, cl, kc, binary, create, tmp, f"bench-tfjob-{i}",
                                           f"tfjob-{i}"))
                remove_tfjob_component(cl)
            else:
                theirs.append(run_training_operator(cl, jobs=a.jobs, workers=a.workers,
                                                    create=create, namespace=f"tfop-bench-{i}"))
    raw_after = raw_creates(cl, create, tmp, "raw-after", n_pods)
    raw_rate = (raw_before + raw_after) / 2
    print(f"uptime: {subprocess.run(['uptime'], capture_output=True, text=True).stdout.strip()}")
    print(f"raw create loop (same client, 8 parallel): {raw_rate:.1f} pods/s "
          f"(before {raw_before:.1f}, after {raw_after:.1f})")
    for i, r in enumerate(ours):
        report(a, f"ctrain --enable-tfjob {i + 1}/{a.rounds}", binary, r, raw_rate)
    for r in theirs:
        print(tfop_report(r))
        print(f"  ratio training-operator/raw loop: {r['pods_per_s'] / raw_rate:.2f}")
    t_ours = statistics.median(r["t_pods"] for r in ours)
    t_theirs = statistics.median(r["seconds_to_all_pods"] for r in theirs)
    req_ours = statistics.median(r["requests"] for r in ours) / a.jobs
    req_theirs = statistics.median(r["requests_per_job"] for r in theirs)
    rss_ours = max(r["rss_kb"] for r in ours) / 1024
    rss_theirs = max(r["peak_rss_mib"] for r in theirs)
    cpu_ours = statistics.median(r["cpu"] for r in ours)
    cpu_theirs = statistics.median(r["cpu_seconds"] for r in theirs)
    print(f"TFJobs {a.jobs} x {a.workers}: ctrain vs training-operator {tfop_report_version()}: "
          f"time until every pod exists {t_ours:.2f} s vs {t_theirs:.2f} s"
          f"{' (medians of %d rounds)' % a.rounds if a.rounds > 1 else ''}, ratio "
          f"training-operator/ctrain {t_theirs / t_ours:.2f} (>1: ctrain faster); API requests per "
          f"job {req_ours:.2f} vs {req_theirs:.2f}; CPU {cpu_ours:.2f} s vs {cpu_theirs:.2f} s; "
          f"peak RSS {rss_ours:.1f} vs {rss_theirs:.1f} MiB")


def tfop_report_version():
    from baseline_tfop import VERSION
    return VERSION


def metric_or_none(port):
    try:
        return metric(port, "ctrain_reconcile_total")
    except Exception:
        return None


if __name__ == "__main__":
    main()
