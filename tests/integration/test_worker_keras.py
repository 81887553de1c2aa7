"""ctrain-worker given Keras model JSON (no Kubernetes): the real to_json()
of tf-keras 2.21 and Keras 3 (tests/data/keras/) trains; variants with a
field the worker does not implement exit 78 naming the layer and the field,
before any output is written."""
import json
import re
import os
import pathlib
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
BUILD = pathlib.Path(os.environ.get("CTRAIN_BUILD_DIR", ROOT / "build"))
WORKER = BUILD / "worker" / "ctrain-worker"
DATA = pathlib.Path("/usr/share/datasets/fashion-mnist")
FIXTURES = ROOT / "tests" / "data" / "keras"

pytestmark = pytest.mark.skipif(not WORKER.exists(), reason=f"{WORKER} not built")


def run(tmp_path, model, *extra, timeout=120, data=DATA / "t10k"):
    """One worker without TF_CONFIG, output in tmp_path/out."""
    env = dict(os.environ)
    env.pop("TF_CONFIG", None)
    return subprocess.run([str(WORKER), "train", "--model", str(model), "--data",
                           str(data), "--output", str(tmp_path / "out"),
                           "--termination-log", "", *extra],
                          env=env, capture_output=True, text=True, timeout=timeout)


def variant(tmp_path, src, at, key, value):
    """The fixture with layers[at].config[key] = value (class_name: the layer's)."""
    m = json.loads((FIXTURES / src).read_text())
    layer = m["config"]["layers"][at]
    (layer if key == "class_name" else layer["config"])[key] = value
    path = tmp_path / f"{key}.json"
    path.write_text(json.dumps(m))
    return path


@pytest.mark.parametrize("src,at,key,value,needle", [
    ("cnn-keras3.json", 1, "dilation_rate", [2, 2],
     "layers[1] (Conv2D 'conv2d').dilation_rate: only 1 is supported"),
    ("cnn-tf_keras.json", 4, "groups", 2, "layers[4] (Conv2D 'conv2d_1').groups: only 1"),
    ("cnn-keras3.json", 9, "kernel_regularizer",
     {"module": "keras.regularizers", "class_name": "L2", "config": {"l2": 0.01},
      "registered_name": None},
     "layers[9] (Dense 'dense').kernel_regularizer: only null"),
    ("cnn-tf_keras.json", 1, "data_format", "channels_first",
     "layers[1] (Conv2D 'conv2d').data_format: only \"channels_last\""),
    ("cnn-keras3.json", 2, "class_name", "LayerNormalization",
     "layers[2]: unknown layer type 'LayerNormalization'"),
])
def test_unsupported_keras_field_exits_78(tmp_path, src, at, key, value, needle):
    p = run(tmp_path, variant(tmp_path, src, at, key, value))
    assert p.returncode == 78, p.stderr
    assert needle in p.stderr, p.stderr
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("src", ["small-tf_keras.json", "small-keras3.json"])
def test_keras_json_trains(tmp_path, src):
    """One epoch of the small CNN (Reshape, strided Conv2D without bias,
    BatchNormalization, AveragePooling2D, GlobalAveragePooling2D) on the
    test split: it learns (accuracy far above chance) and writes Keras'
    tensors."""
    metrics = tmp_path / "m.jsonl"
    p = run(tmp_path, FIXTURES / src, "--epochs", "1", "--batch", "32", "--lr", "0.01",
            "--metrics", str(metrics), timeout=600)
    assert p.returncode == 0, p.stderr
    last = [json.loads(line) for line in metrics.read_text().splitlines()][-1]
    assert last["accuracy"] > 0.3, last
    raw = (tmp_path / "out" / "model.safetensors").read_bytes()
    header = json.loads(raw[8:8 + int.from_bytes(raw[:8], "little")])
    names = {l["class_name"]: l["config"]["name"]
             for l in json.loads((FIXTURES / src).read_text())["config"]["layers"]}
    conv, bn, dense = names["Conv2D"], names["BatchNormalization"], names["Dense"]
    assert header[f"{conv}/kernel"]["shape"] == [5, 3, 1, 8]
    assert set(header) - {"__metadata__"} == {
        f"{conv}/kernel", f"{bn}/gamma", f"{bn}/moving_mean", f"{bn}/moving_variance",
        f"{dense}/kernel", f"{dense}/bias"}


def free_ports(n):
    import socket
    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def read_params(path):
    raw = path.read_bytes()
    hl = int.from_bytes(raw[:8], "little")
    import struct
    data = raw[8 + hl:]
    return struct.unpack(f"<{len(data) // 4}f", data)


