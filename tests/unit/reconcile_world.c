/* reconcile_world.c - the in-memory world, the JSON patterns and the case
 * runner of the table-driven reconcile tests (reconcile_world.h). */
#include "reconcile_world.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- matching parsed JSON ------------------------------------------------ */

/* v printed on one line, cut at 600 characters; "(absent)" for NULL. Owned. */
static char *jm_print(const cJSON *v) {
  char *s = v ? cJSON_PrintUnformatted(v) : NULL;
  if (!s)
    return strdup(v ? "(unprintable)" : "(absent)");
  if (strlen(s) > 600)
    strcpy(s + 590, " ...(cut)");
  return s;
}

static int jm_fail(int quiet, const char *path, const char *why, const cJSON *exp,
                   const cJSON *act) {
  if (quiet)
    return 1;
  char *e = jm_print(exp), *a = jm_print(act);
  fprintf(stderr, "    at %s: %s\n      expected: %s\n      actual:   %s\n",
          path[0] ? path : "(root)", why, e, a);
  free(e);
  free(a);
  return 1;
}

static int jm_number_is(const cJSON *act, const cJSON *exp, const char *op) {
  double a = act->valuedouble, e = exp->valuedouble;
  if (!strcmp(op, "$gt"))
    return a > e;
  if (!strcmp(op, "$ge"))
    return a >= e;
  if (!strcmp(op, "$lt"))
    return a < e;
  return a <= e; /* $le */
}

/* Some element of the array `act` matches `pattern`. */
static int jm_some(const cJSON *act, const cJSON *pattern) {
  const cJSON *e;
  cJSON_ArrayForEach(e, act) {
    if (!jm_match(e, pattern, "", 1))
      return 1;
  }
  return 0;
}

/* Prints how the element of `act` nearest to `pattern` (the fewest
 * mismatches) differs from it. */
static void jm_nearest(const cJSON *act, const cJSON *pattern, const char *path) {
  const cJSON *e, *best = NULL;
  int least = 0, i = 0, at = 0;
  cJSON_ArrayForEach(e, act) {
    int n = jm_match(e, pattern, "", 2);
    if (!best || n < least) {
      best = e;
      least = n;
      at = i;
    }
    i++;
  }
  if (!best)
    return;
  char sub[512];
  snprintf(sub, sizeof(sub), "%s[%d]", path, at);
  fprintf(stderr, "    the nearest element, %s, differs:\n", sub);
  jm_match(best, pattern, sub, 0);
}

static int jm_operator(const cJSON *act, const cJSON *op, const char *path, int quiet) {
  const char *k = op->string;
  if (!strcmp(k, "$absent"))
    return (act != NULL) == cJSON_IsTrue(op) ? jm_fail(quiet, path, "present", op, act) : 0;
  if (!act)
    return jm_fail(quiet, path, "missing", op, act);
  if (!strcmp(k, "$count")) {
    if (!cJSON_IsArray(act) && !cJSON_IsObject(act))
      return jm_fail(quiet, path, "not an array", op, act);
    int n = cJSON_GetArraySize(act);
    if (n == (int)op->valuedouble)
      return 0;
    char why[64];
    snprintf(why, sizeof(why), "%d elements, expected %d", n, (int)op->valuedouble);
    return jm_fail(quiet, path, why, op, act);
  }
  if (!strcmp(k, "$contains")) {
    if (!cJSON_IsString(act))
      return jm_fail(quiet, path, "not a string", op, act);
    if (cJSON_IsString(op))
      return strstr(act->valuestring, op->valuestring)
                 ? 0
                 : jm_fail(quiet, path, "no such part", op, act);
    const cJSON *s;
    cJSON_ArrayForEach(s, op) {
      if (!strstr(act->valuestring, s->valuestring))
        return jm_fail(quiet, path, "no such part", s, act);
    }
    return 0;
  }
  if (!strcmp(k, "$gt") || !strcmp(k, "$ge") || !strcmp(k, "$lt") || !strcmp(k, "$le")) {
    if (!cJSON_IsNumber(act) || !jm_number_is(act, op, k))
      return jm_fail(quiet, path, k, op, act);
    return 0;
  }
  if (!strcmp(k, "$has") || !strcmp(k, "$none")) {
    if (!cJSON_IsArray(act))
      return jm_fail(quiet, path, "not an array", op, act);
    int has = !strcmp(k, "$has"), bad = 0;
    /* one pattern, or an array of them */
    for (const cJSON *p = cJSON_IsObject(op) ? op : op->child; p;
         p = cJSON_IsObject(op) ? NULL : p->next) {
      if (jm_some(act, p) == has)
        continue;
      bad += jm_fail(quiet, path, has ? "no element matches" : "an element matches", p, act);
      if (has && !quiet)
        jm_nearest(act, p, path);
    }
    return bad;
  }

  if (!strcmp(k, "$order")) {
    int last = -1;
    const cJSON *v;
    cJSON_ArrayForEach(v, op) {
      int at = -1, i = 0;
      const cJSON *e;
      cJSON_ArrayForEach(e, act) {
        if (cJSON_Compare(e, v, 1)) {
          at = i;
          break;
        }
        i++;
      }
      if (at < 0 || at < last)
        return jm_fail(quiet, path, at < 0 ? "missing from the order" : "out of order", v, act);
      last = at;
    }
    return 0;
  }
  if (!strcmp(k, "$json")) {
    if (!cJSON_IsString(act))
      return jm_fail(quiet, path, "not a string", op, act);
    cJSON *parsed = cJSON_Parse(act->valuestring);
    if (!parsed)
      return jm_fail(quiet, path, "not JSON", op, act);
    char sub[512];
    snprintf(sub, sizeof(sub), "%s($json)", path);
    int bad = jm_match(parsed, op, sub, quiet);
    cJSON_Delete(parsed);
    return bad;
  }
  TEST_FAIL_("unknown operator %s in an expectation at %s", k, path);
  return 1;
}

