#!/usr/bin/env python3
"""bench/baseline_tfop: the Kubeflow training-operator's row of bench/controller.

training-operator v1.9.3, built from its Go module by
tools/baselines/build-training-operator.sh, run out of cluster on a control
plane that is already up, reconciling N TFJobs x W workers created at once by
the same load generator as ctrain's row (bench_create, 8 parallel):

  - the TFJob CRD and the operator's ClusterRole come from the same module;
    it runs as the ServiceAccount kubeflow/training-operator bound to that
    ClusterRole (as ctrain runs with manifests/ RBAC), unless a kubeconfig is
    given;
  - flags: --enable-scheme=tfjob (the TFJob controller only),
    --controller-threads=16, --kube-api-qps/--kube-api-burst 1000,
    --leader-elect=false, --zap-log-level=info;
  - out of cluster its webhook cert rotator (pkg/cert/cert.go) needs the
    Secret kubeflow/training-operator-webhook-cert (it fills it), the
    ValidatingWebhookConfiguration validator.training-operator.kubeflow.org
    (it injects the CA; this one matches nothing) and the certs it wrote into
    that Secret on disk in its fixed certDir (in cluster a volume mount does
    that); the controllers start only once all that is done;
  - pods carry a nodeSelector that matches no node, so nothing runs.

Measured: the time from the first create until all N*W pods exist (a watch
on the namespace), pods/s, Services, the operator's API requests from just
before the jobs were created until it settled (controller-runtime's
rest_client_requests_total: no change for 2 s), by method, its CPU time and
peak RSS (VmHWM).

From bench/controller.py, on its cluster:
    from baseline_tfop import run_training_operator
    r = run_training_operator(cl, jobs=a.jobs, workers=a.workers, create=create)

CLI (brings up its own control plane with tools/localcluster/cluster.sh and
takes it down at the end):
    python3 bench/baseline_tfop.py [--jobs 200] [--workers 4] [--threads 16]
                                   [--build build] [--log FILE] [--json]
"""
import argparse
import json
import os
import pathlib
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

from _paths import ROOT
from clusterlib import control_plane_down, control_plane_up, free_port, sa_kubeconfig

VERSION = "v1.9.3"
BUILD_SCRIPT = ROOT / "tools/baselines/build-training-operator.sh"
OPERATOR_NS = "kubeflow"  # pkg/cert/cert.go defaultOperatorNamespace
SECRET = "training-operator-webhook-cert"
WEBHOOK_CONFIG = "validator.training-operator.kubeflow.org"
# pkg/cert/cert.go certDir: fixed in the binary; in cluster, the Secret's mount.
CERT_DIR = pathlib.Path("/tmp/k8s-webhook-server/serving-certs")
CERT_FILES = ("tls.crt", "tls.key", "ca.crt")
# A label no node has: the pods stay Pending (the same for ctrain's row).
NODE_SELECTOR = {"ctrain.dev/bench": "no-such-node"}


def build_training_operator():
    """Builds (once, cached by version) and returns (binary, manifests dir)."""
    out = subprocess.run(["bash", str(BUILD_SCRIPT)], capture_output=True, text=True,
                         env=dict(os.environ, TRAINING_OPERATOR_VERSION=VERSION))
    if out.returncode:
        raise RuntimeError(f"{BUILD_SCRIPT} failed ({out.returncode}):\n{out.stderr[-4000:]}")
    bindir = pathlib.Path(out.stdout.strip().splitlines()[-1])
    return bindir / "training-operator.v1", bindir.parent / "manifests"


def _metrics_text(port):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        return r.read().decode()


def _requests(port):
    """rest_client_requests_total by method (summed over code and host)."""
    by = {}
    for m in re.finditer(r'^rest_client_requests_total\{([^}]*)\} ([0-9.e+]+)$',
                         _metrics_text(port), re.M):
        method = re.search(r'method="([^"]*)"', m.group(1))
        k = method.group(1) if method else "?"
        by[k] = by.get(k, 0) + float(m.group(2))
    return by


def _settle(port, quiet_s=2.0, limit_s=120):
    """Waits until the operator made no API request for quiet_s; returns its
    request counts then."""
    end = time.monotonic() + limit_s
    last, since = None, time.monotonic()
    while time.monotonic() < end:
        r = _requests(port)
        if r != last:
            last, since = r, time.monotonic()
        elif time.monotonic() - since >= quiet_s:
            return r
        time.sleep(0.2)
    return _requests(port)


