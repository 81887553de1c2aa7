"""List and watch throughput and memory of the C client against kubectl, on
the same pods in the same run (a bench, as a test that prints the
ratios). Opt-in: CTRAIN_KUBE_BENCH_PODS=<n> (e.g. 2000; 10000 takes ~6 min
to create on a 2-core machine)."""
import os
import subprocess

import pytest

from kubechecklib import assert_pass, run_check

N = int(os.environ.get("CTRAIN_KUBE_BENCH_PODS", "0"))


def child_maxrss_kb(cmd, env, until_line=None):
    """Runs cmd in a fresh python (so RUSAGE_CHILDREN is its alone); returns
    (seconds, maxrss_kb)."""
    code = f"""
import subprocess, time, resource, sys
t = time.monotonic()
p = subprocess.Popen({cmd!r}, stdout=subprocess.PIPE, text=True)
for line in p.stdout:
    if {until_line!r} is not None and line.rstrip() == {until_line!r}:
        break
dt = time.monotonic() - t
p.kill(); p.wait()
print(dt, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
"""
    out = subprocess.run(["python3", "-c", code], env=env, capture_output=True, text=True,
                         check=True, timeout=600).stdout.split()
    return float(out[0]), int(out[1])


@pytest.mark.skipif(N <= 0, reason="set CTRAIN_KUBE_BENCH_PODS=<n> to run the kube client bench")
def test_list_watch_vs_kubectl(cluster, kubeclient_check, namespace):
    p, _ = run_check(cluster, kubeclient_check, "mkpods", namespace, N, timeout=3600)
    assert_pass(p)
    p, c_list = run_check(cluster, kubeclient_check, "listbench", namespace, N)
    assert_pass(p)
    p, c_watch = run_check(cluster, kubeclient_check, "watchbench", namespace, N)
    assert_pass(p)
    k_list_s, k_list_rss = child_maxrss_kb(
        [cluster.kubectl_bin, "get", "pods", "-n", namespace, "-o", "json"], cluster.env)
    k_watch_s, k_watch_rss = child_maxrss_kb(
        [cluster.kubectl_bin, "get", "pods", "-n", namespace, "--watch", "-o", "json"],
        cluster.env, until_line="}")
    cl, cw = float(c_list["list_s"]), float(c_watch["watch_s"])
    print(f"\n{N} pods  list: C {cl:.2f} s {int(c_list['maxrss_kb']) // 1024} MiB | kubectl "
          f"{k_list_s:.2f} s {k_list_rss // 1024} MiB | speed x{k_list_s / cl:.1f}")
    print(f"{N} pods watch: C {cw:.2f} s {int(c_watch['maxrss_kb']) // 1024} MiB | kubectl "
          f"{k_watch_s:.2f} s {k_watch_rss // 1024} MiB | speed x{k_watch_s / cw:.1f}")
    assert cl < k_list_s and cw < k_watch_s
    assert int(c_list["maxrss_kb"]) < k_list_rss