/* The number of mismatches of `act` against the pattern `exp`, each printed
 * when quiet is 0; 1: only whether there is one (the first ends the
 * search); 2: all counted, none printed. */
int jm_match(const cJSON *act, const cJSON *exp, const char *path, int quiet) {
  char sub[512];
  if (cJSON_IsNull(exp))
    return act && !cJSON_IsNull(act) ? jm_fail(quiet, path, "present, expected absent", exp, act)
                                     : 0;
  if (cJSON_IsObject(exp)) {
    int only_ops = 1, bad = 0;
    const cJSON *k;
    cJSON_ArrayForEach(k, exp) {
      if (k->string[0] != '$')
        only_ops = 0;
    }
    if (!act && !only_ops)
      return jm_fail(quiet, path, "missing", exp, act);
    if (act && !only_ops && !cJSON_IsObject(act) && !cJSON_IsArray(act))
      return jm_fail(quiet, path, "not an object", exp, act);
    cJSON_ArrayForEach(k, exp) {
      if (k->string[0] == '$') {
        bad += jm_operator(act, k, path, quiet);
        continue;
      }
      const cJSON *child;
      if (cJSON_IsArray(act)) {
        int i = (int)strtol(k->string, NULL, 10), n = cJSON_GetArraySize(act);
        child = cJSON_GetArrayItem(act, i < 0 ? n + i : i);
        snprintf(sub, sizeof(sub), "%s[%s]", path, k->string);
      } else {
        child = cJSON_GetObjectItemCaseSensitive(act, k->string);
        if (strchr(k->string, '.')) /* a label key: ["ctrain.dev/attempt"] */
          snprintf(sub, sizeof(sub), "%s[\"%s\"]", path, k->string);
        else
          snprintf(sub, sizeof(sub), "%s%s%s", path, path[0] ? "." : "", k->string);
      }
      bad += jm_match(child, k, sub, quiet);
      if (quiet == 1 && bad)
        return bad;
    }
    return bad;
  }
  if (cJSON_IsArray(exp)) {
    if (!cJSON_IsArray(act) || cJSON_GetArraySize(act) != cJSON_GetArraySize(exp))
      return jm_fail(quiet, path, cJSON_IsArray(act) ? "another length" : "not an array", exp, act);
    int bad = 0, i = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, exp) {
      snprintf(sub, sizeof(sub), "%s[%d]", path, i);
      bad += jm_match(cJSON_GetArrayItem(act, i), e, sub, quiet);
      if (quiet == 1 && bad)
        return bad;
      i++;
    }
    return bad;
  }
  if (!act)
    return jm_fail(quiet, path, "missing", exp, act);
  if (cJSON_IsNumber(exp)) {
    double a = act->valuedouble, e = exp->valuedouble;
    if (!cJSON_IsNumber(act) || fabs(a - e) > 1e-12 * (fabs(e) > 1 ? fabs(e) : 1))
      return jm_fail(quiet, path, "differs", exp, act);
    return 0;
  }
  if (cJSON_IsBool(exp)) {
    if (!cJSON_IsBool(act) || cJSON_IsTrue(act) != cJSON_IsTrue(exp))
      return jm_fail(quiet, path, "differs", exp, act);
    return 0;
  }
  if (cJSON_IsString(exp)) {
    if (!cJSON_IsString(act) || strcmp(act->valuestring, exp->valuestring))
      return jm_fail(quiet, path, "differs", exp, act);
    return 0;
  }
  TEST_FAIL_("unsupported expectation at %s", path);
  return 1;
}

