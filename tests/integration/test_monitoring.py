"""manifests/components/monitoring: with the install it renders a ServiceMonitor that
selects the controller's metrics Service by its port, and a Grafana dashboard whose every
query names metrics the controller serves (the names in controller/metrics.c,
controller/outcomes.c and controller/jobmetrics.c) and nothing else; its
prometheus-scrape.yaml, the scrape job for a plain Prometheus, selects what the
ServiceMonitor selects. These need no cluster. test_per_job_series_follow_the_job runs the
controller against a real kube-apiserver (the local control plane): a running job's
per-job series on the leader's /metrics, gone with the job."""
import json
import re
import shutil
import subprocess

import yaml

from clusterlib import ROOT
from ctllib import FakeChief, cond, create, gone, job, pods, tj, wait_for

COMPONENT = ROOT / "manifests/components/monitoring"


def served_metrics():
    names = set()
    for f in ("controller/metrics.c", "controller/outcomes.c", "controller/jobmetrics.c"):
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
    exprs = [t["expr"] for p in d["panels"] for t in p.get("targets", [])]
    variables = {v["name"]: v for v in d["templating"]["list"]}
    exprs += [v["definition"] for v in variables.values() if v["type"] == "query"]
    used = set()
    for e in exprs:
        used |= {re.sub(r"_(bucket|sum|count)$", "", n) for n in re.findall(r"ctrain_[a-z_]+", e)}
    assert used and not used - served, used - served
    # The outcome counters, by namespace, are on the dashboard.
    assert {f"ctrain_jobs_{o}_total" for o in ("created", "successful", "failed",
                                               "restarted")} <= used
    # Per job: its numbers, phase, restarts and disruptions, and a job picker
    # over the label the series carry (job_name: `job` is the scrape job's).
    assert {"ctrain_job_loss", "ctrain_job_accuracy", "ctrain_job_val_accuracy",
            "ctrain_job_samples_per_second", "ctrain_job_epoch", "ctrain_job_phase",
            "ctrain_job_restarts_total", "ctrain_job_disruptions_total",
            "ctrain_job_metrics_dropped"} <= used
    assert re.fullmatch(r"label_values\(ctrain_job_\w+\{[^}]*\}, job_name\)",
                        variables["job"]["definition"]), variables["job"]
    assert all('job_name=~"$job"' in e for e in exprs
               if re.search(r"ctrain_job_(?!metrics)", e) and "label_values" not in e)
    ids = [p["id"] for p in d["panels"]]
    assert len(ids) == len(set(ids))
    # Panels do not overlap on Grafana's 24-column grid.
    cells = set()
    for p in d["panels"]:
        g = p["gridPos"]
        mine = {(x, y) for x in range(g["x"], g["x"] + g["w"])
                for y in range(g["y"], g["y"] + g["h"])}
        assert g["x"] + g["w"] <= 24 and not mine & cells, p["title"]
        cells |= mine


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


# ---- per-job series on the leader's /metrics ------------------------------------------

def series(text, ns, name):
    """{metric name (with the phase label, if any): value} of job ns/name on a /metrics
    page, its labels checked: namespace, job_name, kind, and phase for ctrain_job_phase."""
    out = {}
    for m in re.finditer(r'^(ctrain_job_[a-z_]+)\{namespace="([^"]*)",job_name="([^"]*)",'
                         r'kind="([^"]*)"(?:,phase="([A-Za-z]+)")?\} (\S+)$', text, re.M):
        metric, mns, mname, kind, phase, value = m.groups()
        if (mns, mname) == (ns, name):
            assert kind == "TrainingJob", m.group(0)
            out[metric + (f"/{phase}" if phase else "")] = float(value)
    return out


def test_per_job_series_follow_the_job(crd, namespace, start_controller):
    ns = namespace
    chief = FakeChief()
    chief.answer = ({"state": "Training", "rank": 0, "epoch": 2, "epochs": 3, "step": 19,
                   "steps_per_epoch": 1875, "global_step": 3769, "replicas_in_sync": 1,
                   "workers": 1, "samples_per_sec": 16500.5, "loss": 0.4123,
                   "accuracy": 0.61, "val_loss": 0.5, "val_accuracy": 0.58,
                   "slowest_rank": -1})
    try:
        ctl = start_controller("--progress-interval=1", "--metrics-max-jobs=5")
        create(crd, ns, job("pj", workers=1, progressPort=chief.port))
        create(crd, ns, job("idle", workers=1))
        wait_for(lambda: len(pods(crd, ns, "pj")) == 1, what="the pod")
        crd.kubectl("patch", "pod", "pj-worker-0", "-n", ns, "--subresource=status",
                    "--type=merge", "-p", json.dumps({"status": {
                        "phase": "Running", "podIP": "127.0.0.1",
                        "podIPs": [{"ip": "127.0.0.1"}]}}))
        wait_for(lambda: cond(tj(crd, ns, "pj"), "Running"), what="Running")
        s = wait_for(lambda: (lambda s: s.get("ctrain_job_epoch") == 2 and s)(
            series(ctl.metrics(), ns, "pj")), what="pj's series")
        assert s == {
            "ctrain_job_epoch": 2, "ctrain_job_global_step": 3769, "ctrain_job_loss": 0.4123,
            "ctrain_job_accuracy": 0.61, "ctrain_job_val_accuracy": 0.58,
            "ctrain_job_samples_per_second": 16500.5, "ctrain_job_restarts_total": 0,
            "ctrain_job_disruptions_total": 0, "ctrain_job_phase/Pending": 0,
            "ctrain_job_phase/Created": 0, "ctrain_job_phase/Running": 1,
            "ctrain_job_phase/Restarting": 0, "ctrain_job_phase/Suspended": 0,
            "ctrain_job_phase/Succeeded": 0, "ctrain_job_phase/Failed": 0}, s
        # What the status says, the series say.
        p = tj(crd, ns, "pj")["status"]["progress"]
        assert (p["epoch"], p["loss"], p["samplesPerSec"]) == (2, 0.4123, 16500.5), p
        # A job with no progress yet: its phase and counts, no training numbers.
        idle = series(ctl.metrics(), ns, "idle")
        assert idle["ctrain_job_restarts_total"] == 0 and "ctrain_job_epoch" not in idle, idle
        assert sum(v for k, v in idle.items() if k.startswith("ctrain_job_phase/")) == 1, idle
        text = ctl.metrics()
        assert "# TYPE ctrain_job_phase gauge" in text
        assert "# TYPE ctrain_job_restarts_total counter" in text
        # The controller is shared: other tests' jobs count towards its cap too.
        assert re.search(r'^ctrain_job_metrics_dropped\{reason="max_jobs"\} \d+$', text, re.M)
        # The chief's numbers move: so do the series.
        chief.answer = dict(chief.answer, epoch=3, loss=0.35)
        wait_for(lambda: series(ctl.metrics(), ns, "pj").get("ctrain_job_loss") == 0.35,
                 what="the new loss")
        # Deleted: its series go, the other job's stay.
        crd.kubectl("delete", "tj", "pj", "-n", ns, "--wait=false")
        wait_for(lambda: not series(ctl.metrics(), ns, "pj"), what="pj's series gone")
        assert series(ctl.metrics(), ns, "idle")
        # Still gone after the passes its pods' deletion brings (no late pass revives it).
        wait_for(lambda: gone(crd, ns, "pj"), timeout=60, what="pj's pods gone")
        assert not series(ctl.metrics(), ns, "pj")
    finally:
        chief.close()
