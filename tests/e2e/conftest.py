"""Fixtures shared by the whole-system test modules (the session's cluster, nodes and
controller Deployment are in tests/conftest.py)."""
import shutil

import pytest

from e2e_lib import claim_dir, host_ip
from s3lib import new_server


@pytest.fixture
def ns(cluster, namespace):
    """The test's namespace for the example job; afterwards its hostPath PV
    (e2e_lib.apply_example) and the claim's directory are removed too."""
    yield namespace
    cluster.kubectl("delete", "pv", f"e2e-{namespace}", "--wait=false", check=False)
    shutil.rmtree(claim_dir(namespace), ignore_errors=True)


@pytest.fixture
def s3(cluster):
    """A versitygw of the test's own on the node's host address, where pods reach it
    (tests/integration/s3lib.py); stopped afterwards, and nothing of it left running."""
    s = new_server(host=host_ip(cluster))
    try:
        yield s
    finally:
        s.stop()
        assert not (s.dir / "versitygw.pid").exists(), "versitygw left running"
