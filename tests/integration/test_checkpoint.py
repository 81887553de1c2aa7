"""BackupAndRestore with real ctrain-worker processes on loopback.

Small raw-record subsets of Fashion-MNIST (4000 train, 1000 test samples) and a
model with Dropout keep each run to seconds while exercising every piece of
state a backup holds (weights, Adam moments and step, data order, per-rank
dropout RNG). Checks: a run SIGKILLed right after a step backup, or stopped by
SIGTERM anywhere, or losing a non-chief worker mid-epoch, resumes and ends
bitwise identical to an unbroken run; a corrupt or truncated newest backup
falls back to the previous one with a warning naming it, all corrupt is a
fresh start; a changed config is exit 78 printing both hashes; a full disk
(RLIMIT_FSIZE) is exit 75 with the previous backup intact and loadable.
"""
import hashlib
import json
import os
import pathlib
import resource
import signal
import struct
import subprocess
import time

import pytest

from ckptlib import MODEL_JSON, Run, reference, weights
from workerlib import WORKER

pytestmark = pytest.mark.skipif(not WORKER.exists(), reason=f"{WORKER} not built")


def backups(d):
    d = pathlib.Path(d)
    return sorted(d.glob("backup-*.ckpt")) if d.exists() else []


def wait_for_backup(run, min_step, timeout=60):
    """Polls until a backup of global step >= min_step exists; returns its path."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        for b in backups(run.where / "bk"):
            if int(b.name[7:27]) >= min_step:
                return b
        assert all(p.poll() is None for p in run.procs), run.logs()
        time.sleep(0.002)
    raise AssertionError(f"no backup >= {min_step}:\n{run.logs()}")


@pytest.fixture(scope="session")
def fx_cnn(fx, tmp_path_factory):
    """The same data with tests/data/keras/small-keras3.json: a Keras 3
    to_json() CNN whose BatchNormalization keeps moving statistics."""
    d = tmp_path_factory.mktemp("ckpt-cnn")
    for name in ("train.raw", "test.raw"):
        (d / name).symlink_to(fx["dir"] / name)
    src = pathlib.Path(__file__).resolve().parents[1] / "data" / "keras" / "small-keras3.json"
    (d / "model.json").write_text(src.read_text())
    return {"dir": d, "refs": {}}


@pytest.fixture(scope="session")
def fx_big_cnn(fx, tmp_path_factory):
    """The same data with tests/data/keras/cnn-tf_keras.json, the example's CNN
    (422k parameters): its workers overlap the all-reduce with the backward pass."""
    d = tmp_path_factory.mktemp("ckpt-big-cnn")
    for name in ("train.raw", "test.raw"):
        (d / name).symlink_to(fx["dir"] / name)
    src = pathlib.Path(__file__).resolve().parents[1] / "data" / "keras" / "cnn-tf_keras.json"
    (d / "model.json").write_text(src.read_text())
    return {"dir": d, "refs": {}}


def test_sigterm_during_the_overlap_saves_and_resumes_exactly(fx_big_cnn, tmp_path):
    """SIGTERM to a worker of the CNN, whose "SIGTERM seen" flag travels in the
    first part all-reduced during the backward pass: both stop after the same
    step, save, exit 75, and the resumed run ends bitwise where an unbroken one
    does."""
    ref = reference(fx_big_cnn, tmp_path, 2, epochs=3)
    # --overlap on: the overlap throughout (auto could settle on "after")
    a = Run(fx_big_cnn, tmp_path / "run", 2, "--save-freq", "100000", "--overlap", "on", epochs=3)
    deadline = time.time() + 120
    while "Epoch 2/" not in a.log(0):
        assert time.time() < deadline and all(p.poll() is None for p in a.procs), a.logs()
        time.sleep(0.01)
    time.sleep(0.2)
    a.kill(signal.SIGTERM, ranks=[1])
    assert a.wait() == [75, 75], a.logs()
    assert "part of the all-reduce during the backward pass" in a.log(0), a.log(0)
    steps = {a.log(r).split("stopped by SIGTERM after global step")[1].split()[0]
             for r in range(2)}
    assert len(steps) == 1, a.logs()
    b = Run(fx_big_cnn, tmp_path / "run", 2, "--save-freq", "100000", "--overlap", "on", epochs=3,
            tag="b")
    assert b.wait() == [0, 0], b.logs()
    assert "backup: resuming from" in b.log(0), b.log(0)
    assert weights(b.where) == ref


def test_batchnorm_moving_statistics_resume_bitwise_identical(fx_cnn, tmp_path):
    """SIGKILL after a step backup of the CNN (2 workers, synchronized batch
    statistics): the backup carries BatchNormalization's moving statistics
    with the weights, and the resumed run ends bitwise identical to an
    unbroken one, moving statistics included."""
    ref = reference(fx_cnn, tmp_path, 2, epochs=6)
    a = Run(fx_cnn, tmp_path / "run", 2, "--save-freq", "20", epochs=6)
    wait_for_backup(a, 100)
    a.kill(signal.SIGKILL)
    assert a.wait() == [-9, -9], a.logs()
    b = Run(fx_cnn, tmp_path / "run", 2, "--save-freq", "20", epochs=6, tag="b")
    assert b.wait() == [0, 0], b.logs()
    assert "backup: resuming from" in b.log(0), b.log(0)
    got = weights(b.where)
    assert b"moving_variance" in got[:4096]
    assert got == ref, "resumed run differs from the unbroken one"


@pytest.mark.parametrize("freq", ["20", "epoch"])
def test_sigkill_after_backup_resumes_bitwise_identical(fx, tmp_path, freq):
    ref = reference(fx, tmp_path, 2, epochs=12)
    a = Run(fx, tmp_path / "run", 2, "--save-freq", freq, epochs=12)
    wait_for_backup(a, 100)
    a.kill(signal.SIGKILL)
    assert a.wait() == [-9, -9], a.logs()
    assert backups(a.where / "bk"), "the killed run left no backup"
    b = Run(fx, tmp_path / "run", 2, "--save-freq", freq, epochs=12, tag="b")
    assert b.wait() == [0, 0], b.logs()
    assert "backup: resuming from" in b.log(0), b.log(0)
    assert weights(b.where) == ref, "resumed run differs from the unbroken one"
    w1 = (b.where / "out" / ".worker-1" / "model.safetensors").read_bytes()
    with open(b.where / "out" / "model.safetensors", "rb") as f:
        assert w1 == f.read()
    assert backups(b.where / "bk") == [], "backups were not deleted after success"


@pytest.mark.parametrize("who", ["chief", "worker"])
def test_sigterm_saves_and_exits_75_then_resumes_exactly(fx, tmp_path, who):
    ref = reference(fx, tmp_path, 2, epochs=12)
    # No periodic backups: the one that exists must come from the SIGTERM.
    a = Run(fx, tmp_path / "run", 2, "--save-freq", "100000", epochs=12)
    deadline = time.time() + 60
    while "Epoch 3/" not in a.log(0):
        assert time.time() < deadline and all(p.poll() is None for p in a.procs), a.logs()
        time.sleep(0.01)
    time.sleep(0.05)
    a.kill(signal.SIGTERM, ranks=[0 if who == "chief" else 1])
    assert a.wait() == [75, 75], a.logs()
    saved = backups(a.where / "bk")
    assert len(saved) == 1, saved
    for r in range(2):
        assert "stopped by SIGTERM after global step" in a.log(r), a.log(r)
    assert saved[0].name in a.log(0)
    b = Run(fx, tmp_path / "run", 2, "--save-freq", "100000", epochs=12, tag="b")
    assert b.wait() == [0, 0], b.logs()
    assert f"resuming from {saved[0]}" in b.log(0), b.log(0)
    assert weights(b.where) == ref


def test_non_chief_killed_mid_epoch_others_exit_75_and_restart_resumes(fx, tmp_path):
    ref = reference(fx, tmp_path, 3, epochs=10)
    # Non-chief workers get a path they cannot even create: they never touch it.
    blocker = tmp_path / "blocker"
    blocker.write_text("")
    a = Run(fx, tmp_path / "run", 3, "--save-freq", "15", epochs=10,
            worker_backup=blocker / "bk")
    wait_for_backup(a, 60)
    time.sleep(0.03)  # mid-epoch, past the backup
    a.kill(signal.SIGKILL, ranks=[2])
    codes = a.wait()
    assert codes[:2] == [75, 75] and codes[2] == -9, a.logs()
    b = Run(fx, tmp_path / "run", 3, "--save-freq", "15", epochs=10, tag="b",
            worker_backup=blocker / "bk")
    assert b.wait() == [0, 0, 0], b.logs()
    assert "backup: resuming from" in b.log(0)
    last = json.loads((b.where / "metrics.jsonl").read_text().splitlines()[-1])
    assert last["epoch"] == 10 and last["val_accuracy"] > 0.78, last
    assert weights(b.where) == ref


@pytest.mark.parametrize("schedule", ["constant", "cosine"])
def test_sgd_momentum_nesterov_warmup_resume_exact(fx, tmp_path, schedule):
    """Killed mid-run and resumed, the run ends bitwise where one that was never
    stopped does: the optimizer's state, the warm-up, and (cosine) the decay's step."""
    opts = ("--optimizer", "sgd", "--lr", "0.05", "--momentum", "0.9", "--nesterov",
            "--warmup-steps", "300", "--lr-schedule", schedule)
    ref = reference(fx, tmp_path, 1, *opts, epochs=30)
    a = Run(fx, tmp_path / "run", 1, *opts, "--save-freq", "100", epochs=30)
    wait_for_backup(a, 200)  # inside the warm-up for slow machines, past it for fast
    a.kill(signal.SIGKILL)
    assert a.wait() == [-9], a.logs()
    b = Run(fx, tmp_path / "run", 1, *opts, "--save-freq", "100", epochs=30, tag="b")
    assert b.wait() == [0], b.logs()
    assert "backup: resuming from" in b.log(0)
    assert weights(b.where) == ref


def flip_byte(path, offset):
    data = bytearray(path.read_bytes())
    data[offset] ^= 0x40
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("damage", ["flip", "truncate"])
def test_corrupt_newest_falls_back_to_previous_with_warning(fx, tmp_path, damage):
    ref = reference(fx, tmp_path, 1, epochs=3)
    a = Run(fx, tmp_path / "run", 1, "--save-freq", "30", "--keep", "3", "--keep-backup",
            epochs=2)
    assert a.wait() == [0], a.logs()
    saved = backups(a.where / "bk")
    assert len(saved) == 3, saved
    newest, previous = saved[-1], saved[-2]
    if damage == "flip":
        flip_byte(newest, newest.stat().st_size // 2)
    else:
        os.truncate(newest, newest.stat().st_size - 1000)
    b = Run(fx, tmp_path / "run", 1, "--save-freq", "30", "--keep", "3", epochs=3, tag="b")
    assert b.wait() == [0], b.logs()
    log = b.log(0)
    assert "warn" in log and f"skipping {newest}" in log, log
    assert f"resuming from {previous}" in log, log
    assert weights(b.where) == ref


def test_all_corrupt_is_a_fresh_start_with_warning(fx, tmp_path):
    ref = reference(fx, tmp_path, 1, epochs=3)
    a = Run(fx, tmp_path / "run", 1, "--save-freq", "30", "--keep", "2", "--keep-backup",
            epochs=1)
    assert a.wait() == [0], a.logs()
    saved = backups(a.where / "bk")
    assert len(saved) == 2
    for s in saved:
        flip_byte(s, 200)
    b = Run(fx, tmp_path / "run", 1, "--save-freq", "30", epochs=3, tag="b")
    assert b.wait() == [0], b.logs()
    log = b.log(0)
    for s in saved:
        assert f"skipping {s}" in log
    assert "none of the 2 backups" in log and "starting fresh" in log, log
    assert "resuming from" not in log
    assert weights(b.where) == ref


def test_newer_builds_backup_exits_78_and_is_kept(fx, tmp_path):
    """A backup whose format version is a newer build's (an image rolled
    back) stops the worker with 78 naming it, before training; the file is
    left as it was (not moved aside as damage), and nothing new is written."""
    a = Run(fx, tmp_path / "run", 1, "--save-freq", "50", "--keep-backup", epochs=1)
    assert a.wait() == [0], a.logs()
    saved = backups(a.where / "bk")
    newest = saved[-1]
    with open(newest, "r+b") as f:
        f.seek(8)
        version = struct.unpack("<I", f.read(4))[0]
        f.seek(8)
        f.write(struct.pack("<I", version + 1))
    before = {p.name: p.read_bytes() for p in (a.where / "bk").iterdir()}
    b = Run(fx, tmp_path / "run", 1, "--save-freq", "50", epochs=2, tag="b")
    assert b.wait() == [78], b.logs()
    log = b.log(0)
    assert f"format version {version + 1}, written by a newer ctrain" in log, log
    assert str(a.where / "bk") in log, log
    after = {p.name: p.read_bytes() for p in (a.where / "bk").iterdir()}
    assert after == before


def test_changed_config_exits_78_with_both_hashes(fx, tmp_path):
    a = Run(fx, tmp_path / "run", 1, "--save-freq", "50", "--keep-backup", epochs=1)
    assert a.wait() == [0], a.logs()
    b = Run(fx, tmp_path / "run", 1, "--lr", "0.01", epochs=2, tag="b")
    assert b.wait() == [78], b.logs()
    log = b.log(0)
    assert "different training config" in log
    hashes = [w.strip(",);") for w in log.split() if len(w.strip(",);")) == 64]
    assert len(hashes) == 2 and hashes[0] != hashes[1], log
    c = Run(fx, tmp_path / "run", 1, "--lr", "0.01", "--backup-ignore-config", epochs=2,
            tag="c")
    assert c.wait() == [0], c.logs()
    assert "resuming anyway" in c.log(0) and "resuming from" in c.log(0)


def test_disk_full_exits_75_and_previous_backup_loads(fx, tmp_path):
    ref = reference(fx, tmp_path, 1, epochs=2)
    a = Run(fx, tmp_path / "run", 1, "--save-freq", "40", "--keep", "1", "--keep-backup",
            epochs=1)
    assert a.wait() == [0], a.logs()
    [old] = backups(a.where / "bk")
    digest = hashlib.sha256(old.read_bytes()).hexdigest()
    limit = old.stat().st_size // 2

    def small_files():
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    b = Run(fx, tmp_path / "run", 1, "--save-freq", "40", epochs=2, tag="b",
            preexec=small_files)
    assert b.wait() == [75], b.logs()
    log = b.log(0)
    assert "/bk/.backup-" in log and "File too large" in log, log
    assert "previous backup is intact" in log
    assert backups(a.where / "bk") == [old]
    assert hashlib.sha256(old.read_bytes()).hexdigest() == digest
    assert not list((a.where / "bk").glob(".*.tmp"))
    c = Run(fx, tmp_path / "run", 1, "--save-freq", "40", epochs=2, tag="c")
    assert c.wait() == [0], c.logs()
    assert f"resuming from {old}" in c.log(0)
    assert weights(c.where) == ref


def test_unusable_backup_dir_exits_75_before_training(fx, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    env = dict(os.environ)
    env.pop("TF_CONFIG", None)
    d = fx["dir"]
    p = subprocess.run([str(WORKER), "train", "--model", str(d / "model.json"), "--data",
                        str(d / "train.raw"), "--format", "raw", "--backup-dir",
                        str(blocker / "bk")], env=env, capture_output=True, text=True,
                       timeout=60)
    assert p.returncode == 75, p.stderr
    assert str(blocker / "bk") in p.stderr and "Epoch 1/" not in p.stderr, p.stderr


@pytest.mark.parametrize("world", [1, 2])
def test_sigkill_with_two_replicas_resumes_bitwise_identical(fx, tmp_path, world):
    """R = 2 (cpu:2, Dropout on every replica), 1 or 2 workers: killed right
    after a mid-epoch backup, resumed, it ends bitwise equal to the unbroken
    run of the same layout."""
    ref = reference(fx, tmp_path, world, "--device", "cpu:2", epochs=12)
    a = Run(fx, tmp_path / "run", world, "--device", "cpu:2", "--save-freq", "25", epochs=12)
    wait_for_backup(a, 100 // world)
    a.kill(signal.SIGKILL)
    assert a.wait() == [-9] * world, a.logs()
    saved = backups(a.where / "bk")
    assert saved, "the killed run left no backup"
    b = Run(fx, tmp_path / "run", world, "--device", "cpu:2", "--save-freq", "25", epochs=12,
            tag="b")
    assert b.wait() == [0] * world, b.logs()
    assert "backup: resuming from" in b.log(0), b.log(0)
    assert f"replicas in sync: {2 * world} (workers {world} x replicas 2" in b.log(0)
    assert weights(b.where) == ref, "resumed cpu:2 run differs from the unbroken one"


def test_other_replica_layout_exits_78_saying_why(fx, tmp_path):
    """The layout is in the backup. Same global batch, other replicas, with
    Dropout (masks per replica): exit 78 naming the layouts and the way out.
    Other worker count: exit 78 (the data shards differ)."""
    a = Run(fx, tmp_path / "run", 1, "--device", "cpu:2", "--save-freq", "30",
            "--keep-backup", epochs=1)
    assert a.wait() == [0], a.logs()
    b = Run(fx, tmp_path / "run", 1, "--device", "cpu:1", "--batch", "64", epochs=2, tag="b")
    assert b.wait() == [78], b.logs()
    assert "written with 2 replica(s) per worker, this run has 1" in b.log(0), b.log(0)
    assert "Dropout" in b.log(0) and "--device cpu:2" in b.log(0), b.log(0)
    c = Run(fx, tmp_path / "run", 2, "--device", "cpu:1", epochs=2, tag="c")
    assert c.wait() == [78, 78], c.logs()
    assert "written by 1 worker(s) x 2 replica(s), this run has 2 x 1" in c.log(0), c.log(0)


def test_other_replica_layout_without_dropout_resumes_at_the_same_sample(fx, tmp_path):
    """Without Dropout a backup of cpu:2 x batch 32 resumes as cpu:1 x batch
    64 (same worker, same global batch, same order) and ends within 1e-5 of
    the unbroken cpu:2 run."""
    plain = dict(MODEL_JSON, layers=[l for l in MODEL_JSON["layers"] if l["type"] != "Dropout"])
    model = tmp_path / "plain.json"
    model.write_text(json.dumps(plain))
    fx2 = {"dir": fx["dir"], "refs": {}}
    ref_run = Run(fx2, tmp_path / "ref", 1, "--model", str(model), "--device", "cpu:2",
                  epochs=4, backup=False)
    assert ref_run.wait() == [0], ref_run.logs()
    a = Run(fx2, tmp_path / "run", 1, "--model", str(model), "--device", "cpu:2",
            "--save-freq", "40", "--keep-backup", epochs=2)
    assert a.wait() == [0], a.logs()
    b = Run(fx2, tmp_path / "run", 1, "--model", str(model), "--device", "cpu:1", "--batch",
            "64", "--save-freq", "40", epochs=4, tag="b")
    assert b.wait() == [0], b.logs()
    assert "resuming at the same sample" in b.log(0), b.log(0)
    ra, rb = params_of(ref_run.where), params_of(b.where)
    scale = max(abs(x) for x in ra)
    worst = max(abs(x - y) for x, y in zip(ra, rb))
    assert len(ra) == len(rb) and worst <= 1e-5 * scale, (worst, scale)


def params_of(where):
    raw = weights(where)
    (hl,) = struct.unpack("<Q", raw[:8])
    data = raw[8 + hl:]
    return struct.unpack(f"<{len(data) // 4}f", data)
