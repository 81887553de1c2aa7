/* test_ctl_ownership.c - whose an object is (controller/ownership.h): the
 * rule itself, case by case, then a property test of the pass built on it.
 *
 * The property test draws random worlds (a seeded PRNG; the seed is printed
 * and CTRAIN_PROPERTY_SEED overrides it, CTRAIN_PROPERTY_WORLDS the count,
 * CTRAIN_PROPERTY_WORLD=i replays world i alone and prints it): 2-3
 * namespaces, TrainingJobs of a small pool of names (so namesakes across
 * namespaces happen; some deleting), pods with every kind of ownerReference
 * (the job's uid, another namespace's job, an earlier incarnation of the
 * job, a TFJob namesake, a ReplicaSet, non-controller references, none) and
 * spoofed labels, finalizers, phases and deletions. For each job it does
 * what the controller does (controller/ctl_pass.c sync_job and
 * release_orphans; controller/executor.c exec_name_taken): the candidates from
 * the owner-name index (half the time with the owner-uid index's too, which
 * crosses namespaces: the rule must not depend on the index), own_split,
 * recon_reconcile over the job's own pods, the release of an earlier
 * incarnation's pods, the executor's AlreadyExists handling; and for each
 * kind and name with no live job, the release of its pods. It checks, by
 * an oracle written from the rule's text (spec_verdict), never by calling
 * the rule:
 *   (a) DeletePod / RemoveFinalizer / DeleteJob name (name and uid) an
 *       object of the job's own: its namespace, its controller uid;
 *   (b) the new status.attempt is at most the old one or the attempt
 *       labels of the job's own collective pods, plus one for a gang
 *       restart of this pass: a decoy's label never raises it;
 *   (c) one attempt's pods a pass (the pass's attempt), each the job's own;
 *   (d) the pods whose finalizer is released are exactly the going pods
 *       with our finalizer whose controller is the kind and name with
 *       another uid, in that namespace: none of another namespace or kind;
 *   (e) a create that meets the name taken is counted done only on the
 *       job's own pod, deletes only an earlier incarnation's;
 *   (f) the split puts each candidate where the rule says.
 * The checker takes the rule (split and classify) as a parameter, so
 * planted_bug_is_caught runs it over broken copies of the rule and must see
 * each one fail one of (a)-(e). */
#include "test.h"

#include <stdarg.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "controller/ownership.h"
#include "controller/podbuild.h"
#include "controller/reconcile.h"
#include "ctrain/json.h"
#include "ctrain/kube_time.h"

#define NOW     1700000000LL
#define TJ_API  "ctrain.dev/v1alpha1"
#define TJ_KIND "TrainingJob"
#define TF_API  "kubeflow.org/v1"
#define TF_KIND "TFJob"

/* ---- the rule, case by case ------------------------------------------------ */

static cJSON *parse(const char *text) {
  cJSON *j = cJSON_Parse(text);
  if (!j)
    TEST_FAIL_("not JSON: %s", text);
  return j;
}

/* A pod `p` in `ns` with the given ownerReferences (JSON array text, or
 * NULL: none) and labels (JSON object text, or NULL). */
static cJSON *pod_in(const char *ns, const char *refs, const char *labels) {
  char text[2048];
  snprintf(
      text, sizeof(text),
      "{\"metadata\":{\"name\":\"tj-worker-0\",\"namespace\":\"%s\",\"uid\":\"pod-uid\"%s%s%s%s}}",
      ns, refs ? ",\"ownerReferences\":" : "", refs ? refs : "", labels ? ",\"labels\":" : "",
      labels ? labels : "");
  return parse(text);
}

/* An ownerReference (JSON text) to api/kind/name/uid; controller: "true",
 * "false" or NULL (absent). */
static const char *ref(char *buf, size_t len, const char *api, const char *kind, const char *name,
                       const char *uid, const char *controller) {
  snprintf(buf, len, "{\"apiVersion\":\"%s\",\"kind\":\"%s\",\"name\":\"%s\",\"uid\":\"%s\"%s%s}",
           api, kind, name, uid, controller ? ",\"controller\":" : "",
           controller ? controller : "");
  return buf;
}

static const own_job JOB_A = {
    .ns = "team-a", .name = "tj", .uid = "uid-1", .api_version = TJ_API, .kind = TJ_KIND};

/* own_classify of a pod in `ns` with the single ownerReference given. */
static own_verdict classify1(const char *ns, const char *api, const char *kind, const char *name,
                             const char *uid, const char *controller) {
  char r[512], refs[520];
  ref(r, sizeof(r), api, kind, name, uid, controller);
  snprintf(refs, sizeof(refs), "[%s]", r);
  cJSON *pod = pod_in(ns, refs, NULL);
  own_verdict v = own_classify(pod, &JOB_A);
  ASSERT_EQ(own_is_mine(pod, &JOB_A), v == OWN_MINE);
  cJSON_Delete(pod);
  return v;
}

TEST(mine_is_namespace_and_controller_uid) {
  ASSERT_EQ(classify1("team-a", TJ_API, TJ_KIND, "tj", "uid-1", "true"), OWN_MINE);
  /* The reference names the job whole: the uid under another name or kind
   * is no one's (the owner-name index would not find it for the job). */
  ASSERT_EQ(classify1("team-a", TJ_API, TJ_KIND, "other", "uid-1", "true"), OWN_FOREIGN);
  ASSERT_EQ(classify1("team-a", "kubeflow.org/v1", "TFJob", "tj", "uid-1", "true"), OWN_FOREIGN);
  char r[512], refs[520];
  ref(r, sizeof(r), TJ_API, TJ_KIND, "tj", "uid-1", "true");
  snprintf(refs, sizeof(refs), "[%s]", r);
  cJSON *pod = pod_in("team-a", refs, NULL);
  ASSERT_NOT_NULL(own_controller_ref(pod));
  ASSERT_STR_EQ(own_controller_uid(pod), "uid-1");
  ASSERT_STR_EQ(ctrain_json_str(own_controller_ref(pod), "name"), "tj");
  cJSON_Delete(pod);
}

TEST(other_namespace_with_the_uid_is_foreign) {
  ASSERT_EQ(classify1("team-b", TJ_API, TJ_KIND, "tj", "uid-1", "true"), OWN_FOREIGN);
  /* nor an earlier incarnation: another namespace's job is another job */
  ASSERT_EQ(classify1("team-b", TJ_API, TJ_KIND, "tj", "uid-0", "true"), OWN_FOREIGN);
  /* no namespace at all */
  cJSON *pod = parse("{\"metadata\":{\"name\":\"p\",\"ownerReferences\":[{\"apiVersion\":\"" TJ_API
                     "\",\"kind\":\"" TJ_KIND
                     "\",\"name\":\"tj\",\"uid\":\"uid-1\",\"controller\":true}]}}");
  ASSERT_EQ(own_classify(pod, &JOB_A), OWN_FOREIGN);
  cJSON_Delete(pod);
}

TEST(non_controller_ref_is_foreign) {
  ASSERT_EQ(classify1("team-a", TJ_API, TJ_KIND, "tj", "uid-1", "false"), OWN_FOREIGN);
  ASSERT_EQ(classify1("team-a", TJ_API, TJ_KIND, "tj", "uid-1", NULL), OWN_FOREIGN);
  /* a string is not the boolean */
  ASSERT_EQ(classify1("team-a", TJ_API, TJ_KIND, "tj", "uid-1", "\"true\""), OWN_FOREIGN);
  ASSERT_EQ(classify1("team-a", TJ_API, TJ_KIND, "tj", "uid-0", "false"), OWN_FOREIGN);
  cJSON *pod = pod_in("team-a",
                      "[{\"apiVersion\":\"" TJ_API "\",\"kind\":\"" TJ_KIND
                      "\",\"name\":\"tj\",\"uid\":\"uid-1\",\"controller\":false}]",
                      NULL);
  ASSERT_NULL(own_controller_ref(pod));
  ASSERT_NULL(own_controller_uid(pod));
  cJSON_Delete(pod);
}

TEST(first_controller_ref_decides) {
  /* a non-controller ref naming the job does not help a pod whose
   * controller is someone else */
  cJSON *pod = pod_in("team-a",
                      "[{\"apiVersion\":\"" TJ_API "\",\"kind\":\"" TJ_KIND
                      "\",\"name\":\"tj\",\"uid\":\"uid-1\"},"
                      "{\"apiVersion\":\"apps/v1\",\"kind\":\"ReplicaSet\",\"name\":\"tj\","
                      "\"uid\":\"rs-1\",\"controller\":true}]",
                      NULL);
  ASSERT_EQ(own_classify(pod, &JOB_A), OWN_FOREIGN);
  ASSERT_STR_EQ(own_controller_uid(pod), "rs-1");
  cJSON_Delete(pod);
  /* after a non-controller ref of another owner, the controller is the job */
  pod = pod_in("team-a",
               "[{\"apiVersion\":\"apps/v1\",\"kind\":\"ReplicaSet\",\"name\":\"x\","
               "\"uid\":\"rs-1\"},{\"apiVersion\":\"" TJ_API "\",\"kind\":\"" TJ_KIND
               "\",\"name\":\"tj\",\"uid\":\"uid-1\",\"controller\":true}]",
               NULL);
  ASSERT_EQ(own_classify(pod, &JOB_A), OWN_MINE);
  cJSON_Delete(pod);
}

