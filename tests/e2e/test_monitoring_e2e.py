"""The Grafana dashboard (manifests/components/monitoring/ctrain-dashboard.json) against a
real Prometheus (tools/prometheus/build.sh) that scrapes the session's controller Deployment
through the shipped scrape job (prometheus-scrape.yaml: the metrics Service, the leader's pod
only): while a real TrainingJob trains on the nodes (the example's two ctrain-worker pods),
every query of the dashboard, its namespace and job pickers set to that job as Grafana sets
them, returns data from /api/v1/query, and the pickers' label_values list the job; once the
job is deleted its per-job series (controller/jobmetrics.c: ctrain_job_*{namespace,
job_name, kind}) are gone from the leader's /metrics and Prometheus returns none of them
(the scrape that no longer has them marks them stale), while the namespace's outcome
counters stay."""
import json
import re
import time

from e2e_lib import (JOB, ROOT, Prometheus, apply_example, cond, dump, host_only, job_json,
                     job_pods, leader_metrics)

DASHBOARD = ROOT / "manifests/components/monitoring/ctrain-dashboard.json"

# Prometheus on this host scrapes the leader's pod IP (routed from the host only here).
pytestmark = host_only()


def dashboard():
    """[(title, expr)] of every panel's target, and {variable: label_values definition}."""
    d = json.loads(DASHBOARD.read_text())
    queries = [(p["title"], t["expr"]) for p in d["panels"] for t in p.get("targets", [])]
    pickers = {v["name"]: v["definition"] for v in d["templating"]["list"]
               if v["type"] == "query"}
    return d, queries, pickers


def grafana_substitute(expr, values):
    """expr with $name and ${name} replaced as Grafana does for one picked value of a
    query variable (a value without regex metacharacters is put in as is)."""
    def one(m):
        name = m.group(1) or m.group(2)
        assert name in values, f"the dashboard uses ${name}, unknown to this test: {expr}"
        v = values[name]
        assert name.startswith("__") or not re.search(r"[\\.^$*+?()\[\]{}|]", v), v
        return v
    return re.sub(r"\$\{(\w+)\}|\$(\w+)", one, expr)


def label_values(prom, definition, values):
    """What Grafana's label_values(<selector>, <label>) lists, through Prometheus' API."""
    m = re.fullmatch(r"label_values\((.+), (\w+)\)", grafana_substitute(definition, values))
    assert m, definition
    return prom.label_values(m.group(2), m.group(1))


PER_JOB = re.compile(r"ctrain_job_(?!metrics_)")  # the per-job series, not the cap's two


