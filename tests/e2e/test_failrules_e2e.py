"""spec.failurePolicy.rules on the session's real nodes (docs/api.md "Failure rules"): the
three examples of the docs, each with a one-worker job of tiny pods (the ctrain image running
a shell or coreutils, no training) whose ends the kubelet really reports:

- "exit code 1 from my script is a bug: fail at once": the worker exits 1; a FailJob rule
  fails the job on the first attempt, although restartPolicy OnFailure would retry it;
- "retry an OOMKilled worker twice, then fail": the worker outgrows its 32Mi memory limit
  and the kernel kills it (the kubelet says OOMKilled); a Restart rule with maxRestarts 2
  restarts the gang twice, then fails the job (FailurePolicyMaxRestarts);
- "exit 137 from our preemption hook is not a failure": the worker exits 137 on its first
  attempt (CTRAIN_ATTEMPT, which the controller sets) and 0 after; a RestartNotCounted rule
  restarts the gang as a disruption, not against backoffLimit, and the job Succeeds.

Every pod version is recorded from a `kubectl get pods --watch` (a restarted attempt's pods
are deleted), so the tests assert the kubelet's own terminated state of each attempt."""
import json
import subprocess
import threading
import time

import pytest

from e2e_lib import cond, dump, events, wait_event, wait_job

JOB = "rules"
POD = f"{JOB}-worker-0"


def job(rules, command, backoff_limit=None, memory="32Mi"):
    """A one-worker TrainingJob of the ctrain image (never pulled) running `command`."""
    c = {"name": "worker", "image": "ctrain:latest", "imagePullPolicy": "Never",
         "command": command,
         "resources": {"requests": {"cpu": "50m", "memory": memory},
                       "limits": {"memory": memory}}}
    spec = {"replicaSpecs": {"Worker": {"replicas": 1, "template": {"spec": {
                "terminationGracePeriodSeconds": 5, "containers": [c]}}}},
            "failurePolicy": {"rules": rules}}
    if backoff_limit is not None:
        spec["backoffLimit"] = backoff_limit
    return {"apiVersion": "ctrain.dev/v1alpha1", "kind": "TrainingJob",
            "metadata": {"name": JOB}, "spec": spec}


class Terminations:
    """Every terminated state of the worker container of the job's pods, by attempt (the
    pod's ctrain.dev/attempt label), as a `kubectl get pods --watch` streams them: a
    restart deletes the attempt's pods, so polling could miss one."""

    def __init__(self, cluster, ns):
        self.by_attempt = {}
        self.proc = subprocess.Popen(
            [cluster.kubectl_bin, "get", "pods", "-n", ns, "-l", f"ctrain.dev/job-name={JOB}",
             "--watch", "-o", "json"], env=cluster.env, stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL, text=True)
        self.t = threading.Thread(target=self.run, daemon=True)
        self.t.start()

    def run(self):
        buf = ""
        for line in self.proc.stdout:
            buf += line
            try:
                p = json.loads(buf)
            except ValueError:
                continue
            buf = ""
            attempt = int(p["metadata"].get("labels", {}).get("ctrain.dev/attempt", "0"))
            for cs in p.get("status", {}).get("containerStatuses") or []:
                term = cs.get("state", {}).get("terminated")
                if cs.get("name") == "worker" and term:
                    self.by_attempt[attempt] = term

    def close(self):
        self.proc.terminate()
        self.proc.wait(10)
        self.t.join(10)
        return dict(self.by_attempt)


@pytest.fixture
def run_job(cluster, node, controller, namespace):
    """Applies the job in the test's namespace with a Terminations watch on it; yields a
    function that does so and returns the watch."""
    watches = []

    def run(obj):
        w = Terminations(cluster, namespace)
        watches.append(w)
        time.sleep(1)  # the watch is up before the first pod (seconds away) ends
        cluster.kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(obj))
        return w

    yield run
    for w in watches:
        w.close()


def finished(j):
    return cond(j, "Succeeded") or cond(j, "Failed")


def test_exit_code_1_is_a_bug_fail_at_once(cluster, node, namespace, run_job):
    """FailJob on exit code 1 of container worker: the job fails on its first attempt with
    reason FailurePolicyFailJob, its condition and a Warning event naming the pod, the exit
    code and the rule; no restart, though restartPolicy OnFailure retries an exit 1."""
    t0 = time.monotonic()
    w = run_job(job([{"action": "FailJob",
                      "onExitCodes": {"containerName": "worker", "operator": "In",
                                      "values": [1]}}],
                    ["sh", "-c", "echo my script has a bug; exit 1"]))
    j = wait_job(cluster, node, namespace, finished, timeout=120, what="the job's end", name=JOB)
    c = cond(j, "Failed")
    assert c and c["reason"] == "FailurePolicyFailJob", (j["status"], dump(cluster, node, namespace))
    want = (f"container worker of pod {POD} failed with exit code 1 (Error), "
            "matching spec.failurePolicy.rules[0] (FailJob)")
    assert c["message"] == want, c
    st = j["status"]
    assert st.get("attempt", 1) == 1 and not st.get("restarts") and not st.get("disruptions"), st
    ev = wait_event(cluster, node, namespace,
                    lambda e: e["reason"] == "Failed" and e["involvedObject"]["name"] == JOB)
    assert ev["type"] == "Warning" and ev["message"] == want, ev
    assert not [e for e in events(cluster, namespace) if e["reason"] == "Restarting"]
    # The kubelet's own word for the one attempt: exit code 1; the failed pod stays.
    pod = cluster.get_json("pod", POD, "-n", namespace)
    assert pod["metadata"]["labels"]["ctrain.dev/attempt"] == "1", pod["metadata"]
    term = pod["status"]["containerStatuses"][0]["state"]["terminated"]
    assert term["exitCode"] == 1 and term["reason"] == "Error", term
    assert set(w.close()) == {1}
    print(f"e2e: exit 1 -> FailJob on attempt 1 in {time.monotonic() - t0:.1f} s: {want}")


