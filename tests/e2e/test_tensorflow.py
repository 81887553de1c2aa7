"""Stock TensorFlow under ctrain, on the real node: examples/tensorflow-mwms.yaml
(a Keras MultiWorkerMirroredStrategy script with BackupAndRestore, in an image
with nothing of ctrain in it) runs unchanged as a TrainingJob, reading the
TF_CONFIG the controller renders; a SIGKILLed worker costs one gang restart and
TensorFlow's own BackupAndRestore resumes after the last finished epoch."""
import json
import os
import pathlib
import re
import shutil
import signal
import sys
import time

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "e2e"))
from e2e_lib import EXISTING, build_image, dump, events, job_json, task_pids  # noqa: E402

JOB = "tf-mwms"

pytestmark = pytest.mark.skipif(EXISTING, reason="kills a container process from the node's host")


def docs(backup_dir):
    import yaml
    out = list(yaml.safe_load_all(open(ROOT / "examples/tensorflow-mwms.yaml")))
    for d in out:
        if d["kind"] == "TrainingJob":
            d["spec"]["checkpoint"]["volume"]["hostPath"]["path"] = str(backup_dir)
    return out


def test_stock_tensorflow_mwms_survives_a_killed_worker(cluster, node, controller, namespace):
    node.import_image(build_image("tf"))
    ns = namespace
    backup = pathlib.Path(f"/tmp/ctrain-e2e-tf-{ns}")
    shutil.rmtree(backup, ignore_errors=True)
    try:
        cluster.kubectl("apply", "-n", ns, "-f", "-",
                        input=json.dumps({"apiVersion": "v1", "kind": "List", "items": docs(backup)}))
        w0, w1 = f"{JOB}-worker-0", f"{JOB}-worker-1"
        # After the first epoch's backup, SIGKILL worker 1's python.
        deadline = time.monotonic() + 600
        while "epoch 0 end" not in node.pod_log(ns, w0):
            assert time.monotonic() < deadline, dump(cluster, node, ns)
            time.sleep(1)
        log0 = node.pod_log(ns, w0)
        assert "replicas in sync: 2" in log0, log0[-3000:]
        assert f"{JOB}-worker-1.{JOB}.{ns}.svc:2222" in log0, log0[-3000:]
        pids = task_pids(ns, 1, b"mwms.py")
        assert pids, "worker 1's python not found"
        for pid in pids:
            os.kill(pid, signal.SIGKILL)
        p = cluster.kubectl("wait", "--for=condition=Succeeded", f"tj/{JOB}", "-n", ns,
                            "--timeout=900s", check=False, timeout=930)
        assert p.returncode == 0, dump(cluster, node, ns)
        job = job_json(cluster, ns, JOB)
        assert job["status"]["restarts"] == 1, job["status"]
        # TensorFlow's worker 0 exits 1 as soon as its peer dies, often in the
        # same kubelet status sync as the killed worker: the controller names the
        # cause when it sees both (a signal over an error exit), but it may see
        # worker 0's failure first and gang-restart on it.
        msgs = [e["message"] for e in events(cluster, ns) if e["reason"] == "Restarting"]
        assert len(msgs) == 1 and (w1 in msgs[0] or w0 in msgs[0]), msgs
        # Attempt 2 started after the backed-up epochs, not from epoch 0.
        log = node.pod_log(ns, w0)
        first = re.search(r"epoch (\d+) begin", log)
        assert first and int(first.group(1)) >= 1, log[-4000:]
        assert "epoch 3 end" in log, log[-4000:]
        acc = re.search(r"test accuracy: ([0-9.]+)", log)
        assert acc and float(acc.group(1)) >= 0.80, log[-3000:]
        print(f"e2e: stock TensorFlow MWMS resumed at epoch {first.group(1)}, "
              f"test accuracy {acc.group(1)}")
    finally:
        shutil.rmtree(backup, ignore_errors=True)
