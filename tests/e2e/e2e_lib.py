"""Helpers of the whole-system tests (their fixtures `node` and `controller` are in
tests/conftest.py): real nodes joined to the session's control plane
(containerd + runc, kubelet, kube-proxy; CoreDNS on the first; see
tools/localcluster/node.sh), CTRAIN_TEST_NODES of them (default 2: `ctrain-node`
in the host's network namespace and `ctrain-node-2` in its own, routed through
the host), with the `ctrain` image built here from the Dockerfile, and the
controller installed as users install it: `kubectl apply --server-side -k` of
manifests/crds and manifests/ (its
Deployment, two replicas, leader election).

Node helpers: `node.names` (every node's name, the first is `node.name`),
`node_names(cluster)`, `pod_node`, `stop_node`/`start_node` (node.sh's power
loss and power on, nodes 2..N), `wait_node_ready`, `drain`, `uncordon`.

The example job (examples/fashion-mnist.yaml, job `JOB`, workers `W0` and `W1`):
`apply_example` (optionally changed, with a hostPath PV in `claim_dir(ns)`; the `ns`
fixture of tests/e2e/conftest.py removes both), `job_pods`, `worker_pids`, `cond`,
`PodWatch` (every pod uid seen), and `probe` (a TCP connect from a labelled pod).

With CTRAIN_TEST_USE_KUBECONFIG=1 the cluster in $KUBECONFIG is used as it is:
its nodes must already have the `ctrain:latest` image (kind load, minikube
image load); tests that need the node's host (SIGKILL of a container process,
hostPath volumes) are skipped there.
"""
import json
import os
import pathlib
import shutil
import subprocess
import threading
import time

import pytest

from clusterlib import build_image as build_image  # re-exported: the one of each is clusterlib's
from clusterlib import cond as cond

ROOT = pathlib.Path(__file__).resolve().parents[2]
EXISTING = os.environ.get("CTRAIN_TEST_USE_KUBECONFIG") == "1"
CONTROLLER_NS = "ctrain-system"


NODE_SH = ROOT / "tools/localcluster/node.sh"


class Node:
    """The nodes the pods run on: `name` is the first (its `dir` holds its
    components' logs), `names` all of them; `host` is True when they run on
    this machine."""

    def __init__(self, cluster, name, node_dir=None, names=None):
        self.cluster = cluster
        self.name = name
        self.names = list(names or [name])
        self.dir = pathlib.Path(node_dir) if node_dir else None
        self.host = node_dir is not None
        self.imported = set()  # archives loaded this session (their names carry their hash)
        self.pending = {}  # archive -> the background `node.sh import` (prefetch_image)

    def component_log(self, name):
        return (self.dir / "logs" / f"{name}.log").read_text(errors="replace") if self.dir else ""

    def import_image(self, archive):
        """Loads the image archive into every node's containerd, once a session:
        the nodes keep their images across a stop and start, and a 1.7 GB TF
        image takes over a minute to load into two nodes."""
        if archive in self.imported:
            return
        p = self.pending.pop(archive, None)
        if p:
            p.communicate(timeout=1800)
            if p.returncode == 0:
                self.imported.add(archive)
                return
            # It failed in the background (a node stopped meanwhile): again, here.
        subprocess.run(["bash", str(NODE_SH), "import", "--dir",
                        self.cluster.state_dir, archive], check=True, capture_output=True,
                       text=True, timeout=1800)
        self.imported.add(archive)

    def prefetch_image(self, archive):
        """Starts loading the archive into every node in the background; the
        import_image of it waits for that. For an image a later module needs,
        once no test stops a node any more."""
        if archive in self.imported or archive in self.pending:
            return
        self.pending[archive] = subprocess.Popen(
            ["bash", str(NODE_SH), "import", "--dir", self.cluster.state_dir, archive],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)

    def pod_log(self, ns, pod, container=None, previous=False):
        """`kubectl logs` of a pod ('' when it has none yet)."""
        args = ["logs", "-n", ns, pod]
        if container:
            args += ["-c", container]
        if previous:
            args.append("--previous")
        p = self.cluster.kubectl(*args, check=False, timeout=60)
        return p.stdout if p.returncode == 0 else ""


