"""Uninstall: `ctrain-controller --release-finalizers` against a real
kube-apiserver, kube-controller-manager (garbage collector, namespace controller) and
kube-scheduler, run as the ctrain-controller ServiceAccount with only the RBAC in
manifests/. With the controller gone, the pods it made keep the ctrain.dev/attempt
finalizer: a deleted job's pods, and a namespace that holds one, stay Terminating. The
one-shot removes that finalizer, and only it, from every pod in its scope that carries it,
pages through the list, prints a summary and exits 0. No node runs these pods."""
import json
import subprocess
import uuid

import pytest

from clusterlib import CONTROLLER, install_controller_rbac, sa_kubeconfig
from ctllib import create, job, pods, wait_for

OURS = "ctrain.dev/attempt"
OTHER = "example.com/keep"


@pytest.fixture
def kubeconfig(crd, tmp_path):
    if not CONTROLLER.exists():
        pytest.fail(f"{CONTROLLER} not built")
    install_controller_rbac(crd)
    return sa_kubeconfig(crd, tmp_path / "sa.kubeconfig")


@pytest.fixture
def namespaces(cluster):
    """Makes fresh namespaces; at the end, releases what the test left holding a finalizer
    (ours or the decoys'), so the namespaces go."""
    made = []

    def make():
        name = "it-un-" + uuid.uuid4().hex[:6]
        cluster.kubectl("create", "namespace", name)
        made.append(name)
        return name

    yield make
    for ns in made:
        for p in cluster.get_json("pods", "-n", ns)["items"]:
            if p["metadata"].get("finalizers"):
                cluster.kubectl("patch", "pod", p["metadata"]["name"], "-n", ns, "--type=json",
                                "-p", '[{"op":"remove","path":"/metadata/finalizers"}]',
                                check=False)
        cluster.kubectl("delete", "namespace", ns, "--wait=false", check=False)


def release(kubeconfig, *extra):
    p = subprocess.run([str(CONTROLLER), "--kubeconfig", str(kubeconfig), "--release-finalizers",
                        "--log-format=text", *extra], capture_output=True, text=True, timeout=300)
    return p


def pod(name, finalizers, job_label=True):
    md = {"name": name, "finalizers": finalizers}
    if job_label:
        md["labels"] = {"ctrain.dev/job-name": "j"}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": md,
            "spec": {"containers": [{"name": "c", "image": "ctrain:latest"}]}}


def apply_pods(cluster, ns, items):
    cluster.kubectl("create", "-n", ns, "-f", "-",
                    input=json.dumps({"apiVersion": "v1", "kind": "List", "items": items}),
                    timeout=300)


def get_pod(cluster, ns, name):
    p = cluster.kubectl("get", "pod", name, "-n", ns, "-o", "json", check=False)
    return json.loads(p.stdout) if p.returncode == 0 else None


def namespace_gone(cluster, ns):
    return cluster.kubectl("get", "namespace", ns, check=False).returncode != 0