def _cpu_seconds(pid):
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _vm_hwm_kib(pid):
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    return None


class _PodWatch:
    """`kubectl get pods --watch -o name` in one namespace: the time each pod
    name was first seen. Synced once it has seen `sentinel`."""

    def __init__(self, cluster, ns, sentinel):
        self.sentinel = sentinel
        self.first_seen = {}
        self.lock = threading.Lock()
        self.proc = subprocess.Popen(
            [cluster.kubectl_bin, "get", "pods", "-n", ns, "--watch", "-o", "name"],
            env=cluster.env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self):
        for line in self.proc.stdout:
            name = line.strip().removeprefix("pod/")
            now = time.monotonic()
            with self.lock:
                self.first_seen.setdefault(name, now)

    def synced(self):
        with self.lock:
            return self.sentinel in self.first_seen

    def times(self):
        with self.lock:
            return sorted(t for n, t in self.first_seen.items() if n != self.sentinel)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait()


def tfjob_template(workers, namespace=None):
    """The TFJob bench_create copies (name j-%d): what both this row and ctrain's TFJob row
    (bench/controller.py --kind tfjob) reconcile."""
    meta = {"name": "j-%d"}
    if namespace:
        meta["namespace"] = namespace
    return {"apiVersion": "kubeflow.org/v1", "kind": "TFJob", "metadata": meta,
            "spec": {"tfReplicaSpecs": {"Worker": {
                "replicas": workers, "restartPolicy": "Never",
                "template": {"spec": {
                    "nodeSelector": NODE_SELECTOR,
                    "containers": [{"name": "tensorflow", "image": "ctrain:latest"}]}}}}}}


def _apply(cluster, objs):
    cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", "-",
                    input=json.dumps({"apiVersion": "v1", "kind": "List", "items": objs}))


def _wait(pred, what, limit_s, proc=None, log=None, every=0.2):
    end = time.monotonic() + limit_s
    while not pred():
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"training-operator exited ({proc.returncode}) while waiting for "
                               f"{what}; see {log}")
        if time.monotonic() > end:
            raise RuntimeError(f"timed out after {limit_s} s waiting for {what}; see {log}")
        time.sleep(every)


def _secret_certs(cluster):
    p = cluster.kubectl("get", "secret", SECRET, "-n", OPERATOR_NS, "-o", "json", check=False)
    if p.returncode:
        return None
    data = json.loads(p.stdout).get("data") or {}
    return data if all(data.get(f) for f in CERT_FILES) else None


def _write_certs(data):
    import base64
    CERT_DIR.mkdir(parents=True, exist_ok=True)
    for f in CERT_FILES:
        tmp = CERT_DIR / f".{f}.tmp"
        tmp.write_bytes(base64.b64decode(data[f]))
        os.chmod(tmp, 0o600)
        os.replace(tmp, CERT_DIR / f)


def _remove_certs():
    for f in CERT_FILES:
        try:
            (CERT_DIR / f).unlink()
        except FileNotFoundError:
            pass


def _setup_objects(webhook_port):
    return [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": OPERATOR_NS}},
        # Empty: the rotator generates the CA and serving cert into it.
        {"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
         "metadata": {"name": SECRET, "namespace": OPERATOR_NS}},
        # The rotator injects its CA here; the one webhook matches nothing.
        {"apiVersion": "admissionregistration.k8s.io/v1",
         "kind": "ValidatingWebhookConfiguration",
         "metadata": {"name": WEBHOOK_CONFIG},
         "webhooks": [{
             "name": "none.training-operator.kubeflow.org",
             "clientConfig": {"url": f"https://127.0.0.1:{webhook_port}/none"},
             "rules": [{"apiGroups": ["none.invalid"], "apiVersions": ["v1"],
                        "operations": ["CREATE"], "resources": ["none"]}],
             "failurePolicy": "Ignore", "sideEffects": "None",
             "admissionReviewVersions": ["v1"]}]},
    ]


