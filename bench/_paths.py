"""The benches' one path setup: the test libraries (tests/clusterlib.py, tests/integration/
workerlib.py and the other *lib.py there, tests/e2e/e2e_lib.py) importable by name, as
pytest.ini's pythonpath makes them for the tests. A bench started as `python3 bench/x.py`
imports this first (`from _paths import ROOT`), then the libraries; never a test module."""
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
for _d in ("tests/e2e", "tests/integration", "tests"):  # tests/ first on sys.path, as pytest.ini
    if str(ROOT / _d) not in sys.path:
        sys.path.insert(0, str(ROOT / _d))