TEST(no_owner_references_is_foreign) {
  cJSON *pod = pod_in("team-a", NULL, NULL);
  ASSERT_EQ(own_classify(pod, &JOB_A), OWN_FOREIGN);
  ASSERT_NULL(own_controller_ref(pod));
  cJSON_Delete(pod);
  pod = pod_in("team-a", "[]", NULL);
  ASSERT_EQ(own_classify(pod, &JOB_A), OWN_FOREIGN);
  cJSON_Delete(pod);
  /* no metadata, not an object, NULL */
  pod = parse("{}");
  ASSERT_EQ(own_classify(pod, &JOB_A), OWN_FOREIGN);
  cJSON_Delete(pod);
  pod = parse("[1]");
  ASSERT_EQ(own_classify(pod, &JOB_A), OWN_FOREIGN);
  cJSON_Delete(pod);
  ASSERT_EQ(own_classify(NULL, &JOB_A), OWN_FOREIGN);
  ASSERT_NULL(own_controller_ref(NULL));
  /* a controller ref without a uid */
  pod = pod_in("team-a",
               "[{\"apiVersion\":\"" TJ_API "\",\"kind\":\"" TJ_KIND
               "\",\"name\":\"tj\",\"controller\":true}]",
               NULL);
  ASSERT_EQ(own_classify(pod, &JOB_A), OWN_FOREIGN);
  cJSON_Delete(pod);
}

TEST(job_without_uid_owns_nothing) {
  char r[512], refs[520];
  ref(r, sizeof(r), TJ_API, TJ_KIND, "tj", "", "true");
  snprintf(refs, sizeof(refs), "[%s]", r);
  cJSON *pod = pod_in("team-a", refs, NULL);
  own_job j = JOB_A;
  j.uid = "";
  ASSERT_EQ(own_classify(pod, &j), OWN_FOREIGN);
  j.uid = NULL;
  ASSERT_EQ(own_classify(pod, &j), OWN_FOREIGN);
  ASSERT_EQ(own_classify(pod, NULL), OWN_FOREIGN);
  cJSON_Delete(pod);
}

TEST(same_kind_and_name_other_uid_is_earlier) {
  ASSERT_EQ(classify1("team-a", TJ_API, TJ_KIND, "tj", "uid-0", "true"), OWN_EARLIER);
  /* another version of the same group is the same kind */
  ASSERT_EQ(classify1("team-a", "ctrain.dev/v1", TJ_KIND, "tj", "uid-0", "true"), OWN_EARLIER);
  /* another name, kind or group is not */
  ASSERT_EQ(classify1("team-a", TJ_API, TJ_KIND, "tj2", "uid-0", "true"), OWN_FOREIGN);
  ASSERT_EQ(classify1("team-a", TJ_API, "TrainingJobs", "tj", "uid-0", "true"), OWN_FOREIGN);
  ASSERT_EQ(classify1("team-a", "ctrain.dev.evil/v1alpha1", TJ_KIND, "tj", "uid-0", "true"),
            OWN_FOREIGN);
  ASSERT_EQ(classify1("team-a", "ctrain.de/v1alpha1", TJ_KIND, "tj", "uid-0", "true"), OWN_FOREIGN);
  ASSERT_EQ(classify1("team-a", "apps/v1", "ReplicaSet", "tj", "uid-0", "true"), OWN_FOREIGN);
}

TEST(tfjob_namesake_is_foreign) {
  ASSERT_EQ(classify1("team-a", TF_API, TF_KIND, "tj", "tf-1", "true"), OWN_FOREIGN);
  /* TFJob kind, TrainingJob's group, and the other way round */
  ASSERT_EQ(classify1("team-a", TJ_API, TF_KIND, "tj", "tf-1", "true"), OWN_FOREIGN);
  ASSERT_EQ(classify1("team-a", TF_API, TJ_KIND, "tj", "tf-1", "true"), OWN_FOREIGN);
  /* for a TFJob, an earlier TFJob of its name is earlier, a TrainingJob foreign */
  own_job tf = {
      .ns = "team-a", .name = "tj", .uid = "tf-2", .api_version = TF_API, .kind = TF_KIND};
  cJSON *pod = pod_in("team-a",
                      "[{\"apiVersion\":\"" TF_API "\",\"kind\":\"" TF_KIND
                      "\",\"name\":\"tj\",\"uid\":\"tf-1\",\"controller\":true}]",
                      NULL);
  ASSERT_EQ(own_classify(pod, &tf), OWN_EARLIER);
  cJSON_Delete(pod);
  pod = pod_in("team-a",
               "[{\"apiVersion\":\"" TJ_API "\",\"kind\":\"" TJ_KIND
               "\",\"name\":\"tj\",\"uid\":\"uid-1\",\"controller\":true}]",
               NULL);
  ASSERT_EQ(own_classify(pod, &tf), OWN_FOREIGN);
  cJSON_Delete(pod);
}

TEST(labels_never_matter) {
  const char *claim = "{\"ctrain.dev/job-name\":\"tj\",\"ctrain.dev/attempt\":\"9\","
                      "\"ctrain.dev/replica-type\":\"worker\",\"ctrain.dev/replica-index\":\"0\"}";
  cJSON *pod = pod_in("team-a", NULL, claim);
  ASSERT_EQ(own_classify(pod, &JOB_A), OWN_FOREIGN);
  cJSON_Delete(pod);
  pod = pod_in("team-a",
               "[{\"apiVersion\":\"" TJ_API "\",\"kind\":\"" TJ_KIND
               "\",\"name\":\"tj\",\"uid\":\"uid-1\"}]",
               claim);
  ASSERT_EQ(own_classify(pod, &JOB_A), OWN_FOREIGN);
  cJSON_Delete(pod);
  pod = pod_in("team-b",
               "[{\"apiVersion\":\"" TJ_API "\",\"kind\":\"" TJ_KIND
               "\",\"name\":\"tj\",\"uid\":\"uid-1\",\"controller\":true}]",
               claim);
  ASSERT_EQ(own_classify(pod, &JOB_A), OWN_FOREIGN);
  cJSON_Delete(pod);
  /* and a pod of the job labelled for another job is still the job's */
  pod = pod_in("team-a",
               "[{\"apiVersion\":\"" TJ_API "\",\"kind\":\"" TJ_KIND
               "\",\"name\":\"tj\",\"uid\":\"uid-1\",\"controller\":true}]",
               "{\"ctrain.dev/job-name\":\"other\",\"ctrain.dev/attempt\":\"x\"}");
  ASSERT_EQ(own_classify(pod, &JOB_A), OWN_MINE);
  cJSON_Delete(pod);
}