class Operator:
    """training-operator installed on `cluster` and running out of cluster, until stop():

        op = Operator(cluster, threads=16, qps=1000, burst=1000, log=path).start()
        op.proc, op.metrics_port, op.requests(), op.flags ... op.stop()

    start() installs the TFJob CRD, the namespace kubeflow with the webhook Secret and
    configuration, and (kubeconfig None) the ServiceAccount kubeflow/training-operator
    bound to the module's ClusterRole; starts the binary; writes the certs its rotator
    put in the Secret where it reads them (out of cluster we are its volume mount); and
    returns once its TFJob workers started. stop() stops it and deletes what start()
    installed (and `also`: e.g. the bench's namespace), leaving the cluster as found.
    start() refuses a cluster where any of those exists."""

    def __init__(self, cluster, kubeconfig=None, threads=16, qps=1000, burst=1000, log=None,
                 extra_args=(), also=(), quiet=False):
        self.cluster, self.kubeconfig, self.log = cluster, kubeconfig, log
        self.threads, self.qps, self.burst, self.extra_args = threads, qps, burst, extra_args
        self.say = (lambda *a: None) if quiet else (
            lambda *a: print("baseline_tfop:", *a, file=sys.stderr, flush=True))
        self.owned = tuple(also) + (
            ("validatingwebhookconfiguration", WEBHOOK_CONFIG),
            ("clusterrolebinding", "training-operator"), ("clusterrole", "training-operator"),
            ("namespace", OPERATOR_NS), ("crd", "tfjobs.kubeflow.org"))
        self.proc = None
        self.work = None
        self.metrics_port = self.probe_port = self.webhook_port = None
        self.flags = []

    def start(self):
        cluster = self.cluster
        binary, manifests = build_training_operator()
        for args in self.owned:
            if cluster.kubectl("get", *args, "--ignore-not-found", "-o", "name").stdout.strip():
                raise RuntimeError(f"{' '.join(args)} exists already (training-operator "
                                   "installed?): run on a fresh control plane")
        self.metrics_port, self.probe_port, self.webhook_port = free_port(), free_port(), \
            free_port()
        self.work = pathlib.Path(tempfile.mkdtemp(prefix="baseline-tfop-"))
        try:
            self._start(binary, manifests)
        except BaseException:
            self.stop()
            raise
        return self

    def _start(self, binary, manifests):
        cluster, say, log = self.cluster, self.say, self.log
        say(f"installing the TFJob CRD, namespace {OPERATOR_NS}, Secret, webhook config")
        cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f",
                        str(manifests / "kubeflow.org_tfjobs.yaml"))

        def established():  # (`kubectl wait` fails before the CRD has any condition)
            p = cluster.kubectl("get", "crd", "tfjobs.kubeflow.org", "-o", "json", check=False)
            return p.returncode == 0 and any(
                c["type"] == "Established" and c["status"] == "True"
                for c in json.loads(p.stdout).get("status", {}).get("conditions") or [])
        _wait(established, "the TFJob CRD Established", 60)
        _apply(cluster, _setup_objects(self.webhook_port))
        if self.kubeconfig is None:
            cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f",
                            str(manifests / "role.yaml"))
            _apply(cluster, [
                {"apiVersion": "v1", "kind": "ServiceAccount",
                 "metadata": {"name": "training-operator", "namespace": OPERATOR_NS}},
                {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
                 "metadata": {"name": "training-operator"},
                 "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                             "name": "training-operator"},
                 "subjects": [{"kind": "ServiceAccount", "name": "training-operator",
                               "namespace": OPERATOR_NS}]}])
            self.kubeconfig = sa_kubeconfig(cluster, self.work / "training-operator.kubeconfig",
                                            sa="training-operator", ns=OPERATOR_NS)
        _remove_certs()  # so it waits for this cluster's

        self.flags = ["--enable-scheme=tfjob", f"--controller-threads={self.threads}",
                      f"--kube-api-qps={self.qps}", f"--kube-api-burst={self.burst}",
                      "--leader-elect=false",
                      f"--metrics-bind-address=127.0.0.1:{self.metrics_port}",
                      f"--health-probe-bind-address=127.0.0.1:{self.probe_port}",
                      f"--webhook-server-port={self.webhook_port}", "--zap-log-level=info",
                      *self.extra_args]
        env = {k: v for k, v in os.environ.items()
               if k not in ("KUBECONFIG", "KUBEFLOW_NAMESPACE", "MY_POD_NAMESPACE")}
        say(f"starting {binary.name} {' '.join(self.flags)}")
        self.proc = subprocess.Popen([str(binary), f"--kubeconfig={self.kubeconfig}",
                                      *self.flags],
                                     stdout=open(log, "w"), stderr=subprocess.STDOUT, env=env)
        # The rotator fills the Secret; out of cluster we are its volume mount.
        certs = {}

        def got_certs():
            certs["d"] = _secret_certs(cluster)
            return certs["d"] is not None
        _wait(got_certs, f"the rotator to fill Secret {OPERATOR_NS}/{SECRET}", 60, self.proc,
              log, 0.5)
        _write_certs(certs["d"])

        def workers_started():
            return "Starting workers" in pathlib.Path(log).read_text(errors="replace")
        _wait(workers_started, "the TFJob controller's workers (cert mount, CA injection, "
              "cache sync)", 120, self.proc, log, 0.2)
        say("operator ready")

    def requests(self):
        """rest_client_requests_total by method."""
        return _requests(self.metrics_port)

    def settle(self, quiet_s=2.0, limit_s=120):
        return _settle(self.metrics_port, quiet_s, limit_s)

    def stop(self, clean=True):
        """clean=False: only the process and the cert files (the cluster is going away)."""
        proc = self.proc
        if proc and proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        _remove_certs()
        # Leave the cluster as found: the next row (ctrain) sees no TFJob
        # objects, operator, or webhook configuration.
        for args in self.owned if clean else ():
            try:
                self.cluster.kubectl("delete", *args, "--ignore-not-found", "--wait=true",
                                     "--timeout=300s", check=False, timeout=330)
            except subprocess.TimeoutExpired:
                self.say(f"warning: deleting {' '.join(args)} timed out")
        if self.work:
            shutil.rmtree(self.work, ignore_errors=True)


