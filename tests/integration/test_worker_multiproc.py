"""ctrain-worker as real processes on loopback, with hand-written TF_CONFIG.

No Kubernetes: 2-3 `ctrain-worker train` processes find each other through
TF_CONFIG and CTRAIN_JOB_TOKEN and train Fashion-MNIST together. Checks:
identical final weights on every worker and test accuracy > 0.80 after one
epoch; a killed peer makes the others exit 75 naming it; a bad TF_CONFIG
exits 78; a bad data file exits 65, before any output is written.
"""
import json
import os
import signal
import subprocess
import time

import pytest

from clusterlib import ROOT
from workerlib import DATA, MODEL, WORKER, free_ports, log_of, start

pytestmark = pytest.mark.skipif(not WORKER.exists(), reason=f"{WORKER} not built")


@pytest.mark.parametrize("world", [2, 3])
def test_workers_train_to_identical_weights(tmp_path, world):
    ports = free_ports(world)
    procs = [start(tmp_path, ports, r) for r in range(world)]
    codes = [p.wait(timeout=120) for p in procs]
    logs = [log_of(tmp_path, r) for r in range(world)]
    assert codes == [0] * world, "\n".join(logs)
    chief = (tmp_path / "out" / "model.safetensors").read_bytes()
    assert len(chief) > 400000
    for r in range(1, world):
        other = (tmp_path / "out" / f".worker-{r}" / "model.safetensors").read_bytes()
        assert other == chief, f"rank {r} weights differ from the chief's"
    lines = (tmp_path / "m0.jsonl").read_text().splitlines()
    m = json.loads(lines[-1])
    assert m["replicas"] == world
    assert m["val_accuracy"] > 0.80, m
    assert "Epoch 1/1" in logs[0] and "samples/s" in logs[0]
    assert f"replicas in sync: {world}" in logs[0]
    assert json.loads((tmp_path / "out" / "model.json").read_text())["input_shape"] == [28, 28]


@pytest.mark.parametrize("model", ["mlp", "cnn"])
def test_killed_peer_makes_others_exit_75_naming_it(tmp_path, model):
    """The CNN's workers all-reduce its Dense kernel's gradients on a thread of
    their own during the backward pass (the overlap): a peer lost then is named
    the same way."""
    ports = free_ports(3)
    path = MODEL if model == "mlp" else ROOT / "tests" / "data" / "keras" / "cnn-tf_keras.json"
    # --overlap on: the overlap throughout (auto could settle on "after")
    procs = [start(tmp_path, ports, r, "--overlap", "on", epochs=50, model=path) for r in range(3)]
    # Wait until training runs (the chief printed its first epoch header).
    deadline = time.time() + 60
    while "Epoch 1/" not in log_of(tmp_path, 0):
        assert time.time() < deadline, log_of(tmp_path, 0)
        assert all(p.poll() is None for p in procs)
        time.sleep(0.1)
    time.sleep(1.0)
    procs[2].send_signal(signal.SIGKILL)
    t0 = time.time()
    codes = [procs[r].wait(timeout=30) for r in range(2)]
    elapsed = time.time() - t0
    procs[2].wait()
    assert codes == [75, 75], [log_of(tmp_path, r) for r in range(2)]
    assert elapsed < 3 + 2, elapsed  # within the peer timeout (3 s) plus slack
    for r in range(2):
        assert f"rank 2 (127.0.0.1:{ports[2]})" in log_of(tmp_path, r), log_of(tmp_path, r)
    assert not (tmp_path / "out" / "model.safetensors").exists()
    if model == "cnn":
        assert "part of the all-reduce during the backward pass" in log_of(tmp_path, 0)


def test_forged_token_is_refused(tmp_path):
    ports = free_ports(2)
    good = start(tmp_path, ports, 0, "--rendezvous-timeout", "4")
    bad = start(tmp_path, ports, 1, "--rendezvous-timeout", "4", token="forged")
    assert bad.wait(timeout=30) == 75
    assert good.wait(timeout=30) == 75  # nobody legitimate joined in time
    assert "refused connection" in log_of(tmp_path, 0)
    assert "HMAC mismatch" in log_of(tmp_path, 0)
    assert "HMAC mismatch" in log_of(tmp_path, 1)


