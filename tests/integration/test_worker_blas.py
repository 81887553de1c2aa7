"""The worker's GEMMs run OpenBLAS kernels for the widest vectors this CPU runs
(docs/worker.md, "CPU threads"): where OpenBLAS took the CPU for an older one
the worker starts itself again with OPENBLAS_CORETYPE, and a pod's own
OPENBLAS_CORETYPE wins. The CPU's vectors come from /proc/cpuinfo here, not
from the worker's own probe."""
import os
import re
import subprocess

from workerlib import DATA, WORKER

# OpenBLAS's x86 core names by the widest vectors their kernels use.
CORE_LEVEL = {"SkylakeX": 3, "Cooperlake": 3, "SapphireRapids": 3, "Haswell": 2, "Zen": 2,
              "Excavator": 2, "Sandybridge": 1, "Bulldozer": 1, "Piledriver": 1,
              "Steamroller": 1}


def cpu_level():
    flags = set()
    for line in open("/proc/cpuinfo"):
        if line.startswith("flags"):
            flags = set(line.split(":", 1)[1].split())
            break
    if {"avx512f", "avx512bw", "avx512dq", "avx512vl"} <= flags:
        return 3
    if {"avx2", "fma"} <= flags:
        return 2
    return 1 if "avx" in flags else 0


def run_worker(**env_over):
    """A worker that stops at once (no such model: exit 78), after its start."""
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_CORETYPE"}
    env.update(env_over)
    p = subprocess.run([str(WORKER), "evaluate", "--model", "/nonexistent-model",
                        "--test-data", str(DATA / "t10k")],
                       capture_output=True, text=True, timeout=60, env=env)
    assert p.returncode == 78 and "/nonexistent-model" in p.stderr, p.stderr
    return p.stderr


def test_worker_runs_the_cpus_widest_kernels():
    err = run_worker()
    cores = re.findall(r"OpenBLAS: (\S+) kernels", err)
    assert len(cores) == 1, err
    level = cpu_level()
    if level >= 1:
        assert CORE_LEVEL.get(cores[0], 0) >= level, (cores[0], level, err)
    restarted = re.search(r"OpenBLAS took this CPU for (\S+), .*OPENBLAS_CORETYPE=(\S+)", err)
    if restarted:  # the second start says what it was given
        assert f"(OPENBLAS_CORETYPE={restarted.group(2)})" in err, err
        assert CORE_LEVEL.get(restarted.group(1), 0) < level, err


def test_pods_own_coretype_wins():
    err = run_worker(OPENBLAS_CORETYPE="Prescott")
    assert "OpenBLAS: Prescott kernels (OPENBLAS_CORETYPE=Prescott)" in err, err
    assert "starting again" not in err, err