/* Parses the JSON of a table, where ' stands for " (a quote inside a JSON
 * string is \" there, \\\" in a C literal). Owned; NULL when not JSON. */
cJSON *rw_qparse(const char *text) {
  char *t = strdup(text);
  ASSERT_NOT_NULL(t);
  for (char *c = t; *c; c++)
    if (*c == '\'')
      *c = '"';
  cJSON *j = cJSON_Parse(t);
  free(t);
  return j;
}

/* The mismatches of `act` against the pattern text `exp` (qparse); a
 * pattern that is not JSON fails the test at once. */
int jm_check(const cJSON *act, const char *exp, const char *where) {
  cJSON *e = rw_qparse(exp);
  if (!e)
    TEST_FAIL_("%s: the expectation is not JSON near: %.80s", where,
               cJSON_GetErrorPtr() ? cJSON_GetErrorPtr() : exp);
  fflush(stdout);
  int bad = jm_match(act, e, "", 1);
  if (bad) {
    fprintf(stderr, "%s: %s\n", where, "mismatch");
    jm_match(act, e, "", 0);
  }
  cJSON_Delete(e);
  return bad;
}

/* RFC 7386 merge patch: objects merge, null deletes, anything else replaces. */
static void merge_patch(cJSON *target, const cJSON *patch) {
  const cJSON *p;
  cJSON_ArrayForEach(p, patch) {
    cJSON *t = cJSON_GetObjectItemCaseSensitive(target, p->string);
    if (cJSON_IsNull(p))
      cJSON_DeleteItemFromObjectCaseSensitive(target, p->string);
    else if (cJSON_IsObject(p) && cJSON_IsObject(t))
      merge_patch(t, p);
    else if (t)
      cJSON_ReplaceItemInObjectCaseSensitive(target, p->string, cJSON_Duplicate(p, 1));
    else
      cJSON_AddItemToObject(target, p->string, cJSON_Duplicate(p, 1));
  }
}

void rw_merge_patch_text(cJSON *target, const char *patch) {
  cJSON *p = rw_qparse(patch);
  if (!p)
    TEST_FAIL_("merge patch is not JSON: %s", patch);
  merge_patch(target, p);
  cJSON_Delete(p);
}

/* The step running (case, step, line), for the failures of the world's
 * helpers ("" outside a case). */
static char step_where[256];

/* A token that, like the controller's, depends on the job uid and attempt only. */
ctrain_err rw_fake_token(void *ctx, const char *uid, int attempt, char *hex, size_t n) {
  world *w = ctx;
  w->token_calls++;
  if (w->token_fail)
    return CTRAIN_E_IO;
  snprintf(hex, n, "tok-%s-%d", uid, attempt);
  return CTRAIN_OK;
}

cJSON *rw_spec_of(world *w) {
  return cJSON_GetObjectItemCaseSensitive(w->job, "spec");
}

void rw_set_spec(world *w, const char *k, cJSON *v) {
  cJSON *spec = rw_spec_of(w);
  if (cJSON_GetObjectItemCaseSensitive(spec, k))
    cJSON_ReplaceItemInObjectCaseSensitive(spec, k, v);
  else
    cJSON_AddItemToObject(spec, k, v);
}

void rw_add_replicas(cJSON *rs, const char *type, int n) {
  cJSON *o = cJSON_AddObjectToObject(rs, type);
  cJSON_AddNumberToObject(o, "replicas", n);
  cJSON_AddItemToObject(o, "template", cJSON_Parse(TEMPLATE_JSON));
}

/* A job as the apiserver returns it, with the CRD defaults applied:
 *   {"apiVersion":"ctrain.dev/v1alpha1","kind":"TrainingJob",
 *    "metadata":{"name":"tj","namespace":"default","uid":"job-uid","generation":1},
 *    "spec":{"replicaSpecs":{"Chief":{"replicas":1,"template":T},  (chief)
 *                            "Worker":{"replicas":workers,"template":T},
 *                            "Evaluator":{"replicas":1,"template":T}},  (evaluator)
 *            "port":2222,"restartPolicy":"OnFailure","backoffLimit":3,"suspend":false,
 *            "cleanPodPolicy":"Running","successPolicy":"ChiefOrWorker0"}} */