class Deployment:
    """The controller as installed by `kubectl apply --server-side -k manifests/`."""

    def __init__(self, cluster):
        self.cluster = cluster

    def pods(self):
        """The controller's pods, less those being deleted (an earlier
        module's, whose Deployment is gone, or a deleted leader)."""
        return [p for p in self.cluster.get_json("pods", "-n", CONTROLLER_NS, "-l",
                                                 "app.kubernetes.io/component=controller")["items"]
                if not p["metadata"].get("deletionTimestamp")]

    def leader(self):
        """The pod holding the Lease (its holderIdentity names the pod)."""
        lease = self.cluster.get_json("lease", "-n", CONTROLLER_NS, "ctrain-controller")
        holder = lease["spec"].get("holderIdentity", "")
        for p in self.pods():
            if holder.rsplit("_", 1)[0] == p["metadata"]["name"]:
                return p
        return None

    def wait_leader(self, timeout=120, not_uid=None):
        deadline = time.monotonic() + timeout
        while True:
            p = self.leader()
            if p and p["metadata"]["uid"] != not_uid and p["status"].get("phase") == "Running":
                return p
            assert time.monotonic() < deadline, f"no leader pod: {self.lease_json()}"
            time.sleep(0.5)

    def lease_json(self):
        p = self.cluster.kubectl("get", "lease", "-n", CONTROLLER_NS, "ctrain-controller", "-o",
                                 "json", check=False)
        return p.stdout or p.stderr

    def rollout(self, timeout=300):
        self.cluster.kubectl("rollout", "status", "deployment/ctrain-controller", "-n",
                             CONTROLLER_NS, f"--timeout={timeout}s", timeout=timeout + 30)

    def logs(self):
        out = []
        for p in self.pods():
            name = p["metadata"]["name"]
            out.append(self.cluster.kubectl("logs", "-n", CONTROLLER_NS, name, check=False).stdout)
        return "\n".join(out)


def node_names(cluster):
    """The names of the cluster's nodes, sorted (ctrain-node, ctrain-node-2, ...)."""
    return sorted(n["metadata"]["name"] for n in cluster.get_json("nodes")["items"])


def pod_node(cluster, ns, pod):
    """The node a pod is bound to ('' while it is not scheduled)."""
    return cluster.get_json("pod", pod, "-n", ns)["spec"].get("nodeName", "")


def node_ready(cluster, name):
    """The status of the node's Ready condition: 'True', 'False' or 'Unknown'."""
    for c in cluster.get_json("node", name)["status"].get("conditions", []):
        if c["type"] == "Ready":
            return c["status"]
    return "Unknown"


def wait_node_ready(cluster, name, ready=True, timeout=120):
    """Waits until the node's Ready condition is True (ready) or not True;
    returns the seconds it took."""
    t0 = time.monotonic()
    while (node_ready(cluster, name) == "True") != ready:
        assert time.monotonic() - t0 < timeout, \
            f"node {name} not {'Ready' if ready else 'NotReady'} after {timeout} s:\n" + \
            cluster.kubectl("describe", "node", name, check=False).stdout[-3000:]
        time.sleep(0.5)
    return time.monotonic() - t0


def _node_sh(cmd, name, state_dir, timeout):
    p = subprocess.run(["bash", str(NODE_SH), cmd, "--dir", str(state_dir), name],
                       capture_output=True, text=True, timeout=timeout)
    assert p.returncode == 0, f"node.sh {cmd} {name} failed:\n{p.stderr[-3000:]}"


