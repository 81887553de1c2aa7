"""The controller with less than manifests/ grants reports the failure
instead of hiding it; no token or key reaches its logs; and it
cannot read a Secret in a job's namespace, only create one, and reads
nothing in its own but its key."""
import json
import os
import re
import time

import yaml

from clusterlib import ROOT, Controller, install_controller_rbac, sa_kubeconfig
from ctllib import job, wait_for, create, pods


def test_missing_rule_is_reported_not_hidden(crd, namespace, tmp_path):
    install_controller_rbac(crd)
    # The manifests' ClusterRole, less "create" on pods, for a second SA.
    docs = list(yaml.safe_load_all(open(ROOT / "manifests/rbac/clusterrole.yaml")))
    (role,) = [d for d in docs if d["kind"] == "ClusterRole"]
    role["metadata"]["name"] = "ctrain-controller-no-pod-create"
    for rule in role["rules"]:
        if rule["resources"] == ["pods"]:
            rule["verbs"].remove("create")
    crd.kubectl("apply", "-f", "-", input=json.dumps(role))
    crd.kubectl("create", "serviceaccount", "crippled", "-n", "ctrain-system")
    crd.kubectl("create", "clusterrolebinding", "crippled-" + namespace,
                "--clusterrole=ctrain-controller-no-pod-create",
                "--serviceaccount=ctrain-system:crippled")
    crd.kubectl("create", "rolebinding", "crippled-lease", "-n", "ctrain-system",
                "--role=ctrain-controller-leader-election",
                "--serviceaccount=ctrain-system:crippled")
    crd.kubectl("create", "rolebinding", "crippled-key", "-n", "ctrain-system",
                "--role=ctrain-controller-key", "--serviceaccount=ctrain-system:crippled")
    kc = sa_kubeconfig(crd, tmp_path / "crippled.kubeconfig", sa="crippled")
    ctl = Controller(crd, kc, tmp_path / "crippled.log", ["--leader-elect-lease-name=crippled"])
    ctl.start()
    try:
        create(crd, namespace, job("denied", workers=1))

        def failed_event():
            evs = crd.get_json("events", "-n", namespace)["items"]
            return [e for e in evs if e["reason"] == "FailedCreatePod"]
        evs = wait_for(failed_event, timeout=60, what="FailedCreatePod event")
        msg = evs[0]["message"]
        assert "forbidden" in msg.lower() or "403" in msg, msg
        assert evs[0]["type"] == "Warning"
        assert not pods(crd, namespace, "denied")
        # The log says it too, naming the pod and the apiserver's reason.
        wait_for(lambda: "denied-worker-0" in ctl.logs() and "Forbidden" in ctl.logs(),
                 what="log line")
        assert "ctrain_pod_create_errors_total 0" not in ctl.metrics()
    finally:
        ctl.stop()
        crd.kubectl("delete", "clusterrolebinding", "crippled-" + namespace, check=False)
        crd.kubectl("delete", "serviceaccount", "crippled", "-n", "ctrain-system", check=False)
        crd.kubectl("delete", "rolebinding", "crippled-lease", "-n", "ctrain-system", check=False)
        crd.kubectl("delete", "rolebinding", "crippled-key", "-n", "ctrain-system", check=False)


def test_no_token_or_key_in_logs(crd, namespace, start_controller, tmp_path):
    ctl = start_controller("--log-level=debug")
    create(crd, namespace, job("quiet", workers=2))
    wait_for(lambda: len(pods(crd, namespace, "quiet")) == 2, what="2 pods")
    secret = crd.get_json("secret", crd.attempt_object(namespace, "quiet", "token"), "-n",
                          namespace)
    import base64
    job_tokens = [base64.b64decode(v).decode() for v in secret["data"].values()]
    key = crd.get_json("secret", "ctrain-controller-key", "-n", "ctrain-system")["data"]["key"]
    job_tokens += [key, base64.b64decode(key).decode()]
    kc = open(ctl.kubeconfig).read()
    sa_token = [l.split("token:")[1].strip() for l in kc.splitlines() if "token:" in l][0]
    time.sleep(1)
    ctl.stop()
    logs = ctl.logs()
    assert "became leader" in logs  # the log is real and non-empty
    for t in job_tokens + [sa_token]:
        assert t and t not in logs
        # Nor a long fragment of it.
        assert t[:24] not in logs
    assert "PRIVATE KEY" not in logs


