"""spec.failurePolicy.rules against a real kube-apiserver: the three examples of docs/api.md
"Failure rules" are accepted with their defaults, and what the schema and its CEL rules refuse
is refused naming the field (the controller's own checks, controller/jobspec.c, are
tests/unit/test_ctl_failrules.c's); and ctrain-controller, with only the RBAC in manifests/,
applies a FailJob rule and a Restart rule's maxRestarts, pod exits simulated by writing pod
status as tests/integration/test_controller.py does."""
import copy
import json

import pytest
import yaml

from clusterlib import ROOT
from ctllib import cond, create, pods, tj, wait_for
from ctllib import job as ctl_job

BASE = {
    "apiVersion": "ctrain.dev/v1alpha1",
    "kind": "TrainingJob",
    "metadata": {"name": "rules"},
    "spec": {
        "replicaSpecs": {
            "Worker": {"replicas": 2,
                       "template": {"spec": {"containers": [{"name": "worker", "image": "x"}]}}},
        },
    },
}


def api_examples():
    """The YAML examples of docs/api.md's "Failure rules" section, as spec patches."""
    text = (ROOT / "docs/api.md").read_text()
    section = text.split("## Failure rules", 1)[1].split("\n## ", 1)[0]
    blocks = [b.split("```", 1)[0] for b in section.split("```yaml\n")[1:]]
    assert len(blocks) == 3, blocks
    return [yaml.safe_load(b)["spec"] for b in blocks]


def job(spec_patch):
    obj = copy.deepcopy(BASE)
    obj["spec"].update(spec_patch)
    return obj


def apply(cluster, ns, obj, *args):
    return cluster.kubectl("apply", *args, "-n", ns, "-f", "-", input=json.dumps(obj), check=False)


def rule(**kw):
    r = {"action": "FailJob", "onExitCodes": {"operator": "In", "values": [1]}}
    r.update(kw)
    return {"failurePolicy": {"rules": [r]}}


def test_api_examples_accepted_with_defaults(crd, namespace):
    for i, spec in enumerate(api_examples()):
        obj = job(spec)
        obj["metadata"]["name"] = f"rules-{i}"
        p = apply(crd, namespace, obj)
        assert p.returncode == 0, (spec, p.stderr)
        got = crd.get_json("trainingjob", f"rules-{i}", "-n", namespace)["spec"]["failurePolicy"]
        assert got == spec["failurePolicy"], got
    obj = job({"failurePolicy": {"rules": [
        {"action": "RestartNotCounted", "onPodConditions": [{"type": "DisruptionTarget"}]}]}})
    p = apply(crd, namespace, obj)
    assert p.returncode == 0, p.stderr
    got = crd.get_json("trainingjob", "rules", "-n", namespace)["spec"]["failurePolicy"]
    assert got["rules"][0]["onPodConditions"] == [{"type": "DisruptionTarget", "status": "True"}]


INVALID = [
    ("unknown_action", rule(action="Count"), "action"),
    ("no_action", {"failurePolicy": {"rules": [{"onExitCodes": {"operator": "In", "values": [1]}}]}},
     "action"),
    ("no_matcher", {"failurePolicy": {"rules": [{"action": "FailJob"}]}},
     "a rule needs onExitCodes, onTerminationReasons or onPodConditions"),
    ("max_restarts_with_fail_job", rule(maxRestarts=2), "maxRestarts"),
    ("negative_max_restarts", rule(action="Restart", maxRestarts=-1), "maxRestarts"),
    ("in_zero", rule(onExitCodes={"operator": "In", "values": [0, 1]}),
     "0 is success, never a failure"),
    ("bad_operator", rule(onExitCodes={"operator": "Is", "values": [1]}), "operator"),
    ("no_values", rule(onExitCodes={"operator": "In", "values": []}), "values"),
    ("duplicate_values", rule(onExitCodes={"operator": "In", "values": [1, 1]}), "values"),
    ("too_many_values", rule(onExitCodes={"operator": "In", "values": list(range(1, 34))}),
     "values"),
    ("too_many_rules", {"failurePolicy": {"rules": [rule()["failurePolicy"]["rules"][0]] * 17}},
     "rules"),
    ("bad_condition_status",
     rule(onExitCodes=None, onPodConditions=[{"type": "DisruptionTarget", "status": "Yes"}]),
     "status"),
]


