"""Object-storage backups on the real node: the example job with its backups in object
storage (`spec.checkpoint.uri: s3://...`, `endpoint`, `credentialsSecret`)
against a real S3-compatible server (versitygw, tools/s3/server.sh) listening
on the node's host address, where the pods reach it through the CNI bridge
(the job's NetworkPolicy restricts ingress only).

A worker SIGKILLed mid run costs one gang restart; the chief resumes from the
bucket and the final accuracy is within 0.01 of an unbroken run of the same
job. The bucket never holds anything but complete backups that verify (our
header's sizes and SHA-256), no unfinished multipart upload is left, and the
backups are removed after success. The credentials never appear in
`kubectl describe`, events, status, or the controller's and workers' logs.
The server is stopped by the test.
"""
import json
import os
import re
import signal
import subprocess
import threading
import time

import pytest

from clusterlib import BUILD, ROOT
from e2e_lib import (JOB, W0, W1, events, host_only, job_json, task_pids, wait_job, wait_log,
                     wait_succeeded)
from s3lib import BUCKET, verifies

SECRET = "s3-backup-creds"
EPOCHS = 3
S3_CHECK = BUILD / "tests/integration/s3_check"

pytestmark = [host_only(),
              pytest.mark.skipif(not S3_CHECK.exists(), reason=f"{S3_CHECK} not built")]


def s3_docs(s, prefix, epochs):
    """examples/fashion-mnist.yaml with its backups in the bucket: the claim
    is dropped, the model and metrics go to an emptyDir (read with kubectl
    logs; the accuracy is on the chief's last line)."""
    import yaml
    out = []
    for d in yaml.safe_load_all(open(ROOT / "examples/fashion-mnist.yaml")):
        if d["kind"] == "PersistentVolumeClaim":
            continue
        if d["kind"] == "TrainingJob":
            d["spec"]["checkpoint"] = {"uri": f"s3://{BUCKET}/{prefix}", "endpoint": s.endpoint,
                                       "credentialsSecret": SECRET}
            pod = d["spec"]["replicaSpecs"]["Worker"]["template"]["spec"]
            c = pod["containers"][0]
            args = []
            for a in c["args"]:
                if a.startswith("--epochs="):
                    a = f"--epochs={epochs}"
                elif a.startswith("--output="):
                    a = "--output=/out/model"
                elif a.startswith("--metrics="):
                    a = "--metrics=/out/metrics.jsonl"
                args.append(a)
            c["args"] = args
            c["volumeMounts"].append({"name": "out", "mountPath": "/out"})
            pod["volumes"].append({"name": "out", "emptyDir": {}})
        out.append(d)
    return out


def apply_job(cluster, ns, s, prefix, epochs=EPOCHS):
    cluster.kubectl("apply", "-n", ns, "-f", "-",
                    input=json.dumps({"apiVersion": "v1", "kind": "List",
                                      "items": s3_docs(s, prefix, epochs)}))








def accuracy(node, ns):
    log = node.pod_log(ns, W0)
    m = re.search(r"test accuracy: ([0-9.]+)", log)
    assert m, log[-3000:]
    return float(m.group(1)), log