def stop_node(name, cluster=None):
    """Power loss of node `name` (2..N of the local cluster): every process of
    it SIGKILLed, its network gone (node.sh stop). The apiserver sees it go
    NotReady after the node monitor grace period (20 s in the test session)."""
    _node_sh("stop", name, (cluster or _CLUSTER["c"]).state_dir, 120)


def start_node(name, cluster=None):
    """Powers node `name` on again (node.sh start); it is Ready when this returns."""
    _node_sh("start", name, (cluster or _CLUSTER["c"]).state_dir, 300)


_CLUSTER = {}  # the session's cluster, for stop_node/start_node (set by the node fixture)


def drain(cluster, nodes, selector=None, timeout=120):
    """`kubectl drain` of one node or several (all cordoned first, so no evicted
    pod lands on another of them), with the pod selector if given."""
    nodes = [nodes] if isinstance(nodes, str) else list(nodes)
    for n in nodes:
        cluster.kubectl("cordon", n)
    for n in nodes:
        args = ["drain", n, "--ignore-daemonsets", "--delete-emptydir-data",
                f"--timeout={timeout}s"]
        if selector:
            args += ["--pod-selector", selector]
        cluster.kubectl(*args, timeout=timeout + 60)


def uncordon(cluster, nodes):
    for n in [nodes] if isinstance(nodes, str) else list(nodes):
        cluster.kubectl("uncordon", n, check=False)


def host_only():
    return pytest.mark.skipif(EXISTING, reason="needs the node's host (processes, hostPath)")


def host_ip(cluster):
    """The node's host address (cluster.sh's HOST_IP): pods reach the apiserver, CoreDNS
    and a server the test starts there (test_data_e2e.py's versitygw)."""
    for line in (pathlib.Path(cluster.state_dir) / "ports").read_text().splitlines():
        if line.startswith("HOST_IP="):
            return line.split("=", 1)[1].strip()
    raise AssertionError("no HOST_IP in the cluster's ports file")


def job_json(cluster, ns, name="fashion-mnist"):
    return cluster.get_json("tj", name, "-n", ns)


def events(cluster, ns):
    return cluster.get_json("events", "-n", ns)["items"]


def wait_event(cluster, node, ns, pred, timeout=60):
    """The first Event in `ns` that `pred` holds for, polled: the controller
    writes an Event after the status change it goes with."""
    deadline = time.monotonic() + timeout
    while True:
        got = [e for e in events(cluster, ns) if pred(e)]
        if got:
            return got[0]
        assert time.monotonic() < deadline, \
            "no such event:\n" + "\n".join(f"{e['reason']}: {e['message']}"
                                            for e in events(cluster, ns)) + dump(cluster, node, ns)
        time.sleep(0.5)


def wait_job(cluster, node, ns, pred, timeout=180, what="state", name="fashion-mnist"):
    """The TrainingJob `name` once pred(job) holds; fails with dump() after timeout s."""
    deadline = time.monotonic() + timeout
    while True:
        j = job_json(cluster, ns, name)
        if pred(j):
            return j
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}:\n{dump(cluster, node, ns)}")
        time.sleep(0.5)


def wait_succeeded(cluster, node, ns, timeout=600, name="fashion-mnist"):
    """`kubectl wait` for the TrainingJob's Succeeded condition; the job, or dump()."""
    p = cluster.kubectl("wait", "--for=condition=Succeeded", f"tj/{name}", "-n", ns,
                        f"--timeout={timeout}s", check=False, timeout=timeout + 30)
    if p.returncode != 0:
        raise AssertionError(f"job did not succeed:\n{dump(cluster, node, ns)}")
    return job_json(cluster, ns, name)


def wait_log(node, ns, pod, text, timeout=300):
    """The pod's log once it holds `text`."""
    deadline = time.monotonic() + timeout
    while True:
        log = node.pod_log(ns, pod)
        if text in log:
            return log
        assert time.monotonic() < deadline, f"{text!r} never in the log of {pod}:\n{log[-3000:]}"
        time.sleep(0.5)