def test_oomkilled_retried_twice_then_failed(cluster, node, namespace, run_job):
    """Restart with maxRestarts 2 on OOMKilled: `tail /dev/zero` outgrows the 32Mi limit on
    every attempt and the kubelet reports OOMKilled (exit 137) each time; two gang restarts
    (status.restarts 2, status.ruleRestarts [2]), then the third OOMKilled fails the job with
    FailurePolicyMaxRestarts; backoffLimit (5) is not what ends it."""
    t0 = time.monotonic()
    w = run_job(job([{"action": "Restart", "maxRestarts": 2,
                      "onTerminationReasons": {"values": ["OOMKilled"]}}],
                    ["tail", "/dev/zero"], backoff_limit=5))
    j = wait_job(cluster, node, namespace, finished, timeout=240, what="the job's end", name=JOB)
    c = cond(j, "Failed")
    assert c and c["reason"] == "FailurePolicyMaxRestarts", \
        (j["status"], dump(cluster, node, namespace))
    assert c["message"].startswith(
        "spec.failurePolicy.rules[0] (Restart): maxRestarts 2 reached after 2 restarts by this "
        f"rule; last: container worker of pod {POD} failed with exit code 137 (OOMKilled)"), c
    st = j["status"]
    assert st["attempt"] == 3 and st["restarts"] == 2 and not st.get("disruptions"), st
    assert st["ruleRestarts"] == [2], st
    # Two restarts, each naming the rule and the OOMKilled container.
    restarts = sorted(e["message"] for e in events(cluster, namespace)
                      if e["reason"] == "Restarting" and e["involvedObject"]["name"] == JOB)
    for n in (1, 2):
        want = (f"container worker of pod {POD} failed with exit code 137 (OOMKilled), matching "
                f"spec.failurePolicy.rules[0] (Restart): restart {n} of 2 by this rule; "
                f"gang restart {n} of 5, attempt {n + 1}")
        assert want in restarts, restarts
    ev = wait_event(cluster, node, namespace,
                    lambda e: e["reason"] == "Failed" and e["involvedObject"]["name"] == JOB)
    assert ev["message"] == c["message"], ev
    # The kernel really killed each attempt's worker: the kubelet says OOMKilled, 137.
    pod = cluster.get_json("pod", POD, "-n", namespace)
    assert pod["metadata"]["labels"]["ctrain.dev/attempt"] == "3", pod["metadata"]
    seen = w.close()
    seen[3] = pod["status"]["containerStatuses"][0]["state"]["terminated"]
    assert set(seen) == {1, 2, 3}, seen
    for a, term in seen.items():
        assert term["reason"] == "OOMKilled" and term["exitCode"] == 137, (a, term)
    print(f"e2e: OOMKilled x3 -> 2 restarts, then FailurePolicyMaxRestarts in "
          f"{time.monotonic() - t0:.1f} s")


def test_exit_137_from_a_preemption_hook_is_not_a_failure(cluster, node, namespace, run_job):
    """RestartNotCounted on exit code 137 with reason Error (not the kernel's OOMKilled): the
    worker exits 137 on attempt 1 (CTRAIN_ATTEMPT) and 0 on attempt 2; one gang restart
    counted as a disruption (status.disruptions 1, status.restarts 0, ruleRestarts [1]),
    with backoffLimit 0, and the job Succeeds."""
    t0 = time.monotonic()
    script = 'echo "attempt $CTRAIN_ATTEMPT"; if [ "$CTRAIN_ATTEMPT" = 1 ]; then exit 137; fi'
    w = run_job(job([{"action": "RestartNotCounted", "maxRestarts": 20,
                      "onExitCodes": {"operator": "In", "values": [137]},
                      "onTerminationReasons": {"values": ["Error"]}}],
                    ["sh", "-c", script], backoff_limit=0))
    j = wait_job(cluster, node, namespace, finished, timeout=180, what="the job's end", name=JOB)
    assert cond(j, "Succeeded"), (j["status"], dump(cluster, node, namespace))
    st = j["status"]
    assert st["attempt"] == 2 and not st.get("restarts") and st["disruptions"] == 1, st
    assert st["ruleRestarts"] == [1], st
    ev = wait_event(cluster, node, namespace,
                    lambda e: e["reason"] == "Restarting" and e["involvedObject"]["name"] == JOB)
    want = (f"container worker of pod {POD} failed with exit code 137 (Error), matching "
            "spec.failurePolicy.rules[0] (RestartNotCounted): restart 1 of 20 by this rule, "
            "counted against maxDisruptions, not backoffLimit; gang restart after disruption 1 "
            "of 10 (not counted against backoffLimit), attempt 2")
    assert ev["message"] == want, ev
    seen = w.close()
    assert seen.get(1, {}).get("exitCode") == 137 and seen[1]["reason"] == "Error", seen
    pod = cluster.get_json("pod", POD, "-n", namespace)
    assert pod["metadata"]["labels"]["ctrain.dev/attempt"] == "2", pod["metadata"]
    term = pod["status"]["containerStatuses"][0]["state"]["terminated"]
    assert term["exitCode"] == 0, term
    print(f"e2e: exit 137 (Error) -> RestartNotCounted, Succeeded on attempt 2 in "
          f"{time.monotonic() - t0:.1f} s")
