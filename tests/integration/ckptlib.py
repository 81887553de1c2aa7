"""Helpers of the BackupAndRestore tests (test_checkpoint.py, and test_s3_backup.py and
test_s3_gcs.py in object storage): small raw-record subsets of Fashion-MNIST and a model with
Dropout (the session's `fx` fixture in conftest.py writes them), real ctrain-worker runs of 1-3
processes on loopback (`Run`), their final weights, and an unbroken reference run's (cached
per session in `fx`)."""
import gzip
import os
import pathlib
import signal
import struct
import subprocess

from workerlib import DATA, WORKER, free_ports, tf_config

MODEL_JSON = {
    "name": "fmnist-dropout",
    "input_shape": [28, 28],
    "layers": [
        {"type": "Flatten"},
        {"type": "Dense", "units": 64, "activation": "relu"},
        {"type": "Dropout", "rate": 0.2},
        {"type": "Dense", "units": 10},
    ],
}
BASE = ["--batch", "32", "--seed", "7", "--rendezvous-timeout", "30", "--peer-timeout", "3"]


def write_raw(src_prefix, n, out):
    img = gzip.open(DATA / f"{src_prefix}-images-idx3-ubyte.gz").read()
    lab = gzip.open(DATA / f"{src_prefix}-labels-idx1-ubyte.gz").read()
    with open(out, "wb") as f:
        f.write(b"CTRAINR1" + struct.pack("<QII", n, 0, 2) + struct.pack("<II", 28, 28))
        for i in range(n):
            f.write(struct.pack("<i", lab[8 + i]) + img[16 + 784 * i:16 + 784 * (i + 1)])


class Run:
    """world ctrain-worker processes (world 1: no TF_CONFIG) in `where`."""

    def __init__(self, fx, where, world, *extra, epochs=3, backup=True, tag="a",
                 preexec=None, worker_backup=None):
        self.where, self.world, self.tag = pathlib.Path(where), world, tag
        self.where.mkdir(parents=True, exist_ok=True)
        d = fx["dir"]
        ports = free_ports(world)
        self.procs = []
        for r in range(world):
            env = dict(os.environ, CTRAIN_JOB_TOKEN="tok-ckpt", CTRAIN_JOB_NAME="ckpt",
                       CTRAIN_ATTEMPT="0")
            env.pop("TF_CONFIG", None)
            env.pop("CTRAIN_BACKUP_DIR", None)
            if world > 1:
                env["TF_CONFIG"] = tf_config(ports, "chief" if r == 0 else "worker",
                                             0 if r == 0 else r - 1)
            args = [str(WORKER), "train", "--model", str(d / "model.json"), "--data",
                    str(d / "train.raw"), "--test-data", str(d / "test.raw"), "--format", "raw",
                    "--epochs", str(epochs), "--output", str(self.where / "out"),
                    "--metrics", str(self.where / "metrics.jsonl"), *BASE, *extra]
            if backup:
                # worker_backup: what non-chief workers are given (only the
                # chief may need the storage).
                bk = self.where / "bk" if r == 0 or worker_backup is None else worker_backup
                args += ["--backup-dir", str(bk)]
            log = open(self.log_path(r), "w")
            self.procs.append(subprocess.Popen(args, env=env, stdout=log,
                                               stderr=subprocess.STDOUT, preexec_fn=preexec))
            log.close()

    def log_path(self, r):
        return self.where / f"{self.tag}-rank{r}.log"

    def log(self, r=0):
        return self.log_path(r).read_text()

    def logs(self):
        return "\n".join(f"--- rank {r}\n{self.log(r)}" for r in range(self.world))

    def wait(self, timeout=90):
        return [p.wait(timeout=timeout) for p in self.procs]

    def kill(self, sig=signal.SIGKILL, ranks=None):
        for r in ranks if ranks is not None else range(self.world):
            self.procs[r].send_signal(sig)


def weights(where):
    return (pathlib.Path(where) / "out" / "model.safetensors").read_bytes()


def reference(fx, tmp_path, world, *extra, epochs=3):
    """Final weights of an unbroken run without backups (cached per session)."""
    key = (world, epochs, extra)
    if key not in fx["refs"]:
        run = Run(fx, tmp_path / f"ref-{world}-{epochs}", world, *extra, epochs=epochs,
                  backup=False)
        assert run.wait() == [0] * world, run.logs()
        fx["refs"][key] = weights(run.where)
    return fx["refs"][key]
