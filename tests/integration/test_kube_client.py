"""The C Kubernetes client (kube/) against a real kube-apiserver.

Each test runs build/tests/integration/kubeclient_check, a small C program
that makes the calls and checks its own expectations ("ok ..." lines, then
PASS); the Python side adds what only the cluster can confirm (kubectl sees
the same objects, the Status the C side decoded is the apiserver's)."""
import os
import pathlib
import subprocess

import pytest
import yaml

from kubechecklib import assert_pass, run_check


def test_crud_conflict_patch_delete(cluster, kubeclient_check, namespace):
    p, v = run_check(cluster, kubeclient_check, "crud", namespace)
    assert_pass(p)
    # The conflict message is the apiserver's own, passed through verbatim.
    assert 'configmaps "crud"' in v["conflict_message"]
    # Deleted for real: kubectl agrees.
    assert cluster.kubectl("get", "configmap", "crud", "-n", namespace,
                           check=False).returncode != 0


def test_404_status_decoded(cluster, kubeclient_check, namespace):
    p, v = run_check(cluster, kubeclient_check, "notfound", namespace)
    assert_pass(p)
    # Same Status as kubectl sees for the same request.
    raw = cluster.kubectl("get", "--raw",
                          f"/api/v1/namespaces/{namespace}/configmaps/does-not-exist",
                          check=False)
    assert raw.returncode != 0
    assert v["http_code"] == "404" and v["reason"] == "NotFound"
    assert v["message"] == 'configmaps "does-not-exist" not found'
    assert v["details_name"] == "does-not-exist" and v["details_kind"] == "configmaps"


def test_list_pagination_over_500(cluster, kubeclient_check, namespace):
    p, v = run_check(cluster, kubeclient_check, "paginate", namespace, 550)
    assert_pass(p)
    assert v["total"] == "550" and v["pages"] == "6"
    names = cluster.kubectl("get", "configmaps", "-n", namespace, "-l", "ctrain.dev/it=kubeclient",
                            "-o", "name").stdout.split()
    assert len(names) == 550


def test_watch_sees_1000_changes_in_order(cluster, kubeclient_check, namespace):
    p, v = run_check(cluster, kubeclient_check, "watch", namespace, 1000)
    assert_pass(p)
    assert v["seen"] == "1000"
    print(f"watch: 1000 writes in {v['write_s']} s, all seen after {v['all_seen_s']} s")


@pytest.mark.skipif(os.environ.get("CTRAIN_TEST_USE_KUBECONFIG") != "1",
                    reason="a fresh local cluster still holds version 1 in its watch cache; "
                           "test_kube_informer.py provokes 410 there by compacting etcd")
def test_watch_410_gone_relists(cluster, kubeclient_check, namespace):
    """On a long-running cluster (whose etcd has been compacted), a watch from
    resourceVersion 1 gets 410 Gone; the hook relists (all 5 objects: nothing lost) and the watch
    resumes from the list's version and sees the next object."""
    for i in range(5):
        cluster.kubectl("create", "configmap", f"pre{i}", "-n", namespace)
        cluster.kubectl("label", "configmap", f"pre{i}", "-n", namespace,
                        "ctrain.dev/it=kubeclient")
    p, v = run_check(cluster, kubeclient_check, "gone", namespace, "1", 5)
    assert_pass(p)
    assert v["relist_items"] == "5"
    assert "resourceVersion too old (410)" in p.stderr


def _kubeconfig(cluster):
    return yaml.safe_load(pathlib.Path(cluster.kubeconfig).read_text())


def _current_cluster(kc):
    ctx = next(c for c in kc["contexts"] if c["name"] == kc["current-context"])
    return next(c for c in kc["clusters"] if c["name"] == ctx["context"]["cluster"])


@pytest.fixture
def wrong_ca(tmp_path):
    key, crt = tmp_path / "wrong.key", tmp_path / "wrong.crt"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", key,
                    "-out", crt, "-days", "1", "-subj", "/CN=not-the-cluster-ca"],
                   check=True, capture_output=True)
    return crt


