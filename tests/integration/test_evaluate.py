"""`ctrain-worker evaluate` loads what training wrote and reproduces its test
accuracy; bad inputs exit with the documented codes, naming the file."""
import json
import subprocess

from workerlib import DATA, MODEL, WORKER


def run(*args):
    return subprocess.run([str(WORKER), *args], capture_output=True, text=True, timeout=300)


def test_evaluate_matches_training(tmp_path):
    out = tmp_path / "model"
    t = run("train", "--model", str(MODEL), "--data", str(DATA / "train"), "--test-data",
            str(DATA / "t10k"), "--epochs", "1", "--batch", "64", "--output", str(out),
            "--metrics", str(tmp_path / "m.jsonl"))
    assert t.returncode == 0, t.stderr[-2000:]
    trained = json.loads((tmp_path / "m.jsonl").read_text().splitlines()[-1])["val_accuracy"]
    e = run("evaluate", "--model", str(out), "--test-data", str(DATA / "t10k"))
    assert e.returncode == 0, e.stderr
    got = json.loads(e.stdout)
    assert got["samples"] == 10000
    assert abs(got["accuracy"] - trained) < 1e-6, (got, trained)


def test_evaluate_bad_inputs(tmp_path):
    e = run("evaluate", "--model", str(tmp_path / "nope"), "--test-data", str(DATA / "t10k"))
    assert e.returncode == 78 and "nope" in e.stderr, e.stderr
    (tmp_path / "w.safetensors").write_bytes(b"\x08\0\0\0\0\0\0\0{}      ")
    e = run("evaluate", "--model", str(MODEL), "--weights", str(tmp_path / "w.safetensors"),
            "--test-data", str(DATA / "t10k"))
    assert e.returncode == 78 and "w.safetensors" in e.stderr, e.stderr
    e = run("evaluate", "--model", str(MODEL), "--test-data", str(DATA / "t10k"))
    assert e.returncode == 64 and "--weights" in e.stderr, e.stderr
