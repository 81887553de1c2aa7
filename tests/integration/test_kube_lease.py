"""Leader election on a coordination.k8s.io/v1 Lease with the C elector,
against a real kube-apiserver: acquire, renew, no takeover while the lease
is valid, handover within the lease duration after the leader is killed,
and immediate handover after a clean release."""
import json
import signal
import subprocess
import time

from kubechecklib import Session

DUR = 6  # lease duration (s); renew deadline 4 s, retry period 1 s


class Candidate(Session):
    def __init__(self, cluster, check, ns, ident):
        self.ident = ident
        self.p = subprocess.Popen([str(check), "lease", ns, ident, str(DUR)], env=cluster.env,
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True, bufsize=1)
        import queue
        import threading
        self.lines = queue.Queue()
        self.seen = []
        threading.Thread(target=self._pump, daemon=True).start()

    def at(self, pattern, timeout=30):
        line = self.expect(pattern + r" t=[\d.]+", timeout)
        return float(line.rsplit("t=", 1)[1])


def lease(cluster, ns):
    return json.loads(cluster.kubectl("get", "lease", "-n", ns, "ctrain-it-leader", "-o",
                                      "json").stdout)["spec"]


def test_leader_election_handover(cluster, kubeclient_check, namespace):
    ns = namespace
    a = Candidate(cluster, kubeclient_check, ns, "cand-a")
    b = c = None
    try:
        a.at("leading cand-a")
        s1 = lease(cluster, ns)
        assert s1["holderIdentity"] == "cand-a" and s1["leaseDurationSeconds"] == DUR
        time.sleep(2.5)
        s2 = lease(cluster, ns)
        assert s2["holderIdentity"] == "cand-a"
        assert s2["renewTime"] != s1["renewTime"], "leader did not renew"

        b = Candidate(cluster, kubeclient_check, ns, "cand-b")
        b.at("new_leader cand-a")
        time.sleep(DUR + 1)  # a renews: b must not take over a valid lease
        assert lease(cluster, ns)["holderIdentity"] == "cand-a"

        killed = time.monotonic()
        a.p.send_signal(signal.SIGKILL)
        a.p.wait()
        took = b.at("leading cand-b", timeout=DUR * 3)
        handover = took - killed
        print(f"handover after SIGKILL of the leader: {handover:.2f} s (lease {DUR} s)")
        assert DUR - 2.5 < handover < DUR + 2.5, handover
        s3 = lease(cluster, ns)
        assert s3["holderIdentity"] == "cand-b"
        assert s3["leaseTransitions"] >= 1

        c = Candidate(cluster, kubeclient_check, ns, "cand-c")
        c.at("new_leader cand-b")
        b.send("quit")
        b.at("stopped cand-b")
        released = b.at("released cand-b")
        took = c.at("leading cand-c", timeout=DUR * 2)
        print(f"handover after release: {took - released:.2f} s")
        assert took - released < 2.5, took - released  # no waiting out the lease
        assert lease(cluster, ns)["holderIdentity"] == "cand-c"
        c.send("quit")
        c.expect("PASS")
        s4 = lease(cluster, ns)
        assert not s4.get("holderIdentity"), s4  # released on clean shutdown
    finally:
        for x in (a, b, c):
            if x and x.p.poll() is None:
                x.p.kill()
                x.p.wait()