void world_init(world *w, int chief, int workers, int evaluator) {
  memset(w, 0, sizeof(*w));
  w->job = cJSON_CreateObject();
  cJSON_AddStringToObject(w->job, "apiVersion", "ctrain.dev/v1alpha1");
  cJSON_AddStringToObject(w->job, "kind", "TrainingJob");
  cJSON *md = cJSON_AddObjectToObject(w->job, "metadata");
  cJSON_AddStringToObject(md, "name", "tj");
  cJSON_AddStringToObject(md, "namespace", "default");
  cJSON_AddStringToObject(md, "uid", "job-uid");
  cJSON_AddNumberToObject(md, "generation", 1);
  cJSON *spec = cJSON_AddObjectToObject(w->job, "spec");
  cJSON *rs = cJSON_AddObjectToObject(spec, "replicaSpecs");
  if (chief)
    rw_add_replicas(rs, "Chief", 1);
  rw_add_replicas(rs, "Worker", workers);
  if (evaluator)
    rw_add_replicas(rs, "Evaluator", 1);
  cJSON_AddNumberToObject(spec, "port", 2222);
  cJSON_AddStringToObject(spec, "restartPolicy", "OnFailure");
  cJSON_AddNumberToObject(spec, "backoffLimit", 3);
  cJSON_AddFalseToObject(spec, "suspend");
  cJSON_AddStringToObject(spec, "cleanPodPolicy", "Running");
  cJSON_AddStringToObject(spec, "successPolicy", "ChiefOrWorker0");
  w->pods = cJSON_CreateArray();
  w->now = NOW;
  w->burst = 1000;
  recon_expectations_init(&w->x);
}

void world_free(world *w) {
  cJSON_Delete(w->job);
  cJSON_Delete(w->pods);
  cJSON_Delete(w->view);
  cJSON_Delete(w->progress);
  free(w->cluster);
  recon_expectations_free(&w->x);
  recon_result_free(&w->res);
}

void rw_run(world *w) {
  char err[256] = "";
  recon_result_free(&w->res);
  recon_input in = {
      .job = w->job,
      .pods = w->view ? w->view : w->pods,
      .service = w->service ? w->job : NULL, /* any non-NULL object: "exists" */
      .token_attempt = w->token_attempt,
      .now = w->now,
      .token = rw_fake_token,
      .token_ctx = w,
      .burst = w->burst,
      .progress = w->progress,
      .straggler = w->straggler,
      .progress_interval_s = w->progress_interval_s,
      .create_error = w->create_error,
  };
  ctrain_err r = recon_reconcile(&in, &w->x, &w->res, err, sizeof(err));
  if (r)
    TEST_FAIL_("%s: recon_reconcile: %d %s", step_where, (int)r, err);
  ASSERT_NOT_NULL(w->res.status);
}

const char *rw_str_at(const cJSON *o, const char *a, const char *b) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, a);
  if (b)
    v = cJSON_GetObjectItemCaseSensitive(v, b);
  return cJSON_IsString(v) ? v->valuestring : NULL;
}

static cJSON *pod_by_name_in(cJSON *pods, const char *name) {
  cJSON *p;
  cJSON_ArrayForEach(p, pods) {
    if (!strcmp(rw_str_at(p, "metadata", "name"), name))
      return p;
  }
  return NULL;
}

static cJSON *pod_by_name(world *w, const char *name) {
  return pod_by_name_in(w->pods, name);
}

cJSON *rw_pod_named(world *w, const char *name) {
  cJSON *p = pod_by_name(w, name);
  if (!p)
    TEST_FAIL_("%s: no pod %s in the world", step_where, name);
  return p;
}

/* `name` is one of the comma-separated names of `list`. */
static int in_list(const char *list, const char *name) {
  size_t n = name ? strlen(name) : 0;
  for (const char *s = list; s && n && *s;) {
    const char *e = strchr(s, ',');
    size_t l = e ? (size_t)(e - s) : strlen(s);
    if (l == n && !strncmp(s, name, n))
      return 1;
    s = e ? e + 1 : s + l;
  }
  return 0;
}

/* Applies a pass's actions as the apiserver would, except the creates of the
 * pods named in `unsent` (comma-separated; NULL: none), which the executor
 * did not send or which failed. */
