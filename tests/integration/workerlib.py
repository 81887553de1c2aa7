"""Helpers of the worker's integration tests: where the built worker, the data set and the
example model are, free loopback ports, a hand-written TF_CONFIG, and a `ctrain-worker
train` process of a local job with its log."""
import json
import os
import pathlib
import socket
import subprocess

from clusterlib import BUILD, ROOT

WORKER = BUILD / "worker" / "ctrain-worker"
DATA = pathlib.Path("/usr/share/datasets/fashion-mnist")
MODEL = ROOT / "examples" / "fashion-mnist-model.json"


def free_ports(n):
    socks, ports = [], []
    for _ in range(n):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        socks.append(s)
        ports.append(s.getsockname()[1])
    for s in socks:
        s.close()
    return ports


def tf_config(ports, task_type, index, chief=True):
    addrs = [f"127.0.0.1:{p}" for p in ports]
    cluster = {"chief": addrs[:1], "worker": addrs[1:]} if chief else {"worker": addrs}
    return json.dumps({"cluster": cluster, "task": {"type": task_type, "index": index}})


def start(tmp_path, ports, rank, *extra, token="tok-123", chief=True, epochs=1, model=MODEL):
    if chief:
        ttype, index = ("chief", 0) if rank == 0 else ("worker", rank - 1)
    else:
        ttype, index = "worker", rank
    env = dict(os.environ, TF_CONFIG=tf_config(ports, ttype, index, chief),
               CTRAIN_JOB_TOKEN=token, CTRAIN_JOB_NAME="itest", CTRAIN_ATTEMPT="0")
    args = [str(WORKER), "train", "--model", str(model), "--data", str(DATA / "train"),
            "--test-data", str(DATA / "t10k"), "--epochs", str(epochs), "--batch", "32",
            "--output", str(tmp_path / "out"), "--metrics", str(tmp_path / f"m{rank}.jsonl"),
            "--rendezvous-timeout", "30", "--peer-timeout", "3", *extra]
    log = open(tmp_path / f"rank{rank}.log", "w")
    return subprocess.Popen(args, env=env, stdout=log, stderr=subprocess.STDOUT)


def log_of(tmp_path, rank):
    return (tmp_path / f"rank{rank}.log").read_text()
