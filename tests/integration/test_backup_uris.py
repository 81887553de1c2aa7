"""One definition of a backup URI, so the CRD and the worker never disagree: every row of
tests/data/backup_uris.tsv (uri, accepted yes|no, why) goes through a real
kube-apiserver with the TrainingJob CRD (a server-side dry run of a job whose
spec.checkpoint.uri is the row's URI) and through the worker's own parser
(tests/integration/backup_uri_check, s3_location_parse), and both verdicts
must be the table's. The controller is held to the same table by
tests/unit/test_reconcile.c (validate_backup_uri_table); the grammar is
include/common/ctrain/backup_uri.h's."""
import copy
import json
import re
import subprocess

import pytest

from clusterlib import BUILD, ROOT

TABLE = ROOT / "tests/data/backup_uris.tsv"
CHECK = BUILD / "tests/integration/backup_uri_check"

JOB = {
    "apiVersion": "ctrain.dev/v1alpha1",
    "kind": "TrainingJob",
    "metadata": {"name": "uri"},
    "spec": {
        "replicaSpecs": {
            "Worker": {"replicas": 1,
                       "template": {"spec": {"containers": [{"name": "w", "image": "x"}]}}},
        },
        "checkpoint": {"uri": None, "credentialsSecret": "s3-creds"},
    },
}


def decode(uri):
    """The table's escapes: \\xNN an ASCII byte, \\\\ a backslash (as tests/unit/backup_uris.h)."""
    def one(m):
        if m.group(1) == "\\":
            return "\\"
        c = int(m.group(1)[1:], 16)
        assert 0 < c < 0x80, m.group(0)
        return chr(c)
    return re.sub(r"\\(\\|x[0-9a-fA-F]{2})", one, uri)


def rows():
    out = []
    for n, line in enumerate(TABLE.read_text(encoding="utf-8").split("\n"), 1):
        if not line or line.startswith("#"):
            continue
        uri, accepted, why = line.split("\t")
        assert accepted in ("yes", "no"), f"{TABLE}:{n}: {accepted!r}"
        out.append((n, decode(uri), accepted == "yes", why))
    return out


def worker_verdicts():
    if not CHECK.exists():
        pytest.fail(f"{CHECK} is not built: build {BUILD} first")
    p = subprocess.run([str(CHECK), str(TABLE)], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    got = {}
    for line in p.stdout.splitlines():
        n, verdict, msg = line.split("\t", 2)
        got[int(n)] = (verdict == "yes", msg)
    return got


def apiserver_verdict(cluster, ns, n, uri):
    obj = copy.deepcopy(JOB)
    obj["metadata"]["name"] = f"uri-{n}"
    obj["spec"]["checkpoint"]["uri"] = uri
    p = cluster.kubectl("create", "--dry-run=server", "-n", ns, "-f", "-", input=json.dumps(obj),
                        check=False)
    if p.returncode == 0:
        assert "created (server dry run)" in p.stdout, p.stdout
        return True, ""
    # Refused for the URI, not for anything else of the job.
    assert "is invalid" in p.stderr and "spec.checkpoint.uri" in p.stderr, p.stderr
    return False, p.stderr.strip()


def test_one_table_apiserver_and_worker_agree(crd, namespace):
    table = rows()
    assert len(table) >= 60
    must = ["s3://a_b", "gs://" + "a" * 40 + "." + "b" * 23, "s3://192.168.5.4", "s3://a..b",
            "s3://My-Bucket", "s3://bucket-/p", "s3://xn--bucket", "s3://bucket/my prefix",
            "s3://bucket/", "s3://bucket/runs/a/"]
    uris = {u for _, u, _, _ in table}
    for u in must:
        assert u in uris, f"the table lacks {u!r}"
    assert any(u.startswith("gs://") and len(u) == 5 + 223 for u in uris), "a 223-char gs:// name"
    assert any(len(u) == 961 for u in uris), "an overlong URI"

    worker = worker_verdicts()
    assert sorted(worker) == [n for n, _, _, _ in table]
    wrong = []
    for n, uri, want, why in table:
        api, api_msg = apiserver_verdict(crd, namespace, n, uri)
        wk, wk_msg = worker[n]
        mark = "" if api == want == wk else "  <-- disagrees"
        print(f"{n:3} table {'yes' if want else 'no ':3} apiserver {'yes' if api else 'no ':3} "
              f"worker {'yes' if wk else 'no ':3} {why}{mark}")
        if mark:
            wrong.append(f"{TABLE.name}:{n}: {uri[:120]!r} ({why}): table {want}, apiserver {api}, "
                         f"worker {wk}\n  apiserver: {api_msg[-400:]}\n  worker: {wk_msg[:400]}")
    print(f"{len(table)} rows, {sum(w for _, _, w, _ in table)} accepted, "
          f"{len(wrong)} disagreeing")
    assert not wrong, "\n".join(wrong)
