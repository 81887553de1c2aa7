"""A TrainingJob over a TrainingRuntime on the real node, as a team uses them: the admin applies
examples/runtime.yaml (the model config, the claim, the runtime), a user applies
examples/fashion-mnist-runtime.yaml (two workers, a cpu request; nothing else), and the job
trains to Succeeded from the runtime's image, command, data and checkpoint claim, its runtime
recorded in its status; `kubectl get tj` shows the validation accuracy in ACCURACY."""
import json
import re

import yaml

from e2e_lib import ROOT, bind_claim, wait_succeeded

JOB = "fashion-mnist-trial"


def test_example_trains_over_its_runtime(cluster, node, controller, ns):
    bind_claim(cluster, ns)
    docs = list(yaml.safe_load_all(open(ROOT / "examples/runtime.yaml")))
    (rt,) = [d for d in docs if d["kind"] == "TrainingRuntime"]
    c = rt["spec"]["replicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]
    c["args"] = ["--epochs=2" if a.startswith("--epochs=") else a for a in c["args"]]
    cluster.kubectl("apply", "-n", ns, "-f", "-",
                    input=json.dumps({"apiVersion": "v1", "kind": "List", "items": docs}))
    cluster.kubectl("apply", "-n", ns, "-f", str(ROOT / "examples/fashion-mnist-runtime.yaml"))
    j = wait_succeeded(cluster, node, ns, timeout=600, name=JOB)
    st = j["status"]
    assert st["runtime"]["kind"] == "TrainingRuntime" and st["runtime"]["name"] == "fashion-mnist-cpu"
    assert st["restarts"] == 0 and st["result"]["epochs"] == 2, st
    assert st["result"]["valAccuracy"] > 0.8, st["result"]
    out = cluster.kubectl("get", "tj", JOB, "-n", ns).stdout.splitlines()
    header, row = out[0].split(), out[1].split()
    acc = row[header.index("ACCURACY")]
    assert re.fullmatch(r"0\.\d{1,4}", acc) and abs(float(acc) - st["result"]["valAccuracy"]) < 1e-4, out
    ev = cluster.get_json("events", "-n", ns, "--field-selector", "reason=RuntimeRecorded")["items"]
    assert ev and "fashion-mnist-cpu" in ev[0]["message"], ev
