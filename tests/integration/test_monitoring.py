"""manifests/components/monitoring: with the install it renders a ServiceMonitor that
selects the controller's metrics Service by its port, and a Grafana dashboard whose every
query names metrics the controller serves (the names in controller/metrics.c and
controller/outcomes.c) and nothing else. Needs no cluster."""
import json
import re
import shutil
import subprocess

import yaml

from conftest import ROOT
from test_chart import kubectl  # noqa: F401 (a fixture)

COMPONENT = ROOT / "manifests/components/monitoring"


def served_metrics():
    names = set()
    for f in ("controller/metrics.c", "controller/outcomes.c"):
        names |= set(re.findall(r'(?:"|# (?:HELP|TYPE) )(ctrain_[a-z_]+)', (ROOT / f).read_text()))
    return {re.sub(r"_(bucket|sum|count)$", "", n) for n in names}


def render(kubectl, tmp_path):  # noqa: F811
    shutil.copytree(ROOT / "manifests", tmp_path / "manifests")
    (tmp_path / "kustomization.yaml").write_text(
        "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n"
        "resources:\n- manifests\ncomponents:\n- manifests/components/monitoring\n")
    out = subprocess.run([kubectl, "kustomize", str(tmp_path)], capture_output=True, text=True,
                         check=True).stdout
    return [d for d in yaml.safe_load_all(out) if d]


def test_service_monitor_selects_the_metrics_service(kubectl, tmp_path):  # noqa: F811
    docs = render(kubectl, tmp_path)
    (sm,) = [d for d in docs if d["kind"] == "ServiceMonitor"]
    (svc,) = [d for d in docs if d["kind"] == "Service"
              and d["metadata"]["name"] == "ctrain-controller-metrics"]
    labels = svc["metadata"]["labels"]
    assert all(labels.get(k) == v for k, v in sm["spec"]["selector"]["matchLabels"].items())
    assert sm["metadata"]["namespace"] in sm["spec"]["namespaceSelector"]["matchNames"]
    ports = {p["name"] for p in svc["spec"]["ports"]}
    assert all(e["port"] in ports for e in sm["spec"]["endpoints"])
    (cm,) = [d for d in docs if d["kind"] == "ConfigMap"]
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert json.loads(cm["data"]["ctrain-dashboard.json"])["uid"] == "ctrain-controller"


def test_dashboard_queries_name_served_metrics():
    d = json.loads((COMPONENT / "ctrain-dashboard.json").read_text())
    served = served_metrics()
    assert {"ctrain_jobs_created_total", "ctrain_jobs_failed_total", "ctrain_leader"} <= served
    exprs = [t["expr"] for p in d["panels"] for t in p["targets"]]
    exprs.append(d["templating"]["list"][1]["definition"])
    used = set()
    for e in exprs:
        used |= {re.sub(r"_(bucket|sum|count)$", "", n) for n in re.findall(r"ctrain_[a-z_]+", e)}
    assert used and not used - served, used - served
    # The outcome counters, by namespace, are on the dashboard.
    assert {f"ctrain_jobs_{o}_total" for o in ("created", "successful", "failed",
                                               "restarted")} <= used
    ids = [p["id"] for p in d["panels"]]
    assert len(ids) == len(set(ids))