def dump(cluster, node, ns, kinds="tj,pods", yaml_kind=None):
    """What a failed wait shows: `kinds` of the namespace, `yaml_kind`'s
    objects in full (their last 4000 characters), events and worker logs."""
    out = [cluster.kubectl("get", kinds, "-n", ns, "-o", "wide", check=False).stdout]
    if yaml_kind:
        out.append(cluster.kubectl("get", yaml_kind, "-n", ns, "-o", "yaml",
                                   check=False).stdout[-4000:])
    out.append(json.dumps([(e["reason"], e["message"]) for e in events(cluster, ns)], indent=1))
    for p in cluster.get_json("pods", "-n", ns)["items"]:
        n = p["metadata"]["name"]
        out.append(f"--- {n}: {json.dumps(p['status'].get('containerStatuses'))[:1500]}\n"
                   + node.pod_log(ns, n)[-2000:])
    return "\n".join(out)


# what the node and its pods run, as /proc/PID/comm shows them (15 characters)
OURS = tuple(n[:15] for n in ("ctrain-worker", "ctrain-controller"))
NODE_PROCS = tuple(n[:15] for n in ("containerd", "kubelet", "kube-proxy", "coredns", "pause",
                                     "kube-router", "containerd-shim-runc-v2"))


def host_state():
    """What the node may change on its host, for a before/after comparison:
    iptables chains, links, mounts, network namespaces, kubepods cgroups,
    the sysctls node.sh restores, and the node's processes."""
    def run(*a):
        p = subprocess.run(a, capture_output=True, text=True)
        return p.stdout if p.returncode == 0 else ""
    st = {}
    for ipt in ("iptables-save", "ip6tables-save"):
        builtin = {":INPUT", ":FORWARD", ":OUTPUT", ":PREROUTING", ":POSTROUTING"}
        st[ipt] = sorted(line.split()[0] for line in run(ipt).splitlines()
                         if line.startswith(":") and line.split()[0] not in builtin)
        st[ipt + " rules"] = len([line for line in run(ipt).splitlines() if line.startswith("-A")])
    st["ipsets"] = sorted(run("ipset", "list", "-n").split())
    st["links"] = sorted(line.split(":")[1].strip().split("@")[0]
                         for line in run("ip", "-o", "link").splitlines())
    st["mounts"] = sorted(line.split()[4] for line in open("/proc/self/mountinfo"))
    st["netns"] = sorted(os.listdir("/var/run/netns")) if os.path.isdir("/var/run/netns") else []
    st["host paths"] = [p for p in ("/var/log/containers", "/var/log/pods", "/var/lib/cni",
                                    "/var/lib/kubelet", "/run/containerd/s", "/var/run/netns",
                                    "/run/ctrain-localnode.owner") if os.path.exists(p)]
    st["kubepods"] = sorted(str(p) for p in pathlib.Path("/sys/fs/cgroup").glob("*/kubepods"))
    # nodes 2..N: their cgroupRoot, veth, host route, pinned network namespace
    # (a mount), the pods' RETURN rule (the iptables rules' count)
    st["node cgroups"] = sorted(str(p) for p in pathlib.Path("/sys/fs/cgroup").glob("*/ctrain-node*"))
    st["routes"] = sorted(run("ip", "-4", "route").splitlines())
    for s in ("net/ipv4/ip_forward", "vm/overcommit_memory", "vm/panic_on_oom", "kernel/panic",
              "kernel/panic_on_oops", "net/ipv4/conf/all/route_localnet"):
        f = pathlib.Path("/proc/sys") / s
        st[s] = f.read_text().strip() if f.exists() else None
    names = []
    for p in pathlib.Path("/proc").iterdir():
        try:
            if p.name.isdigit():
                # the kernel keeps 15 characters of a name: ctrain-controller
                # reads "ctrain-controll", containerd-shim-runc-v2 "containerd-shim"
                comm = (p / "comm").read_text().strip()
                if comm in OURS:
                    # only those of pods: other tests on this machine run
                    # workers on loopback, outside any container
                    if b"KUBERNETES_SERVICE_HOST=" not in (p / "environ").read_bytes():
                        continue
                if comm in NODE_PROCS or comm in OURS:
                    names.append(comm)
        except OSError:
            continue
    st["processes"] = sorted(names)
    return st