SA = "system:serviceaccount:ctrain-system:ctrain-controller"


def can_i(cluster, *args):
    p = cluster.kubectl("auth", "can-i", *args, f"--as={SA}", check=False)
    return p.stdout.strip()


def test_controller_cannot_read_job_secrets(crd, namespace, start_controller, tmp_path):
    """Least privilege: the manifests' RBAC lets the controller create Secrets in a
    job's namespace but not read, list or update any; in its own namespace it
    reads only its key. And a job runs with exactly that RBAC."""
    install_controller_rbac(crd)
    assert can_i(crd, "get", "secrets", "-n", namespace) == "no"
    assert can_i(crd, "get", "secrets/anything", "-n", namespace) == "no"
    assert can_i(crd, "list", "secrets", "-n", namespace) == "no"
    assert can_i(crd, "update", "secrets", "-n", namespace) == "no"
    assert can_i(crd, "create", "secrets", "-n", namespace) == "yes"
    assert can_i(crd, "get", "secrets/ctrain-controller-key", "-n", "ctrain-system") == "yes"
    assert can_i(crd, "create", "secrets", "-n", "ctrain-system") == "yes"
    assert can_i(crd, "get", "secrets/other", "-n", "ctrain-system") == "no"
    assert can_i(crd, "get", "secrets", "--all-namespaces") == "no"
    # The cluster ConfigMap of each attempt is created and the
    # previous one deleted; no ConfigMap is read or changed.
    assert can_i(crd, "create", "configmaps", "-n", namespace) == "yes"
    assert can_i(crd, "delete", "configmaps", "-n", namespace) == "yes"
    for verb in ("get", "list", "watch", "update", "patch"):
        assert can_i(crd, verb, "configmaps", "-n", namespace) == "no", verb
    out = os.environ.get("CTRAIN_CAN_I_OUT")
    if out:  # for the record: the granted verbs, shown
        with open(out, "w") as f:
            for ns in (namespace, "ctrain-system"):
                p = crd.kubectl("auth", "can-i", "--list", "-n", ns, f"--as={SA}", check=False)
                f.write(f"$ kubectl auth can-i --list -n {ns} --as={SA}\n{p.stdout}\n")

    # With the SA's own token: a Secret in the job's namespace is Forbidden.
    crd.kubectl("create", "secret", "generic", "someone-elses", "-n", namespace,
                "--from-literal=password=hunter2")
    kc = sa_kubeconfig(crd, tmp_path / "sa.kubeconfig")
    p = crd.kubectl("--kubeconfig", kc, "get", "secret", "someone-elses", "-n", namespace,
                    check=False)
    assert p.returncode != 0 and "forbidden" in p.stderr.lower(), p.stderr

    # Everything still works: the controller (as that SA) runs a job, its
    # key Secret exists, and the job's token Secret was created.
    ctl = start_controller()
    create(crd, namespace, job("least", workers=2))
    wait_for(lambda: len(pods(crd, namespace, "least")) == 2, what="2 pods")
    sec = crd.get_json("secret", crd.attempt_object(namespace, "least", "token"), "-n", namespace)
    assert sec["metadata"]["ownerReferences"][0]["name"] == "least"
    crd.get_json("secret", "ctrain-controller-key", "-n", "ctrain-system")
    # (Other tests' namespaces being deleted may log a Forbidden of their own.)
    mine = [l for l in ctl.logs().splitlines() if "/least" in l or "ctrain-controller-key" in l]
    # The message only: a timestamp's milliseconds can read ".403Z".
    said = [l.split(" ctrain-controller: ", 1)[-1] for l in mine]
    assert mine and not [l for l in said if re.search(r"\bForbidden\b|\b403\b", l)], mine
    assert "hunter2" not in ctl.logs()