TEST(split_partitions_copies) {
  cJSON *cands = parse(
      "[{\"metadata\":{\"name\":\"m1\",\"namespace\":\"team-a\",\"ownerReferences\":[{"
      "\"apiVersion\":\"" TJ_API "\",\"kind\":\"" TJ_KIND "\",\"name\":\"tj\",\"uid\":\"uid-1\","
      "\"controller\":true}]}},"
      "{\"metadata\":{\"name\":\"e1\",\"namespace\":\"team-a\",\"ownerReferences\":[{"
      "\"apiVersion\":\"" TJ_API "\",\"kind\":\"" TJ_KIND "\",\"name\":\"tj\",\"uid\":\"uid-0\","
      "\"controller\":true}]}},"
      "{\"metadata\":{\"name\":\"f1\",\"namespace\":\"team-b\",\"ownerReferences\":[{"
      "\"apiVersion\":\"" TJ_API "\",\"kind\":\"" TJ_KIND "\",\"name\":\"tj\",\"uid\":\"uid-1\","
      "\"controller\":true}]}},"
      "{\"metadata\":{\"name\":\"f2\",\"namespace\":\"team-a\",\"ownerReferences\":[{"
      "\"apiVersion\":\"" TF_API "\",\"kind\":\"" TF_KIND "\",\"name\":\"tj\",\"uid\":\"tf-1\","
      "\"controller\":true}]}},"
      "{\"metadata\":{\"name\":\"f3\",\"namespace\":\"team-a\",\"labels\":{"
      "\"ctrain.dev/job-name\":\"tj\"}}},"
      "{\"metadata\":{\"name\":\"m2\",\"namespace\":\"team-a\",\"ownerReferences\":[{"
      "\"apiVersion\":\"" TJ_API "\",\"kind\":\"" TJ_KIND "\",\"name\":\"tj\",\"uid\":\"uid-1\","
      "\"controller\":true}]}}]");
  cJSON *mine = NULL, *earlier = NULL;
  ASSERT_OK(own_split(cands, &JOB_A, &mine, &earlier));
  ASSERT_EQ(cJSON_GetArraySize(mine), 2);
  ASSERT_EQ(cJSON_GetArraySize(earlier), 1);
  ASSERT_STR_EQ(ctrain_json_str(ctrain_json_get(cJSON_GetArrayItem(mine, 0), "metadata"), "name"),
                "m1");
  ASSERT_STR_EQ(ctrain_json_str(ctrain_json_get(cJSON_GetArrayItem(mine, 1), "metadata"), "name"),
                "m2");
  ASSERT_STR_EQ(
      ctrain_json_str(ctrain_json_get(cJSON_GetArrayItem(earlier, 0), "metadata"), "name"), "e1");
  /* copies: the candidates can go */
  ASSERT(cJSON_GetArrayItem(mine, 0) != cJSON_GetArrayItem(cands, 0));
  cJSON_Delete(cands);
  ASSERT_STR_EQ(ctrain_json_str(ctrain_json_get(cJSON_GetArrayItem(mine, 0), "metadata"), "name"),
                "m1");
  cJSON_Delete(mine);
  cJSON_Delete(earlier);
  /* without `earlier`; an empty or absent list */
  cands = parse("[]");
  ASSERT_OK(own_split(cands, &JOB_A, &mine, NULL));
  ASSERT(cJSON_IsArray(mine));
  ASSERT_EQ(cJSON_GetArraySize(mine), 0);
  cJSON_Delete(mine);
  cJSON_Delete(cands);
  ASSERT_OK(own_split(NULL, &JOB_A, &mine, &earlier));
  ASSERT_EQ(cJSON_GetArraySize(mine), 0);
  ASSERT_EQ(cJSON_GetArraySize(earlier), 0);
  cJSON_Delete(mine);
  cJSON_Delete(earlier);
}

TEST(describe_names_the_controller) {
  char buf[256];
  cJSON *pod = pod_in("team-a", NULL, NULL);
  own_describe(pod, buf, sizeof(buf));
  ASSERT_STR_EQ(buf, "no controller ownerReference");
  cJSON_Delete(pod);
  pod = pod_in("team-a",
               "[{\"apiVersion\":\"" TJ_API "\",\"kind\":\"" TJ_KIND
               "\",\"name\":\"tj\",\"uid\":\"uid-1\"}]",
               NULL);
  own_describe(pod, buf, sizeof(buf));
  ASSERT_STR_EQ(buf, "no controller ownerReference");
  cJSON_Delete(pod);
  pod = pod_in("team-b",
               "[{\"apiVersion\":\"" TF_API "\",\"kind\":\"" TF_KIND
               "\",\"name\":\"tj\",\"uid\":\"tf-1\",\"controller\":true}]",
               NULL);
  own_describe(pod, buf, sizeof(buf));
  ASSERT_STR_EQ(buf, "controlled by TFJob team-b/tj uid tf-1");
  /* a short buffer is cut, NUL-terminated */
  memset(buf, 'x', sizeof(buf));
  own_describe(pod, buf, 12);
  ASSERT_EQ(strlen(buf), 11);
  cJSON_Delete(pod);
  pod = pod_in("team-a", "[{\"controller\":true}]", NULL);
  own_describe(pod, buf, sizeof(buf));
  ASSERT_STR_EQ(buf, "controlled by ? team-a/? uid ?");
  cJSON_Delete(pod);
}

/* ---- the property test ------------------------------------------------------ */

/* splitmix64: small, seedable, the same sequence everywhere. */
typedef struct {
  uint64_t s;
} prng;