static void apply_except(world *w, const char *unsent) {
  for (size_t i = 0; i < w->res.n_actions; i++) {
    recon_action *a = &w->res.actions[i];
    if (a->kind == RECON_CREATE_POD && in_list(unsent, a->name))
      continue;
    switch (a->kind) {
    case RECON_UPDATE_STATUS:
      cJSON_DeleteItemFromObject(w->job, "status");
      cJSON_AddItemToObject(w->job, "status", cJSON_Duplicate(a->object, 1));
      break;
    case RECON_CREATE_SERVICE:
      w->service = 1;
      break;
    case RECON_CREATE_SECRET:
      w->token_attempt = a->attempt; /* the executor remembers it */
      break;
    case RECON_CREATE_CONFIGMAP:
      free(w->cluster);
      w->cluster = strdup(rw_str_at(a->object, "data", PODBUILD_CLUSTER_KEY));
      w->cluster_attempt = a->attempt;
      break;
    case RECON_CREATE_POD: {
      if (pod_by_name(w, a->name))
        TEST_FAIL_("%s: create of %s: the apiserver would say AlreadyExists", step_where, a->name);
      cJSON *p = cJSON_Duplicate(a->object, 1);
      cJSON *md = cJSON_GetObjectItemCaseSensitive(p, "metadata");
      char uid[128];
      snprintf(uid, sizeof(uid), "uid-%s-a%d", a->name, a->attempt);
      cJSON_AddStringToObject(md, "uid", uid);
      cJSON *st = cJSON_AddObjectToObject(p, "status");
      cJSON_AddStringToObject(st, "phase", "Pending");
      cJSON_AddItemToArray(w->pods, p);
      break;
    }
    case RECON_DELETE_POD: {
      cJSON *p;
      int found = 0;
      cJSON_ArrayForEach(p, w->pods) {
        cJSON *md = cJSON_GetObjectItemCaseSensitive(p, "metadata");
        if (!strcmp(rw_str_at(md, "uid", NULL), a->uid)) {
          found = 1;
          char ts[40]; /* the end of a 30 s grace period, as the apiserver sets it */
          ASSERT_OK(kube_time_format(w->now + 30, ts, sizeof(ts)));
          if (!cJSON_GetObjectItemCaseSensitive(md, "deletionTimestamp"))
            cJSON_AddStringToObject(md, "deletionTimestamp", ts);
        }
      }
      if (!found)
        TEST_FAIL_("%s: delete of pod uid %s: no such pod", step_where, a->uid);
      break;
    }
    case RECON_DELETE_JOB:
      w->job_deleted = 1;
      break;
    default:
      break;
    }
  }
}

static void apply(world *w) {
  apply_except(w, NULL);
}

/* The kubelet finishes every pending deletion. */
static void reap(world *w) {
  cJSON *p = w->pods->child;
  while (p) {
    cJSON *next = p->next;
    if (cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(p, "metadata"),
                                         "deletionTimestamp"))
      cJSON_Delete(cJSON_DetachItemViaPointer(w->pods, p));
    p = next;
  }
}

static void set_phase(world *w, const char *name, const char *phase) {
  cJSON *st = cJSON_GetObjectItemCaseSensitive(rw_pod_named(w, name), "status");
  cJSON_ReplaceItemInObjectCaseSensitive(st, "phase", cJSON_CreateString(phase));
}

/* Every Pending pod is Running. */
static void all_running(world *w) {
  cJSON *p;
  cJSON_ArrayForEach(p, w->pods) {
    cJSON *st = cJSON_GetObjectItemCaseSensitive(p, "status");
    if (!strcmp(rw_str_at(st, "phase", NULL), "Pending"))
      cJSON_ReplaceItemInObjectCaseSensitive(st, "phase", cJSON_CreateString("Running"));
  }
}

/* The pod's container exited with `code` at `finished` (seconds after NOW). */
void rw_terminate(world *w, const char *name, int code, const char *reason, int finished) {
  cJSON *st = cJSON_GetObjectItemCaseSensitive(rw_pod_named(w, name), "status");
  cJSON_ReplaceItemInObjectCaseSensitive(st, "phase",
                                         cJSON_CreateString(code ? "Failed" : "Succeeded"));
  cJSON_DeleteItemFromObject(st, "containerStatuses");
  cJSON *cs = cJSON_AddArrayToObject(st, "containerStatuses");
  cJSON *c = cJSON_CreateObject();
  cJSON_AddItemToArray(cs, c);
  cJSON_AddStringToObject(c, "name", "train");
  cJSON *term = cJSON_AddObjectToObject(cJSON_AddObjectToObject(c, "state"), "terminated");
  cJSON_AddNumberToObject(term, "exitCode", code);
  cJSON_AddStringToObject(term, "reason", reason);
  char ts[40];
  ASSERT_OK(kube_time_format(NOW + finished, ts, sizeof(ts)));
  cJSON_AddStringToObject(term, "finishedAt", ts);
}

/* `name` exits 75 (it lost a peer) at NOW + finished, and the clock moves
 * past the window in which the end of the attempt waits for a cause
 * (RECON_PEER_LOSS_WINDOW_S) while others still run. */
void rw_lost_peer(world *w, const char *name, int finished) {
  rw_terminate(w, name, 75, "Error", finished);
  if (w->now < NOW + finished + RECON_PEER_LOSS_WINDOW_S)
    w->now = NOW + finished + RECON_PEER_LOSS_WINDOW_S;
}

/* The termination message of `pod`'s terminated container. */
static void set_message(world *w, const char *pod, const char *msg) {
  cJSON *cs = cJSON_GetObjectItemCaseSensitive(
      cJSON_GetObjectItemCaseSensitive(rw_pod_named(w, pod), "status"), "containerStatuses");
  cJSON *term = cJSON_GetObjectItemCaseSensitive(
      cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(cs, 0), "state"), "terminated");
  ASSERT_NOT_NULL(term);
  cJSON_AddStringToObject(term, "message", msg);
}

