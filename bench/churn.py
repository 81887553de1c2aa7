#!/usr/bin/env python3
"""bench/churn: a churn soak on a shared cluster with a hostile tenant (not in CI).

On a fresh two-node local cluster (the controller installed as users install it:
`kubectl apply --server-side -k` of manifests/crds and manifests/), `--namespaces`
namespaces each run `--cycles` cycles of one cheap TrainingJob `churn` (2 workers of
the ctrain image, 50m of CPU each, a bash that exits 0 after `--run-s` seconds and takes
`--term-s` seconds to stop on SIGTERM, so deleted pods stay Terminating a while), all
namespaces at once. A cycle:

  1. `kubectl delete tj churn --wait=false` of the last cycle's (finished) job and at
     once `kubectl apply` of a new one, whose pods' names the old job's pods still hold;
     wait until its 2 pods are Running (or it Succeeded);
  2. `kubectl delete --wait=false` of that running job and at once `kubectl apply` again,
     while its pods are still Terminating; or, every `--suspend-every`th cycle, instead
     `spec.suspend: true`, the Suspended condition, and at once `suspend: false`;
  3. the re-applied (resumed) job must reach Succeeded within `--bound` seconds.

A hostile tenant's decoys are there throughout: in every namespace a NetworkPolicy
named like another job, `nightly` (whose TrainingJob is applied too and must wait,
Blocked/NameTaken, without a pod), and a ConfigMap `churn-cluster-1` and a Secret
`churn-token-1`, the churned job's names under the older naming (no `-<tag>` suffix), labelled as
ours; and for every churned job as soon as it exists, in the NEXT namespace, a pod
`churn-worker-<10+>` whose controller ownerReference names that job's uid, labelled
`ctrain.dev/job-name: churn`, `ctrain.dev/attempt: "9"`, held by a finalizer of the
tenant's and a scheduling gate (it never runs).

Invariants, checked against the apiserver after every step (one `kubectl get` of every
decoy), and every version of a decoy pod the watch delivers:
  - no decoy is deleted, re-created (uid), or written (resourceVersion); the one
    exception is a tenant pod, whose owner is not in its namespace, which Kubernetes'
    garbage collector marks for deletion (it cannot go: the tenant's finalizer). Told
    apart: such a version differs from the created one only in deletionTimestamp,
    deletionGracePeriodSeconds, generation and status (the scheduler's SchedulingGated);
    no managedFields entry is the controller's; its finalizers never gain
    `ctrain.dev/attempt`; the garbage collector says so in an OwnerRefInvalidNamespace
    event on the pod; and no line of the controller's log names a decoy, except the
    `... is not this job's ...` of the job that waits on `nightly`;
  - every step's job reaches its state within --bound (pods Running; Suspended;
    Succeeded), and a re-apply is a new job (new uid) whose pods are new pods; the
    churned jobs Succeed with status.restarts 0 and an attempt under the decoys' 9;
  - the `nightly` jobs stay Blocked (reason NameTaken) and never get a pod;
  - the controller's pods never restart.
After the last delete (of every job): nothing with our finalizer, a `ctrain.dev/`
label or an ownerReference to a TrainingJob is left in the namespaces (pods, Services,
ConfigMaps, Secrets, NetworkPolicies; Kueue Workloads when their CRD is there), the
decoys aside, within --bound.

Prints: cycles done, invariant violations, leaked objects, the time from a re-apply to
all pods Running and to Succeeded (median, p90, max) and how often a re-apply met
Blocked/NameTaken (it waited on an older pod). Exits 1 on any violation or leak.
The cluster is taken down at the end, whatever happened.

  python3 bench/churn.py [--namespaces 5] [--cycles 20] [--run-s 8] [--term-s 3]
                         [--controller-log FILE]

tests/e2e/test_churn.py runs the same steps, short (2 namespaces x 3 cycles), in the e2e lane.
"""

import argparse
import json
import os
import re
import subprocess
import sys
import threading
import time
from contextlib import contextmanager

import _paths  # noqa: F401 (the test libraries' path)
from clusterlib import build_image, cond, install, local_cluster
import e2e_lib as e2e

JOB = "churn"  # the churned job, the same name in every namespace
SQUAT = "nightly"  # a job whose NetworkPolicy name the tenant holds
WORKERS = 2
FINALIZER = "ctrain.dev/attempt"
TENANT_FINALIZER = "tenant.example/hold"
DECOY = "tenant.example/decoy"  # the label on every decoy
SPOOF_BASE = 10  # the tenant's pods are churn-worker-10, -11, ...: never a 2-worker job's
# What the garbage collector's mark (a delete of an object whose finalizer holds it) and the
# scheduler's status write change in a tenant pod.
GC_MARK = (
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "generation",
    "resourceVersion",
    "managedFields",
)


def owner_uid(obj):
    for r in obj["metadata"].get("ownerReferences", []):
        if r.get("controller"):
            return r.get("uid")
    return None