def run_training_operator(cluster, kubeconfig=None, jobs=200, workers=4, threads=16,
                          qps=1000, burst=1000, create=None, namespace="tfop-bench",
                          log=None, extra_args=(), timeout_s=600, quiet=False):
    """Runs training-operator out of cluster against `cluster` (a
    tests/conftest.py Cluster, admin kubeconfig) and measures `jobs` TFJobs x
    `workers` Workers created at once.

    kubeconfig: what the operator runs with; None: a token of the
    ServiceAccount kubeflow/training-operator bound to the module's ClusterRole.
    create: path of bench_create (the load generator of ctrain's row); None:
    ROOT/build/bench/bench_create if it exists, else one `kubectl create` of a
    List. log: where its log goes (default: a temp file, kept on failure).

    Returns a dict: seconds_to_all_pods, pods_per_s, seconds_to_first_pod,
    seconds_first_to_last_pod, seconds_to_jobs_created (load generator done),
    seconds_to_all_jobs_created_condition, pods, services, requests (total
    API requests, jobs created until settled), requests_by_method,
    requests_per_job, cpu_seconds, peak_rss_mib, version, flags.
    Leaves the cluster as it found it (namespace, CRD, RBAC, webhook objects,
    the cert files are removed); refuses one where any of those exists."""
    if create is None and (ROOT / "build/bench/bench_create").exists():
        create = ROOT / "build/bench/bench_create"
    own_log = log is None
    if own_log:
        log = tempfile.mktemp(prefix="training-operator-", suffix=".log")
    n_pods = jobs * workers
    op = Operator(cluster, kubeconfig, threads, qps, burst, log, extra_args,
                  also=(("namespace", namespace),), quiet=quiet)
    say = op.say
    watch = gen = None
    ok = False
    op.start()
    proc, work, flags = op.proc, op.work, op.flags
    try:
        r0 = op.settle(quiet_s=1.0)
        cpu0 = _cpu_seconds(proc.pid)
        cluster.kubectl("create", "namespace", namespace)
        sentinel = "tfop-bench-sentinel"
        cluster.kubectl("create", "-f", "-", input=json.dumps({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": sentinel, "namespace": namespace},
            "spec": {"nodeSelector": NODE_SELECTOR,
                     "containers": [{"name": "c", "image": "ctrain:latest"}]}}))
        watch = _PodWatch(cluster, namespace, sentinel)
        _wait(watch.synced, "the pod watch", 30)

        tfjob = tfjob_template(workers, namespace)
        (work / "tfjob.json").write_text(json.dumps(tfjob))
        say(f"creating {jobs} TFJobs x {workers} workers")
        t0 = time.monotonic()
        if create:
            gen = subprocess.Popen([str(create), "--kubeconfig", cluster.kubeconfig, "--ns",
                                    namespace, "--count", str(jobs), "--parallel", "8",
                                    "--group", "kubeflow.org", "--version", "v1",
                                    "--resource", "tfjobs", "--template",
                                    str(work / "tfjob.json")], stdout=subprocess.DEVNULL)
        else:
            items = []
            for i in range(jobs):
                j = json.loads(json.dumps(tfjob))
                j["metadata"]["name"] = f"j-{i}"
                items.append(j)
            (work / "tfjobs.json").write_text(json.dumps({"apiVersion": "v1", "kind": "List",
                                                          "items": items}))
            gen = subprocess.Popen([cluster.kubectl_bin, "create", "-f",
                                    str(work / "tfjobs.json")], env=cluster.env,
                                   stdout=subprocess.DEVNULL)
        t_jobs = None
        while True:
            now = time.monotonic()
            if t_jobs is None and gen.poll() is not None:
                if gen.returncode:
                    raise RuntimeError(f"creating the TFJobs failed ({gen.returncode})")
                t_jobs = now - t0
            if len(watch.times()) >= n_pods and t_jobs is not None:
                break
            if now - t0 > timeout_s:
                raise RuntimeError(f"{len(watch.times())}/{n_pods} pods after {timeout_s} s; "
                                   f"see {log}")
            if proc.poll() is not None:
                raise RuntimeError(f"training-operator exited ({proc.returncode}); see {log}")
            time.sleep(0.1)
        times = watch.times()
        t_first, t_pods = times[0] - t0, times[n_pods - 1] - t0
        services_then = len(cluster.kubectl("get", "services", "-n", namespace, "-o",
                                            "name").stdout.split())
        say(f"all {n_pods} pods after {t_pods:.2f} s")

        def all_created():
            items = cluster.get_json("tfjobs", "-n", namespace)["items"]
            return sum(1 for j in items if any(
                c.get("type") == "Created" and c.get("status") == "True"
                for c in (j.get("status") or {}).get("conditions") or [])) == jobs
        _wait(all_created, "every TFJob Created", timeout_s, proc, log, 0.5)
        t_created = time.monotonic() - t0
        r1 = op.settle()
        cpu1 = _cpu_seconds(proc.pid)
        rss_kib = _vm_hwm_kib(proc.pid)
        pods = len(watch.times())
        services = len(cluster.kubectl("get", "services", "-n", namespace, "-o",
                                       "name").stdout.split())
        by_method = {k: int(r1.get(k, 0) - r0.get(k, 0)) for k in sorted(set(r0) | set(r1))}
        by_method = {k: v for k, v in by_method.items() if v}
        req = sum(by_method.values())
        ok = True
        return {
            "version": VERSION, "jobs": jobs, "workers": workers, "threads": threads,
            "flags": flags,
            "load_generator": "bench_create (8 parallel)" if create else "kubectl create (List)",
            "seconds_to_jobs_created": t_jobs,
            "seconds_to_first_pod": t_first,
            "seconds_to_all_pods": t_pods,
            "pods_per_s": n_pods / t_pods,
            "seconds_first_to_last_pod": t_pods - t_first,
            "seconds_to_all_jobs_created_condition": t_created,
            "pods": pods,
            "services_when_all_pods": services_then,
            "services": services,
            "requests": req,
            "requests_by_method": by_method,
            "requests_per_job": req / jobs,
            "cpu_seconds": cpu1 - cpu0,
            "peak_rss_mib": rss_kib / 1024 if rss_kib else None,
            "log": None if own_log else log,
        }
    finally:
        if gen and gen.poll() is None:
            gen.kill()
            gen.wait()
        if watch:
            watch.stop()
        op.stop()
        if own_log:
            if ok:
                os.unlink(log)
            else:
                say(f"training-operator log kept: {log}")