/* Someone deletes `name` (deletionTimestamp `at`, grace 0 when forced); the
 * pod stays listed: our finalizer holds it. */
static void delete_by_someone(world *w, const char *name, int64_t at, int forced) {
  cJSON *md = cJSON_GetObjectItemCaseSensitive(rw_pod_named(w, name), "metadata");
  char ts[40];
  ASSERT_OK(kube_time_format(at, ts, sizeof(ts)));
  cJSON_AddStringToObject(md, "deletionTimestamp", ts);
  cJSON_AddNumberToObject(md, "deletionGracePeriodSeconds", forced ? 0 : 30);
}

/* The node controller marked `name` not ready: Ready False, its container
 * still running and ready as the kubelet last said. */
static void node_lost(world *w, const char *name, const char *node) {
  cJSON *p = rw_pod_named(w, name);
  cJSON_AddItemToObject(cJSON_GetObjectItemCaseSensitive(p, "spec"), "nodeName",
                        cJSON_CreateString(node));
  cJSON *st = cJSON_GetObjectItemCaseSensitive(p, "status");
  cJSON_AddItemToObject(st, "conditions",
                        cJSON_Parse("[{\"type\":\"Ready\",\"status\":\"False\"}]"));
  cJSON_AddItemToObject(st, "containerStatuses",
                        cJSON_Parse("[{\"name\":\"train\",\"ready\":true,\"state\":{\"running\":"
                                    "{\"startedAt\":\"2023-11-14T22:13:20Z\"}}}]"));
}

size_t rw_count(world *w, recon_action_kind k) {
  size_t n = 0;
  for (size_t i = 0; i < w->res.n_actions; i++)
    n += w->res.actions[i].kind == k;
  return n;
}

/* Runs passes, applying each and marking new pods Running, until a pass
 * creates nothing. Returns the number of passes that created pods. */
int rw_settle(world *w) {
  int passes = 0;
  for (int i = 0; i < 64; i++) {
    rw_run(w);
    apply(w);
    if (!rw_count(w, RECON_CREATE_POD))
      return w->passes = passes;
    passes++;
    all_running(w);
  }
  TEST_FAIL_("%s: settle: no fixed point", step_where);
  return -1;
}

/* ---- what a pass did, as JSON -------------------------------------------- */

static const recon_action_kind OBS_KINDS[] = {
    RECON_UPDATE_STATUS,    RECON_CREATE_SERVICE,   RECON_CREATE_SECRET,
    RECON_DELETE_POD,       RECON_CREATE_POD,       RECON_EVENT,
    RECON_DELETE_JOB,       RECON_REQUEUE,          RECON_CREATE_NETWORK_POLICY,
    RECON_CREATE_WORKLOAD,  RECON_UPDATE_WORKLOAD,  RECON_REMOVE_FINALIZER,
    RECON_CREATE_CONFIGMAP, RECON_DELETE_CONFIGMAP,
};

static cJSON *obs_action(const recon_result *r, size_t i) {
  const recon_action *a = &r->actions[i];
  cJSON *o = cJSON_CreateObject();
  cJSON_AddNumberToObject(o, "i", (double)i);
  if (a->name)
    cJSON_AddStringToObject(o, "name", a->name);
  if (a->uid)
    cJSON_AddStringToObject(o, "uid", a->uid);
  cJSON_AddNumberToObject(o, "attempt", a->attempt);
  switch (a->kind) {
  case RECON_EVENT:
    cJSON_AddStringToObject(o, "type", a->event_type);
    cJSON_AddStringToObject(o, "reason", a->reason);
    cJSON_AddStringToObject(o, "message", a->message);
    cJSON_AddNumberToObject(o, "after", a->after);
    if (a->after >= 0 && (size_t)a->after < r->n_actions) {
      /* the action it reports, and whether that comes before it */
      cJSON_AddBoolToObject(o, "follows", (size_t)a->after < i);
      const recon_action *b = &r->actions[a->after];
      cJSON *about = cJSON_AddObjectToObject(o, "about");
      cJSON_AddStringToObject(about, "kind", recon_action_kind_name(b->kind));
      if (b->name)
        cJSON_AddStringToObject(about, "name", b->name);
    }
    break;
  case RECON_REQUEUE:
    cJSON_AddNumberToObject(o, "seconds", (double)a->seconds);
    break;
  case RECON_DELETE_POD:
    cJSON_AddBoolToObject(o, "force", a->force);
    break;
  case RECON_REMOVE_FINALIZER:
    cJSON_AddNumberToObject(o, "index", a->index);
    break;
  default:
    break;
  }
  if (a->object)
    cJSON_AddItemToObject(o, "object", cJSON_Duplicate(a->object, 1));
  return o;
}

