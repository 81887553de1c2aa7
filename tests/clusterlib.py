"""The local cluster, brought up and taken down one way for the test fixtures
(tests/conftest.py) and the benches (bench/*.py): a real control plane on loopback
(tools/localcluster/cluster.sh), real nodes with an image (node.sh), the `Cluster` handle
that runs kubectl against it, the install steps both use, and a ctrain-controller run
here as its ServiceAccount (`Controller`). Nothing here fakes a part.

    with local_cluster(nodes=2, image=build_image("ctrain")) as cl:
        install(cl, "manifests/crds", "manifests")

Needs no pytest: a failing step raises ClusterError with the script's stderr tail.
"""
import json
import os
import pathlib
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from contextlib import contextmanager

ROOT = pathlib.Path(__file__).resolve().parents[1]
BUILD = pathlib.Path(os.environ.get("CTRAIN_BUILD_DIR", ROOT / "build"))
CLUSTER_SH = ROOT / "tools/localcluster/cluster.sh"
NODE_SH = ROOT / "tools/localcluster/node.sh"


class ClusterError(RuntimeError):
    pass


class Cluster:
    def __init__(self, kubeconfig, kubectl, state_dir=None):
        self.kubeconfig = str(kubeconfig)
        self.kubectl_bin = str(kubectl)
        self.state_dir = state_dir
        self.env = dict(os.environ, KUBECONFIG=self.kubeconfig)

    def kubectl(self, *args, check=True, input=None, timeout=120):
        """Runs kubectl against this cluster; returns CompletedProcess (text)."""
        p = subprocess.run([self.kubectl_bin, *args], env=self.env, input=input,
                           capture_output=True, text=True, timeout=timeout)
        if check and p.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} failed ({p.returncode}):\n"
                                 f"{p.stdout}\n{p.stderr}")
        return p

    def wait_established(self, *crds, timeout=60):
        """Waits for each CRD's Established condition. (`kubectl wait` fails at once, instead
        of waiting, while a just-created CRD has no status.conditions yet.)"""
        deadline = time.monotonic() + timeout
        for name in crds:
            while True:
                p = self.kubectl("get", "crd", name, "-o",
                                 'jsonpath={.status.conditions[?(@.type=="Established")].status}',
                                 check=False)
                if p.stdout.strip() == "True":
                    break
                if time.monotonic() > deadline:
                    raise AssertionError(f"crd/{name} not Established in {timeout} s: {p.stderr}")
                time.sleep(0.5)

    def get_json(self, *args):
        return json.loads(self.kubectl("get", *args, "-o", "json").stdout)

    def attempt_object(self, ns, job, what, attempt=1):
        """The name of a job's token Secret (what "token") or cluster ConfigMap ("cluster") of
        one attempt: `<job>-<what>-<attempt>-<tag>`, the tag a keyed hash of the job's uid
        (controller/jobtoken.h), so the name is looked up, not computed. The oldest one when a
        key rotation made a second."""
        kind = "secrets" if what == "token" else "configmaps"
        pat = re.compile(rf"^{re.escape(job)}-{what}-{attempt}-[0-9a-f]{{10}}$")
        items = [o for o in self.get_json(kind, "-n", ns)["items"]
                 if pat.match(o["metadata"]["name"])]
        if not items:
            raise AssertionError(f"no {kind} {job}-{what}-{attempt}-<tag> in {ns}")
        items.sort(key=lambda o: o["metadata"]["creationTimestamp"])
        return items[0]["metadata"]["name"]

    def server_version(self):
        v = json.loads(self.kubectl("version", "-o", "json").stdout)
        return v["serverVersion"]["gitVersion"]


def local_kubectl():
    """The kubectl of the pinned Kubernetes build (tools/localcluster/build.sh, cached)."""
    out = subprocess.run(["bash", str(ROOT / "tools/localcluster/build.sh")],
                         capture_output=True, text=True, check=True)
    return pathlib.Path(out.stdout.strip().splitlines()[-1]) / "kubectl"


def _run(args, what, env=None, timeout=3600):
    p = subprocess.run(["bash", *map(str, args)], capture_output=True, text=True, env=env,
                       timeout=timeout)
    if p.returncode != 0:
        raise ClusterError(f"{what} failed ({p.returncode}):\n{p.stderr[-6000:]}")
    return p


def control_plane_up(state_dir=None, env=None, prefix="ctrain-cluster-"):
    """Starts etcd, kube-apiserver, kube-controller-manager and kube-scheduler in state_dir
    (a new temporary one by default); `env` adds to the environment (CTRAIN_NODE_MONITOR_GRACE,
    CTRAIN_APISERVER_PROFILING: see cluster.sh)."""
    state = str(state_dir or tempfile.mkdtemp(prefix=prefix))
    _run([CLUSTER_SH, "up", "--dir", state], "cluster.sh up", env=dict(os.environ, **(env or {})))
    return Cluster(pathlib.Path(state) / "kubeconfig", local_kubectl(), state)


def control_plane_down(cluster):
    """Stops exactly what control_plane_up started (and its nodes) and removes its dir."""
    subprocess.run(["bash", str(CLUSTER_SH), "down", "--dir", cluster.state_dir],
                   capture_output=True, text=True, timeout=300)


def nodes_up(cluster, nodes, image):
    """Joins `nodes` real nodes (containerd, kubelet, kube-proxy; CoreDNS on the first) with
    the image archive loaded; on failure takes down what started and raises."""
    try:
        _run([NODE_SH, "up", "--dir", cluster.state_dir, "--nodes", nodes, "--image", image],
             "node.sh up", timeout=1800)
    except ClusterError:
        nodes_down(cluster)
        raise