SGD = ["--epochs", "1", "--optimizer", "sgd", "--lr", "0.05", "--momentum", "0.9"]


def head_of_t10k(where, n):
    """The first n test samples as an uncompressed IDX prefix (where/s)."""
    import gzip
    for part, dims, per in (("images", 3, 784), ("labels", 1, 1)):
        raw = gzip.open(DATA / f"t10k-{part}-idx{dims}-ubyte.gz").read()
        hdr = bytearray(raw[:4 + 4 * dims])
        hdr[4:8] = n.to_bytes(4, "big")
        (where / f"s-{part}-idx{dims}-ubyte").write_bytes(bytes(hdr) + raw[len(hdr):len(hdr) + n * per])
    return where / "s"


def workers(tmp_path, model, data, n, *extra, rank_extra=None):
    """n workers on TF_CONFIG (ports on 127.0.0.1), output in tmp_path/two; their exit
    codes and the chief's log. rank_extra: {rank: [flags]} for some ranks only."""
    ports = free_ports(n)
    addrs = [f"127.0.0.1:{q}" for q in ports]
    procs = []
    for r in range(n):
        env = dict(os.environ, CTRAIN_JOB_TOKEN="tok", CTRAIN_JOB_NAME="bn", CTRAIN_ATTEMPT="0",
                   TF_CONFIG=json.dumps({"cluster": {"worker": addrs},
                                         "task": {"type": "worker", "index": r}}))
        log = open(tmp_path / f"w{r}.log", "w")
        procs.append(subprocess.Popen(
            [str(WORKER), "train", "--model", str(model), "--data", str(data),
             "--output", str(tmp_path / "two"), "--termination-log", "", *extra,
             *(rank_extra or {}).get(r, []),
             "--rendezvous-timeout", "60", "--peer-timeout", "30"],
            env=env, stdout=log, stderr=subprocess.STDOUT))
    return [q.wait(timeout=300) for q in procs], (tmp_path / "w0.log").read_text()


def assert_same_params(a_path, b_path):
    """Within 1e-5 of the largest weight: the order of summation differs; over a whole
    epoch at this learning rate the difference grows chaotically, as any reordering would."""
    a, b = read_params(a_path), read_params(b_path)
    assert len(a) == len(b) == 234
    scale = max(abs(x) for x in a)
    worst = max(abs(x - y) for x, y in zip(a, b))
    assert worst <= 1e-5 * scale, (worst, scale)


def test_synchronized_batchnorm_two_workers_equal_one_worker_batch_2b(tmp_path):
    """The small CNN (BatchNormalization after a Conv2D): 2 workers x batch
    16, whose batch statistics are all-reduced in every forward and backward,
    end where 1 worker x batch 32 does, moving statistics included, after 20
    steps. Unsynchronized statistics differ at the first step."""
    model, data = FIXTURES / "small-keras3.json", head_of_t10k(tmp_path, 640)
    p = run(tmp_path / "one", model, "--batch", "32", *SGD, data=data)
    assert p.returncode == 0, p.stderr
    codes, log = workers(tmp_path, model, data, 2, "--batch", "16", *SGD)
    assert codes == [0, 0], log
    assert "replicas in sync: 2 (workers 2 x replicas 1" in log
    assert_same_params(tmp_path / "one" / "out" / "model.safetensors",
                       tmp_path / "two" / "model.safetensors")


def test_synchronized_batchnorm_local_replicas(tmp_path):
    """Local replicas step on threads of their own and meet in every
    BatchNormalization layer: cpu:2 x batch 16 ends where 1 replica x batch
    32 does, and 2 workers x cpu:2 x batch 8 too (the statistics summed over
    the replicas, then across the workers)."""
    model, data = FIXTURES / "small-keras3.json", head_of_t10k(tmp_path, 640)
    p = run(tmp_path / "one", model, "--batch", "32", *SGD, data=data)
    assert p.returncode == 0, p.stderr
    p = run(tmp_path / "local", model, "--batch", "16", "--device", "cpu:2", *SGD, data=data)
    assert p.returncode == 0, p.stderr
    assert "replicas in sync: 2 (workers 1 x replicas 2" in p.stderr, p.stderr
    one = tmp_path / "one" / "out" / "model.safetensors"
    assert_same_params(one, tmp_path / "local" / "out" / "model.safetensors")
    codes, log = workers(tmp_path, model, data, 2, "--batch", "8", "--device", "cpu:2", *SGD)
    assert codes == [0, 0], log
    assert "replicas in sync: 4 (workers 2 x replicas 2" in log
    assert_same_params(one, tmp_path / "two" / "model.safetensors")


