"""Training data from object storage on the real node: examples/fashion-mnist-s3data.yaml as a
user applies it, its --data and --test-data (and backups) in a real S3-compatible server
(versitygw, tools/s3/server.sh) listening on the node's host address, where the pods reach
it through the CNI bridge, as in test_s3_e2e.py.

Fashion-MNIST as 16 GZIP TFRecord train shards and 2 test shards (tools/data/
tfrecord_shards.py) is uploaded with curl's SigV4; the example, adjusted only in its
endpoint, bucket and epochs, trains to Succeeded with no restart, its status.result shows
the test accuracy (> 0.80), the chief logs the reader's memory line, and the keys reach the
pods by reference only. The server is stopped by the test.
"""
import json
import re
import sys


from clusterlib import ROOT
from e2e_lib import host_only, wait_succeeded
from s3lib import BUCKET

sys.path.insert(0, str(ROOT / "tools/data"))
import tfrecord_shards  # noqa: E402

EXAMPLE = ROOT / "examples/fashion-mnist-s3data.yaml"
JOB = "fashion-mnist-s3data"
SECRET = "fashion-mnist-s3data-creds"
EPOCHS = 2

pytestmark = [host_only()]


def example_docs(s):
    """The example with the test's endpoint and bucket (the example's bucket name replaced
    in every s3:// URI) and EPOCHS epochs."""
    import yaml
    text = EXAMPLE.read_text().replace("s3://ctrain-data/", f"s3://{BUCKET}/")
    docs = list(yaml.safe_load_all(text))
    for d in docs:
        if d["kind"] == "TrainingJob":
            d["spec"]["checkpoint"]["endpoint"] = s.endpoint
            c = d["spec"]["replicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]
            c["args"] = [f"--epochs={EPOCHS}" if a.startswith("--epochs=") else a
                         for a in c["args"]]
    return docs


def test_example_trains_from_the_bucket(cluster, node, controller, namespace, s3, tmp_path):
    ns = namespace
    tfrecord_shards.write_fmnist(tmp_path / "shards", shards=16, test_shards=2)
    uris = tfrecord_shards.upload_dir(tmp_path / "shards", f"s3://{BUCKET}/fashion-mnist/",
                                      s3.endpoint, s3.access, s3.secret, "us-east-1")
    assert len(uris) == 18, uris
    cluster.kubectl("create", "secret", "generic", SECRET, "-n", ns,
                    f"--from-literal=AWS_ACCESS_KEY_ID={s3.access}",
                    f"--from-literal=AWS_SECRET_ACCESS_KEY={s3.secret}")
    docs = example_docs(s3)
    args = [d for d in docs if d["kind"] == "TrainingJob"][0]["spec"]["replicaSpecs"][
        "Worker"]["template"]["spec"]["containers"][0]["args"]
    assert f"--data=s3://{BUCKET}/fashion-mnist/train/" in args, args
    cluster.kubectl("apply", "-n", ns, "-f", "-",
                    input=json.dumps({"apiVersion": "v1", "kind": "List", "items": docs}))
    job = wait_succeeded(cluster, node, ns, timeout=900, name=JOB)
    st = job["status"]
    assert st.get("restarts", 0) == 0, st
    res = st["result"]
    assert res["epochs"] == EPOCHS and res["valAccuracy"] > 0.80, res
    log = node.pod_log(ns, f"{JOB}-worker-0")
    m = re.search(r"test accuracy: ([0-9.]+)", log)
    assert m and abs(float(m.group(1)) - res["valAccuracy"]) < 1e-4, (res, log[-3000:])
    data = re.search(r"data: peak RSS .*", log)
    assert data, log[-3000:]
    # The keys by reference only, the endpoint the example's (set by the test).
    pod = cluster.get_json("pod", f"{JOB}-worker-0", "-n", ns)
    env = {e["name"]: e for e in pod["spec"]["containers"][0]["env"]}
    assert env["CTRAIN_S3_ENDPOINT"]["value"] == s3.endpoint
    for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        assert "value" not in env[k], env[k]
    for key in (s3.secret, s3.access):
        assert key not in log
    print(f"e2e data: {len(uris)} objects in s3://{BUCKET}/fashion-mnist/; valAccuracy "
          f"{res['valAccuracy']}; {data[0]}")
