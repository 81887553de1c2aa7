"""Pod Security: in a namespace that enforces `restricted:latest`, the
apiserver's PodSecurity admission admits the pods the controller builds
from a template that sets no securityContext (controller/podsec.h), and a
template that asks for root keeps its choice (the pod is then refused
there, as the namespace's policy says)."""
import json

from ctllib import create, job, pods, wait_for


def restricted(cluster, ns):
    cluster.kubectl("label", "namespace", ns, "--overwrite",
                    "pod-security.kubernetes.io/enforce=restricted",
                    "pod-security.kubernetes.io/enforce-version=latest")


def test_pods_pass_restricted(crd, namespace, start_controller):
    restricted(crd, namespace)
    start_controller()
    spec = job("psa", workers=2, chief=True,
               checkpoint={"mountPath": "/ckpt", "volume": {"emptyDir": {}}})
    create(crd, namespace, spec)
    ps = wait_for(lambda: len(pods(crd, namespace, "psa")) == 3 and pods(crd, namespace, "psa"),
                  timeout=60, what="3 pods admitted under restricted")
    for p in ps.values():
        sc = p["spec"]["securityContext"]
        assert sc["runAsNonRoot"] is True, sc
        assert sc["seccompProfile"] == {"type": "RuntimeDefault"}, sc
        assert sc["fsGroup"] == 65532, sc
        c = p["spec"]["containers"][0]["securityContext"]
        assert c["allowPrivilegeEscalation"] is False and c["capabilities"]["drop"] == ["ALL"], c


def test_root_template_is_kept_and_refused_by_the_namespace(crd, namespace, start_controller):
    restricted(crd, namespace)
    start_controller()
    spec = job("psa-root", workers=1)
    spec["spec"]["replicaSpecs"]["Worker"]["template"]["spec"]["securityContext"] = {
        "runAsNonRoot": False}
    create(crd, namespace, spec)
    # The controller tries; PodSecurity refuses and says why in an event.
    def refused():
        evs = crd.get_json("events", "-n", namespace)["items"]
        return [e for e in evs if "PodSecurity" in e.get("message", "")]
    evs = wait_for(refused, timeout=60, what="a PodSecurity refusal in the job's events")
    assert "runAsNonRoot" in json.dumps(evs), evs
    assert not pods(crd, namespace, "psa-root")