def s3_cli(s, prefix, *args):
    """tests/integration/s3_check against the server (ListObjectsV2,
    ListMultipartUploads) with the server's keys."""
    env = dict(os.environ, AWS_ACCESS_KEY_ID=s.access, AWS_SECRET_ACCESS_KEY=s.secret,
               AWS_REGION="us-east-1")
    for v in ("AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3"):
        env.pop(v, None)
    p = subprocess.run([str(S3_CHECK), "--endpoint", s.endpoint, f"s3://{BUCKET}/{prefix}",
                        *args], env=env, capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, (args, p.stdout, p.stderr)
    return [line.split()[0] for line in p.stdout.splitlines() if line.strip()]


class BucketWatch:
    """Checks the bucket every 0.2 s while the job runs: every object the
    backend holds under the prefix is a backup that verifies (a partial or
    temp object would not); records the backups seen."""

    def __init__(self, s, prefix):
        self.s, self.prefix, self.seen, self.bad, self.stop = s, prefix, set(), [], False
        self.t = threading.Thread(target=self.run, daemon=True)
        self.t.start()

    def check(self):
        d = self.s.backend(self.prefix)
        for p in sorted(d.iterdir()) if d.exists() else []:
            try:
                ok = p.name.startswith("backup-") and p.name.endswith(".ckpt") and verifies(p)
            except FileNotFoundError:
                continue  # pruned between the listing and the read
            if ok:
                self.seen.add(p.name)
            else:
                self.bad.append(p.name)

    def run(self):
        while not self.stop:
            self.check()
            time.sleep(0.2)

    def close(self):
        self.stop = True
        self.t.join()
        self.check()
        return self.seen, self.bad


def create_secret(cluster, ns, s):
    cluster.kubectl("create", "secret", "generic", SECRET, "-n", ns,
                    f"--from-literal=AWS_ACCESS_KEY_ID={s.access}",
                    f"--from-literal=AWS_SECRET_ACCESS_KEY={s.secret}")


def delete_job(cluster, ns):
    cluster.kubectl("delete", "tj", JOB, "-n", ns, "--wait=true", "--timeout=120s", timeout=150)
    deadline = time.monotonic() + 120
    while cluster.get_json("pods", "-n", ns, "-l", f"ctrain.dev/job-name={JOB}")["items"]:
        assert time.monotonic() < deadline, "pods left after the job was deleted"
        time.sleep(0.5)


def test_sigkilled_worker_resumes_from_the_bucket(cluster, node, controller, namespace, s3):
    ns = namespace
    create_secret(cluster, ns, s3)

    # The unbroken run, same job and seed, its own prefix.
    apply_job(cluster, ns, s3, "unbroken")
    wait_succeeded(cluster, node, ns, timeout=900)
    unbroken, log = accuracy(node, ns)
    assert "backup: wrote s3://ckpt/unbroken/backup-" in log, log[-3000:]
    assert f"removed the backups in s3://{BUCKET}/unbroken" in log, log[-3000:]
    assert s3_cli(s3, "unbroken", "list") == []
    delete_job(cluster, ns)

    # The broken one: worker 1 SIGKILLed after the chief's first upload.
    watch = BucketWatch(s3, "run")
    try:
        apply_job(cluster, ns, s3, "run")
        wait_log(node, ns, W0, "backup: wrote s3://ckpt/run/backup-")
        # The kill first: the job has a few seconds left after its first
        # backup, and the bucket's checks below take as long.
        pids = task_pids(ns, 1, b"ctrain-worker")
        assert pids, "worker 1 process not found"
        # Attempt 1's worker 1, read while it runs (after the job, an exited
        # container's log may be gone).
        w1_log = node.pod_log(ns, W1)
        for pid in pids:
            os.kill(pid, signal.SIGKILL)
        assert watch.seen or s3_cli(s3, "run", "list"), "the log says wrote, the bucket is empty"
        assert s3_cli(s3, "run", "uploads") == []
        wait_job(cluster, node, ns, lambda j: j["status"].get("restarts") == 1, 120, "Restarting")
        job = wait_succeeded(cluster, node, ns, timeout=900)
    finally:
        seen, bad = watch.close()
    assert not bad, f"objects that are not verified backups: {bad}"
    assert seen, "no backup was ever seen in the bucket"
    assert job["status"]["restarts"] == 1 and job["status"]["attempt"] == 2, job["status"]
    got, log = accuracy(node, ns)
    m = re.search(r"backup: resuming from (s3://ckpt/run/backup-\d+\.ckpt) at epoch \d+, step \d+",
                  log)
    assert m, log[-4000:]
    assert m.group(1).rsplit("/", 1)[1] in seen, (m.group(1), seen)
    assert abs(got - unbroken) <= 0.01, (got, unbroken)
    print(f"e2e s3: unbroken accuracy {unbroken}, killed-and-resumed {got}; "
          f"backups seen {sorted(seen)}")
    # After success: no backup, no unfinished upload left under the prefix.
    assert s3_cli(s3, "run", "list") == []
    assert s3_cli(s3, "run", "uploads") == []
    ev = [(e["reason"], e["message"]) for e in events(cluster, ns)]
    assert any(r == "Restarting" and W1 in m and "137" in m for r, m in ev), ev

    # The pods got the keys by reference only; the job's NetworkPolicy
    # restricts ingress only (egress to the host reached the bucket).
    pod = cluster.get_json("pod", W0, "-n", ns)
    env = {e["name"]: e for e in pod["spec"]["containers"][0]["env"]}
    for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        assert "value" not in env[k] and env[k]["valueFrom"]["secretKeyRef"] == \
            {"name": SECRET, "key": k, "optional": False}, env[k]
    assert env["CTRAIN_S3_ENDPOINT"]["value"] == s3.endpoint
    for np in cluster.get_json("networkpolicy", "-n", ns)["items"]:
        assert np["spec"].get("policyTypes", ["Ingress"]) == ["Ingress"], np["spec"]

    # The keys appear nowhere a user or the operator reads.
    texts = {
        "describe tj": cluster.kubectl("describe", "tj", JOB, "-n", ns).stdout,
        "describe pods": cluster.kubectl("describe", "pods", "-n", ns).stdout,
        "tj json": json.dumps(job_json(cluster, ns)),
        "events": json.dumps(events(cluster, ns)),
        "controller logs": controller.logs(),
        "worker 0 log": log,
        "worker 1 log": w1_log + node.pod_log(ns, W1),
    }
    assert "AWS_SECRET_ACCESS_KEY" in texts["describe pods"]  # named, by reference
    for what, text in texts.items():
        assert text, what
        for key in (s3.secret, s3.access):
            assert key not in text and key[:12] not in text, f"a key is in {what}"