def test_dashboard_queries_return_data_for_a_running_job_and_its_series_go_with_it(
        cluster, node, controller, ns):
    t0 = time.monotonic()
    prom = Prometheus(cluster)
    try:
        assert prom.failure is None, prom.failure
        d, queries, pickers = dashboard()
        assert queries and {"namespace", "job"} <= set(pickers), pickers

        def slow(job):
            # 400 epochs: hours at this pace; the test deletes the job once it has seen
            # every panel's data. Half a CPU a worker leaves room for the tests beside it.
            c = job["spec"]["replicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]
            c["resources"]["limits"] = {"cpu": "500m"}
        apply_example(cluster, ns, epochs=400, mutate=slow)

        # The values Grafana puts in: the pickers set to this job, the range the dashboard
        # opens with (now-24h: $__range is 24h).
        rng = d["time"]["from"].removeprefix("now-")
        values = {"namespace": ns, "job": JOB, "__range": rng, "__rate_interval": "1m",
                  "__interval": "2s", "datasource": "prometheus"}
        exprs = [(title, grafana_substitute(e, values)) for title, e in queries]
        per_job = [(title, e) for title, e in exprs if PER_JOB.search(e)]
        assert len(per_job) >= 10, per_job

        # Every query answers with data while the job trains (the progress numbers come
        # with the controller's polls of the chief, every 10 s, validation accuracy after
        # the first epoch).
        deadline = time.monotonic() + 300
        while True:
            j = job_json(cluster, ns)
            assert not cond(j, "Succeeded") and not cond(j, "Failed"), dump(cluster, node, ns)
            empty, results = [], {}
            try:
                for title, e in exprs:
                    results[e] = prom.query(e)
                    if not results[e]:
                        empty.append((title, e))
            except OSError:
                empty = ["prometheus not answering yet"]
            if not empty:
                break
            assert time.monotonic() < deadline, \
                f"dashboard queries without data after 300 s: {empty}\n" \
                f"leader's /metrics:\n{per_job_lines(leader_metrics(cluster), ns)}\n" \
                f"prometheus:\n{prom.logs()}\n{dump(cluster, node, ns)}"
            time.sleep(2)
        seen_s = time.monotonic() - t0
        j = job_json(cluster, ns)
        assert cond(j, "Running") and not j["status"].get("restarts"), j["status"]

        # One target: the leader's pod, through the metrics Service.
        leader = controller.wait_leader()["metadata"]["name"]
        up = prom.query('up{job="ctrain-controller-metrics"} == 1')
        assert [r["metric"]["pod"] for r in up] == [leader], up
        # The per-job panels show this job only, labelled as the docs say, Running.
        for title, e in per_job:
            for r in results[e]:
                m = r["metric"]
                assert (m["namespace"], m["job_name"], m["kind"]) == (ns, JOB, "TrainingJob"), \
                    (title, e, r)
        (phase,) = results[dict(per_job)["Phase"]]
        assert phase["metric"]["phase"] == "Running", phase
        (epoch,) = results[dict(per_job)["Epoch"]]
        assert float(epoch["value"][1]) >= 1, epoch
        # The pickers list the namespace and the job (label_values through the API).
        assert ns in label_values(prom, pickers["namespace"], values)
        assert label_values(prom, pickers["job"], values) == [JOB]
        print(f"e2e: every one of the dashboard's {len(exprs)} queries returned data "
              f"{seen_s:.1f} s after the job's apply (epoch {epoch['value'][1]})")

        # Deleted while it trains: its series leave the leader's /metrics ...
        t1 = time.monotonic()
        cluster.kubectl("delete", "tj", JOB, "-n", ns, "--wait=false")
        wait_for(lambda: not per_job_lines(leader_metrics(cluster), ns), 60,
                 lambda: f"{JOB}'s series still on /metrics:\n"
                         f"{per_job_lines(leader_metrics(cluster), ns)}")
        metrics_s = time.monotonic() - t1
        # ... and Prometheus, at its next scrape of the leader, returns none of them.
        sel = f'{{__name__=~"ctrain_job_.+",namespace="{ns}",job_name="{JOB}"}}'
        wait_for(lambda: not prom.query(sel) and not [e for _, e in per_job if prom.query(e)],
                 60, lambda: f"{sel} -> {prom.query(sel)}")
        prom_s = time.monotonic() - t1
        # (The job picker still lists it over a range that holds its samples, as Grafana's
        # label_values asks with the dashboard's range: the job's history stays readable.)
        # What is not per job stays: the namespace's outcome counters, the controller's own.
        for title, e in exprs:
            if not PER_JOB.search(e):
                assert prom.query(e), (title, e)
        # Still gone once the pods are (no late pass brings a series back).
        wait_for(lambda: not job_pods(cluster, ns), 120, lambda: dump(cluster, node, ns))
        time.sleep(4)  # two scrapes
        assert not per_job_lines(leader_metrics(cluster), ns)
        assert not prom.query(sel)
        print(f"e2e: deleted job's series gone from /metrics in {metrics_s:.1f} s, "
              f"from Prometheus in {prom_s:.1f} s")
    finally:
        prom.stop()


def per_job_lines(text, ns):
    """The lines of a /metrics page that are series of the job in ns."""
    return "\n".join(line for line in text.splitlines()
                     if line.startswith("ctrain_job_")
                     and f'namespace="{ns}",job_name="{JOB}"' in line)


def wait_for(pred, timeout, why):
    deadline = time.monotonic() + timeout
    while not pred():
        assert time.monotonic() < deadline, why()
        time.sleep(0.5)