@pytest.mark.parametrize("tfc,needle", [
    ("{not json", "malformed JSON"),
    ('{"cluster":{"worker":["a:1"]},"task":{"type":"worker","index":4}}', "task.index"),
    ('{"cluster":{"chief":["a:1","b:1"]},"task":{"type":"chief","index":0}}', "cluster.chief"),
    ('{"cluster":{"master":["a:1"]},"task":{"type":"master","index":0}}', "cluster.master"),
])
def test_bad_tf_config_exits_78(tmp_path, tfc, needle):
    env = dict(os.environ, TF_CONFIG=tfc, CTRAIN_JOB_TOKEN="x")
    p = subprocess.run([str(WORKER), "train", "--model", str(MODEL), "--data",
                        str(DATA / "train")], env=env, capture_output=True, text=True,
                       timeout=60)
    assert p.returncode == 78, p.stderr
    assert needle in p.stderr


def test_bad_data_file_exits_65_before_output(tmp_path):
    bad = tmp_path / "bad-images-idx3-ubyte.gz"
    bad.write_bytes(b"\x1f\x8b\x08\x00garbage")
    env = dict(os.environ)
    env.pop("TF_CONFIG", None)
    p = subprocess.run([str(WORKER), "train", "--model", str(MODEL), "--data", str(bad),
                        "--output", str(tmp_path / "out")], env=env, capture_output=True,
                       text=True, timeout=60)
    assert p.returncode == 65, p.stderr
    assert str(bad) in p.stderr
    assert not (tmp_path / "out").exists()


def test_model_data_shape_mismatch_exits_78(tmp_path):
    model = tmp_path / "m.json"
    model.write_text('{"input_shape":[32,32],"layers":[{"type":"Flatten"},'
                     '{"type":"Dense","units":10}]}')
    env = dict(os.environ)
    env.pop("TF_CONFIG", None)
    p = subprocess.run([str(WORKER), "train", "--model", str(model), "--data",
                        str(DATA / "t10k")], env=env, capture_output=True, text=True, timeout=60)
    assert p.returncode == 78, p.stderr
    assert "784 features" in p.stderr and str(model) in p.stderr


def read_params(path):
    import struct
    raw = path.read_bytes()
    (hl,) = struct.unpack("<Q", raw[:8])
    data = raw[8 + hl:]
    return struct.unpack(f"<{len(data) // 4}f", data)


def test_two_workers_batch_b_equal_one_worker_batch_2b(tmp_path):
    """Same seed and data order: 2 x B ends where 1 x 2B does (1e-5 relative)."""
    one = tmp_path / "one"
    one.mkdir()
    env = dict(os.environ)
    env.pop("TF_CONFIG", None)
    p = subprocess.run([str(WORKER), "train", "--model", str(MODEL), "--data",
                        str(DATA / "train"), "--epochs", "1", "--batch", "64", "--optimizer",
                        "sgd", "--lr", "0.05", "--momentum", "0.9", "--output", str(one / "out")],
                       env=env, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    ports = free_ports(2)
    procs = [start(tmp_path, ports, r, "--optimizer", "sgd", "--lr", "0.05", "--momentum", "0.9",
                   "--batch", "32") for r in range(2)]
    assert [q.wait(timeout=120) for q in procs] == [0, 0]
    a = read_params(one / "out" / "model.safetensors")
    b = read_params(tmp_path / "out" / "model.safetensors")
    assert len(a) == len(b) == 101770
    scale = max(abs(x) for x in a)
    worst = max(abs(x - y) for x, y in zip(a, b))
    assert worst <= 1e-5 * scale, (worst, scale)


def run_one(where, *extra):
    """One worker without TF_CONFIG; returns its final parameters."""
    where.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ)
    env.pop("TF_CONFIG", None)
    p = subprocess.run([str(WORKER), "train", "--model", str(MODEL), "--data",
                        str(DATA / "train"), "--epochs", "1", "--optimizer", "sgd", "--lr", "0.05",
                        "--momentum", "0.9", "--output", str(where / "out"),
                        "--metrics", str(where / "m.jsonl"), *extra],
                       env=env, capture_output=True, text=True, timeout=180)
    assert p.returncode == 0, p.stderr
    return read_params(where / "out" / "model.safetensors"), p.stderr


def run_workers(tmp_path, world, *extra):
    tmp_path.mkdir(parents=True, exist_ok=True)
    ports = free_ports(world)
    procs = [start(tmp_path, ports, r, "--optimizer", "sgd", "--lr", "0.05", "--momentum", "0.9",
                   *extra) for r in range(world)]
    codes = [q.wait(timeout=180) for q in procs]
    assert codes == [0] * world, "\n".join(log_of(tmp_path, r) for r in range(world))
    return read_params(tmp_path / "out" / "model.safetensors")