def raw_create_rate(cluster, create, n_pods, ns="tfop-raw"):
    """bench/controller.py's baseline: n_pods raw pod creates with bench_create
    (8 parallel, no client rate limit) in a fresh namespace, deleted after.
    Returns pods/s. On a shared machine it moves with the load: the CLI
    measures it before and after, so the rows' ratios to it compare."""
    cluster.kubectl("create", "namespace", ns)
    try:
        with tempfile.NamedTemporaryFile("w", suffix=".json") as f:
            json.dump({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p-%d"},
                       "spec": {"restartPolicy": "Never", "nodeSelector": NODE_SELECTOR,
                                "containers": [{"name": "worker", "image": "ctrain:latest"}]}},
                      f)
            f.flush()
            out = subprocess.run([str(create), "--kubeconfig", cluster.kubeconfig, "--ns", ns,
                                  "--count", str(n_pods), "--parallel", "8", "--template",
                                  f.name], capture_output=True, text=True, check=True)
        return float(re.search(r": ([0-9.]+)/s", out.stdout).group(1))
    finally:
        cluster.kubectl("delete", "namespace", ns, "--wait=true", "--timeout=300s",
                        check=False, timeout=330)


def report(r):
    """The lines bench/controller.py prints for this row."""
    n = r["jobs"] * r["workers"]
    bm = ", ".join(f"{k} {v}" for k, v in r["requests_by_method"].items())
    return "\n".join([
        f"training-operator {r['version']} (out of cluster; {' '.join(r['flags'][:4])}):",
        f"  {r['jobs']} TFJobs x {r['workers']} workers = {n} pods ({r['pods']} exist); "
        f"TFJobs created by {r['load_generator']} in {r['seconds_to_jobs_created']:.2f} s",
        f"  time until every pod exists: {r['seconds_to_all_pods']:.2f} s "
        f"({r['pods_per_s']:.1f} pods/s; first pod after {r['seconds_to_first_pod']:.2f} s); "
        f"every TFJob Created: {r['seconds_to_all_jobs_created_condition']:.2f} s",
        f"  Services: {r['services']} ({r['services_when_all_pods']} when every pod existed)",
        f"  API requests per job: {r['requests_per_job']:.2f} (total {r['requests']}: {bm})",
        f"  CPU {r['cpu_seconds']:.2f} s; peak RSS {r['peak_rss_mib']:.1f} MiB",
    ])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--jobs", type=int, default=200)
    ap.add_argument("--workers", type=int, default=4, help="worker replicas per TFJob")
    ap.add_argument("--threads", type=int, default=16, help="its --controller-threads")
    ap.add_argument("--qps", type=int, default=1000, help="its --kube-api-qps and -burst")
    ap.add_argument("--build", default=str(ROOT / "build"),
                    help="the C build with bench/bench_create (the load generator)")
    ap.add_argument("--log", help="keep training-operator's log here")
    ap.add_argument("--json", action="store_true", help="print the result as JSON too")
    a = ap.parse_args()
    create = pathlib.Path(a.build) / "bench/bench_create"
    if not create.exists():
        print(f"baseline_tfop: {create} not built; TFJobs are created with kubectl",
              file=sys.stderr)
        create = None
    t_build = time.monotonic()
    build_training_operator()  # before the cluster: the first run compiles for minutes
    t_build = time.monotonic() - t_build
    cl = control_plane_up(prefix="bench-tfop-")
    try:
        n = a.jobs * a.workers
        raw = [raw_create_rate(cl, create, n)] if create else []
        r = run_training_operator(cl, jobs=a.jobs, workers=a.workers, threads=a.threads,
                                  qps=a.qps, burst=a.qps, create=create, log=a.log)
        if create:
            raw.append(raw_create_rate(cl, create, n))
            r["raw_create_pods_per_s"] = raw
    finally:
        control_plane_down(cl)
    if t_build > 5:
        print(f"(training-operator build: {t_build:.0f} s)")
    print(report(r))
    if "raw_create_pods_per_s" in r:
        b, af = r["raw_create_pods_per_s"]
        print(f"  baseline (tight create loop, bench_create, 8 parallel): {(b + af) / 2:.1f} "
              f"pods/s (before {b:.1f}, after {af:.1f}); ratio training-operator/baseline: "
              f"{r['pods_per_s'] / ((b + af) / 2):.2f}")
    if a.json:
        print(json.dumps(r, indent=1))


if __name__ == "__main__":
    main()