def state_diff(before, after):
    return {k: (before.get(k), after.get(k)) for k in set(before) | set(after)
            if before.get(k) != after.get(k)}


def task_pids(ns, index, marker):
    """Host PIDs of the processes whose command line holds `marker`, of task
    `index` of a job in namespace `ns` (by their CTRAIN_NAMESPACE and
    TF_CONFIG): the containers' processes, seen from the node's host."""
    pids = []
    for p in pathlib.Path("/proc").iterdir():
        if not p.name.isdigit():
            continue
        try:
            if marker not in (p / "cmdline").read_bytes():
                continue
            env = (p / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if f"CTRAIN_NAMESPACE={ns}".encode() in env and any(
                e.startswith(b"TF_CONFIG=") and f'"index":{index}'.encode() in e for e in env):
            pids.append(int(p.name))
    return pids


def controller_rss_kib():
    """VmRSS (KiB) of every ctrain-controller process of a pod on this host."""
    out = []
    for p in pathlib.Path("/proc").iterdir():
        try:
            # (comm is cut at 15 characters: "ctrain-controll")
            if not p.name.isdigit() or pathlib.Path(
                    (p / "cmdline").read_bytes().split(b"\0")[0].decode()).name \
                    != "ctrain-controller":
                continue
            if b"KUBERNETES_SERVICE_HOST=" not in (p / "environ").read_bytes():
                continue
            for line in (p / "status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    out.append(int(line.split()[1]))
        except OSError:
            continue
    return out


# ---- the example job (examples/fashion-mnist.yaml) as the tests apply and watch it ------

JOB = "fashion-mnist"
W0, W1 = f"{JOB}-worker-0", f"{JOB}-worker-1"


def example_docs(epochs=None, model_json=None, mutate=None):
    import yaml
    docs = list(yaml.safe_load_all(open(ROOT / "examples/fashion-mnist.yaml")))
    for d in docs:
        if d["kind"] == "TrainingJob":
            c = d["spec"]["replicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]
            if epochs:
                c["args"] = [f"--epochs={epochs}" if a.startswith("--epochs=") else a
                             for a in c["args"]]
            if mutate:
                mutate(d)
        if d["kind"] == "ConfigMap" and model_json is not None:
            d["data"]["model.json"] = model_json
    return docs


def claim_dir(ns):
    return pathlib.Path(f"/tmp/ctrain-e2e-pv-{ns}")


def bind_claim(cluster, ns):
    """A hostPath PV pre-bound to the examples' claim `ctrain-checkpoints` in `ns` (the
    local cluster has no provisioner), owned by the image's non-root user."""
    if not EXISTING:
        d = claim_dir(ns)
        shutil.rmtree(d, ignore_errors=True)
        d.mkdir(parents=True)
        os.chown(d, 65532, 65532)
        pv = {"apiVersion": "v1", "kind": "PersistentVolume",
              "metadata": {"name": f"e2e-{ns}"},
              "spec": {"capacity": {"storage": "10Gi"}, "accessModes": ["ReadWriteMany"],
                       "persistentVolumeReclaimPolicy": "Retain",
                       "hostPath": {"path": str(d), "type": "Directory"},
                       "claimRef": {"namespace": ns, "name": "ctrain-checkpoints"}}}
        cluster.kubectl("apply", "-f", "-", input=json.dumps(pv))


def apply_example(cluster, ns, epochs=None, model_json=None, mutate=None):
    """The example as a user applies it (optionally changed), its claim bound
    (bind_claim)."""
    bind_claim(cluster, ns)
    if epochs is None and model_json is None and mutate is None:
        cluster.kubectl("apply", "-n", ns, "-f", str(ROOT / "examples/fashion-mnist.yaml"))
    else:
        cluster.kubectl("apply", "-n", ns, "-f", "-",
                        input=json.dumps({"apiVersion": "v1", "kind": "List",
                                          "items": example_docs(epochs, model_json, mutate)}))


def worker_pids(ns, index):
    return task_pids(ns, index, b"ctrain-worker")


def job_pods(cluster, ns):
    return cluster.get_json("pods", "-n", ns, "-l", f"ctrain.dev/job-name={JOB}")["items"]


class PodWatch:
    """Records every (pod name, attempt) -> uids seen while the job runs."""

    def __init__(self, cluster, ns):
        self.cluster, self.ns, self.seen, self.stop = cluster, ns, {}, False
        self.t = threading.Thread(target=self.run, daemon=True)
        self.t.start()

    def run(self):
        while not self.stop:
            try:
                for p in job_pods(self.cluster, self.ns):
                    key = (p["metadata"]["name"], p["metadata"]["labels"]["ctrain.dev/attempt"])
                    self.seen.setdefault(key, set()).add(p["metadata"]["uid"])
            except Exception:
                pass  # the apiserver is being restarted
            time.sleep(0.3)

    def close(self):
        self.stop = True
        self.t.join()
        return self.seen


def release_held(cluster, node, ns, pod, attempt=None, timeout=240):
    """Touches /tmp/go in `pod`'s worker container (of `attempt`, when given),
    which a held worker waits for before it starts. It waits for that
    container to be running first: right after a restart the new pod may
    still be scheduling or creating its container, and an exec then fails
    with "container not found"."""
    deadline = time.monotonic() + timeout
    while True:
        r = cluster.kubectl("get", "pod", pod, "-n", ns, "-o", "json", check=False)
        p = json.loads(r.stdout) if r.returncode == 0 else {}
        running = any(c.get("name") == "worker" and "running" in c.get("state", {})
                      for c in p.get("status", {}).get("containerStatuses", []))
        if running and (attempt is None or
                        p["metadata"]["labels"].get("ctrain.dev/attempt") == attempt):
            r = cluster.kubectl("exec", "-n", ns, pod, "--", "touch", "/tmp/go", check=False)
            if r.returncode == 0:
                return
            last = r.stderr.strip()
        else:
            last = p.get("status", {}).get("phase")
        assert time.monotonic() < deadline, \
            f"{ns}/{pod} never took /tmp/go ({last}):\n{dump(cluster, node, ns)}"
        time.sleep(0.5)


def probe(cluster, ns, name, job_label, ip, port, tries=1, timeout=120, attempt="1"):
    """A pod in `ns` labelled as a pod of job `job_label` (and of its attempt
    `attempt`, None: no attempt label) tries a TCP connect
    to ip:port (bash's /dev/tcp, 4 s), up to `tries` times a second apart;
    returns "OPEN" at the first that connects, else "BLOCKED". An allowed
    probe needs tries: the firewall admits a new pod only once kube-router
    has synced its IP into the policy's set, a moment after the pod starts."""
    script = (f"for i in $(seq {tries}); do"
              f" if timeout 4 bash -c 'exec 3<>/dev/tcp/{ip}/{port}' 2>/dev/null;"
              " then echo OPEN; exit 0; fi; sleep 1; done; echo BLOCKED")
    pod = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": name, "namespace": ns,
                        "labels": {"ctrain.dev/job-name": job_label,
                                   **({"ctrain.dev/attempt": attempt} if attempt else {})}},
           "spec": {"restartPolicy": "Never", "containers": [{
               "name": "probe", "image": "ctrain:latest", "imagePullPolicy": "Never",
               "command": ["bash", "-c", script]}]}}
    cluster.kubectl("apply", "-f", "-", input=json.dumps(pod))
    deadline = time.monotonic() + timeout
    while True:
        phase = cluster.get_json("pod", name, "-n", ns).get("status", {}).get("phase")
        if phase in ("Succeeded", "Failed"):
            break
        assert time.monotonic() < deadline, f"probe {ns}/{name} never finished ({phase})"
        time.sleep(0.5)
    out = cluster.kubectl("logs", "-n", ns, name).stdout.strip()
    cluster.kubectl("delete", "pod", name, "-n", ns, "--wait=false")
    return out


# training-operator v1.9.3's own TensorFlow examples (test_tfjob_e2e.py; test_release_e2e.py
# prefetches their image), from the Go module cache.
TFOP = pathlib.Path(os.environ.get("GOMODCACHE", pathlib.Path.home() / "go/pkg/mod")) / \
    "github.com/kubeflow/training-operator@v1.9.3"
EXAMPLES = TFOP / "examples/tensorflow"


# ---- a Prometheus server scraping the controller (test_monitoring_e2e.py) ----------------

PROM_SCRAPE = ROOT / "manifests/components/monitoring/prometheus-scrape.yaml"


class Prometheus:
    """A Prometheus server on this host (tools/prometheus/build.sh, from its Go module),
    scraping the controller with the shipped scrape job (prometheus-scrape.yaml) every
    `interval`, its Kubernetes discovery through the session's admin kubeconfig; the pods'
    IPs are routed from the host. In a temp directory (its config, its TSDB, its log) that
    stop() removes. `failure` says why it did not start (None when it did)."""

    def __init__(self, cluster, interval="2s"):
        import tempfile

        import yaml
        from clusterlib import free_port
        self.proc, self.failure, self.log = None, None, None
        self.dir = pathlib.Path(tempfile.mkdtemp(prefix="ctrain-e2e-prometheus-"))
        self.port = free_port()
        b = subprocess.run(["bash", str(ROOT / "tools/prometheus/build.sh")],
                           capture_output=True, text=True, timeout=3600)
        if b.returncode != 0:
            self.failure = f"tools/prometheus/build.sh failed:\n{b.stderr[-3000:]}"
            return
        (job,) = yaml.safe_load(PROM_SCRAPE.read_text())["scrape_configs"]
        job["scrape_interval"] = job["scrape_timeout"] = interval
        for sd in job["kubernetes_sd_configs"]:
            sd["kubeconfig_file"] = cluster.kubeconfig
        (self.dir / "prometheus.yml").write_text(yaml.safe_dump({"scrape_configs": [job]}))
        self.log = open(self.dir / "prometheus.log", "w")
        self.proc = subprocess.Popen(
            [b.stdout.strip().splitlines()[-1], f"--config.file={self.dir / 'prometheus.yml'}",
             f"--storage.tsdb.path={self.dir / 'data'}",
             f"--web.listen-address=127.0.0.1:{self.port}"],
            stdout=self.log, stderr=subprocess.STDOUT, cwd=self.dir)

    def logs(self):
        return (self.dir / "prometheus.log").read_text(errors="replace")[-3000:] \
            if (self.dir / "prometheus.log").exists() else ""

    def _get(self, path, params):
        import urllib.parse
        import urllib.request
        url = f"http://127.0.0.1:{self.port}{path}?" + urllib.parse.urlencode(params)
        with urllib.request.urlopen(url, timeout=5) as r:
            body = json.loads(r.read())
        assert body["status"] == "success", body
        return body["data"]

    def query(self, promql):
        """The result of an instant query (/api/v1/query): a list of {metric, value}."""
        return self._get("/api/v1/query", {"query": promql})["result"]

    def label_values(self, label, match):
        """/api/v1/label/<label>/values of the series `match` selects (what Grafana's
        label_values(match, label) asks)."""
        return self._get(f"/api/v1/label/{label}/values", {"match[]": match})

    def wait(self, promql, pred, timeout=60):
        """The query's result once pred(result) holds."""
        deadline = time.monotonic() + timeout
        res = None
        while True:
            assert self.proc.poll() is None, f"prometheus exited:\n{self.logs()}"
            try:
                res = self.query(promql)
                if pred(res):
                    return res
            except OSError:
                pass  # not listening yet
            assert time.monotonic() < deadline, \
                f"{promql} -> {res} after {timeout} s; prometheus:\n{self.logs()}"
            time.sleep(0.5)

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.log:
            self.log.close()
        shutil.rmtree(self.dir, ignore_errors=True)


def leader_metrics(cluster):
    """The leader's /metrics page through the metrics Service (the apiserver's proxy)."""
    return cluster.kubectl("get", "--raw", f"/api/v1/namespaces/{CONTROLLER_NS}/services/"
                           "ctrain-controller-metrics:8080/proxy/metrics").stdout


# --- Helm in place of the kustomize install (test_helm_e2e.py, test_uninstall_e2e.py) ---

def helm():
    """The helm binary tools/helm/build.sh built (cached by version)."""
    return subprocess.run(["bash", str(ROOT / "tools/helm/build.sh")], capture_output=True,
                          text=True, check=True, timeout=3600).stdout.strip().splitlines()[-1]


def run_helm(cluster, *args, timeout=400):
    """helm `args` in CONTROLLER_NS against the session's cluster (not checked)."""
    return subprocess.run([helm(), *args, "-n", CONTROLLER_NS, "--kubeconfig",
                           cluster.kubeconfig], capture_output=True, text=True, timeout=timeout)


def remove_kustomize_install(cluster):
    """What `kubectl apply -k manifests/` made, less the CRD and the namespace."""
    remove_install_docs(cluster, cluster.kubectl("kustomize", str(ROOT / "manifests")).stdout)


def remove_install_docs(cluster, text):
    """Deletes what the install YAML `text` makes, less the CRD and the namespace (they hold
    the jobs)."""
    import yaml  # the e2e modules that install with Helm need it, the rest do not
    for d in yaml.safe_load_all(text):
        if d and d["kind"] not in ("CustomResourceDefinition", "Namespace"):
            args = ["delete", d["kind"], d["metadata"]["name"], "--ignore-not-found",
                    "--wait=true", "--timeout=120s"]
            if d["metadata"].get("namespace"):
                args += ["-n", d["metadata"]["namespace"]]
            cluster.kubectl(*args, timeout=150)


class HelmSlot:
    """`with HelmSlot(cluster, releases):` the controller's namespace without the kustomize
    install of the other modules (what manifests/ made is removed, less the CRD and the
    namespace, which hold the jobs: Helm refuses objects it does not own), the namespace
    made and labelled as README.md says where it is missing; on leaving, the Helm
    `releases` still installed are uninstalled and manifests/ is applied again, less its
    Deployment: the state the other modules leave."""

    def __init__(self, cluster, releases):
        self.cluster, self.releases = cluster, tuple(releases)

    def __enter__(self):
        c = self.cluster
        remove_kustomize_install(c)
        if c.kubectl("get", "namespace", CONTROLLER_NS, check=False).returncode != 0:
            c.kubectl("create", "namespace", CONTROLLER_NS)
        c.kubectl("label", "--overwrite", "namespace", CONTROLLER_NS,
                  "pod-security.kubernetes.io/enforce=restricted")
        return self

    def __exit__(self, *exc):
        c = self.cluster
        for r in self.releases:
            if run_helm(c, "status", r).returncode == 0:
                run_helm(c, "uninstall", r, "--wait")
        c.kubectl("apply", "--server-side", "--force-conflicts", "-k", str(ROOT / "manifests"),
                  check=False)
        c.kubectl("delete", "deployment", "ctrain-controller", "-n", CONTROLLER_NS,
                  "--wait=true", "--timeout=120s", check=False, timeout=150)
        return False