def pct(xs, q):
    """The q-quantile by nearest rank (q 0.5: the median)."""
    xs = sorted(xs)
    return xs[min(len(xs) - 1, max(0, int(-(-q * len(xs) // 1)) - 1))] if xs else float("nan")


def job_manifest(name=JOB, run_s=8, term_s=3):
    """A cheap TrainingJob: WORKERS workers of the ctrain image (never pulled) running bash,
    which exits 0 after run_s seconds and, on SIGTERM, exits 143 term_s seconds later (a
    deleted pod stays Terminating that long)."""
    script = f"trap 'sleep {term_s}; exit 143' TERM; sleep {run_s} & wait $!; exit 0"
    tmpl = {
        "spec": {
            "terminationGracePeriodSeconds": term_s + 30,
            "containers": [
                {
                    "name": "worker",
                    "image": "ctrain:latest",
                    "imagePullPolicy": "Never",
                    "command": ["bash", "-c", script],
                    "resources": {"requests": {"cpu": "50m", "memory": "32Mi"}},
                }
            ],
        }
    }
    spec = {"replicaSpecs": {"Worker": {"replicas": WORKERS, "template": tmpl}}}
    return {
        "apiVersion": "ctrain.dev/v1alpha1",
        "kind": "TrainingJob",
        "metadata": {"name": name},
        "spec": spec,
    }


def apply_json(cl, ns, obj, verb="apply"):
    """`kubectl apply` (or create) of obj in ns; the object as the apiserver stored it."""
    return json.loads(
        cl.kubectl(verb, "-n", ns, "-f", "-", "-o", "json", input=json.dumps(obj)).stdout
    )


# ---- the apiserver's view, as two kubectl watches keep it -------------------------------


class Mirror:
    """The pods and TrainingJobs of `namespaces` as `kubectl get --watch` streams them (no
    polling: a wait wakes on the event that makes it true, so a time measured is the
    event's arrival). Also keeps every version of a decoy pod and the Blocked reasons each
    job (by uid) showed True."""

    KINDS = ("pods", "trainingjobs.ctrain.dev")

    def __init__(self, cl, namespaces):
        self.cl, self.nss = cl, set(namespaces)
        self.cv = threading.Condition()
        self.objs = {k: {} for k in self.KINDS}  # kind -> uid -> object
        self.decoy_versions = {}  # decoy pod uid -> [object, ...] in the order seen
        self.blocked = {}  # job uid -> {reason of a Blocked condition seen True}
        self.job_ns = {}  # job uid -> its namespace (kept after it is gone)
        self.procs = {}
        self.closed = False
        self.ready = {k: threading.Event() for k in self.KINDS}
        self.threads = [
            threading.Thread(target=self._run, args=(k,), daemon=True) for k in self.KINDS
        ]
        for t in self.threads:
            t.start()
        for k in self.KINDS:
            self.ready[k].wait(60)

    def _run(self, kind):
        first = True
        while not self.closed:
            if not first:  # the watch ended: start over from a fresh list
                with self.cv:
                    self.objs[kind].clear()
            first = False
            p = subprocess.Popen(
                [
                    self.cl.kubectl_bin,
                    "get",
                    kind,
                    "-A",
                    "--watch",
                    "--output-watch-events",
                    "-o",
                    "json",
                ],
                env=self.cl.env,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                text=True,
            )
            self.procs[kind] = p
            self.ready[kind].set()
            buf = ""  # an event a line (kubectl prints them compact); else until it parses
            for line in p.stdout:
                buf += line
                try:
                    ev = json.loads(buf)
                except ValueError:
                    continue
                buf = ""
                self._event(kind, ev)
            p.wait()
            if not self.closed:
                time.sleep(0.5)

    def _event(self, kind, ev):
        o = ev.get("object") or {}
        md = o.get("metadata") or {}
        if md.get("namespace") not in self.nss or not md.get("uid"):
            return
        with self.cv:
            if ev.get("type") == "DELETED":
                self.objs[kind].pop(md["uid"], None)
            elif ev.get("type") in ("ADDED", "MODIFIED"):
                self.objs[kind][md["uid"]] = o
            if kind == "pods" and DECOY in (md.get("labels") or {}):
                self.decoy_versions.setdefault(md["uid"], []).append(o)
            if kind != "pods":
                self.job_ns[md["uid"]] = md["namespace"]
            c = cond(o, "Blocked") if kind != "pods" else None
            if c:
                self.blocked.setdefault(md["uid"], set()).add(c.get("reason"))
            self.cv.notify_all()

    def close(self):
        self.closed = True
        for p in self.procs.values():
            if p.poll() is None:
                p.terminate()
                p.wait(10)

    # Queries: call them inside wait()'s predicate, or under `with mirror.cv`.
    def job(self, uid):
        return self.objs["trainingjobs.ctrain.dev"].get(uid)

    def jobs(self, ns, name):
        return [
            j
            for j in self.objs["trainingjobs.ctrain.dev"].values()
            if j["metadata"]["namespace"] == ns and j["metadata"]["name"] == name
        ]

    def pods_of(self, uid):
        """The pods of job uid's namespace whose controller ownerReference names uid, going
        ones included (not the tenant's pods naming it from another namespace)."""
        ns = self.job_ns.get(uid)
        return [
            p
            for p in self.objs["pods"].values()
            if owner_uid(p) == uid and p["metadata"]["namespace"] == ns
        ]

    def labelled(self, ns, name):
        """The pods of ns labelled for job `name` (whoever made them)."""
        return [
            p
            for p in self.objs["pods"].values()
            if p["metadata"]["namespace"] == ns
            and p["metadata"].get("labels", {}).get("ctrain.dev/job-name") == name
        ]

    def state(self, uid, n=WORKERS):
        """ "Succeeded"/"Failed" when the job says so, "Running" when n of its pods run (none
        going), else None."""
        j = self.job(uid)
        for t in ("Succeeded", "Failed"):
            if j and cond(j, t):
                return t
        up = [
            p
            for p in self.pods_of(uid)
            if not p["metadata"].get("deletionTimestamp")
            and p.get("status", {}).get("phase") == "Running"
        ]
        return "Running" if len(up) >= n else None

    def wait(self, pred, timeout):
        """pred()'s first true value within timeout seconds (None after it)."""
        deadline = time.monotonic() + timeout
        with self.cv:
            while True:
                v = pred()
                if v:
                    return v
                left = deadline - time.monotonic()
                if left <= 0:
                    return None
                self.cv.wait(min(left, 1.0))


# ---- the tenant --------------------------------------------------------------------------


def decoy_md(name, **labels):
    return {"name": name, "labels": {DECOY: "true", **labels}}


def plant_namespace_decoys(cl, ns):
    """In ns: the NetworkPolicy `nightly` (its TrainingJob is applied too: it must wait)
    and the churned job's ConfigMap and Secret under the older names (no `-<tag>` suffix). Returns
    the stored objects."""
    ours = {"ctrain.dev/job-name": JOB, "ctrain.dev/attempt": "1"}
    objs = [
        {
            "apiVersion": "networking.k8s.io/v1",
            "kind": "NetworkPolicy",
            "metadata": decoy_md(SQUAT, **{"ctrain.dev/job-name": SQUAT}),
            "spec": {
                "podSelector": {"matchLabels": {"ctrain.dev/job-name": SQUAT}},
                "policyTypes": ["Ingress"],
            },
        },
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": decoy_md(f"{JOB}-cluster-1", **ours),
            "data": {"cluster": json.dumps({"worker": ["tenant-a:2222", "tenant-b:2222"]})},
        },
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": decoy_md(f"{JOB}-token-1", **ours),
            "stringData": {"token": "tenant"},
        },
    ]
    return [apply_json(cl, ns, o, "create") for o in objs]


def spoof_pod(cl, ns, job_uid, index):
    """In ns: a pod whose controller ownerReference names job_uid (a `churn` job of ANOTHER
    namespace), labelled as a later attempt's worker of `churn`, held by the tenant's
    finalizer, gated so that it never runs."""
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            **decoy_md(
                f"{JOB}-worker-{index}",
                **{
                    "ctrain.dev/job-name": JOB,
                    "ctrain.dev/attempt": "9",
                    "ctrain.dev/replica-type": "worker",
                    "ctrain.dev/replica-index": str(index),
                },
            ),
            "finalizers": [TENANT_FINALIZER],
            "ownerReferences": [
                {
                    "apiVersion": "ctrain.dev/v1alpha1",
                    "kind": "TrainingJob",
                    "name": JOB,
                    "uid": job_uid,
                    "controller": True,
                }
            ],
        },
        "spec": {
            "schedulingGates": [{"name": TENANT_FINALIZER}],
            "containers": [
                {
                    "name": "c",
                    "image": "ctrain:latest",
                    "imagePullPolicy": "Never",
                    "command": ["true"],
                }
            ],
        },
    }
    return apply_json(cl, ns, pod, "create")


def strip(obj, drop_md=GC_MARK):
    """obj less status and the metadata fields in drop_md (for comparing decoy versions)."""
    o = {k: v for k, v in obj.items() if k != "status"}
    o["metadata"] = {k: v for k, v in obj["metadata"].items() if k not in drop_md}
    return o


def controller_managers(obj):
    return [
        m.get("manager")
        for m in obj["metadata"].get("managedFields", [])
        if "ctrain" in (m.get("manager") or "")
    ]


@contextmanager
def tenant_namespaces(cl, names):
    """Creates the namespaces; afterwards releases the tenant's finalizers there and deletes
    them (--wait=false)."""
    for n in names:
        cl.kubectl("create", "namespace", n)
    try:
        yield list(names)
    finally:
        release_tenant(cl, names)
        for n in names:
            cl.kubectl("delete", "namespace", n, "--wait=false", check=False)


def release_tenant(cl, names):
    for n in names:
        p = cl.kubectl("get", "pods", "-n", n, "-l", DECOY, "-o", "json", check=False)
        for pod in json.loads(p.stdout)["items"] if p.returncode == 0 else []:
            cl.kubectl(
                "patch",
                "pod",
                pod["metadata"]["name"],
                "-n",
                n,
                "--type=json",
                "-p",
                '[{"op":"remove","path":"/metadata/finalizers"}]',
                check=False,
            )


# ---- leftovers ---------------------------------------------------------------------------


def leftovers(cl, namespaces, skip_uids=()):
    """Objects of the namespaces with our finalizer, a ctrain.dev/ label or an
    ownerReference to a TrainingJob (pods, Services, ConfigMaps, Secrets, NetworkPolicies,
    Kueue Workloads when their CRD is installed), less skip_uids; and TrainingJobs."""
    kinds = "trainingjobs.ctrain.dev,pods,services,configmaps,secrets,networkpolicies"
    if cl.kubectl("get", "crd", "workloads.kueue.x-k8s.io", check=False).returncode == 0:
        kinds += ",workloads.kueue.x-k8s.io"
    out = []
    for o in cl.get_json(kinds, "-A")["items"]:
        md = o["metadata"]
        if md.get("namespace") not in namespaces or md["uid"] in skip_uids:
            continue
        if (
            o["kind"] == "TrainingJob"
            or FINALIZER in md.get("finalizers", [])
            or any(k.startswith("ctrain.dev/") for k in md.get("labels") or {})
            or any(r.get("kind") == "TrainingJob" for r in md.get("ownerReferences", []))
        ):
            out.append(
                f"{o['kind']} {md['namespace']}/{md['name']} (uid {md['uid']}, "
                f"finalizers {md.get('finalizers', [])}, "
                f"deleting {bool(md.get('deletionTimestamp'))})"
            )
    return out


def wait_no_leftovers(cl, namespaces, skip_uids=(), bound=120):
    """(leftovers, seconds): polls until nothing is left or bound seconds passed."""
    t0 = time.monotonic()
    while True:
        left = leftovers(cl, namespaces, skip_uids)
        if not left or time.monotonic() - t0 > bound:
            return left, time.monotonic() - t0
        time.sleep(1)


# ---- the soak ----------------------------------------------------------------------------


class Churn:
    """The cycles of bench/churn.py (see its doc) over `namespaces` (at least 2, already
    created), against the controller Deployment `deployment` (e2e_lib.Deployment)."""

    def __init__(
        self,
        cl,
        namespaces,
        deployment,
        cycles=20,
        run_s=8,
        term_s=3,
        bound=120,
        suspend_every=4,
        out=print,
    ):
        if len(namespaces) < 2:
            raise ValueError("churn: the tenant's pods need a second namespace")
        self.cl, self.nss, self.dep = cl, list(namespaces), deployment
        self.cycles, self.run_s, self.term_s, self.bound = cycles, run_s, term_s, bound
        self.suspend_every, self.out = suspend_every, out
        self.lock = threading.Lock()
        self.violations = []
        self.reported = set()
        self.decoys = {}  # uid -> the object as created
        self.spoofs = {}  # job ns -> next tenant pod index
        self.times = {
            k: {"running": [], "succeeded": []}
            for k in (
                "first apply",
                "re-apply over finished pods",
                "re-apply over running pods",
                "resume",
            )
        }
        self.met = {k: [0, 0] for k in self.times}  # kind -> [runs, runs that met Blocked]
        self.pending = {}  # ns -> the tenant's threads of the step
        self.n = {
            "cycles": 0,
            "re-applies": 0,
            "resumes": 0,
            "old pods present": 0,
            "old pods terminating": 0,
            "finished early": 0,
            "steps": 0,
        }
        self.leaked = []
        self.restarts0 = self.controller_restarts()
        self.mirror = Mirror(cl, self.nss)

    def log(self, msg):
        self.out(f"churn: {msg}")

    def violation(self, msg, key=None):
        with self.lock:
            if key is not None:
                if key in self.reported:
                    return
                self.reported.add(key)
            self.violations.append(msg)
        self.log(f"VIOLATION: {msg}")

    # -- decoys
    def plant(self):
        for ns in self.nss:
            for o in plant_namespace_decoys(self.cl, ns):
                self.decoys[o["metadata"]["uid"]] = o
            apply_json(self.cl, ns, job_manifest(SQUAT, self.run_s, self.term_s))
            self.spoofs[ns] = SPOOF_BASE
        for ns in self.nss:
            j = self.mirror.wait(
                lambda: [j for j in self.mirror.jobs(ns, SQUAT) if cond(j, "Blocked")], self.bound
            )
            c = cond(j[0], "Blocked") if j else None
            if not c or c.get("reason") != "NameTaken" or SQUAT not in c.get("message", ""):
                self.violation(
                    f"{ns}/{SQUAT}: not Blocked/NameTaken on the tenant's "
                    f"NetworkPolicy within {self.bound} s: {c}"
                )
        self.check_decoys("the decoys planted", full=True)

    def spoof(self, ns, job_uid):
        """The tenant's pod naming job_uid (of ns's job) in the next namespace."""
        other = self.nss[(self.nss.index(ns) + 1) % len(self.nss)]
        with self.lock:
            i = self.spoofs[ns]
            self.spoofs[ns] += 1
        o = spoof_pod(self.cl, other, job_uid, i)
        with self.lock:
            self.decoys[o["metadata"]["uid"]] = o

    def check_decoys(self, where, full=False):
        """Every decoy against the apiserver: the NetworkPolicies, ConfigMaps and Secrets by
        a get; the tenant's pods as the pods' watch has delivered every version of them
        (full: by a get too, as every 10th step does)."""
        with self.lock:
            decoys = dict(self.decoys)
        kinds = (
            "pods,configmaps,secrets,networkpolicies"
            if full
            else "configmaps,secrets,networkpolicies"
        )
        got = {o["metadata"]["uid"]: o for o in self.cl.get_json(kinds, "-A", "-l", DECOY)["items"]}
        with self.mirror.cv:
            versions = {u: list(v) for u, v in self.mirror.decoy_versions.items()}
            for uid, d in decoys.items():
                # A pod the watch has shown: as it stands now (not there: deleted).
                if d["kind"] == "Pod" and not full and uid in versions:
                    got[uid] = self.mirror.objs["pods"].get(uid)
        for uid, d in decoys.items():
            md = d["metadata"]
            what = f"{d['kind']} {md['namespace']}/{md['name']}"
            now = got.get(uid)
            if now is None and d["kind"] == "Pod" and not full and uid not in versions:
                continue  # created a moment ago: the watch has not shown it yet
            if now is None:  # by name (the watch may be starting over)
                p = self.cl.kubectl(
                    "get",
                    d["kind"].lower(),
                    md["name"],
                    "-n",
                    md["namespace"],
                    "-o",
                    "json",
                    check=False,
                )
                now = json.loads(p.stdout) if p.returncode == 0 else None
                if (
                    not now
                    or now["metadata"]["uid"] != uid
                    or DECOY not in now["metadata"].get("labels", {})
                ):
                    self.violation(
                        f"after {where}: {what} (uid {uid}) is gone or lost its "
                        f"label: {p.stdout[:1500] or p.stderr}",
                        ("gone", uid),
                    )
                    continue
            for v in [now] + versions.get(uid, []):
                bad = self.decoy_changed(d, v)
                if bad:
                    self.violation(f"after {where}: {what} was written: {bad}", ("w", uid))
                    break

    @staticmethod
    def decoy_changed(d, v):
        """Why version v of decoy d is not d, or not d as the garbage collector marks it
        (None when it is)."""
        if v["metadata"]["uid"] != d["metadata"]["uid"]:
            return "a new uid"
        if v["metadata"].get("finalizers") != d["metadata"].get("finalizers"):
            return (
                f"finalizers {d['metadata'].get('finalizers')} -> {v['metadata'].get('finalizers')}"
            )
        if controller_managers(v):
            return f"managedFields of {controller_managers(v)}"
        if d["kind"] != "Pod":
            if v["metadata"]["resourceVersion"] != d["metadata"]["resourceVersion"]:
                return (
                    f"resourceVersion {d['metadata']['resourceVersion']} -> "
                    f"{v['metadata']['resourceVersion']}"
                )
            return None
        a, b = strip(d), strip(v)
        if a != b:
            diff = {k: (a.get(k), b.get(k)) for k in set(a) | set(b) if a.get(k) != b.get(k)}
            return f"changed beyond the garbage collector's mark: {json.dumps(diff)[:1500]}"
        return None

    def gc_marked(self):
        """The tenant pods marked for deletion, and how many of them the garbage collector's
        OwnerRefInvalidNamespace event names."""
        pods = [
            o
            for o in self.cl.get_json("pods", "-A", "-l", DECOY)["items"]
            if o["metadata"].get("deletionTimestamp")
        ]
        evs = {
            (e["involvedObject"].get("namespace"), e["involvedObject"].get("name"))
            for e in self.cl.get_json(
                "events", "-A", "--field-selector", "reason=OwnerRefInvalidNamespace"
            )["items"]
        }
        named = [p for p in pods if (p["metadata"]["namespace"], p["metadata"]["name"]) in evs]
        return len(pods), len(named)

    def check_logs(self):
        """No controller log line names a decoy (a line of a job waiting on one, `... is not
        this job's ...`, aside)."""
        logs = self.dep.logs()
        with self.lock:
            decoys = list(self.decoys.values())
        pats = set()
        for d in decoys:
            # The NetworkPolicy is named like the job `nightly` (in the key of its lines);
            # the other decoys' names are theirs alone (the new names go on: `-<tag>`).
            kind = "networkpolicy " if d["kind"] == "NetworkPolicy" else ""
            pats.add(rf"(?<![\w.-]){kind}{re.escape(d['metadata']['name'])}(?![\w.-])")
        if not pats:
            return 0
        pat = re.compile("|".join(sorted(pats)), re.I)
        bad = [
            line
            for line in logs.splitlines()
            if "is not this job's" not in line and pat.search(line)
        ]
        for line in bad[:20]:
            self.violation(f"the controller's log names a decoy: {line}")
        return len(bad)

    def controller_restarts(self):
        return {
            p["metadata"]["name"]: sum(
                c.get("restartCount", 0) for c in p["status"].get("containerStatuses", [])
            )
            for p in self.dep.pods()
        }

    # -- steps
    def step_done(self, ns, where):
        """The checks after a step: the tenant's pods it started are there, every decoy is
        as it was, the blocked job has no pod."""
        with self.lock:
            self.n["steps"] += 1
            full = self.n["steps"] % 10 == 0
            pending, self.pending[ns] = self.pending.get(ns, []), []
        for t in pending:
            t.join()
        self.check_decoys(f"{ns} {where}", full)
        with self.mirror.cv:
            own = [p["metadata"]["name"] for p in self.mirror.labelled(ns, SQUAT)]
        if own:
            self.violation(
                f"after {ns} {where}: the blocked {SQUAT} job has pods {own}", ("squat", ns)
            )

    def apply(self, ns):
        """`kubectl apply` of the job; its uid. The tenant's pod naming that uid goes into
        the next namespace meanwhile (a thread: the apply's timing stays the job's)."""
        uid = apply_json(self.cl, ns, job_manifest(JOB, self.run_s, self.term_s))["metadata"]["uid"]

        def tenant():
            try:
                self.spoof(ns, uid)
            except Exception as e:
                self.violation(f"{ns}: the tenant's pod for {uid} not created: {e}")

        t = threading.Thread(target=tenant)
        t.start()
        with self.lock:
            self.pending.setdefault(ns, []).append(t)
        return uid

    def old_pods(self, uid):
        """The uids of job uid's pods, and how many of them are going."""
        with self.mirror.cv:
            ps = self.mirror.pods_of(uid)
            return (
                {p["metadata"]["uid"] for p in ps},
                len([p for p in ps if p["metadata"].get("deletionTimestamp")]),
            )

    def wait_state(self, ns, uid, want, what, t0):
        """Waits until job uid is in a state of `want` (Mirror.state); (the seconds since t0,
        the state), or (None, the state) and a violation after the bound."""
        st = self.mirror.wait(
            lambda: self.mirror.state(uid) in want + ("Failed",) and self.mirror.state(uid),
            self.bound,
        )
        took = time.monotonic() - t0
        if st not in want:
            self.violation(
                f"{ns}: {what}: {st or 'nothing'} after {took:.0f} s, not "
                f"{'/'.join(want)}:\n{self.dump(ns, uid)}"
            )
            return None, st
        return took, st

    def reapply(self, ns, old_uid):
        """`kubectl delete --wait=false` of job old_uid and at once `kubectl apply`: (the new
        job's uid, the time of the apply, the old job's pods' uids)."""
        self.cl.kubectl("delete", "tj", JOB, "-n", ns, "--wait=false")
        old, going = self.old_pods(old_uid)
        t0 = time.monotonic()
        uid = self.apply(ns)
        if uid == old_uid:
            self.violation(f"{ns}: the re-applied job has the deleted one's uid {uid}")
        with self.lock:
            self.n["old pods present"] += len(old) > 0
            self.n["old pods terminating"] += going > 0
        return uid, t0, old

    def run_job(self, ns, uid, kind, t0, old=(), to_end=True):
        """Job uid from t0 (its apply, or resume) to Running (or Succeeded) and, to_end, to
        Succeeded: kind's figures. Checks that its pods are none of `old` (pod uids) and,
        at the end, its counters. Its state, or None after a violation."""
        took, st = self.wait_state(ns, uid, ("Running", "Succeeded"), f"{kind}: Running", t0)
        if took is None:
            return None
        with self.mirror.cv:
            reused = {
                p["metadata"]["name"]
                for p in self.mirror.pods_of(uid)
                if p["metadata"]["uid"] in old
            }
        if reused:
            self.violation(
                f"{ns}: {kind}: the new job took over the old pods {reused}:\n{self.dump(ns, uid)}"
            )
        if st == "Running":
            self.times[kind]["running"].append(took)
        if to_end:
            took, st = self.wait_state(ns, uid, ("Succeeded",), f"{kind}: Succeeded", t0)
            if took is None:
                return None
            self.times[kind]["succeeded"].append(took)
        with self.mirror.cv:
            js = (self.mirror.job(uid) or {}).get("status", {})
            met = uid in self.mirror.blocked or any(
                c["type"] == "Blocked" for c in js.get("conditions", [])
            )
        with self.lock:
            self.met[kind][0] += 1
            self.met[kind][1] += met
        if st == "Succeeded" and (js.get("restarts", 0) or js.get("attempt", 1) >= 9):
            self.violation(
                f"{ns}: {kind}: Succeeded with restarts {js.get('restarts')}, "
                f"attempt {js.get('attempt')}: {json.dumps(js)[:1500]}"
            )
        return st

    def suspend(self, ns, uid, value):
        self.cl.kubectl(
            "patch",
            "tj",
            JOB,
            "-n",
            ns,
            "--type=merge",
            "-p",
            json.dumps({"spec": {"suspend": value}}),
        )

    def cycle(self, ns, k, uid):
        """One cycle of ns; the uid of the job it leaves (Succeeded), None after a violation."""
        # 1: the last cycle's finished job deleted and at once re-applied (the old pods still
        # hold the names), or the first apply; its pods Running.
        if uid:
            kind = "re-apply over finished pods"
            uid, t0, old = self.reapply(ns, uid)
        else:
            kind, t0, old = "first apply", time.monotonic(), ()
            uid = self.apply(ns)
        st = self.run_job(ns, uid, kind, t0, old, to_end=False)
        self.step_done(ns, f"cycle {k}: {kind}")
        if not st:
            return None
        if st == "Succeeded":
            with self.lock:
                self.n["finished early"] += 1
        if (
            st == "Running"
            and self.suspend_every
            and k % self.suspend_every == self.suspend_every - 1
        ):
            # 2': suspended; once Suspended (its pods going), resumed at once.
            self.suspend(ns, uid, True)
            got = self.mirror.wait(
                lambda: (
                    (j := self.mirror.job(uid))
                    and cond(j, "Suspended")
                    and not [
                        p
                        for p in self.mirror.pods_of(uid)
                        if not p["metadata"].get("deletionTimestamp")
                    ]
                ),
                self.bound,
            )
            self.step_done(ns, f"cycle {k}: suspended")
            if not got:
                self.violation(
                    f"{ns}: not Suspended with its pods going within {self.bound} "
                    f"s:\n{self.dump(ns, uid)}"
                )
                return None
            kind, old = "resume", self.old_pods(uid)[0]
            with self.lock:
                self.n["resumes"] += 1
            t0 = time.monotonic()
            self.suspend(ns, uid, False)
        else:
            # 2: deleted while running and at once re-applied.
            kind = (
                "re-apply over running pods" if st == "Running" else "re-apply over finished pods"
            )
            uid, t0, old = self.reapply(ns, uid)
            with self.lock:
                self.n["re-applies"] += kind == "re-apply over running pods"
        # 3: Succeeded.
        st = self.run_job(ns, uid, kind, t0, old)
        self.step_done(ns, f"cycle {k}: {kind}, Succeeded")
        if not st:
            return None
        with self.lock:
            self.n["cycles"] += 1
        return uid

    def run_ns(self, ns):
        uid = None
        for k in range(self.cycles):
            try:
                uid = self.cycle(ns, k, uid)
            except Exception as e:  # a kubectl that failed: this namespace stops
                self.violation(f"{ns}: cycle {k}: {type(e).__name__}: {e}")
                uid = None
            if not uid:
                break
            if (k + 1) % 5 == 0 or k + 1 == self.cycles:
                self.log(f"{ns}: {k + 1} cycles")

    def run(self):
        """Plants the decoys, runs every namespace's cycles at once, deletes every job, and
        checks what is left. True when nothing broke an invariant and nothing leaked."""
        self.t0 = time.monotonic()
        try:
            self.plant()
            threads = [threading.Thread(target=self.run_ns, args=(ns,)) for ns in self.nss]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            self.wall = time.monotonic() - self.t0
            # What the jobs have, before the last deletes (the leak check's reference).
            self.ours = len(leftovers(self.cl, self.nss, set(self.decoys)))
            for ns in self.nss:
                self.cl.kubectl("delete", "tj", JOB, SQUAT, "-n", ns, "--wait=false", check=False)
            self.last_delete = time.monotonic()
            self.leaked, _ = wait_no_leftovers(self.cl, self.nss, set(self.decoys), self.bound)
            self.leak_s = time.monotonic() - self.last_delete
            for x in self.leaked:
                self.violation(f"left after the last delete ({self.bound} s): {x}")
            self.check_decoys("the last delete", full=True)
            self.check_logs()
            now = self.controller_restarts()
            if any(now.get(p, 0) > n for p, n in self.restarts0.items()):
                self.violation(f"the controller restarted: {self.restarts0} -> {now}")
            self.gc = self.gc_marked()
        finally:
            self.mirror.close()
        return not self.violations

    def dump(self, ns, uid):
        with self.mirror.cv:
            j = self.mirror.job(uid)
            pods = [
                (
                    p["metadata"]["name"],
                    p["metadata"]["uid"],
                    owner_uid(p),
                    p.get("status", {}).get("phase"),
                    p["metadata"].get("deletionTimestamp"),
                    p["metadata"].get("finalizers"),
                )
                for p in self.mirror.labelled(ns, JOB)
            ]
        logs = [line for line in self.dep.logs().splitlines() if f"{ns}/" in line][-40:]
        return (
            f"job {uid}: {json.dumps((j or {}).get('status'))[:2500]}\n"
            f"pods labelled {JOB} (name, uid, owner, phase, deleting, finalizers): "
            f"{json.dumps(pods)}\ncontroller log:\n" + "\n".join(logs)
        )

    def report(self):
        out = self.log
        n = self.n
        out(
            f"{len(self.nss)} namespaces x {self.cycles} cycles in {self.wall:.0f} s: "
            f"{n['cycles']} cycles done ({n['re-applies']} delete/re-apply of a running job, "
            f"{n['resumes']} suspend/resume; {n['finished early']} jobs done before the "
            f"step), {n['steps']} steps checked"
        )
        out(f"invariant violations: {len(self.violations)}")
        out(
            f"leaked objects: {len(self.leaked)} (of {self.ours} objects of the jobs "
            f"before the last deletes, none left {self.leak_s:.1f} s after them)"
            if not self.leaked
            else f"leaked objects: {len(self.leaked)} ({self.bound} s after the last delete)"
        )
        out(
            f"{'from the (re-)apply':36s}{'to':>10s}{'n':>5s}{'median s':>10s}{'p90 s':>8s}"
            f"{'max s':>8s}"
        )
        for kind, d in self.times.items():
            for to, xs in d.items():
                if xs:
                    out(
                        f"{kind:36s}{to:>10s}{len(xs):5d}{pct(xs, 0.5):10.1f}{pct(xs, 0.9):8.1f}"
                        f"{max(xs):8.1f}"
                    )
        out(
            f"old pods still there at a delete/re-apply: {n['old pods present']}, already "
            f"Terminating: {n['old pods terminating']}; met Blocked/NameTaken (waited on a "
            f"name an older pod or object held): "
            + ", ".join(f"{kind} {b} of {r}" for kind, (r, b) in self.met.items() if r)
        )
        spoofs = sum(1 for d in self.decoys.values() if d["kind"] == "Pod")
        marked, named = getattr(self, "gc", (0, 0))
        out(
            f"tenant: {len(self.decoys) - spoofs} namespace decoys, {spoofs} pods naming the "
            f"churned jobs' uids; {marked} of those marked for deletion by the garbage "
            f"collector ({named} named by its OwnerRefInvalidNamespace events), none written "
            f"by the controller" + ("" if not self.violations else " (see the violations)")
        )


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--namespaces", type=int, default=5)
    ap.add_argument("--cycles", type=int, default=20)
    ap.add_argument("--run-s", type=int, default=8, help="a worker's run, seconds")
    ap.add_argument(
        "--term-s",
        type=int,
        default=3,
        help="a worker's stop after SIGTERM, seconds (its pod stays Terminating)",
    )
    ap.add_argument("--bound", type=int, default=120, help="seconds a step may take")
    ap.add_argument("--controller-log", help="write the controller pods' logs there at the end")
    ap.add_argument(
        "--suspend-every",
        type=int,
        default=4,
        help="every Nth cycle suspends and resumes instead (0: never)",
    )
    a = ap.parse_args()
    if a.namespaces < 2:
        raise SystemExit("churn: --namespaces 2 at least (the tenant's pods go next door)")
    if os.geteuid() != 0:
        raise SystemExit("churn: the local nodes need root")
    t_all = time.monotonic()
    image = build_image("ctrain")
    with local_cluster(
        nodes=2, image=image, prefix="bench-churn-", env={"CTRAIN_NODE_MONITOR_GRACE": "20s"}
    ) as cl:
        e2e._CLUSTER["c"] = cl
        install(cl, "manifests/crds", "manifests")
        dep = e2e.Deployment(cl)
        dep.rollout()
        dep.wait_leader()
        names = [f"churn-{i}" for i in range(a.namespaces)]
        with tenant_namespaces(cl, names):
            c = Churn(
                cl,
                names,
                dep,
                a.cycles,
                a.run_s,
                a.term_s,
                a.bound,
                a.suspend_every,
                out=lambda s: print(s, flush=True),
            )
            try:
                ok = c.run()
                c.report()
            finally:
                if a.controller_log:
                    with open(a.controller_log, "w") as f:
                        f.write(dep.logs())
    print(f"churn: {time.monotonic() - t_all:.0f} s in all (cluster up and down included)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