/* The last pass and the world after it, as one object:
 *   n, kinds (the actions' kinds in order), and per kind ("CreatePod", ...)
 *   its actions in order: {i, name, uid, attempt, type, reason, message,
 *   after, about: {kind, name} and follows (events: the action reported
 *   and whether it comes first), seconds, force, index, object};
 *   status (the new status), cond (its conditions by type), state
 *   (recon_state), statusChanged, requeueAfter, attempt (of the result),
 *   pending (expectations), podCount, pods (the world's, by name),
 *   passes (of the last settle), jobDeleted. Owned. */
cJSON *obs_build(world *w) {
  const recon_result *r = &w->res;
  cJSON *o = cJSON_CreateObject();
  cJSON_AddNumberToObject(o, "n", (double)r->n_actions);
  cJSON *kinds = cJSON_AddArrayToObject(o, "kinds");
  for (size_t k = 0; k < sizeof(OBS_KINDS) / sizeof(OBS_KINDS[0]); k++)
    cJSON_AddArrayToObject(o, recon_action_kind_name(OBS_KINDS[k]));
  for (size_t i = 0; i < r->n_actions; i++) {
    const char *kn = recon_action_kind_name(r->actions[i].kind);
    cJSON_AddItemToArray(kinds, cJSON_CreateString(kn));
    cJSON *arr = cJSON_GetObjectItemCaseSensitive(o, kn);
    if (!arr)
      arr = cJSON_AddArrayToObject(o, kn);
    cJSON_AddItemToArray(arr, obs_action(r, i));
  }
  if (r->status) {
    cJSON_AddItemToObject(o, "status", cJSON_Duplicate(r->status, 1));
    cJSON *cond = cJSON_AddObjectToObject(o, "cond");
    const cJSON *c;
    cJSON_ArrayForEach(c, cJSON_GetObjectItemCaseSensitive(r->status, "conditions")) {
      const char *t = rw_str_at(c, "type", NULL);
      if (t)
        cJSON_AddItemToObject(cond, t, cJSON_Duplicate(c, 1));
    }
  }
  cJSON_AddStringToObject(o, "state", recon_state(r->status));
  cJSON_AddBoolToObject(o, "statusChanged", r->status_changed);
  cJSON_AddNumberToObject(o, "requeueAfter", (double)r->requeue_after_s);
  cJSON_AddNumberToObject(o, "attempt", r->attempt);
  cJSON_AddNumberToObject(o, "pending", (double)recon_expectations_pending(&w->x));
  cJSON_AddNumberToObject(o, "podCount", cJSON_GetArraySize(w->pods));
  cJSON *pods = cJSON_AddObjectToObject(o, "pods");
  const cJSON *p;
  cJSON_ArrayForEach(p, w->pods) {
    cJSON_AddItemToObject(pods, rw_str_at(p, "metadata", "name"), cJSON_Duplicate(p, 1));
  }
  cJSON_AddNumberToObject(o, "passes", w->passes);
  cJSON_AddBoolToObject(o, "jobDeleted", w->job_deleted);
  return o;
}

static void set_view(world *w, cJSON *v) {
  cJSON_Delete(w->view);
  w->view = v;
}

