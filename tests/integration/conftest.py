"""Fixtures shared by the integration and e2e tests.

`cluster` is a real Kubernetes control plane: the one named by $KUBECONFIG when
CTRAIN_TEST_USE_KUBECONFIG=1 (kind, minikube, a real cluster), otherwise a
fresh local control plane started with tools/localcluster/cluster.sh for this
test session and stopped at its end. Nothing here fakes the apiserver.
"""
import json
import os
import pathlib
import shutil
import subprocess
import tempfile
import uuid

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
BUILD = pathlib.Path(os.environ.get("CTRAIN_BUILD_DIR", ROOT / "build"))
_server_version = {}


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

    def get_json(self, *args):
        return json.loads(self.kubectl("get", *args, "-o", "json").stdout)

    def server_version(self):
        v = json.loads(self.kubectl("version", "-o", "json").stdout)
        return v["serverVersion"]["gitVersion"]


def _local_kubectl():
    out = subprocess.run(["bash", str(ROOT / "tools/localcluster/build.sh")],
                         capture_output=True, text=True, check=True)
    return pathlib.Path(out.stdout.strip().splitlines()[-1]) / "kubectl"


@pytest.fixture(scope="session")
def cluster():
    if os.environ.get("CTRAIN_TEST_USE_KUBECONFIG") == "1":
        kc = os.environ.get("KUBECONFIG")
        if not kc:
            pytest.fail("CTRAIN_TEST_USE_KUBECONFIG=1 but KUBECONFIG is not set")
        kubectl = shutil.which("kubectl")
        c = Cluster(kc, kubectl)
        _server_version["v"] = c.server_version()
        yield c
        return
    state = tempfile.mkdtemp(prefix="ctrain-it-cluster-")
    script = ROOT / "tools/localcluster/cluster.sh"
    up = subprocess.run(["bash", str(script), "up", "--dir", state], capture_output=True, text=True,
                        timeout=3600)
    if up.returncode != 0:
        pytest.fail(f"local control plane did not start:\n{up.stderr[-4000:]}")
    try:
        c = Cluster(pathlib.Path(state) / "kubeconfig", _local_kubectl(), state)
        _server_version["v"] = c.server_version()
        yield c
    finally:
        subprocess.run(["bash", str(script), "down", "--dir", state], capture_output=True,
                       text=True, timeout=120)


@pytest.fixture(scope="session")
def crd(cluster):
    """The TrainingJob CRD from manifests/, applied and Established."""
    cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(ROOT / "manifests/crd.yaml"))
    cluster.kubectl("wait", "--for=condition=Established", "--timeout=60s",
                    "crd/trainingjobs.ctrain.dev")
    return cluster


@pytest.fixture
def namespace(cluster):
    """A fresh namespace per test, deleted afterwards."""
    name = "it-" + uuid.uuid4().hex[:8]
    cluster.kubectl("create", "namespace", name)
    yield name
    cluster.kubectl("delete", "namespace", name, "--wait=false", check=False)


def pytest_terminal_summary(terminalreporter):
    if "v" in _server_version:
        terminalreporter.write_line(
            f"Kubernetes: tested against a real kube-apiserver {_server_version['v']}")