def nodes_reclaim(cluster):
    """node.sh reclaim: takes down what a killed earlier run's nodes left on the host (a
    live one raises), so that a snapshot taken next is the host as `down` must leave it."""
    _run([NODE_SH, "reclaim", "--dir", cluster.state_dir], "node.sh reclaim", timeout=300)


def nodes_down(cluster):
    """node.sh down: stops the nodes and undoes what they changed on the host."""
    return subprocess.run(["bash", str(NODE_SH), "down", "--dir", cluster.state_dir],
                          capture_output=True, text=True, timeout=300)


@contextmanager
def local_cluster(nodes=0, image=None, env=None, state_dir=None, prefix="ctrain-cluster-"):
    """A control plane (and `nodes` nodes with `image`) for the block, taken down after it."""
    cl = control_plane_up(state_dir, env, prefix)
    try:
        if nodes:
            nodes_up(cl, nodes, image)
        yield cl
    finally:
        if nodes:
            nodes_down(cl)
        control_plane_down(cl)


def build_image(name="ctrain"):
    """tools/image/build.sh NAME (cached by content): the image archive's path. A failed
    build raises AssertionError with the script's last output (pytest shows it)."""
    p = subprocess.run(["bash", str(ROOT / "tools/image/build.sh"), name], capture_output=True,
                       text=True, timeout=3600)
    if p.returncode != 0:
        raise AssertionError(f"tools/image/build.sh {name} failed:\n{p.stderr[-4000:]}")
    return p.stdout.strip().splitlines()[-1]


def cond(obj, t):
    """The condition `t` of a job (any object with status.conditions) when it is True, else
    None."""
    for c in obj.get("status", {}).get("conditions", []):
        if c["type"] == t and c["status"] == "True":
            return c
    return None


def install(cluster, *kustomizations):
    """`kubectl apply --server-side -k` of each, as the docs install: the CRDs' path first."""
    for k in kustomizations:
        cluster.kubectl("apply", "--server-side", "--force-conflicts", "-k", str(ROOT / k))


def install_controller_rbac(cluster):
    """The CRD and what the controller runs as (namespace, ServiceAccount, its Roles and
    ClusterRole), for a controller run here with sa_kubeconfig."""
    for m in ("crds/trainingjobs.ctrain.dev.yaml", "base/namespace.yaml",
              "base/serviceaccount.yaml", "base/leader-election.yaml", "rbac/clusterrole.yaml",
              "rbac/user-roles.yaml"):
        cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f",
                        str(ROOT / "manifests" / m))
    cluster.wait_established("trainingjobs.ctrain.dev")


def sa_kubeconfig(cluster, path, sa="ctrain-controller", ns="ctrain-system"):
    """A kubeconfig holding only a TokenRequest token of `sa` (no admin cert)."""
    token = cluster.kubectl("create", "token", sa, "-n", ns, "--duration=3h").stdout.strip()
    server = json.loads(cluster.kubectl("config", "view", "--minify", "--raw", "-o",
                                        "json").stdout)["clusters"][0]["cluster"]
    ca = server.get("certificate-authority")
    ca_line = (f"    certificate-authority: {ca}" if ca else
               f"    certificate-authority-data: {server['certificate-authority-data']}")
    with open(path, "w") as f:
        f.write(f"""apiVersion: v1
kind: Config
clusters:
- name: c
  cluster:
    server: {server['server']}
{ca_line}
users:
- name: {sa}
  user:
    token: {token}
contexts:
- name: c
  context: {{cluster: c, user: {sa}}}
current-context: c
""")
    os.chmod(path, 0o600)
    return str(path)


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def existing_cluster():
    """The cluster of $KUBECONFIG with the PATH's kubectl (CTRAIN_TEST_USE_KUBECONFIG=1)."""
    kc = os.environ.get("KUBECONFIG")
    if not kc:
        raise ClusterError("CTRAIN_TEST_USE_KUBECONFIG=1 but KUBECONFIG is not set")
    return Cluster(kc, shutil.which("kubectl"))


# ---- ctrain-controller, run here with only the RBAC in manifests/ --------------

CONTROLLER = BUILD / "controller" / "ctrain-controller"


class Controller:
    """A ctrain-controller process with a ServiceAccount token kubeconfig."""

    def __init__(self, cluster, kubeconfig, log_path, extra, env=None):
        self.cluster = cluster
        self.kubeconfig = kubeconfig
        self.log_path = log_path
        self.port = free_port()
        self.extra = list(extra)
        self.env = env  # added to the environment (POD_NAME, POD_NAMESPACE)
        self.proc = None

    def start(self):
        self.log = open(self.log_path, "a")
        self.proc = subprocess.Popen(
            [str(CONTROLLER), "--kubeconfig", self.kubeconfig, "--leader-elect=true",
             "--leader-elect-namespace=ctrain-system", "--log-format=text",
             f"--metrics-bind-address=127.0.0.1:{self.port}", *self.extra],
            stdout=self.log, stderr=subprocess.STDOUT,
            env={**os.environ, **self.env} if self.env else None)
        return self

    def stop(self, sig=None):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(sig or signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except Exception:
                self.proc.kill()
                self.proc.wait()
                # What it was doing when it held the signal (shown if the test fails).
                print(f"{self.log_path.name}: no exit 20 s after the signal; its last lines:")
                print("".join(self.logs().splitlines(keepends=True)[-40:]))
        return self.proc.returncode if self.proc else None

    def logs(self):
        with open(self.log_path) as f:
            return f.read()

    def metrics(self):
        import urllib.request
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics", timeout=5) as r:
            return r.read().decode()