def test_release_removes_only_our_finalizer(crd, kubeconfig, namespaces):
    """Ours goes from running and Terminating pods; another finalizer beside it stays; pods
    without ours (labelled or not) are never written; --namespace keeps to its namespace;
    a namespace held by our finalizer finishes deleting."""
    a, b = namespaces(), namespaces()
    apply_pods(crd, a, [
        pod("running", [OURS]),                    # a job's live pod
        pod("going", [OURS]),                      # deleted: Terminating on ours only
        pod("both", [OTHER, OURS]),                # deleted: ours after another one
        pod("theirs", [OTHER]),                    # labelled, not ours: untouched
        pod("unlabelled", [OTHER], job_label=False),
    ])
    apply_pods(crd, b, [pod("w0", [OURS]), pod("w1", [OURS])])
    crd.kubectl("delete", "pod", "going", "both", "-n", a, "--wait=false")
    before = {n: get_pod(crd, a, n)["metadata"]["resourceVersion"]
              for n in ("theirs", "unlabelled")}
    # The namespace controller cannot finish b while its pods hold our finalizer.
    crd.kubectl("delete", "namespace", b, "--wait=false")
    wait_for(lambda: all(get_pod(crd, b, n)["metadata"].get("deletionTimestamp")
                         for n in ("w0", "w1")), what="b's pods Terminating")
    assert not namespace_gone(crd, b)

    p = release(kubeconfig, f"--namespace={a}")
    assert p.returncode == 0, p.stdout + p.stderr
    assert f"released finalizer {OURS} from 3 pods in 1 namespace ({a})" in p.stdout, p.stdout
    wait_for(lambda: get_pod(crd, a, "going") is None, what="'going' gone")
    assert get_pod(crd, a, "running")["metadata"].get("finalizers") in (None, [])
    both = get_pod(crd, a, "both")
    assert both["metadata"]["finalizers"] == [OTHER]
    assert both["metadata"].get("deletionTimestamp")
    for n, rv in before.items():
        assert get_pod(crd, a, n)["metadata"]["resourceVersion"] == rv, n
    # --namespace a left b alone.
    assert get_pod(crd, b, "w0")["metadata"]["finalizers"] == [OURS]

    p = release(kubeconfig)  # all namespaces
    assert p.returncode == 0, p.stdout + p.stderr
    assert "(all namespaces)" in p.stdout, p.stdout
    wait_for(lambda: namespace_gone(crd, b), timeout=90, what=f"namespace {b} deleted")
    # Run again: nothing of ours is left in a, and the decoys still are as they were.
    p = release(kubeconfig, f"--namespace={a}")
    assert p.returncode == 0 and "from 0 pods in 0 namespaces" in p.stdout, p.stdout
    for n, rv in before.items():
        assert get_pod(crd, a, n)["metadata"]["resourceVersion"] == rv, n


def test_release_pages_through_the_list(crd, kubeconfig, namespaces):
    """More pods than one page (500): every one is released, Terminating ones go."""
    ns = namespaces()
    n = 520
    apply_pods(crd, ns, [pod(f"p{i}", [OURS]) for i in range(n)])
    crd.kubectl("delete", "pods", "--all", "-n", ns, "--wait=false", timeout=300)
    p = release(kubeconfig, f"--namespace={ns}")
    assert p.returncode == 0, p.stdout + p.stderr[-3000:]
    assert f"from {n} pods in 1 namespace " in p.stdout, p.stdout
    wait_for(lambda: not crd.get_json("pods", "-n", ns)["items"], timeout=120,
             what="every pod gone")


def test_a_list_it_may_not_read_fails_clearly(crd, tmp_path, namespaces):
    """A ServiceAccount without the controller's RBAC: exit 1 and the apiserver's words."""
    ns = namespaces()
    crd.kubectl("create", "serviceaccount", "nobody", "-n", ns)
    kc = sa_kubeconfig(crd, tmp_path / "nobody.kubeconfig", sa="nobody", ns=ns)
    p = release(kc, f"--namespace={ns}")
    assert p.returncode == 1, p.stdout + p.stderr
    assert "cannot list pods" in p.stdout and "403" in p.stdout, p.stdout


def test_uninstall_then_delete(crd, namespaces, start_controller, kubeconfig):
    """Stuck after uninstall: jobs' pods, the controller stopped (helm uninstall), then a job deleted (the
    garbage collector deletes its pods) and the namespace deleted (with
    OrderedNamespaceDeletion its pods go first, the rest waits on them): Terminating for good
    until --release-finalizers runs."""
    ns = namespaces()
    ctl = start_controller()
    create(crd, ns, job("u", workers=2))
    create(crd, ns, job("v", workers=2))
    wait_for(lambda: len(pods(crd, ns, "u")) == 2 and len(pods(crd, ns, "v")) == 2,
             what="2 pods of each job")
    ctl.stop()

    def terminating(name):
        ps = crd.get_json("pods", "-n", ns, "-l", f"ctrain.dev/job-name={name}")["items"]
        return len(ps) == 2 and all(p["metadata"].get("deletionTimestamp") and
                                    OURS in p["metadata"]["finalizers"] for p in ps)
    crd.kubectl("delete", "tj", "v", "-n", ns, "--wait=false")
    wait_for(lambda: terminating("v"), timeout=60, what="v's pods Terminating on ours")
    crd.kubectl("delete", "namespace", ns, "--wait=false")
    wait_for(lambda: terminating("u"), timeout=60, what="u's pods Terminating on ours")
    assert not namespace_gone(crd, ns)
    p = release(kubeconfig)
    assert p.returncode == 0, p.stdout + p.stderr
    wait_for(lambda: namespace_gone(crd, ns), timeout=90, what=f"namespace {ns} deleted")
