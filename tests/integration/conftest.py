"""Fixtures shared by integration test modules (the cluster's are in tests/conftest.py):
the checkpoint tests' data set, kubectl for rendering, and the C programs that the kube
client and S3 client tests drive."""
import json
import os
import shutil
import subprocess

import pytest

from ckptlib import MODEL_JSON, write_raw
from clusterlib import BUILD, ROOT, local_kubectl
from kubechecklib import CHECK


@pytest.fixture(scope="session")
def fx(tmp_path_factory):
    """The BackupAndRestore tests' data (ckptlib): 4000 train and 1000 test samples of
    Fashion-MNIST as raw records and the Dropout model; "refs" caches the reference runs'
    weights (ckptlib.reference)."""
    d = tmp_path_factory.mktemp("ckpt-data")
    write_raw("train", 4000, d / "train.raw")
    write_raw("t10k", 1000, d / "test.raw")
    (d / "model.json").write_text(json.dumps(MODEL_JSON))
    return {"dir": d, "refs": {}}


@pytest.fixture(scope="module")
def kubectl():
    """A kubectl for `kubectl kustomize`: the PATH's, else the local cluster's build."""
    return shutil.which("kubectl") or str(local_kubectl())


@pytest.fixture(scope="module")
def kubeclient_check():
    """build/tests/integration/kubeclient_check (kubechecklib)."""
    if not CHECK.exists():
        pytest.fail(f"{CHECK} is not built: run `ninja -C {BUILD}` first")
    return CHECK


@pytest.fixture(scope="module")
def s3_check(tmp_path_factory):
    """build/tests/integration/s3_check when CMake builds it, else the same
    source linked here against the build tree's libraries."""
    built = BUILD / "tests/integration/s3_check"
    if built.exists():
        return built
    libs = [BUILD / "worker/libctrain_worker.a", BUILD / "common/libctrain_common.a"]
    for lib in libs:
        if not lib.exists():
            pytest.fail(f"{lib} is not built: run `ninja -C {BUILD}` first")
    out = tmp_path_factory.mktemp("s3bin") / "s3_check"
    cc = os.environ.get("CC", "cc")
    # A Sanitize build tree (build-asan) links its sanitizers into the program.
    cache = BUILD / "CMakeCache.txt"
    san = ["-fsanitize=address,undefined"] if cache.exists() and \
        "CMAKE_BUILD_TYPE:STRING=Sanitize" in cache.read_text() else []
    subprocess.run([cc, *san, "-std=c17", "-D_GNU_SOURCE", "-Wall", "-Wextra", "-Werror", f"-I{ROOT}",
                    f"-I{ROOT / 'include'}", str(ROOT / "tests/integration/s3_check.c"),
                    *map(str, libs), "-lcurl", "-lcrypto", "-lpthread", "-lm", "-o", str(out)],
                   check=True, timeout=300)
    return out