@pytest.mark.parametrize("world", [2, 3])
def test_overlapped_allreduce_gives_the_same_bits(tmp_path, world):
    """The CNN (422k parameters): its Dense kernel's gradients are all-reduced on
    the queue's thread while the convolutions' backward runs, synchronized
    BatchNormalization's statistics through the same queue; every weight and moving
    statistic ends bitwise where --no-overlap (one all-reduce after the backward
    pass) ends, on every worker. With --no-overlap on one worker only ("mixed": a
    TFJob's chief and workers have specs of their own) every worker runs without the
    overlap, and the chief says why. --overlap auto (the default) times both ways in
    its first 52 steps, 24 each, alternating, then keeps one: the same bits again."""
    model, data = FIXTURES / "cnn-tf_keras.json", head_of_t10k(tmp_path, 96 * world)
    out = {}
    for how in ("overlap", "after", "mixed", "auto"):
        (tmp_path / how).mkdir()
        extra = {"overlap": ["--overlap", "on"], "after": ["--no-overlap"],
                 "auto": ["--epochs", "3"]}.get(how, [])
        codes, log = workers(tmp_path / how, model, data, world, "--batch", "4", *SGD, *extra,
                             rank_extra={world - 1: ["--no-overlap"]} if how == "mixed" else None)
        assert codes == [0] * world, log
        said = "part of the all-reduce during the backward pass" in log
        assert said == (how in ("overlap", "auto")), log
        assert (f"1 of {world} workers cannot overlap it" in log) == (how == "mixed"), log
        chose = re.search(r"gradients: [0-9.]+ ms a step with the all-reduce during the backward "
                          rf"pass, [0-9.]+ after it \(mean of 24 steps each way on {world} "
                          r"workers\): (during|after) from now on", log)
        assert bool(chose) == (how == "auto"), log
        out[how] = [(tmp_path / how / "two" / (f".worker-{r}/" if r else "") /
                     "model.safetensors").read_bytes() for r in range(world)]
        assert all(o == out[how][0] for o in out[how]), f"{how}: workers differ"
    assert out["overlap"][0] == out["after"][0] == out["mixed"][0]
    assert out["auto"][0] != out["overlap"][0]  # 3 epochs, not 1: it trained on
    # ... and the same 3 epochs with the overlap on throughout end with the same bits
    (tmp_path / "on3").mkdir()
    codes, log = workers(tmp_path / "on3", model, data, world, "--batch", "4", *SGD, "--epochs",
                         "3", "--overlap", "on")
    assert codes == [0] * world, log
    assert (tmp_path / "on3" / "two" / "model.safetensors").read_bytes() == out["auto"][0]


TF_PYTHON = pathlib.Path(os.environ.get(
    "CTRAIN_TF_PYTHON", pathlib.Path.home() / ".cache/ctrain/bench-tf-venv-2.21.0/bin/python"))


@pytest.mark.skipif(not TF_PYTHON.exists(), reason=f"no TF venv at {TF_PYTHON} "
                    "(bench/train.py makes it; or set CTRAIN_TF_PYTHON)")
@pytest.mark.parametrize("flavour", ["tf_keras", "keras3"])
def test_keras_rescores_our_weights(tmp_path, flavour):
    """Real Keras builds the model from the same JSON, takes our
    model.safetensors by its names and layouts, and scores the test set as
    ctrain did (within 0.002: tests/keras/rescore.py)."""
    metrics = tmp_path / "m.jsonl"
    p = run(tmp_path, FIXTURES / f"small-{flavour}.json", "--epochs", "1", "--lr", "0.01",
            "--test-data", str(DATA / "t10k"), "--metrics", str(metrics), timeout=600,
            data=DATA / "train")
    assert p.returncode == 0, p.stderr
    acc = json.loads(metrics.read_text().splitlines()[-1])["val_accuracy"]
    args = [str(TF_PYTHON), str(ROOT / "tests/keras/rescore.py"), str(tmp_path / "out"),
            "--ctrain-acc", str(acc)] + (["--tf-keras"] if flavour == "tf_keras" else [])
    q = subprocess.run(args, capture_output=True, text=True, timeout=600)
    assert q.returncode == 0, q.stdout + q.stderr[-2000:]