def assert_close(a, b, what):
    assert len(a) == len(b) == 101770
    scale = max(abs(x) for x in a)
    worst = max(abs(x - y) for x, y in zip(a, b))
    assert worst <= 1e-5 * scale, (what, worst, scale)


def test_cpu2_one_worker_equals_two_workers_and_batch_2b(tmp_path):
    """Replicas per worker: cpu:2 x 1 worker x batch B, cpu:1 x 2 workers x
    batch B and 1 worker x batch 2B take the same samples at every step (the
    worker's step batch is split into contiguous replica slices) and end
    within 1e-5 (relative) of each other after a whole epoch."""
    big, _ = run_one(tmp_path / "big", "--batch", "64", "--device", "cpu")
    two, err = run_one(tmp_path / "r2", "--batch", "32", "--device", "cpu:2")
    assert "replicas in sync: 2 (workers 1 x replicas 2" in err, err
    rows = [json.loads(l) for l in (tmp_path / "r2" / "m.jsonl").read_text().splitlines()]
    assert rows[-1]["replicas"] == 2 and rows[-1]["replicas_per_worker"] == 2, rows[-1]
    assert rows[-1]["samples_per_sec_per_replica"] > 0, rows[-1]
    assert_close(big, two, "cpu:2 x 1 worker vs 1 x batch 2B")
    workers = run_workers(tmp_path / "w2", 2, "--batch", "32", "--device", "cpu")
    assert_close(big, workers, "cpu:1 x 2 workers vs 1 x batch 2B")
    assert_close(two, workers, "cpu:2 x 1 worker vs cpu:1 x 2 workers")


def test_cpu2_two_workers_equals_one_worker_batch_4b(tmp_path):
    """cpu:2 x 2 workers x batch B ends within 1e-5 of 1 worker x batch 4B."""
    big, _ = run_one(tmp_path / "big", "--batch", "128", "--device", "cpu")
    ports = free_ports(2)
    procs = [start(tmp_path, ports, r, "--optimizer", "sgd", "--lr", "0.05", "--momentum", "0.9",
                   "--batch", "32", "--device", "cpu:2") for r in range(2)]
    assert [q.wait(timeout=180) for q in procs] == [0, 0], log_of(tmp_path, 0)
    assert "replicas in sync: 4 (workers 2 x replicas 2" in log_of(tmp_path, 0)
    assert_close(big, read_params(tmp_path / "out" / "model.safetensors"),
                 "cpu:2 x 2 workers vs 1 x batch 4B")
    other = read_params(tmp_path / "out" / ".worker-1" / "model.safetensors")
    assert other == read_params(tmp_path / "out" / "model.safetensors")


def test_device_gpu_without_gpu_exits_64_saying_why(tmp_path):
    """No GPU here (or a build without CUDA): --device gpu is a usage error
    with the reason, before any output."""
    env = dict(os.environ)
    env.pop("TF_CONFIG", None)
    # The device is resolved before the data is read: a missing data file
    # is only reached (exit 65) when a GPU is usable.
    p = subprocess.run([str(WORKER), "train", "--model", str(MODEL), "--data",
                        str(tmp_path / "missing"), "--device", "gpu", "--output",
                        str(tmp_path / "out")],
                       env=env, capture_output=True, text=True, timeout=60)
    if p.returncode == 65:
        pytest.skip("a GPU is visible: tools/gpu-check.sh covers --device gpu")
    assert p.returncode == 64, p.stderr
    assert "--device gpu: no usable GPU" in p.stderr, p.stderr
    assert not (tmp_path / "out").exists()


def test_two_workers_reach_087_in_five_epochs(tmp_path):
    """The accuracy bar (0.87 within 5 epochs): Flatten -> Dense(128, relu) -> Dense(10), Adam,
    2 workers x batch 32, 5 epochs, with the learning rate scaled linearly by
    the replicas in sync (global batch 64, lr 0.002)."""
    ports = free_ports(2)
    procs = [start(tmp_path, ports, r, "--scale-lr", chief=False, epochs=5) for r in range(2)]
    codes = [p.wait(timeout=300) for p in procs]
    assert codes == [0, 0], log_of(tmp_path, 0) + log_of(tmp_path, 1)
    rows = [json.loads(l) for l in (tmp_path / "m0.jsonl").read_text().splitlines()]
    last = [r for r in rows if "val_accuracy" in r][-1]
    assert last["replicas"] == 2 and last["epoch"] == 5
    assert last["val_accuracy"] >= 0.87, rows
