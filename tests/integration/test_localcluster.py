"""The local control plane itself: a second cluster beside the session's one,
the control-plane components it runs, and a `down` that stops exactly its own
processes and removes its state."""
import os
import pathlib
import subprocess
import tempfile

import pytest

from clusterlib import ROOT, Cluster, local_kubectl

SCRIPT = ROOT / "tools/localcluster/cluster.sh"


def pids(state):
    return {p.name: int(p.read_text()) for p in (pathlib.Path(state) / "pids").iterdir()}


def alive(pid):
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False


@pytest.mark.skipif(os.environ.get("CTRAIN_TEST_USE_KUBECONFIG") == "1",
                    reason="needs the local control plane's process control")
def test_second_cluster_side_by_side_and_down(cluster):
    state = tempfile.mkdtemp(prefix="ctrain-it-second-")
    up = subprocess.run(["bash", str(SCRIPT), "up", "--dir", state], capture_output=True,
                        text=True, timeout=600)
    assert up.returncode == 0, up.stderr[-3000:]
    try:
        second = Cluster(pathlib.Path(state) / "kubeconfig", local_kubectl(), state)
        # Both answer, on different ports, with separate stores.
        assert second.kubeconfig != cluster.kubeconfig
        second.kubectl("create", "configmap", "only-here", "-n", "default")
        assert cluster.kubectl("get", "configmap", "only-here", "-n", "default",
                               check=False).returncode != 0
        # The scheduler and controller-manager run: the service-account
        # controller made the default ServiceAccount, and the token controller
        # answers TokenRequests (the apiserver signs with the cluster's key).
        second.kubectl("get", "serviceaccount", "default", "-n", "default")
        tok = second.kubectl("create", "token", "default", "-n", "default").stdout.strip()
        assert tok.count(".") == 2
        # RBAC is on: a token of the default SA may not list nodes.
        ports = dict(line.split("=") for line in
                     (pathlib.Path(state) / "ports").read_text().split())
        p = subprocess.run([second.kubectl_bin, "--kubeconfig=/dev/null",
                            f"--server=https://127.0.0.1:{ports['API_PORT']}",
                            f"--certificate-authority={state}/pki/ca.crt", f"--token={tok}",
                            "get", "nodes"], capture_output=True, text=True, timeout=60)
        assert p.returncode != 0 and "forbidden" in p.stderr.lower(), p.stderr
        running = pids(state)
        assert set(running) == {"etcd", "kube-apiserver", "kube-controller-manager",
                                "kube-scheduler"}
        assert all(alive(p) for p in running.values())
    finally:
        down = subprocess.run(["bash", str(SCRIPT), "down", "--dir", state], capture_output=True,
                              text=True, timeout=120)
    assert down.returncode == 0, down.stderr
    assert not any(alive(p) for p in running.values())
    assert not pathlib.Path(state).exists()
    # The session's cluster is untouched.
    cluster.kubectl("get", "--raw", "/readyz")
