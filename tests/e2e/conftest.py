"""Fixtures shared by the whole-system test modules (the session's cluster, nodes and
controller Deployment are in tests/conftest.py)."""
import shutil

import pytest

from e2e_lib import claim_dir


@pytest.fixture
def ns(cluster, namespace):
    """The test's namespace for the example job; afterwards its hostPath PV
    (e2e_lib.apply_example) and the claim's directory are removed too."""
    yield namespace
    cluster.kubectl("delete", "pv", f"e2e-{namespace}", "--wait=false", check=False)
    shutil.rmtree(claim_dir(namespace), ignore_errors=True)