/* Runs one step; returns its mismatches. */
static int step_run(world *w, const rcase *c, const step *s, int k) {
  char *where = step_where;
  snprintf(step_where, sizeof(step_where), "case %s, step %d (line %d)", c->name, k, s->line);
  cJSON *j = NULL;
  switch (s->op) {
  case OP_RUN:
    rw_run(w);
    break;
  case OP_EXPECT:
    break;
  case OP_SETTLE:
    rw_settle(w);
    break;
  case OP_APPLY:
    apply(w);
    break;
  case OP_APPLY_EXCEPT:
    apply_except(w, s->s);
    break;
  case OP_APPLY_NO_STATUS: {
    cJSON *old = cJSON_DetachItemFromObjectCaseSensitive(w->job, "status");
    apply(w);
    cJSON_DeleteItemFromObjectCaseSensitive(w->job, "status");
    if (old)
      cJSON_AddItemToObject(w->job, "status", old);
    break;
  }
  case OP_REAP:
    reap(w);
    break;
  case OP_ALL_RUNNING:
    all_running(w);
    break;
  case OP_TERMINATE:
    rw_terminate(w, s->s, (int)s->a, s->json, (int)s->b);
    break;
  case OP_LOST_PEER:
    rw_lost_peer(w, s->s, (int)s->a);
    break;
  case OP_SET_PHASE:
    set_phase(w, s->s, s->json);
    break;
  case OP_PATCH_POD:
    rw_merge_patch_text(rw_pod_named(w, s->s), s->json);
    break;
  case OP_PATCH_PODS: {
    cJSON *p;
    cJSON_ArrayForEach(p, w->pods) {
      rw_merge_patch_text(p, s->json);
    }
    break;
  }
  case OP_PATCH_JOB:
    rw_merge_patch_text(w->job, s->json);
    break;
  case OP_ADD_POD:
    j = rw_qparse(s->json);
    if (!j)
      TEST_FAIL_("%s: the pod is not JSON", where);
    cJSON_AddItemToArray(w->pods, j);
    j = NULL;
    break;
  case OP_REMOVE_POD:
    cJSON_Delete(cJSON_DetachItemViaPointer(w->pods, rw_pod_named(w, s->s)));
    break;
  case OP_DELETE_BY:
    delete_by_someone(w, s->s, w->now + s->a, (int)s->b);
    break;
  case OP_NODE_LOST:
    node_lost(w, s->s, s->json);
    break;
  case OP_TERM_MESSAGE:
    set_message(w, s->s, s->json);
    break;
  case OP_NOW:
    w->now = NOW + s->a;
    break;
  case OP_ADVANCE:
    w->now += s->a;
    break;
  case OP_BURST:
    w->burst = (int)s->a;
    break;
  case OP_POLL_INTERVAL:
    w->progress_interval_s = (int)s->a;
    break;
  case OP_PROGRESS: {
    cJSON_Delete(w->progress);
    w->progress = s->json ? rw_qparse(s->json) : NULL;
    if (s->json && !w->progress)
      TEST_FAIL_("%s: progress is not JSON", where);
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(w->progress, "lastPollTime");
    if (cJSON_IsString(t) && !strcmp(t->valuestring, "now")) {
      char ts[40];
      ASSERT_OK(kube_time_format(w->now, ts, sizeof(ts)));
      cJSON_ReplaceItemInObjectCaseSensitive(w->progress, "lastPollTime", cJSON_CreateString(ts));
    }
    break;
  }
  case OP_STRAGGLER:
    w->straggler = (recon_straggler){
        .known = (int)s->a, .rank = (int)s->b, .ratio = s->json ? strtod(s->json, NULL) : 0};
    break;
  case OP_CREATE_ERROR:
    w->create_error = s->s;
    break;
  case OP_CREATION_FAILED:
    recon_expect_creation_failed(&w->x, s->s);
    break;
  case OP_DELETION_FAILED:
    recon_expect_deletion_failed(&w->x, s->s);
    break;
  case OP_FORGET:
    recon_expectations_free(&w->x);
    break;
  case OP_TOKEN_ATTEMPT:
    w->token_attempt = (int)s->a;
    break;
  case OP_VIEW_EMPTY:
    set_view(w, cJSON_CreateArray());
    break;
  case OP_VIEW_SNAPSHOT:
    set_view(w, cJSON_Duplicate(w->pods, 1));
    break;
  case OP_VIEW_ONLY:
    j = cJSON_CreateArray();
    cJSON_AddItemToArray(j, cJSON_Duplicate(rw_pod_named(w, s->s), 1));
    set_view(w, j);
    j = NULL;
    break;
  case OP_VIEW_LIVE:
    set_view(w, NULL);
    break;
  default:
    TEST_FAIL_("%s: unknown step %d", where, (int)s->op);
  }
  int bad = 0;
  if ((s->op == OP_RUN || s->op == OP_EXPECT || s->op == OP_SETTLE) && s->json) {
    j = obs_build(w);
    bad = jm_check(j, s->json, where);
    cJSON_Delete(j);
  }
  return bad;
}

/* Runs a case; 0 when every expectation held. */
int rw_case_run(const rcase *c) {
  world w;
  world_init(&w, c->chief, c->workers, c->evaluator);
  if (c->job)
    rw_merge_patch_text(w.job, c->job);
  int bad = 0;
  for (int k = 0; c->steps[k].op != OP_END && !bad; k++)
    bad = step_run(&w, c, &c->steps[k], k);
  world_free(&w);
  step_where[0] = 0;
  return bad;
}

/* Runs every case of a table (those whose names start with RECON_CASE when
 * that is set), each to its first mismatch; fails the test naming the cases
 * that failed. */
void rw_cases_run(const rcase *cases, size_t n) {
  const char *only = getenv("RECON_CASE");
  int failed = 0, ran = 0;
  for (size_t i = 0; i < n; i++) {
    if (only && strncmp(only, cases[i].name, strlen(only)))
      continue;
    ran++;
    if (rw_case_run(&cases[i])) {
      fprintf(stderr, "FAILED case %s\n", cases[i].name);
      failed++;
    }
  }
  printf("# %d cases, %d failed\n", ran, failed);
  if (failed)
    TEST_FAIL_("%d of %d cases failed", failed, ran);
}
