"""manifests/components/monitoring: with the install it renders a ServiceMonitor that
selects the controller's metrics Service by its port, and a Grafana dashboard whose every
query names metrics the controller serves (the names in controller/metrics.c and
controller/outcomes.c) and nothing else; its prometheus-scrape.yaml, the scrape job for a
plain Prometheus, selects what the ServiceMonitor selects. Needs no cluster."""
import json
import re
import shutil
import subprocess

import yaml

from clusterlib import ROOT

COMPONENT = ROOT / "manifests/components/monitoring"


def served_metrics():
    names = set()
    for f in ("controller/metrics.c", "controller/outcomes.c"):
        names |= set(re.findall(r'(?:"|# (?:HELP|TYPE) )(ctrain_[a-z_]+)', (ROOT / f).read_text()))
    return {re.sub(r"_(bucket|sum|count)$", "", n) for n in names}


def render(kubectl, tmp_path):
    shutil.copytree(ROOT / "manifests", tmp_path / "manifests")
    (tmp_path / "kustomization.yaml").write_text(
        "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n"
        "resources:\n- manifests\ncomponents:\n- manifests/components/monitoring\n")
    out = subprocess.run([kubectl, "kustomize", str(tmp_path)], capture_output=True, text=True,
                         check=True).stdout
    return [d for d in yaml.safe_load_all(out) if d]


def test_service_monitor_selects_the_metrics_service(kubectl, tmp_path):
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


def sd_labels(svc, port, ns=None, extra=None, drop=None):
    """The labels Prometheus' role `endpoints` gives the target of a Service's port
    (those the scrape job reads), for the Service as rendered, changed as asked."""
    labels = dict(svc["metadata"]["labels"], **(extra or {}))
    for k in drop or ():
        labels.pop(k)
    t = {"__address__": "10.1.2.3:8080", "__metrics_path__": "/metrics",
         "__meta_kubernetes_namespace": ns or svc["metadata"]["namespace"],
         "__meta_kubernetes_service_name": svc["metadata"]["name"],
         "__meta_kubernetes_endpoint_port_name": port,
         "__meta_kubernetes_pod_name": "ctrain-controller-5d9f8-abcde",
         "__meta_kubernetes_pod_container_name": "controller"}
    for k, v in labels.items():
        t["__meta_kubernetes_service_label_" + re.sub(r"[^a-zA-Z0-9_]", "_", k)] = v
    return t


def relabel(rules, t):
    """Prometheus' relabel_configs, the `keep` and `replace` actions (what the shipped
    job uses): the target's labels after them, or None when it is dropped."""
    t = dict(t)
    for r in rules:
        action = r.get("action", "replace")
        assert action in ("keep", "replace"), r
        value = r.get("separator", ";").join(t.get(k, "") for k in r.get("source_labels", []))
        m = re.fullmatch(r.get("regex", "(.*)"), value)
        if action == "keep":
            if not m:
                return None
        elif m:
            t[r["target_label"]] = m.expand(r.get("replacement", "$1").replace("$", "\\"))
    return t


def test_plain_prometheus_scrape_job_selects_what_the_service_monitor_does(kubectl,
                                                                          tmp_path):
    docs = render(kubectl, tmp_path)
    (sm,) = [d for d in docs if d["kind"] == "ServiceMonitor"]
    (svc,) = [d for d in docs if d["kind"] == "Service"
              and d["metadata"]["name"] == "ctrain-controller-metrics"]
    (ep,) = sm["spec"]["endpoints"]
    # Not a Kubernetes object: the component does not render it.
    assert not [d for d in docs if "scrape_configs" in d]
    (job,) = yaml.safe_load((COMPONENT / "prometheus-scrape.yaml").read_text())["scrape_configs"]
    # Same namespace, path, interval, scheme, label precedence.
    (sd,) = job["kubernetes_sd_configs"]
    assert sd["role"] == "endpoints"
    assert sd["namespaces"]["names"] == sm["spec"]["namespaceSelector"]["matchNames"]
    assert job["metrics_path"] == ep["path"]
    assert job["scrape_interval"] == ep["interval"]
    assert job.get("scheme", "http") == ep.get("scheme", "http")
    assert job.get("honor_labels", False) == ep.get("honorLabels", False) is True
    rules = job["relabel_configs"]
    # The metrics Service's port `metrics` is the one target, labelled as
    # prometheus-operator labels it (job: the Service's name).
    t = relabel(rules, sd_labels(svc, ep["port"]))
    assert t, "the shipped job drops the metrics Service"
    assert ep["port"] in {p["name"] for p in svc["spec"]["ports"]}
    assert (t["job"], t["namespace"], t["service"], t["endpoint"], t["pod"]) == (
        svc["metadata"]["name"], svc["metadata"]["namespace"], svc["metadata"]["name"],
        ep["port"], "ctrain-controller-5d9f8-abcde")
    # Same labels selected: without any one of the ServiceMonitor's matchLabels, or with
    # another value, a Service is dropped; with one more label it is kept.
    for k, v in sm["spec"]["selector"]["matchLabels"].items():
        assert relabel(rules, sd_labels(svc, ep["port"], drop=[k])) is None, k
        assert relabel(rules, sd_labels(svc, ep["port"], extra={k: v + "x"})) is None, k
    assert relabel(rules, sd_labels(svc, ep["port"], extra={"team": "a"}))
    # Same port name: another port of the Service is not scraped.
    assert relabel(rules, sd_labels(svc, "other")) is None
    assert relabel(rules, sd_labels(svc, "")) is None  # a pod port outside the Service
    # The Service keeps selecting only the leader's pod.
    assert svc["spec"]["selector"].get("ctrain.dev/leader") == "true"
    # And Prometheus reads it (promtool of the release the e2e test runs; Debian's lacks
    # the Kubernetes discovery).
    b = subprocess.run(["bash", str(ROOT / "tools/prometheus/build.sh"), "promtool"],
                       capture_output=True, text=True, timeout=3600)
    assert b.returncode == 0, b.stderr[-3000:]
    conf = tmp_path / "prometheus.yml"
    conf.write_text(yaml.safe_dump({"scrape_configs": [job]}))
    p = subprocess.run([b.stdout.strip().splitlines()[-1], "check", "config", str(conf)],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stdout + p.stderr