@pytest.mark.parametrize("what,patch,field", INVALID, ids=[i[0] for i in INVALID])
def test_invalid_rules_refused_naming_field(crd, namespace, what, patch, field):
    for r in patch["failurePolicy"]["rules"]:
        for k in [k for k, v in r.items() if v is None]:
            del r[k]
    p = apply(crd, namespace, job(patch), "--dry-run=server")
    assert p.returncode != 0, f"{what}: accepted\n{p.stdout}"
    assert "spec.failurePolicy.rules" in p.stderr, p.stderr
    assert field in p.stderr, f"{what}: error does not name {field}:\n{p.stderr}"


# ---- ctrain-controller applying the rules (pod exits simulated by writing pod status) ------

def set_exit(cluster, ns, pod, code, reason):
    st = {"status": {"phase": "Failed", "containerStatuses": [{
        "name": "worker", "ready": False, "restartCount": 0, "image": "ctrain:latest",
        "imageID": "", "state": {"terminated": {
            "exitCode": code, "reason": reason,
            "startedAt": "2026-01-01T00:00:00Z", "finishedAt": "2026-01-01T00:01:00Z"}}}]}}
    cluster.kubectl("patch", "pod", pod, "-n", ns, "--subresource=status", "--type=merge",
                    "-p", json.dumps(st))


def attempt_pods(cluster, ns, name, attempt):
    ps = pods(cluster, ns, name)
    return len(ps) == 2 and all(p["metadata"]["labels"]["ctrain.dev/attempt"] == str(attempt)
                                for p in ps.values()) and ps


def test_controller_fails_at_once_on_a_fail_job_rule(crd, namespace, start_controller):
    start_controller()
    create(crd, namespace, ctl_job("bug", workers=2, failurePolicy={"rules": [
        {"action": "FailJob", "onExitCodes": {"containerName": "worker", "operator": "In",
                                              "values": [1]}}]}))
    wait_for(lambda: len(pods(crd, namespace, "bug")) == 2, what="2 pods")
    set_exit(crd, namespace, "bug-worker-1", 1, "Error")
    j = wait_for(lambda: cond(tj(crd, namespace, "bug"), "Failed") and tj(crd, namespace, "bug"),
                 what="Failed")
    c = cond(j, "Failed")
    assert c["reason"] == "FailurePolicyFailJob", c
    assert "spec.failurePolicy.rules[0] (FailJob)" in c["message"] and "exit code 1" in c["message"]
    assert j["status"].get("restarts", 0) == 0 and j["status"]["attempt"] == 1


def test_controller_restarts_oomkilled_then_fails(crd, namespace, start_controller):
    start_controller()
    create(crd, namespace, ctl_job("oom", workers=2, backoffLimit=5, failurePolicy={"rules": [
        {"action": "Restart", "maxRestarts": 1, "onTerminationReasons": {"values": ["OOMKilled"]}}]}))
    wait_for(lambda: attempt_pods(crd, namespace, "oom", 1), what="attempt-1 pods")
    set_exit(crd, namespace, "oom-worker-0", 137, "OOMKilled")
    wait_for(lambda: attempt_pods(crd, namespace, "oom", 2), what="attempt-2 pods")
    j = tj(crd, namespace, "oom")
    assert j["status"]["restarts"] == 1 and j["status"]["ruleRestarts"] == [1], j["status"]
    set_exit(crd, namespace, "oom-worker-1", 137, "OOMKilled")
    j = wait_for(lambda: cond(tj(crd, namespace, "oom"), "Failed") and tj(crd, namespace, "oom"),
                 what="Failed")
    c = cond(j, "Failed")
    assert c["reason"] == "FailurePolicyMaxRestarts", c
    assert "maxRestarts 1" in c["message"] and "OOMKilled" in c["message"], c
    assert j["status"]["attempt"] == 2 and j["status"]["ruleRestarts"] == [1], j["status"]