def test_tls_refused_with_wrong_ca_unless_insecure(cluster, kubeclient_check, namespace, wrong_ca,
                                                   tmp_path):
    kc = _kubeconfig(cluster)
    cl = _current_cluster(kc)["cluster"]
    for k in ("certificate-authority", "certificate-authority-data"):
        cl.pop(k, None)

    # 1. The right kubeconfig works, over HTTP/2 (the apiserver offers h2 by ALPN).
    p, v = run_check(cluster, kubeclient_check, "getns", namespace)
    assert v["result"] == "no error", p.stdout
    assert v["http_version"] == "20", p.stdout

    # 2. A CA that did not sign the serving certificate: CTRAIN_E_TLS.
    cl["certificate-authority"] = str(wrong_ca)
    bad = tmp_path / "wrong-ca.kubeconfig"
    bad.write_text(yaml.safe_dump(kc))
    p, v = run_check(cluster, kubeclient_check, "getns", namespace, kubeconfig=bad)
    assert v["result"] == "TLS verification failed", p.stdout
    assert v["http_code"] == "0"
    assert "certificate" in v["message"].lower(), v["message"]

    # 3. No CA at all: the system store does not know the cluster CA either.
    del cl["certificate-authority"]
    none = tmp_path / "no-ca.kubeconfig"
    none.write_text(yaml.safe_dump(kc))
    p, v = run_check(cluster, kubeclient_check, "getns", namespace, kubeconfig=none)
    assert v["result"] == "TLS verification failed", p.stdout

    # 4. insecure-skip-tls-verify set explicitly: the request goes through.
    cl["insecure-skip-tls-verify"] = True
    insecure = tmp_path / "insecure.kubeconfig"
    insecure.write_text(yaml.safe_dump(kc))
    p, v = run_check(cluster, kubeclient_check, "getns", namespace, kubeconfig=insecure)
    assert v["result"] == "no error", p.stdout


def test_tls_server_name(cluster, kubeclient_check, namespace, tmp_path):
    """tls-server-name: the certificate is checked against that name (a SAN of
    the serving certificate passes, another name fails) while the connection
    still goes to `server`."""
    kc = _kubeconfig(cluster)
    cl = _current_cluster(kc)["cluster"]
    cl["tls-server-name"] = "kubernetes.default.svc"
    good = tmp_path / "sni-good.kubeconfig"
    good.write_text(yaml.safe_dump(kc))
    p, v = run_check(cluster, kubeclient_check, "getns", namespace, kubeconfig=good)
    assert v["result"] == "no error", p.stdout
    cl["tls-server-name"] = "not-in-the-cert.example"
    bad = tmp_path / "sni-bad.kubeconfig"
    bad.write_text(yaml.safe_dump(kc))
    p, v = run_check(cluster, kubeclient_check, "getns", namespace, kubeconfig=bad)
    assert v["result"] == "TLS verification failed", p.stdout
    assert "not-in-the-cert.example" in v["message"], v["message"]


def test_token_and_token_file_auth(cluster, kubeclient_check, namespace, tmp_path):
    """Bearer tokens from `token` and `tokenFile`: a ServiceAccount token
    authenticates (RBAC then forbids reading a namespace: 403 -> AUTH with
    the apiserver's Status), a garbage token is 401."""
    tok = cluster.kubectl("create", "token", "default", "-n", namespace).stdout.strip()
    kc = _kubeconfig(cluster)
    ctx = next(c for c in kc["contexts"] if c["name"] == kc["current-context"])
    kc["users"] = [{"name": "sa", "user": {"token": tok}},
                   {"name": "sa-file", "user": {"tokenFile": str(tmp_path / "token")}},
                   {"name": "garbage", "user": {"token": "not-a-token"}}]
    (tmp_path / "token").write_text(tok + "\n")
    for user, code in (("sa", "403"), ("sa-file", "403"), ("garbage", "401")):
        ctx["context"]["user"] = user
        f = tmp_path / f"{user}.kubeconfig"
        f.write_text(yaml.safe_dump(kc))
        p, v = run_check(cluster, kubeclient_check, "getns", namespace, kubeconfig=f)
        assert v["result"] == "authentication failed", (user, p.stdout)
        assert v["http_code"] == code, (user, p.stdout)
        if code == "403":
            assert f"system:serviceaccount:{namespace}:default" in v["message"], v["message"]


def test_events_aggregated(cluster, kubeclient_check, namespace):
    p, _ = run_check(cluster, kubeclient_check, "events", namespace)
    assert_pass(p)
    evs = cluster.get_json("events", "-n", namespace,
                           "--field-selector", "involvedObject.name=evented")["items"]
    by_reason = {e["reason"]: e for e in evs}
    assert set(by_reason) == {"Tested", "Other"}, evs
    t = by_reason["Tested"]
    assert t["count"] == 3 and t["type"] == "Normal" and t["message"] == "the same message"
    assert t["involvedObject"]["kind"] == "ConfigMap" and t["involvedObject"]["uid"]
    assert t["source"]["component"] == "ctrain-it"
    assert by_reason["Other"]["count"] == 1 and by_reason["Other"]["type"] == "Warning"


def test_trainingjob_status_subresource_and_pods(crd, kubeclient_check, namespace):
    p, v = run_check(crd, kubeclient_check, "crd", namespace)
    assert_pass(p)
    assert v["invalid_reason"] == "Invalid"
    # Foreground deletion: the garbage collector finishes it.
    crd.kubectl("wait", "--for=delete", "--timeout=60s", "-n", namespace,
                "trainingjobs.ctrain.dev/it-tj")