static uint64_t prng_next(prng *r) {
  uint64_t z = (r->s += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

static int rnd(prng *r, int n) {
  return (int)(prng_next(r) % (uint64_t)n);
}

static int chance(prng *r, int pct) {
  return rnd(r, 100) < pct;
}

/* The seed of world `index` of a run seeded `seed`: any world replays alone. */
static uint64_t world_seed(uint64_t seed, int index) {
  prng r = {seed ^ (0xd1b54a32d192ed03ULL * (uint64_t)(index + 1))};
  return prng_next(&r);
}

/* The rule under test: the product's, or a broken copy. */
typedef ctrain_err (*split_fn)(const cJSON *cands, const own_job *j, cJSON **mine, cJSON **earlier);
typedef own_verdict (*classify_fn)(const cJSON *obj, const own_job *j);
typedef struct {
  const char *what;
  split_fn split;       /* the pass's (ctl_pass.c) */
  classify_fn classify; /* the executor's on AlreadyExists (executor.c) */
} own_rule;

static const own_rule REAL_RULE = {"controller/ownership.c", own_split, own_classify};

static const char *const NAMESPACES[] = {"team-a", "team-b", "team-c"};
static const char *const NAMES[] = {"tj", "mnist", "bert"};
#define N_NAMES   3
#define MAX_JOBS  (3 * N_NAMES)
#define FINALIZER PODBUILD_FINALIZER

typedef struct {
  const char *ns, *name;
  char uid[32];
  int deleting, attempt, restarts;
  cJSON *obj; /* the TrainingJob as the apiserver returns it */
} wjob;

typedef struct {
  int n_ns;
  wjob jobs[MAX_JOBS];
  int n_jobs;
  cJSON *pods; /* every pod of the cluster */
  int seq;     /* uids */
} wworld;

/* What one run of the checker saw: violations by invariant, and how often
 * the interesting cases came up (so a generator that stops making them
 * fails the test rather than passing it vacuously). */
enum { INV_A, INV_B, INV_C, INV_D, INV_E, INV_F, N_INV };
static const char INV_NAMES[N_INV] = {'a', 'b', 'c', 'd', 'e', 'f'};

typedef struct {
  int violations[N_INV];
  char first[N_INV][1024]; /* each invariant's first violation */
  /* coverage */
  long jobs, passes, deletes, finalizers_removed, creates, creates_taken, taken_mine, taken_unseen,
      taken_earlier, taken_foreign, earlier_deleted, released_earlier, released_orphans,
      decoys_in_candidates, foreign_candidates, cross_ns_candidates, decoy_attempt_above,
      restarts_seen;
} tally;

static void violate(tally *t, int inv, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void violate(tally *t, int inv, const char *fmt, ...) {
  if (!t->violations[inv]++) {
    int n = snprintf(t->first[inv], sizeof(t->first[inv]), "(%c) ", INV_NAMES[inv]);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(t->first[inv] + n, sizeof(t->first[inv]) - (size_t)n, fmt, ap);
    va_end(ap);
  }
}

/* Violations of the invariants in `mask` (bit i: INV_NAMES[i]). */
static int violated(const tally *t, unsigned mask) {
  int n = 0;
  for (int i = 0; i < N_INV; i++)
    n += (mask >> i & 1) ? t->violations[i] : 0;
  return n;
}

/* The first violation met, of the behaviour (a-e) before the split's (f). */
static const char *first_violation(const tally *t) {
  for (int i = 0; i < N_INV; i++)
    if (t->violations[i])
      return t->first[i];
  return "";
}

#define ALL_INV       ((1u << N_INV) - 1)
#define BEHAVIOUR_INV (ALL_INV & ~(1u << INV_F))

static const cJSON *md(const cJSON *obj) {
  return ctrain_json_get(obj, "metadata");
}

static const char *md_s(const cJSON *obj, const char *k) {
  return ctrain_json_str(md(obj), k);
}

static int deleting(const cJSON *pod) {
  const cJSON *dt = ctrain_json_get(md(pod), "deletionTimestamp");
  return dt && !cJSON_IsNull(dt);
}

/* The index of our finalizer in the pod's finalizers, or -1. */
static int finalizer_index(const cJSON *pod) {
  int i = 0;
  const cJSON *f;
  cJSON_ArrayForEach(f, ctrain_json_get(md(pod), "finalizers")) {
    if (cJSON_IsString(f) && !strcmp(f->valuestring, FINALIZER))
      return i;
    i++;
  }
  return -1;
}

static int str_eq(const char *a, const char *b) {
  return a && b && !strcmp(a, b);
}

/* Whether two apiVersions name the same group ("ctrain.dev" of "ctrain.dev/v1"). */
static int same_api_group(const char *a, const char *b) {
  if (!a || !b)
    return 0;
  size_t la = strcspn(a, "/"), lb = strcspn(b, "/");
  return la == lb && !strncmp(a, b, la);
}

/* The oracle: the rule as controller/ownership.h states it, written again
 * here. An object is the job's when it is in the job's namespace and its
 * controller ownerReference (the first with controller: true) names the
 * job whole: its kind (group and kind), name and uid; an earlier
 * incarnation's when, in the job's namespace, that reference names a job
 * of the same kind and name with another uid; anyone else's otherwise (a
 * reference with the job's uid under another name or kind included). */
static own_verdict spec_verdict(const cJSON *obj, const char *ns, const char *name, const char *uid,
                                const char *api, const char *kind) {
  if (!str_eq(md_s(obj, "namespace"), ns) || !uid || !*uid)
    return OWN_FOREIGN;
  const cJSON *r, *ctl = NULL;
  cJSON_ArrayForEach(r, ctrain_json_get(md(obj), "ownerReferences")) {
    if (cJSON_IsTrue(ctrain_json_get(r, "controller"))) {
      ctl = r;
      break;
    }
  }
  const char *ruid = ctrain_json_str(ctl, "uid");
  if (!ruid || !*ruid)
    return OWN_FOREIGN;
  if (!str_eq(ctrain_json_str(ctl, "kind"), kind) || !str_eq(ctrain_json_str(ctl, "name"), name) ||
      !same_api_group(ctrain_json_str(ctl, "apiVersion"), api))
    return OWN_FOREIGN;
  return strcmp(ruid, uid) ? OWN_EARLIER : OWN_MINE;
}

static own_verdict spec_of_job(const cJSON *obj, const wjob *j) {
  return spec_verdict(obj, j->ns, j->name, j->uid, TJ_API, TJ_KIND);
}

static const char *verdict_name(own_verdict v) {
  return v == OWN_MINE ? "MINE" : v == OWN_EARLIER ? "EARLIER" : "FOREIGN";
}

static cJSON *pod_by_uid(const wworld *w, const char *uid) {
  cJSON *p;
  cJSON_ArrayForEach(p, w->pods) {
    if (str_eq(md_s(p, "uid"), uid))
      return p;
  }
  return NULL;
}

static cJSON *pod_by_name(const wworld *w, const char *ns, const char *name) {
  cJSON *p;
  cJSON_ArrayForEach(p, w->pods) {
    if (str_eq(md_s(p, "namespace"), ns) && str_eq(md_s(p, "name"), name))
      return p;
  }
  return NULL;
}

static const wjob *live_job(const wworld *w, const char *ns, const char *name) {
  for (int i = 0; i < w->n_jobs; i++)
    if (!strcmp(w->jobs[i].ns, ns) && !strcmp(w->jobs[i].name, name))
      return &w->jobs[i];
  return NULL;
}

/* ---- generating a world ---- */

static void put_time(cJSON *o, const char *k, int64_t t) {
  char ts[40];
  ASSERT_OK(kube_time_format(t, ts, sizeof(ts)));
  cJSON_AddStringToObject(o, k, ts);
}

#define TEMPLATE_JSON                                                                              \
  "{\"spec\":{\"containers\":[{\"name\":\"train\",\"image\":\"ctrain:dev\","                       \
  "\"ports\":[{\"containerPort\":2222}]}]}}"

static void add_replicas(cJSON *rs, const char *type, int n) {
  cJSON *o = cJSON_AddObjectToObject(rs, type);
  cJSON_AddNumberToObject(o, "replicas", n);
  cJSON_AddItemToObject(o, "template", parse(TEMPLATE_JSON));
}

/* A TrainingJob as the apiserver returns it, CRD defaults applied (the
 * shape of tests/unit/reconcile_world.h's world_init). */
static void gen_job(prng *r, wworld *w, const char *ns, const char *name) {
  static const char *const policies[] = {"OnFailure", "ExitCode", "Never"};
  wjob *j = &w->jobs[w->n_jobs++];
  j->ns = ns;
  j->name = name;
  snprintf(j->uid, sizeof(j->uid), "job-%d", w->seq++);
  j->deleting = chance(r, 20);
  j->attempt = 1 + rnd(r, 3);
  j->restarts = rnd(r, j->attempt);
  cJSON *o = j->obj = cJSON_CreateObject();
  cJSON_AddStringToObject(o, "apiVersion", TJ_API);
  cJSON_AddStringToObject(o, "kind", TJ_KIND);
  cJSON *m = cJSON_AddObjectToObject(o, "metadata");
  cJSON_AddStringToObject(m, "name", name);
  cJSON_AddStringToObject(m, "namespace", ns);
  cJSON_AddStringToObject(m, "uid", j->uid);
  cJSON_AddNumberToObject(m, "generation", 1);
  if (j->deleting) {
    put_time(m, "deletionTimestamp", NOW - rnd(r, 60));
    cJSON_AddItemToObject(m, "finalizers", parse("[\"foregroundDeletion\"]"));
  }
  cJSON *spec = cJSON_AddObjectToObject(o, "spec");
  cJSON *rs = cJSON_AddObjectToObject(spec, "replicaSpecs");
  if (chance(r, 25))
    add_replicas(rs, "Chief", 1);
  add_replicas(rs, "Worker", 1 + rnd(r, 3));
  if (chance(r, 10))
    add_replicas(rs, "Evaluator", 1);
  cJSON_AddNumberToObject(spec, "port", 2222);
  cJSON_AddStringToObject(spec, "restartPolicy", policies[rnd(r, 3)]);
  cJSON_AddNumberToObject(spec, "backoffLimit", rnd(r, 4));
  cJSON_AddFalseToObject(spec, "suspend");
  cJSON_AddStringToObject(spec, "cleanPodPolicy", chance(r, 50) ? "Running" : "All");
  cJSON_AddStringToObject(spec, "successPolicy", "ChiefOrWorker0");
  if (chance(r, 85)) { /* else a new job: no status yet (attempt 1) */
    cJSON *st = cJSON_AddObjectToObject(o, "status");
    cJSON_AddNumberToObject(st, "attempt", j->attempt);
    cJSON_AddNumberToObject(st, "restarts", j->restarts);
    cJSON_AddNumberToObject(st, "disruptions", 0);
    put_time(st, "startTime", NOW - 600);
  } else {
    j->attempt = 1;
    j->restarts = 0;
  }
}

static cJSON *owner_ref(const char *api, const char *kind, const char *name, const char *uid,
                        int controller) {
  cJSON *o = cJSON_CreateObject();
  cJSON_AddStringToObject(o, "apiVersion", api);
  cJSON_AddStringToObject(o, "kind", kind);
  cJSON_AddStringToObject(o, "name", name);
  cJSON_AddStringToObject(o, "uid", uid);
  if (controller >= 0) {
    cJSON_AddBoolToObject(o, "controller", controller);
    cJSON_AddBoolToObject(o, "blockOwnerDeletion", controller);
  }
  return o;
}

static const char *const TYPES[] = {"chief", "worker", "evaluator"};

/* The kinds of pods the world holds, by their controller. */
enum {
  P_OWN,        /* the job's: its namespace, controller uid */
  P_CROSS_NS,   /* a controller ref with a job's uid, in another namespace */
  P_EARLIER,    /* an earlier TrainingJob of the name (another uid) */
  P_TFJOB,      /* a TFJob of the name */
  P_NONCTL,     /* a non-controller ref naming a job and its uid */
  P_NONE,       /* no ownerReferences */
  P_OTHER_KIND, /* a ReplicaSet of the name */
  P_UID_ONLY,   /* the job's uid as controller, another name in the ref */
  N_P
};

static void gen_pod(prng *r, wworld *w) {
  const char *ns = NAMESPACES[rnd(r, w->n_ns)];
  const wjob *here[MAX_JOBS], *any = w->n_jobs ? &w->jobs[rnd(r, w->n_jobs)] : NULL;
  int n_here = 0;
  for (int i = 0; i < w->n_jobs; i++)
    if (!strcmp(w->jobs[i].ns, ns))
      here[n_here++] = &w->jobs[i];
  const wjob *mine = n_here ? here[rnd(r, n_here)] : NULL;
  int kind = rnd(r, N_P + 3); /* own pods three times as likely */
  if (kind >= N_P)
    kind = P_OWN;
  if ((kind == P_OWN || kind == P_UID_ONLY) && !mine)
    kind = P_NONE;
  if (kind == P_CROSS_NS || kind == P_NONCTL) {
    if (!any)
      kind = P_NONE;
  }
  /* the name the pod's owner goes by, which its pod name and labels use */
  const char *oname = NAMES[rnd(r, N_NAMES)];
  char uid[32];
  snprintf(uid, sizeof(uid), "x-%d", w->seq++);
  cJSON *refs = cJSON_CreateArray(), *ctl = NULL;
  int attempt_base = 1;
  switch (kind) {
  case P_OWN:
    oname = mine->name;
    ctl = owner_ref(TJ_API, TJ_KIND, oname, mine->uid, 1);
    attempt_base = mine->attempt;
    break;
  case P_UID_ONLY:
    ctl = owner_ref(TJ_API, TJ_KIND, NAMES[rnd(r, N_NAMES)], mine->uid, 1);
    oname = mine->name;
    attempt_base = mine->attempt;
    break;
  case P_CROSS_NS:
    oname = any->name;
    ctl = owner_ref(TJ_API, TJ_KIND, oname, any->uid, 1);
    attempt_base = any->attempt + 1 + rnd(r, 4);
    break;
  case P_EARLIER:
    ctl = owner_ref(chance(r, 25) ? "ctrain.dev/v1" : TJ_API, TJ_KIND, oname, uid, 1);
    attempt_base = 1 + rnd(r, 6);
    break;
  case P_TFJOB:
    ctl = owner_ref(TF_API, TF_KIND, oname, uid, 1);
    attempt_base = 1 + rnd(r, 6);
    break;
  case P_NONCTL:
    oname = any->name;
    ctl = owner_ref(TJ_API, TJ_KIND, oname, any->uid, chance(r, 50) ? 0 : -1);
    attempt_base = any->attempt + 1 + rnd(r, 4);
    break;
  case P_OTHER_KIND:
    ctl = owner_ref("apps/v1", "ReplicaSet", oname, uid, 1);
    attempt_base = 1 + rnd(r, 6);
    break;
  default:
    attempt_base = 1 + rnd(r, 6);
    break;
  }
  /* a second, non-controller reference now and then, before or after */
  cJSON *extra = NULL;
  if (chance(r, 25)) {
    const wjob *o = any;
    extra = o && chance(r, 60) ? owner_ref(TJ_API, TJ_KIND, o->name, o->uid, 0)
                               : owner_ref("v1", "ConfigMap", NAMES[rnd(r, N_NAMES)], "cm-1", -1);
  }
  if (extra && chance(r, 50)) {
    cJSON_AddItemToArray(refs, extra);
    extra = NULL;
  }
  if (ctl)
    cJSON_AddItemToArray(refs, ctl);
  if (extra)
    cJSON_AddItemToArray(refs, extra);
  /* the name: mostly one a job of the name would use */
  int type = rnd(r, 6);
  type = type < 1 ? 0 : type < 5 ? 1 : 2;
  int index = rnd(r, 4);
  char name[96];
  if (chance(r, 80))
    snprintf(name, sizeof(name), "%s-%s-%d", oname, TYPES[type], index);
  else
    snprintf(name, sizeof(name), "%s-x%d", oname, w->seq++);
  if (pod_by_name(w, ns, name)) { /* the apiserver keeps a name once a namespace */
    cJSON_Delete(refs);
    return;
  }
  cJSON *pod = cJSON_CreateObject();
  cJSON_AddStringToObject(pod, "apiVersion", "v1");
  cJSON_AddStringToObject(pod, "kind", "Pod");
  cJSON *m = cJSON_AddObjectToObject(pod, "metadata");
  cJSON_AddStringToObject(m, "name", name);
  cJSON_AddStringToObject(m, "namespace", ns);
  char puid[32];
  snprintf(puid, sizeof(puid), "pod-%d", w->seq++);
  cJSON_AddStringToObject(m, "uid", puid);
  if (cJSON_GetArraySize(refs))
    cJSON_AddItemToObject(m, "ownerReferences", refs);
  else
    cJSON_Delete(refs);
  /* labels: true to the name mostly, spoofed often */
  cJSON *l = cJSON_AddObjectToObject(m, "labels");
  if (chance(r, 90))
    cJSON_AddStringToObject(l, PODBUILD_LABEL_JOB, chance(r, 80) ? oname : NAMES[rnd(r, N_NAMES)]);
  if (chance(r, 90))
    cJSON_AddStringToObject(l, PODBUILD_LABEL_TYPE,
                            chance(r, 85)   ? TYPES[type]
                            : chance(r, 50) ? "ps"
                                            : TYPES[rnd(r, 3)]);
  if (chance(r, 90)) {
    char s[16];
    snprintf(s, sizeof(s), "%d", chance(r, 85) ? index : rnd(r, 5));
    cJSON_AddStringToObject(l, PODBUILD_LABEL_INDEX, s);
  }
  if (chance(r, 92)) {
    char s[16];
    int a = attempt_base;
    if (kind == P_OWN || kind == P_UID_ONLY)
      a = chance(r, 70) ? attempt_base : chance(r, 60) ? attempt_base - 1 : 1 + rnd(r, 5);
    snprintf(s, sizeof(s), "%d", a < 0 ? 0 : a);
    cJSON_AddStringToObject(l, PODBUILD_LABEL_ATTEMPT, s);
  }
  /* finalizers */
  int f = rnd(r, 10);
  if (f < 6)
    cJSON_AddItemToObject(m, "finalizers", parse("[\"" FINALIZER "\"]"));
  else if (f < 7)
    cJSON_AddItemToObject(m, "finalizers", parse("[\"example.com/keep\",\"" FINALIZER "\"]"));
  else if (f < 8)
    cJSON_AddItemToObject(m, "finalizers", parse("[\"example.com/keep\"]"));
  if (chance(r, 22)) {
    put_time(m, "deletionTimestamp", NOW - rnd(r, 90));
    cJSON_AddNumberToObject(m, "deletionGracePeriodSeconds", chance(r, 20) ? 0 : 30);
  }
  cJSON *spec = cJSON_AddObjectToObject(pod, "spec");
  cJSON_AddStringToObject(spec, "nodeName", chance(r, 50) ? "node-1" : "node-2");
  cJSON *st = cJSON_AddObjectToObject(pod, "status");
  int ph = rnd(r, 10);
  if (ph < 2) {
    cJSON_AddStringToObject(st, "phase", "Pending");
  } else if (ph < 6) {
    cJSON_AddStringToObject(st, "phase", "Running");
  } else if (ph < 7) {
    cJSON_AddStringToObject(st, "phase", "Succeeded");
  } else {
    static const int codes[] = {1, 42, 75, 137, 143};
    cJSON_AddStringToObject(st, "phase", "Failed");
    cJSON *cs = cJSON_AddArrayToObject(st, "containerStatuses");
    cJSON *c = cJSON_CreateObject();
    cJSON_AddItemToArray(cs, c);
    cJSON_AddStringToObject(c, "name", "train");
    cJSON *term = cJSON_AddObjectToObject(cJSON_AddObjectToObject(c, "state"), "terminated");
    cJSON_AddNumberToObject(term, "exitCode", codes[rnd(r, 5)]);
    cJSON_AddStringToObject(term, "reason", "Error");
    put_time(term, "finishedAt", NOW - 200);
  }
  cJSON_AddItemToArray(w->pods, pod);
}

static void gen_world(prng *r, wworld *w) {
  memset(w, 0, sizeof(*w));
  w->n_ns = 2 + rnd(r, 2);
  for (int n = 0; n < w->n_ns; n++)
    for (int i = 0; i < N_NAMES; i++)
      if (chance(r, 45))
        gen_job(r, w, NAMESPACES[n], NAMES[i]);
  w->pods = cJSON_CreateArray();
  int n_pods = 4 + rnd(r, 24);
  for (int i = 0; i < n_pods; i++)
    gen_pod(r, w);
}

static void free_world(wworld *w) {
  for (int i = 0; i < w->n_jobs; i++)
    cJSON_Delete(w->jobs[i].obj);
  cJSON_Delete(w->pods);
}

static void print_world(const wworld *w) {
  for (int i = 0; i < w->n_jobs; i++) {
    char *s = cJSON_PrintUnformatted(w->jobs[i].obj);
    fprintf(stderr, "  job %s\n", s ? s : "?");
    free(s);
  }
  const cJSON *p;
  cJSON_ArrayForEach(p, w->pods) {
    char *s = cJSON_PrintUnformatted(p);
    fprintf(stderr, "  pod %s\n", s ? s : "?");
    free(s);
  }
}

/* ---- the pass, as the controller does it ---- */

/* The pod informer's owner-name index (kube_informer_by_owner_name): the
 * pods of `ns` with an ownerReference (any kind, any uid) naming `name`.
 * With `by_uid`, also those anywhere with an ownerReference to `uid` (the
 * owner-uid index, kube_informer_by_owner, which crosses namespaces: what
 * the pass once read): the rule must hold whichever index feeds
 * it. With `everything`, every pod of the cluster. Copies. */
static cJSON *candidates(const wworld *w, const char *ns, const char *name, const char *uid,
                         int by_uid, int everything) {
  cJSON *out = cJSON_CreateArray();
  const cJSON *p;
  cJSON_ArrayForEach(p, w->pods) {
    int in = everything;
    const cJSON *r;
    cJSON_ArrayForEach(r, ctrain_json_get(md(p), "ownerReferences")) {
      in |= str_eq(md_s(p, "namespace"), ns) && str_eq(ctrain_json_str(r, "name"), name);
      in |= by_uid && uid && str_eq(ctrain_json_str(r, "uid"), uid);
    }
    if (in)
      cJSON_AddItemToArray(out, cJSON_Duplicate(p, 1));
  }
  return out;
}

/* release_pods (ctl_pass.c): of `pods`, those that are going and hold our
 * finalizer lose it. Marks each released pod's uid in `released`. */
static int released_by(const cJSON *pods, const char **released, int cap) {
  int n = 0;
  const cJSON *p;
  cJSON_ArrayForEach(p, pods) {
    if (!md_s(p, "name") || !md_s(p, "uid") || !deleting(p) || finalizer_index(p) < 0)
      continue;
    if (n < cap)
      released[n++] = md_s(p, "uid");
  }
  return n;
}

static int in_set(const char *const *set, int n, const char *uid) {
  for (int i = 0; i < n; i++)
    if (str_eq(set[i], uid))
      return 1;
  return 0;
}

/* (d): the release set of `kind` `ns`/`name` (`gone`: what the split left
 * as an earlier incarnation's; `uid`: the live job's, or NULL) is exactly
 * the pods of that namespace whose controller is that kind and name (with
 * another uid than the live job's), going, with our finalizer. */
static void check_release(const wworld *w, tally *t, const char *where, const cJSON *gone,
                          const char *ns, const char *name, const char *uid, const char *api,
                          const char *kind, long *count) {
  const char *rel[256];
  int n = released_by(gone, rel, 256);
  *count += n;
  for (int i = 0; i < n; i++) {
    const cJSON *p = pod_by_uid(w, rel[i]);
    own_verdict v = p ? spec_verdict(p, ns, name, uid ? uid : "-", api, kind) : OWN_FOREIGN;
    if (!p || v != OWN_EARLIER)
      violate(t, INV_D, "%s: releases the finalizer of pod %s/%s (uid %s), which is %s to %s %s/%s",
              where, p ? md_s(p, "namespace") : "?", p ? md_s(p, "name") : "?", rel[i],
              verdict_name(v), kind, ns, name);
  }
  const cJSON *p;
  cJSON_ArrayForEach(p, w->pods) {
    if (!deleting(p) || finalizer_index(p) < 0)
      continue;
    if (spec_verdict(p, ns, name, uid ? uid : "-", api, kind) != OWN_EARLIER)
      continue;
    if (!in_set(rel, n, md_s(p, "uid")))
      violate(t, INV_D, "%s: pod %s/%s (uid %s) of an earlier %s %s keeps our finalizer", where, ns,
              md_s(p, "name"), md_s(p, "uid"), kind, name);
  }
}

static ctrain_err fixed_token(void *ctx, const char *uid, int attempt, char *hex, size_t n) {
  (void)ctx;
  snprintf(hex, n, "tok-%s-%d", uid, attempt);
  return CTRAIN_OK;
}

static int label_int(const cJSON *pod, const char *label) {
  const char *s = ctrain_json_str(ctrain_json_get(md(pod), "labels"), label);
  if (!s || !*s || strlen(s) > 9)
    return -1;
  for (const char *c = s; *c; c++)
    if (*c < '0' || *c > '9')
      return -1;
  return atoi(s);
}

/* The highest attempt label of a collective (chief or worker) pod of the
 * job's own, by the oracle; 0: none. */
static int own_attempt_max(const wworld *w, const wjob *j) {
  int most = 0;
  const cJSON *p;
  cJSON_ArrayForEach(p, w->pods) {
    if (spec_of_job(p, j) != OWN_MINE)
      continue;
    const char *type = ctrain_json_str(ctrain_json_get(md(p), "labels"), PODBUILD_LABEL_TYPE);
    if (!str_eq(type, "chief") && !str_eq(type, "worker"))
      continue;
    int a = label_int(p, PODBUILD_LABEL_ATTEMPT);
    if (a > most)
      most = a;
  }
  return most;
}

static int64_t status_int(const cJSON *status, const char *k, int64_t dflt) {
  const cJSON *v = ctrain_json_get(status, k);
  return cJSON_IsNumber(v) ? (int64_t)v->valuedouble : dflt;
}

/* One job's pass: split, reconcile, release, the executor's creates. */
static void check_job(const own_rule *rule, const wworld *w, const wjob *j, prng *r, tally *t) {
  char where[160];
  snprintf(where, sizeof(where), "job %s/%s uid %s", j->ns, j->name, j->uid);
  own_job oj = {
      .ns = j->ns, .name = j->name, .uid = j->uid, .api_version = TJ_API, .kind = TJ_KIND};
  t->jobs++;
  int by_uid = chance(r, 50);
  cJSON *cands = candidates(w, j->ns, j->name, j->uid, by_uid, 0);
  cJSON *mine = NULL, *earlier = NULL;
  if (rule->split(cands, &oj, &mine, &earlier)) {
    violate(t, INV_F, "%s: split failed", where);
    cJSON_Delete(cands);
    return;
  }
  /* coverage: what the split had to turn away */
  const cJSON *p;
  cJSON_ArrayForEach(p, cands) {
    own_verdict v = spec_of_job(p, j);
    if (v == OWN_FOREIGN) {
      t->foreign_candidates++;
      t->cross_ns_candidates += !str_eq(md_s(p, "namespace"), j->ns);
      const char *jl = ctrain_json_str(ctrain_json_get(md(p), "labels"), PODBUILD_LABEL_JOB);
      t->decoys_in_candidates += str_eq(jl, j->name);
    }
    if (v != OWN_MINE && label_int(p, PODBUILD_LABEL_ATTEMPT) > j->attempt)
      t->decoy_attempt_above++;
  }
  /* (f): the split is the rule: every candidate in the set its verdict names */
  cJSON_ArrayForEach(p, mine) {
    own_verdict v = spec_of_job(p, j);
    if (v != OWN_MINE)
      violate(t, INV_F, "%s: split gives pod %s/%s (uid %s) as the job's; it is %s", where,
              md_s(p, "namespace"), md_s(p, "name"), md_s(p, "uid"), verdict_name(v));
  }
  cJSON_ArrayForEach(p, earlier) {
    own_verdict v = spec_of_job(p, j);
    if (v != OWN_EARLIER)
      violate(t, INV_F, "%s: split gives pod %s/%s (uid %s) as an earlier job's; it is %s", where,
              md_s(p, "namespace"), md_s(p, "name"), md_s(p, "uid"), verdict_name(v));
  }
  int n_mine = 0, n_earlier = 0;
  cJSON_ArrayForEach(p, cands) {
    own_verdict v = spec_of_job(p, j);
    n_mine += v == OWN_MINE;
    n_earlier += v == OWN_EARLIER;
  }
  if (cJSON_GetArraySize(mine) != n_mine || cJSON_GetArraySize(earlier) != n_earlier)
    violate(t, INV_F, "%s: split gives %d own and %d earlier of %d candidates; the rule: %d and %d",
            where, cJSON_GetArraySize(mine), cJSON_GetArraySize(earlier), cJSON_GetArraySize(cands),
            n_mine, n_earlier);

  /* (d), the live job: what sync_job's release_pods frees */
  check_release(w, t, where, earlier, j->ns, j->name, j->uid, TJ_API, TJ_KIND,
                &t->released_earlier);

  /* the pass */
  recon_expectations x;
  recon_expectations_init(&x);
  recon_result res = {0};
  char err[256] = "";
  recon_input in = {.job = j->obj,
                    .pods = mine,
                    .service = chance(r, 50) ? j->obj : NULL,
                    .token_attempt = chance(r, 50) ? j->attempt : 0,
                    .now = NOW,
                    .token = fixed_token,
                    .burst = chance(r, 20) ? 2 : 0};
  ctrain_err rc = recon_reconcile(&in, &x, &res, err, sizeof(err));
  t->passes++;
  if (rc) {
    violate(t, INV_F, "%s: recon_reconcile: %s", where, err);
    goto out;
  }
  const cJSON *old_status = ctrain_json_get(j->obj, "status");
  int64_t old_attempt = status_int(old_status, "attempt", 1);
  if (old_attempt < 1)
    old_attempt = 1;
  int64_t old_restarts = status_int(old_status, "restarts", 0),
          old_disruptions = status_int(old_status, "disruptions", 0);
  int restarted = status_int(res.status, "restarts", 0) > old_restarts ||
                  status_int(res.status, "disruptions", 0) > old_disruptions;
  t->restarts_seen += restarted;
  int own_max = own_attempt_max(w, j);
  int64_t bound = (own_max > old_attempt ? own_max : old_attempt) + restarted;
  /* (b) */
  int64_t new_attempt = status_int(res.status, "attempt", old_attempt);
  if (new_attempt > bound || res.attempt > bound)
    violate(t, INV_B,
            "%s: status.attempt %lld (pass attempt %d) above %lld: old status.attempt %lld, own "
            "pods' attempt labels at most %d%s",
            where, (long long)new_attempt, res.attempt, (long long)bound, (long long)old_attempt,
            own_max, restarted ? ", one gang restart" : "");
  int create_attempt = -1;
  for (size_t i = 0; i < res.n_actions; i++) {
    const recon_action *a = &res.actions[i];
    switch (a->kind) {
    case RECON_DELETE_POD:
    case RECON_REMOVE_FINALIZER: {
      /* (a): by name and uid, an object that is the job's own */
      const cJSON *pod = pod_by_uid(w, a->uid);
      own_verdict v = pod ? spec_of_job(pod, j) : OWN_FOREIGN;
      if (a->kind == RECON_DELETE_POD)
        t->deletes++;
      else
        t->finalizers_removed++;
      if (!pod || v != OWN_MINE || !str_eq(md_s(pod, "name"), a->name))
        violate(t, INV_A, "%s: %s %s (uid %s) names pod %s/%s, which is %s", where,
                recon_action_kind_name(a->kind), a->name, a->uid,
                pod ? md_s(pod, "namespace") : "(none)", pod ? md_s(pod, "name") : "(none)",
                verdict_name(v));
      else if (a->kind == RECON_REMOVE_FINALIZER && finalizer_index(pod) != a->index)
        violate(t, INV_A, "%s: RemoveFinalizer %s index %d; ours is at %d", where, a->name,
                a->index, finalizer_index(pod));
      break;
    }
    case RECON_DELETE_JOB:
      if (!str_eq(a->uid, j->uid) || !str_eq(a->name, j->name))
        violate(t, INV_A, "%s: DeleteJob %s uid %s", where, a->name, a->uid);
      break;
    case RECON_CREATE_POD: {
      t->creates++;
      /* (c): one attempt a pass, the pass's; the pod is the job's, in its namespace */
      if (create_attempt < 0)
        create_attempt = a->attempt;
      if (a->attempt != create_attempt || a->attempt != res.attempt || a->attempt > bound)
        violate(t, INV_C, "%s: CreatePod %s of attempt %d (pass attempt %d, first create's %d)",
                where, a->name, a->attempt, res.attempt, create_attempt);
      if (spec_of_job(a->object, j) != OWN_MINE ||
          label_int(a->object, PODBUILD_LABEL_ATTEMPT) != a->attempt)
        violate(t, INV_C, "%s: CreatePod %s builds a pod that is %s, attempt label %d", where,
                a->name, verdict_name(spec_of_job(a->object, j)),
                label_int(a->object, PODBUILD_LABEL_ATTEMPT));
      /* (e): the executor, on AlreadyExists (exec_name_taken) */
      const cJSON *there = pod_by_name(w, j->ns, a->name);
      if (!there)
        break;
      t->creates_taken++;
      own_verdict v = rule->classify(there, &oj), truth = spec_of_job(there, j);
      if (v == OWN_MINE) {
        t->taken_mine++;
        /* the job's by its uid, under a reference naming something else:
         * not in the owner-name index, so the pass never saw it */
        const cJSON *c;
        int seen = 0;
        cJSON_ArrayForEach(c, cands) {
          seen |= str_eq(md_s(c, "uid"), md_s(there, "uid"));
        }
        t->taken_unseen += !seen;
        if (truth != OWN_MINE)
          violate(t, INV_E, "%s: create of %s counted done on pod %s (uid %s), which is %s", where,
                  a->name, md_s(there, "name"), md_s(there, "uid"), verdict_name(truth));
      } else if (v == OWN_EARLIER) {
        t->taken_earlier++;
        if (!deleting(there)) {
          t->earlier_deleted++;
          if (truth != OWN_EARLIER)
            violate(t, INV_E, "%s: create of %s deletes pod %s (uid %s), which is %s", where,
                    a->name, md_s(there, "name"), md_s(there, "uid"), verdict_name(truth));
        }
      } else {
        t->taken_foreign++;
      }
      break;
    }
    default:
      break;
    }
  }
out:
  recon_result_free(&res);
  recon_expectations_free(&x);
  cJSON_Delete(mine);
  cJSON_Delete(earlier);
  cJSON_Delete(cands);
}

/* release_orphans (ctl_pass.c) for `kind` `ns`/`name` with no live job. */
static void check_orphans(const own_rule *rule, const wworld *w, const char *ns, const char *name,
                          const char *api, const char *kind, prng *r, tally *t) {
  char where[160];
  snprintf(where, sizeof(where), "deleted %s %s/%s", kind, ns, name);
  own_job j = {.ns = ns, .name = name, .uid = "-", .api_version = api, .kind = kind};
  cJSON *cands = candidates(w, ns, name, NULL, 0, chance(r, 30));
  cJSON *mine = NULL, *gone = NULL;
  if (rule->split(cands, &j, &mine, &gone)) {
    violate(t, INV_F, "%s: split failed", where);
  } else {
    check_release(w, t, where, gone, ns, name, NULL, api, kind, &t->released_orphans);
  }
  cJSON_Delete(mine);
  cJSON_Delete(gone);
  cJSON_Delete(cands);
}

/* One world: every live job's pass, every deleted job's release. */
static void check_world(const own_rule *rule, uint64_t seed, int index, tally *t, int print) {
  prng r = {world_seed(seed, index)};
  wworld w;
  gen_world(&r, &w);
  if (print)
    print_world(&w);
  for (int i = 0; i < w.n_jobs; i++)
    check_job(rule, &w, &w.jobs[i], &r, t);
  for (int n = 0; n < w.n_ns; n++)
    for (int i = 0; i < N_NAMES; i++) {
      if (!live_job(&w, NAMESPACES[n], NAMES[i]))
        check_orphans(rule, &w, NAMESPACES[n], NAMES[i], TJ_API, TJ_KIND, &r, t);
      check_orphans(rule, &w, NAMESPACES[n], NAMES[i], TF_API, TF_KIND, &r, t); /* never live */
    }
  free_world(&w);
}

/* Runs worlds [0, n) of `seed` (or world `only` alone when >= 0) over
 * `rule`; stops at the first world with a violation of an invariant of
 * `stop` and returns its index, or -1. */
static int run_worlds(const own_rule *rule, uint64_t seed, int n, int only, unsigned stop,
                      tally *t) {
  for (int i = only >= 0 ? only : 0; i < (only >= 0 ? only + 1 : n); i++) {
    check_world(rule, seed, i, t, only >= 0);
    if (violated(t, stop))
      return i;
  }
  return -1;
}

#define DEFAULT_SEED 0x0c7a1e40ULL
/* About 2 s in a release build; a sanitizer's is 5-10 times slower and
 * runs fewer (the planted bugs are all caught within the first 20). */
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define DEFAULT_WORLDS 800
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer) ||                         \
    __has_feature(memory_sanitizer)
#define DEFAULT_WORLDS 800
#endif
#endif
#ifndef DEFAULT_WORLDS
#define DEFAULT_WORLDS 3000
#endif
#define COVERAGE_WORLDS 800 /* from this many on, every case must have come up */

static uint64_t env_seed(void) {
  const char *s = getenv("CTRAIN_PROPERTY_SEED");
  return s && *s ? strtoull(s, NULL, 0) : DEFAULT_SEED;
}

static int env_int(const char *k, int dflt) {
  const char *s = getenv(k);
  return s && *s ? atoi(s) : dflt;
}

static double elapsed_s(const struct timespec *t0) {
  struct timespec t1;
  clock_gettime(CLOCK_MONOTONIC, &t1);
  return (double)(t1.tv_sec - t0->tv_sec) + (double)(t1.tv_nsec - t0->tv_nsec) / 1e9;
}

TEST(property_real_rule) {
  uint64_t seed = env_seed();
  int n = env_int("CTRAIN_PROPERTY_WORLDS", DEFAULT_WORLDS);
  int only = env_int("CTRAIN_PROPERTY_WORLD", -1);
  printf("# seed 0x%" PRIx64 " (CTRAIN_PROPERTY_SEED), %d worlds (CTRAIN_PROPERTY_WORLDS)\n", seed,
         n);
  fflush(stdout);
  struct timespec t0;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  tally t = {0};
  int bad = run_worlds(&REAL_RULE, seed, n, only, ALL_INV, &t);
  if (bad >= 0) {
    fprintf(stderr, "the world, for the replay:\n");
    check_world(&REAL_RULE, seed, bad, &(tally){0}, 1);
    TEST_FAIL_("seed 0x%" PRIx64 " world %d (replay: CTRAIN_PROPERTY_SEED=0x%" PRIx64
               " CTRAIN_PROPERTY_WORLD=%d ./test_ctl_ownership property_real_rule): %s",
               seed, bad, seed, bad, first_violation(&t));
  }
  printf("# %.2f s: %ld job passes, %ld deletes, %ld finalizers removed, %ld creates (%ld met a "
         "taken name: %ld mine (%ld of them not among the candidates), %ld earlier, %ld foreign; "
         "%ld earlier deleted), %ld earlier and "
         "%ld orphan pods released; candidates turned away: %ld (%ld of another namespace, %ld "
         "labelled for the job), %ld decoys labelled past the job's attempt, %ld restarts\n",
         elapsed_s(&t0), t.passes, t.deletes, t.finalizers_removed, t.creates, t.creates_taken,
         t.taken_mine, t.taken_unseen, t.taken_earlier, t.taken_foreign, t.earlier_deleted,
         t.released_earlier, t.released_orphans, t.foreign_candidates, t.cross_ns_candidates,
         t.decoys_in_candidates, t.decoy_attempt_above, t.restarts_seen);
  if (only < 0 && n >= COVERAGE_WORLDS) {
    /* the generator makes what the invariants are about */
    ASSERT_GT(t.deletes, 0);
    ASSERT_GT(t.finalizers_removed, 0);
    ASSERT_GT(t.creates, 0);
    ASSERT_GT(t.taken_earlier, 0);
    ASSERT_GT(t.taken_foreign, 0);
    ASSERT_GT(t.earlier_deleted, 0);
    ASSERT_GT(t.released_earlier, 0);
    ASSERT_GT(t.released_orphans, 0);
    ASSERT_GT(t.cross_ns_candidates, 0);
    ASSERT_GT(t.decoys_in_candidates, 0);
    ASSERT_GT(t.decoy_attempt_above, 0);
    ASSERT_GT(t.restarts_seen, 0);
  }
}

/* ---- planted bugs: broken copies of the rule must fail the property ---- */

static ctrain_err split_by(const cJSON *cands, const own_job *j, cJSON **mine, cJSON **earlier,
                           classify_fn classify) {
  *mine = cJSON_CreateArray();
  *earlier = earlier ? cJSON_CreateArray() : NULL;
  const cJSON *obj;
  cJSON_ArrayForEach(obj, cands) {
    own_verdict v = classify(obj, j);
    cJSON *into = v == OWN_MINE ? *mine : v == OWN_EARLIER && earlier ? *earlier : NULL;
    if (into)
      cJSON_AddItemToArray(into, cJSON_Duplicate(obj, 1));
  }
  return CTRAIN_OK;
}

/* Forgets the namespace: the job's uid anywhere is the job's. */
static own_verdict classify_any_namespace(const cJSON *obj, const own_job *j) {
  own_job k = *j;
  k.ns = md_s(obj, "namespace");
  return own_classify(obj, &k);
}

static ctrain_err split_any_namespace(const cJSON *c, const own_job *j, cJSON **m, cJSON **e) {
  return split_by(c, j, m, e, classify_any_namespace);
}

/* Trusts the job-name label. */
static own_verdict classify_by_label(const cJSON *obj, const own_job *j) {
  own_verdict v = own_classify(obj, j);
  const char *l = ctrain_json_str(ctrain_json_get(md(obj), "labels"), PODBUILD_LABEL_JOB);
  return v == OWN_FOREIGN && str_eq(md_s(obj, "namespace"), j->ns) && str_eq(l, j->name) ? OWN_MINE
                                                                                         : v;
}

static ctrain_err split_by_label(const cJSON *c, const own_job *j, cJSON **m, cJSON **e) {
  return split_by(c, j, m, e, classify_by_label);
}

/* Any reference naming the job (not only the controller's) makes it the job's. */
static own_verdict classify_any_ref(const cJSON *obj, const own_job *j) {
  own_verdict v = own_classify(obj, j);
  const cJSON *r;
  cJSON_ArrayForEach(r, ctrain_json_get(md(obj), "ownerReferences")) {
    if (v != OWN_MINE && str_eq(md_s(obj, "namespace"), j->ns) &&
        str_eq(ctrain_json_str(r, "uid"), j->uid))
      v = OWN_MINE;
  }
  return v;
}

static ctrain_err split_any_ref(const cJSON *c, const own_job *j, cJSON **m, cJSON **e) {
  return split_by(c, j, m, e, classify_any_ref);
}

/* The name makes it the job's: an earlier incarnation (or, kind ignored, a
 * TFJob namesake) is adopted. */
static own_verdict classify_by_name(const cJSON *obj, const own_job *j) {
  own_verdict v = own_classify(obj, j);
  const cJSON *c = own_controller_ref(obj);
  return v != OWN_MINE && str_eq(md_s(obj, "namespace"), j->ns) &&
                 str_eq(ctrain_json_str(c, "name"), j->name)
             ? OWN_MINE
             : v;
}

static ctrain_err split_by_name(const cJSON *c, const own_job *j, cJSON **m, cJSON **e) {
  return split_by(c, j, m, e, classify_by_name);
}

/* Earlier by name alone: a TFJob namesake's pods are an earlier job's. */
static own_verdict classify_earlier_any_kind(const cJSON *obj, const own_job *j) {
  own_verdict v = own_classify(obj, j);
  const cJSON *c = own_controller_ref(obj);
  return v == OWN_FOREIGN && str_eq(md_s(obj, "namespace"), j->ns) &&
                 str_eq(ctrain_json_str(c, "name"), j->name)
             ? OWN_EARLIER
             : v;
}

static ctrain_err split_earlier_any_kind(const cJSON *c, const own_job *j, cJSON **m, cJSON **e) {
  return split_by(c, j, m, e, classify_earlier_any_kind);
}

/* The real split with no rule at all behind it: every candidate is the
 * job's (what the pass did when the index was trusted). */
static own_verdict classify_everything(const cJSON *obj, const own_job *j) {
  (void)obj;
  (void)j;
  return OWN_MINE;
}

static ctrain_err split_everything(const cJSON *c, const own_job *j, cJSON **m, cJSON **e) {
  return split_by(c, j, m, e, classify_everything);
}

TEST(planted_bug_is_caught) {
  static const own_rule bugs[] = {
      {"split ignores the namespace", split_any_namespace, own_classify},
      {"split trusts the job-name label", split_by_label, own_classify},
      {"split counts a non-controller reference", split_any_ref, own_classify},
      {"split adopts an earlier incarnation by name", split_by_name, own_classify},
      {"split takes a TFJob namesake for an earlier incarnation", split_earlier_any_kind,
       own_classify},
      {"split trusts the index", split_everything, own_classify},
      {"executor counts a namesake's pod as the job's", own_split, classify_by_name},
      {"executor deletes a TFJob namesake's pod", own_split, classify_earlier_any_kind},
  };
  const uint64_t seed = env_seed();
  const int limit = 2000;
  for (size_t b = 0; b < sizeof(bugs) / sizeof(bugs[0]); b++) {
    /* caught by what the controller does (a-e), not only by the split's
     * own check (f) */
    tally t = {0};
    int at = run_worlds(&bugs[b], seed, limit, -1, BEHAVIOUR_INV, &t);
    printf("# %s: ", bugs[b].what);
    if (at < 0) {
      printf("NOT caught in %d worlds\n", limit);
      fflush(stdout);
      TEST_FAIL_("planted bug '%s' not caught in %d worlds of seed 0x%" PRIx64, bugs[b].what, limit,
                 seed);
    }
    char which[2 * N_INV + 1] = "";
    for (int i = 0; i < N_INV; i++)
      if (t.violations[i])
        snprintf(which + strlen(which), sizeof(which) - strlen(which), "%c", INV_NAMES[i]);
    printf("caught at world %d, invariants %s; %.400s\n", at, which, first_violation(&t));
  }
  fflush(stdout);
}

TEST_MAIN(T(mine_is_namespace_and_controller_uid), T(other_namespace_with_the_uid_is_foreign),
          T(non_controller_ref_is_foreign), T(first_controller_ref_decides),
          T(no_owner_references_is_foreign), T(job_without_uid_owns_nothing),
          T(same_kind_and_name_other_uid_is_earlier), T(tfjob_namesake_is_foreign),
          T(labels_never_matter), T(split_partitions_copies), T(describe_names_the_controller),
          T(property_real_rule), T(planted_bug_is_caught))
