"""Fixtures shared by the integration and e2e tests.

`cluster` is a real Kubernetes control plane: the one named by $KUBECONFIG when
CTRAIN_TEST_USE_KUBECONFIG=1 (kind, minikube, a real cluster), otherwise a
fresh local control plane started with tools/localcluster/cluster.sh for this
test session and stopped at its end. Nothing here fakes the apiserver.
"""
import os
import pathlib
import uuid

import pytest

# The cluster bring-up and install steps, shared with the benches (tests/clusterlib.py), and
# the whole-system tests' nodes and controller Deployment (tests/e2e/e2e_lib.py). Test modules
# import these libraries themselves (pytest.ini's pythonpath), never this file.
import e2e_lib
from clusterlib import (CONTROLLER, ROOT, ClusterError, Controller, control_plane_down,
                        control_plane_up, existing_cluster, install, install_controller_rbac,
                        nodes_down, nodes_reclaim, nodes_up, sa_kubeconfig)
from e2e_lib import (CONTROLLER_NS, EXISTING, Deployment, Node, build_image, host_state,
                     node_names, state_diff)

_server_version = {}


@pytest.fixture(scope="session")
def cluster():
    if os.environ.get("CTRAIN_TEST_USE_KUBECONFIG") == "1":
        try:
            c = existing_cluster()
        except ClusterError as e:
            pytest.fail(str(e))
        _server_version["v"] = c.server_version()
        yield c
        return
    # A lost node is NotReady after 20 s instead of upstream's 50 s (the
    # multi-node tests stop one); cluster.sh passes it to the controller manager.
    grace = os.environ.get("CTRAIN_NODE_MONITOR_GRACE", "20s")
    try:
        c = control_plane_up(env={"CTRAIN_NODE_MONITOR_GRACE": grace}, prefix="ctrain-it-cluster-")
    except ClusterError as e:
        pytest.fail(f"local control plane did not start: {e}")
    try:
        _server_version["v"] = c.server_version()
        yield c
    finally:
        control_plane_down(c)


@pytest.fixture(scope="session")
def crd(cluster):
    """The TrainingJob CRD from manifests/crds, applied and Established."""
    cluster.kubectl("apply", "--server-side", "--force-conflicts", "-k", str(ROOT / "manifests/crds"))
    cluster.wait_established("trainingjobs.ctrain.dev")
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


# ---- ctrain-controller, run with only the RBAC in manifests/ (clusterlib.Controller) ---

@pytest.fixture
def start_controller(cluster, tmp_path):
    """Starts ctrain-controllers (as the ctrain-controller ServiceAccount);
    stops them all at the end of the test."""
    if not CONTROLLER.exists():
        pytest.fail(f"{CONTROLLER} not built")
    install_controller_rbac(cluster)
    kc = sa_kubeconfig(cluster, tmp_path / "controller.kubeconfig")
    started = []

    def start(*extra, name="controller", env=None):
        c = Controller(cluster, kc, tmp_path / f"{name}.log", extra, env).start()
        started.append(c)
        return c

    yield start
    for c in started:
        c.stop()


# ---- the whole-system tests' node and controller Deployment (tests/e2e/) -----

@pytest.fixture(scope="session")
def node(cluster):
    """The session's nodes: CTRAIN_TEST_NODES (default 2) local nodes, ctrain-node
    and ctrain-node-2 ...; `node.name` is the first, `node.names` all."""
    e2e_lib._CLUSTER["c"] = cluster
    if EXISTING:
        nodes = cluster.get_json("nodes")["items"]
        assert nodes, "the cluster in $KUBECONFIG has no node"
        names = [n["metadata"]["name"] for n in nodes]
        yield Node(cluster, names[0], names=names)
        return
    if os.geteuid() != 0:
        pytest.skip("the local node needs root (containerd, kubelet, iptables)")
    archive = build_image("ctrain")
    try:
        nodes_reclaim(cluster)
    except ClusterError as e:
        pytest.fail(str(e))
    before = host_state()
    nodes = os.environ.get("CTRAIN_TEST_NODES", "2")
    try:
        nodes_up(cluster, nodes, archive)
    except ClusterError as e:
        pytest.fail(str(e))
    try:
        names = node_names(cluster)
        assert len(names) == int(nodes), names
        yield Node(cluster, "ctrain-node", pathlib.Path(cluster.state_dir) / "node", names)
    finally:
        down = nodes_down(cluster)
        assert down.returncode == 0, down.stderr[-3000:]
        # `down` leaves the machine as `up` found it.
        left = state_diff(before, host_state())
        assert not left, f"node.sh down left changes behind: {left}"


@pytest.fixture(scope="module")
def controller(cluster, node):
    """The controller Deployment from manifests/, two replicas Ready; removed
    at the end of the module (the CRD and RBAC stay)."""
    if EXISTING:
        d = Deployment(cluster)
        if not d.pods():
            pytest.skip("no ctrain controller installed in the cluster of $KUBECONFIG")
        yield d
        return
    install(cluster, "manifests/crds", "manifests")
    d = Deployment(cluster)
    d.rollout()
    d.wait_leader()
    try:
        yield d
    finally:
        cluster.kubectl("delete", "deployment", "ctrain-controller", "-n", CONTROLLER_NS,
                        "--wait=true", "--timeout=120s", check=False, timeout=150)


@pytest.fixture(scope="module")
def tfjob_controller(cluster, controller):
    """The controller Deployment with the TFJob component (manifests/with-tfjob: the TFJob
    CRD, its ClusterRole, --enable-tfjob), rolled out; at the end of the module the
    component is removed again (TFJobs with their CRD, the ClusterRole, the flag)."""
    if EXISTING:
        p = cluster.kubectl("get", "crd", "tfjobs.kubeflow.org", check=False)
        if p.returncode != 0:
            pytest.skip("no TFJob CRD in the cluster of $KUBECONFIG")
        yield controller
        return
    install(cluster, "manifests/crds-tfjob", "manifests/with-tfjob")
    cluster.wait_established("tfjobs.kubeflow.org")
    controller.rollout()
    controller.wait_leader()
    try:
        yield controller
    finally:
        cluster.kubectl("delete", "crd", "tfjobs.kubeflow.org", "--wait=true", "--timeout=120s",
                        check=False, timeout=150)
        cluster.kubectl("delete", "clusterrolebinding,clusterrole", "ctrain-controller-tfjob",
                        check=False)
        cluster.kubectl("apply", "--server-side", "--force-conflicts", "-k",
                        str(ROOT / "manifests"), check=False)
