"""The demo tells a short story: tools/lib/steps.sh prints one line per step with
its time, keeps the steps' own output in a log and, when a step fails, names it with its exit
status and the log's last lines; tools/demo.sh's arguments. Needs no cluster.

The whole demo runs only when asked, alone on the machine (it starts its own control plane and
a real node, as root; a first run builds Kubernetes):

    CTRAIN_TEST_DEMO=1 python3 -m pytest tests/integration/test_demo.py -k whole

and asserts what a newcomer sees on a warm run: at most 40 lines (one screen), no `error:` line, the test
accuracy, and an ACCURACY column of at most 4 decimals."""
import os
import re
import subprocess

import pytest

from clusterlib import ROOT

STEPS = ROOT / "tools/lib/steps.sh"
DEMO = ROOT / "tools/demo.sh"


def story(tmp_path, body, verbose=0):
    """Runs `body` after `steps_begin t 3 LOG VERBOSE` in bash -euo pipefail."""
    log = tmp_path / "logs" / "t.log"
    script = f"""set -euo pipefail
. {STEPS}
steps_begin t 3 {log} {verbose}
noisy() {{ for i in $(seq 1 "$1"); do echo "noise $i"; echo "err $i" >&2; done; }}
{body}
"""
    p = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=60)
    return p, log


def test_one_line_per_step_and_the_noise_in_the_log(tmp_path):
    p, log = story(tmp_path, """
step "the first" noisy 50
found() { echo 42 >"$1"; }
step "the second" found "$(dirname "$STEPS_LOG")/found"
steps_note "found $(cat "$(dirname "$STEPS_LOG")/found")"
step "the third" true
""")
    assert p.returncode == 0, p.stderr
    assert p.stdout.splitlines() == [
        "[1/3] the first ... done in 0 s", "[2/3] the second ... done in 0 s", "      found 42",
        "[3/3] the third ... done in 0 s"], p.stdout
    assert p.stderr == ""
    text = log.read_text()
    assert "noise 50" in text and "err 50" in text and "[3/3] done in 0 s" in text, text


def test_a_failed_step_says_which_its_status_and_the_log_tail(tmp_path):
    p, log = story(tmp_path, """
step "the first" true
broken() { noisy 100; echo "the cause" >&2; return 3; }
halfway() { broken; echo "went on past the failure"; }
step "the second, which fails" halfway
echo "the script went on"
""")
    assert p.returncode == 3, (p.stdout, p.stderr)
    assert p.stdout.splitlines() == [
        "[1/3] the first ... done in 0 s",
        "[2/3] the second, which fails ... FAILED (exit 3) after 0 s"], p.stdout
    assert "t: step 2/3 failed: the second, which fails (exit status 3)" in p.stderr
    tail = [line for line in p.stderr.splitlines() if line.startswith("  | ")]
    assert len(tail) == 30, p.stderr
    assert "  | the cause" in tail and "  | err 100" in tail and "  | noise 80" not in tail
    assert f"the whole log: {log}" in p.stderr
    # `set -e` holds inside the step: the function stopped at its first failure.
    assert "went on" not in log.read_text() and "went on" not in p.stdout + p.stderr


def test_verbose_streams_the_output(tmp_path):
    p, log = story(tmp_path, 'step "the first" noisy 3', verbose=1)
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    assert lines[0] == "[1/3] the first" and lines[-1] == "[1/3] done in 0 s", lines
    assert "noise 3" in lines and "err 3" in lines, lines
    assert "noise 3" in log.read_text()


def test_demo_arguments():
    h = subprocess.run(["bash", str(DEMO), "--help"], capture_output=True, text=True)
    assert h.returncode == 0 and "--verbose" in h.stdout and "demo.sh down" in h.stdout, h
    for bad in (["--bogus"], ["--nodes", "0"], ["--nodes"]):
        p = subprocess.run(["bash", str(DEMO), *bad], capture_output=True, text=True)
        assert p.returncode != 0 and p.stderr.startswith("demo:"), (bad, p)


@pytest.mark.skipif(os.environ.get("CTRAIN_TEST_DEMO") != "1",
                    reason="the whole demo runs alone and as root: CTRAIN_TEST_DEMO=1")
def test_whole_demo_is_short_and_clean():
    """Run it once before (or let this run warm the caches): a warm run's stdout is the
    story, the epochs and the result."""
    p = subprocess.run(["bash", str(DEMO)], capture_output=True, text=True, timeout=3600)
    out = p.stdout.splitlines()
    assert p.returncode == 0, (p.stdout[-4000:], p.stderr[-4000:])
    assert len(out) <= 40, p.stdout  # fits one screen; 31 lines measured, warm
    assert not [line for line in out if "error:" in line.lower()], p.stdout
    for n in range(1, 9):
        assert any(re.match(rf"\[{n}/9\] .* done in \d+ s$", line) for line in out), (n, p.stdout)
    assert any(re.search(r"test accuracy: 0\.\d{4}$", line) for line in out), p.stdout
    head = next(i for i, line in enumerate(out) if line.startswith("NAME "))
    cols = dict(zip(out[head].split(), out[head + 1].split()))
    assert cols["STATE"] == "Succeeded", out[head:head + 2]
    assert re.fullmatch(r"0(\.\d{1,4})?|1", cols["ACCURACY"]), out[head:head + 2]
    log = re.search(r"goes to (\S+\.log)$", p.stdout, re.M)
    assert log and os.path.exists(log.group(1)), p.stdout
    assert "kubectl" in open(log.group(1)).read()
