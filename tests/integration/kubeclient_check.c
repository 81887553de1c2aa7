/* kubeclient_check.c - drives the C Kubernetes client against a real
 * kube-apiserver for tests/integration/test_kube_client.py.
 *
 *   kubeclient_check <command> [args]   (cluster from $KUBECONFIG)
 *
 * Each command checks its own expectations, prints one "ok <what>" line per
 * check and a final "PASS"; on a failed check it prints "FAIL <what>: ..."
 * and exits 1. Commands that report values print "key=value" lines for the
 * Python side to compare with kubectl. */
#include <pthread.h>
#include <sys/resource.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <curl/curl.h>

#include "ctrain/clock.h"
#include "ctrain/json.h"
#include "ctrain/kube_client.h"
#include "ctrain/kube_config.h"
#include "ctrain/kube_events.h"
#include "ctrain/kube_informer.h"
#include "ctrain/kube_lease.h"
#include "ctrain/kube_watch.h"
#include "ctrain/log.h"

__attribute__((format(printf, 2, 3))) static void fail(const char *what, const char *fmt, ...) {
  va_list ap;
  printf("FAIL %s: ", what);
  va_start(ap, fmt);
  vprintf(fmt, ap);
  va_end(ap);
  printf("\n");
  fflush(stdout);
  exit(1);
}

#define CHECK(cond, what, ...)                                                                     \
  do {                                                                                             \
    if (!(cond))                                                                                   \
      fail(what, __VA_ARGS__);                                                                     \
    printf("ok %s\n", what);                                                                       \
    fflush(stdout);                                                                                \
  } while (0)

/* Checks a call's result; prints the Status when it is not the expected one. */
#define EXPECT(call, want, what)                                                                   \
  do {                                                                                             \
    ctrain_err r_ = (call);                                                                        \
    CHECK(r_ == (want), what, "got %s (HTTP %d reason=%s message=%s), want %s",                    \
          ctrain_strerror(r_), st.http_code, st.reason, st.message, ctrain_strerror(want));        \
  } while (0)

static kube_config *cfg;
static kube_client *client;
static kube_status st;

static void connect_cluster(double qps, int burst) {
  char err[512];
  ctrain_err r = kube_config_load_default(NULL, NULL, &cfg, err, sizeof(err));
  if (r)
    fail("config", "%s: %s", ctrain_strerror(r), err);
  kube_client_opts o = {.qps = qps, .burst = burst};
  r = kube_client_new(cfg, &o, &client, err, sizeof(err));
  if (r)
    fail("client", "%s: %s", ctrain_strerror(r), err);
}

static cJSON *configmap(const char *name, const char *key, const char *val) {
  cJSON *cm = cJSON_CreateObject();
  cJSON_AddStringToObject(cm, "apiVersion", "v1");
  cJSON_AddStringToObject(cm, "kind", "ConfigMap");
  cJSON *md = cJSON_AddObjectToObject(cm, "metadata");
  cJSON_AddStringToObject(md, "name", name);
  cJSON *labels = cJSON_AddObjectToObject(md, "labels");
  cJSON_AddStringToObject(labels, "ctrain.dev/it", "kubeclient");
  cJSON *data = cJSON_AddObjectToObject(cm, "data");
  cJSON_AddStringToObject(data, key, val);
  return cm;
}

/* ---- crud ---------------------------------------------------------------- */

static int cmd_crud(const char *ns) {
  cJSON *cm = configmap("crud", "k", "v1"), *got = NULL, *stale = NULL, *out = NULL;
  EXPECT(kube_client_create(client, &KUBE_GVR_CONFIGMAPS, ns, cm, NULL, &got, &st), CTRAIN_OK,
         "create");
  CHECK(st.http_code == 201, "create returns 201", "HTTP %d", st.http_code);
  const char *uid = ctrain_json_str(ctrain_json_get(got, "metadata"), "uid");
  CHECK(uid && *uid, "created object has a uid", "no uid");
  char uidbuf[64];
  snprintf(uidbuf, sizeof(uidbuf), "%s", uid);
  stale = cJSON_Duplicate(got, 1);
  cJSON_Delete(got);

  EXPECT(kube_client_create(client, &KUBE_GVR_CONFIGMAPS, ns, cm, NULL, NULL, &st),
         CTRAIN_E_CONFLICT, "create twice is a conflict");
  CHECK(!strcmp(st.reason, "AlreadyExists"), "reason AlreadyExists", "reason=%s", st.reason);

  EXPECT(kube_client_get(client, &KUBE_GVR_CONFIGMAPS, ns, "crud", &got, &st), CTRAIN_OK, "get");
  CHECK(!strcmp(ctrain_json_str(ctrain_json_get(got, "data"), "k"), "v1"), "get returns the data",
        "data.k wrong");

  /* Update from the fresh copy: succeeds and bumps resourceVersion. */
  cJSON_ReplaceItemInObject(cJSON_GetObjectItem(got, "data"), "k", cJSON_CreateString("v2"));
  EXPECT(kube_client_update(client, &KUBE_GVR_CONFIGMAPS, ns, got, NULL, &out, &st), CTRAIN_OK,
         "update");
  CHECK(strcmp(ctrain_json_str(ctrain_json_get(out, "metadata"), "resourceVersion"),
               ctrain_json_str(ctrain_json_get(stale, "metadata"), "resourceVersion")),
        "update bumps resourceVersion", "same version");
  cJSON_Delete(out);
  cJSON_Delete(got);

  /* Update from the stale copy: 409 Conflict with the apiserver's Status. */
  cJSON_ReplaceItemInObject(cJSON_GetObjectItem(stale, "data"), "k", cJSON_CreateString("lost"));
  EXPECT(kube_client_update(client, &KUBE_GVR_CONFIGMAPS, ns, stale, NULL, NULL, &st),
         CTRAIN_E_CONFLICT, "stale update is CTRAIN_E_CONFLICT");
  CHECK(st.http_code == 409 && !strcmp(st.reason, "Conflict"), "stale update Status 409 Conflict",
        "HTTP %d reason=%s", st.http_code, st.reason);
  CHECK(strstr(st.message, "the object has been modified") != NULL, "stale update Status message",
        "message=%s", st.message);
  printf("conflict_message=%s\n", st.message);

  /* Patches: merge, JSON patch, strategic merge, server-side apply. */
  EXPECT(kube_client_patch(client, &KUBE_GVR_CONFIGMAPS, ns, "crud", NULL, KUBE_PATCH_MERGE,
                           "{\"data\":{\"merge\":\"1\"}}", NULL, NULL, &st),
         CTRAIN_OK, "merge patch");
  EXPECT(kube_client_patch(client, &KUBE_GVR_CONFIGMAPS, ns, "crud", NULL, KUBE_PATCH_JSON,
                           "[{\"op\":\"add\",\"path\":\"/data/json\",\"value\":\"2\"}]", NULL, NULL,
                           &st),
         CTRAIN_OK, "json patch");
  EXPECT(kube_client_patch(client, &KUBE_GVR_CONFIGMAPS, ns, "crud", NULL, KUBE_PATCH_STRATEGIC,
                           "{\"data\":{\"smp\":\"3\"}}", NULL, NULL, &st),
         CTRAIN_OK, "strategic merge patch");
  kube_write_opts apply = {.field_manager = "ctrain-it", .force = 1};
  EXPECT(kube_client_patch(client, &KUBE_GVR_CONFIGMAPS, ns, "crud", NULL, KUBE_PATCH_APPLY,
                           "{\"apiVersion\":\"v1\",\"kind\":\"ConfigMap\",\"metadata\":{\"name\":"
                           "\"crud\"},\"data\":{\"applied\":\"4\"}}",
                           &apply, &out, &st),
         CTRAIN_OK, "server-side apply");
  const cJSON *mf = cJSON_GetObjectItem(cJSON_GetObjectItem(out, "metadata"), "managedFields");
  int found = 0;
  const cJSON *e;
  cJSON_ArrayForEach(e, mf) {
    const char *m = ctrain_json_str(e, "manager");
    if (m && !strcmp(m, "ctrain-it"))
      found = 1;
  }
  CHECK(found, "apply records the field manager", "no managedFields entry for ctrain-it");
  cJSON_Delete(out);
  EXPECT(kube_client_patch(client, &KUBE_GVR_CONFIGMAPS, ns, "crud", NULL, KUBE_PATCH_JSON,
                           "[{\"op\":\"test\",\"path\":\"/data/k\",\"value\":\"nope\"}]", NULL,
                           NULL, &st),
         CTRAIN_E_INVAL, "failed JSON patch test op is rejected");

  /* List with a label selector. */
  kube_list_opts lo = {.label_selector = "ctrain.dev/it=kubeclient"};
  EXPECT(kube_client_list(client, &KUBE_GVR_CONFIGMAPS, ns, &lo, &out, &st), CTRAIN_OK, "list");
  CHECK(cJSON_GetArraySize(cJSON_GetObjectItem(out, "items")) == 1, "list by label finds one",
        "%d items", cJSON_GetArraySize(cJSON_GetObjectItem(out, "items")));
  cJSON_Delete(out);

  /* Delete with a wrong uid precondition: refused; right one: deleted. */
  kube_delete_opts d = {.precondition_uid = "00000000-0000-0000-0000-000000000000",
                        .grace_period_seconds = -1};
  EXPECT(kube_client_delete(client, &KUBE_GVR_CONFIGMAPS, ns, "crud", &d, NULL, &st),
         CTRAIN_E_CONFLICT, "delete with a wrong uid precondition");
  d.precondition_uid = uidbuf;
  d.propagation_policy = "Background";
  EXPECT(kube_client_delete(client, &KUBE_GVR_CONFIGMAPS, ns, "crud", &d, NULL, &st), CTRAIN_OK,
         "delete");
  EXPECT(kube_client_get(client, &KUBE_GVR_CONFIGMAPS, ns, "crud", NULL, &st), CTRAIN_E_NOTFOUND,
         "gone after delete");
  cJSON_Delete(cm);
  cJSON_Delete(stale);
  printf("PASS\n");
  return 0;
}

/* ---- notfound -------------------------------------------------------------- */

static int cmd_notfound(const char *ns) {
  EXPECT(kube_client_get(client, &KUBE_GVR_CONFIGMAPS, ns, "does-not-exist", NULL, &st),
         CTRAIN_E_NOTFOUND, "get missing is CTRAIN_E_NOTFOUND");
  printf("http_code=%d\nreason=%s\nmessage=%s\ndetails_name=%s\ndetails_kind=%s\n", st.http_code,
         st.reason, st.message, st.details_name, st.details_kind);
  CHECK(st.http_code == 404 && !strcmp(st.reason, "NotFound") &&
            !strcmp(st.details_name, "does-not-exist") && !strcmp(st.details_kind, "configmaps"),
        "404 Status decoded", "Status not as expected");
  kube_gvr bogus = {"ctrain.dev", "v1alpha1", "nosuchresources"};
  EXPECT(kube_client_list(client, &bogus, ns, NULL, NULL, &st), CTRAIN_E_NOTFOUND,
         "unknown resource is CTRAIN_E_NOTFOUND");
  printf("PASS\n");
  return 0;
}

/* ---- paginate ------------------------------------------------------------ */

static int cmd_paginate(const char *ns, int n) {
  char name[64];
  for (int i = 0; i < n; i++) {
    snprintf(name, sizeof(name), "page-%04d", i);
    cJSON *cm = configmap(name, "i", name);
    ctrain_err r = kube_client_create(client, &KUBE_GVR_CONFIGMAPS, ns, cm, NULL, NULL, &st);
    cJSON_Delete(cm);
    if (r)
      fail("create for pagination", "%s: %s", name, st.message);
  }
  printf("ok created %d\n", n);
  int pages = 0, total = 0;
  char cont[4096] = "";
  do {
    cJSON *out = NULL;
    kube_list_opts lo = {.label_selector = "ctrain.dev/it=kubeclient",
                         .limit = 100,
                         .continue_token = cont[0] ? cont : NULL};
    EXPECT(kube_client_list(client, &KUBE_GVR_CONFIGMAPS, ns, &lo, &out, &st), CTRAIN_OK,
           "list page");
    int got = cJSON_GetArraySize(cJSON_GetObjectItem(out, "items"));
    CHECK(got <= 100, "page within limit", "%d items", got);
    total += got;
    pages++;
    const char *c = ctrain_json_str(ctrain_json_get(out, "metadata"), "continue");
    snprintf(cont, sizeof(cont), "%s", c ? c : "");
    cJSON_Delete(out);
  } while (cont[0]);
  printf("pages=%d\ntotal=%d\n", pages, total);
  CHECK(total == n, "pagination saw every object once", "%d of %d", total, n);
  CHECK(pages == (n + 99) / 100, "page count", "%d pages", pages);
  printf("PASS\n");
  return 0;
}

/* ---- watch ------------------------------------------------------------- */

#define MAXCHG 5000
typedef struct {
  kube_watch *w;
  int want; /* events to see */
  int seen;
  kube_watch_type types[MAXCHG];
  char rvs[MAXCHG][24];
  pthread_mutex_t mu;
} watch_state;

static ctrain_err on_event(void *ud, kube_watch_event *ev) {
  watch_state *s = ud;
  if (ev->type == KUBE_WATCH_BOOKMARK)
    return CTRAIN_OK;
  pthread_mutex_lock(&s->mu);
  if (s->seen < MAXCHG) {
    s->types[s->seen] = ev->type;
    snprintf(s->rvs[s->seen], sizeof(s->rvs[0]), "%s",
             ev->resource_version ? ev->resource_version : "");
  }
  s->seen++;
  int done = s->seen >= s->want;
  pthread_mutex_unlock(&s->mu);
  if (done)
    kube_watch_cancel(s->w);
  return CTRAIN_OK;
}

static watch_state ws;
static ctrain_err watch_result;
static kube_status watch_st;

static void *watch_thread(void *arg) {
  (void)arg;
  watch_result = kube_watch_run(ws.w, on_event, &ws, &watch_st);
  return NULL;
}

static int last_list_items;

static const char *list_rv(const char *ns, char *buf, size_t cap) {
  cJSON *out = NULL;
  kube_list_opts lo = {.label_selector = "ctrain.dev/it=kubeclient"};
  ctrain_err r = kube_client_list(client, &KUBE_GVR_CONFIGMAPS, ns, &lo, &out, &st);
  if (r)
    fail("list", "%s", st.message);
  snprintf(buf, cap, "%s", ctrain_json_str(ctrain_json_get(out, "metadata"), "resourceVersion"));
  last_list_items = cJSON_GetArraySize(cJSON_GetObjectItem(out, "items"));
  cJSON_Delete(out);
  return buf;
}

/* n changes to one ConfigMap: create, n-2 patches, delete; the watch must
 * see each, in order, with the versions the writes returned. */
static int cmd_watch(const char *ns, int n) {
  static char made_rv[MAXCHG][24];
  char rv[64];
  if (n < 3 || n > MAXCHG)
    fail("args", "n must be 3..%d", MAXCHG);
  kube_watch_opts o = {.gvr = &KUBE_GVR_CONFIGMAPS,
                       .ns = ns,
                       .label_selector = "ctrain.dev/it=kubeclient",
                       .resource_version = list_rv(ns, rv, sizeof(rv)),
                       .timeout_seconds = 120};
  pthread_mutex_init(&ws.mu, NULL);
  ws.want = n;
  if (kube_watch_new(client, &o, &ws.w))
    fail("watch_new", "failed");
  pthread_t t;
  pthread_create(&t, NULL, watch_thread, NULL);
  double t0 = ctrain_mono_s();
  cJSON *cm = configmap("watched", "v", "0"), *out = NULL;
  EXPECT(kube_client_create(client, &KUBE_GVR_CONFIGMAPS, ns, cm, NULL, &out, &st), CTRAIN_OK,
         "create watched");
  snprintf(made_rv[0], sizeof(made_rv[0]), "%s",
           ctrain_json_str(ctrain_json_get(out, "metadata"), "resourceVersion"));
  cJSON_Delete(out);
  for (int i = 1; i < n - 1; i++) {
    char patch[64];
    snprintf(patch, sizeof(patch), "{\"data\":{\"v\":\"%d\"}}", i);
    ctrain_err r = kube_client_patch(client, &KUBE_GVR_CONFIGMAPS, ns, "watched", NULL,
                                     KUBE_PATCH_MERGE, patch, NULL, &out, &st);
    if (r)
      fail("patch", "%d: %s %s", i, ctrain_strerror(r), st.message);
    snprintf(made_rv[i], sizeof(made_rv[0]), "%s",
             ctrain_json_str(ctrain_json_get(out, "metadata"), "resourceVersion"));
    cJSON_Delete(out);
  }
  EXPECT(kube_client_delete(client, &KUBE_GVR_CONFIGMAPS, ns, "watched", NULL, &out, &st),
         CTRAIN_OK, "delete watched");
  cJSON_Delete(out);
  double t_writes = ctrain_mono_s() - t0;
  /* Wait (bounded) for the watch to see all of them. */
  for (int i = 0; i < 600; i++) {
    pthread_mutex_lock(&ws.mu);
    int seen = ws.seen;
    pthread_mutex_unlock(&ws.mu);
    if (seen >= n)
      break;
    usleep(100 * 1000);
  }
  double t_all = ctrain_mono_s() - t0;
  kube_watch_cancel(ws.w);
  pthread_join(t, NULL);
  printf("changes=%d\nseen=%d\nwrite_s=%.2f\nall_seen_s=%.2f\n", n, ws.seen, t_writes, t_all);
  CHECK(watch_result == CTRAIN_E_CANCELLED, "watch ends by cancel", "%s: %s",
        ctrain_strerror(watch_result), watch_st.message);
  CHECK(ws.seen == n, "watch saw every change", "%d of %d", ws.seen, n);
  CHECK(ws.types[0] == KUBE_WATCH_ADDED, "first event ADDED", "%s",
        kube_watch_type_name(ws.types[0]));
  CHECK(ws.types[n - 1] == KUBE_WATCH_DELETED, "last event DELETED", "%s",
        kube_watch_type_name(ws.types[n - 1]));
  int modified = 0, in_order = 1;
  for (int i = 1; i < n - 1; i++)
    modified += ws.types[i] == KUBE_WATCH_MODIFIED;
  for (int i = 0; i < n - 1; i++) /* the delete's version is the tombstone's */
    if (strcmp(ws.rvs[i], made_rv[i])) {
      in_order = 0;
      printf("mismatch at %d: watch %s, write %s\n", i, ws.rvs[i], made_rv[i]);
      break;
    }
  CHECK(modified == n - 2, "every MODIFIED seen", "%d of %d", modified, n - 2);
  CHECK(in_order, "events in write order with the writes' resourceVersions", "see above");
  kube_watch_free(ws.w);
  cJSON_Delete(cm);
  printf("PASS\n");
  return 0;
}

/* ---- gone: a watch from a compacted version relists ------------------------ */

static atomic_int relists;
/* Counts only once the list is done: objects made after that must come
 * through the watch (those made before are in the list). */
static ctrain_err relist(void *ud, char *rv, size_t cap) {
  const char *ns = ud;
  list_rv(ns, rv, cap);
  printf("relist_rv=%s\nrelist_items=%d\n", rv, last_list_items);
  atomic_fetch_add(&relists, 1);
  return CTRAIN_OK;
}

/* Watches from `from_rv` (default "1": long compacted / out of the watch
 * cache); with `expect_items` >= 0 the relist must return that many. */
static int cmd_gone(const char *ns, const char *from_rv, int expect_items) {
  kube_watch_opts o = {.gvr = &KUBE_GVR_CONFIGMAPS,
                       .ns = ns,
                       .label_selector = "ctrain.dev/it=kubeclient",
                       .resource_version = from_rv ? from_rv : "1",
                       .timeout_seconds = 60,
                       .relist = relist,
                       .relist_ud = (void *)ns};
  memset(&ws, 0, sizeof(ws));
  pthread_mutex_init(&ws.mu, NULL);
  ws.want = 1;
  if (kube_watch_new(client, &o, &ws.w))
    fail("watch_new", "failed");
  pthread_t t;
  pthread_create(&t, NULL, watch_thread, NULL);
  /* Once relisted, a new object must still arrive through the watch. */
  for (int i = 0; i < 100 && !atomic_load(&relists); i++)
    usleep(100 * 1000);
  CHECK(atomic_load(&relists) == 1, "410 Gone led to one relist", "relists=%d",
        atomic_load(&relists));
  if (expect_items >= 0)
    CHECK(last_list_items == expect_items, "the relist lost nothing", "%d items, want %d",
          last_list_items, expect_items);
  cJSON *cm = configmap("after-gone", "v", "x");
  EXPECT(kube_client_create(client, &KUBE_GVR_CONFIGMAPS, ns, cm, NULL, NULL, &st), CTRAIN_OK,
         "create after relist");
  for (int i = 0; i < 100; i++) {
    pthread_mutex_lock(&ws.mu);
    int seen = ws.seen;
    pthread_mutex_unlock(&ws.mu);
    if (seen)
      break;
    usleep(100 * 1000);
  }
  kube_watch_cancel(ws.w);
  pthread_join(t, NULL);
  CHECK(ws.seen == 1 && ws.types[0] == KUBE_WATCH_ADDED, "watch resumed after relist", "seen=%d",
        ws.seen);
  kube_watch_stats s;
  kube_watch_get_stats(ws.w, &s);
  printf("relists=%ld connects=%ld\n", s.relists, s.connects);
  kube_watch_free(ws.w);
  cJSON_Delete(cm);
  printf("PASS\n");
  return 0;
}

/* ---- tls: the result of one GET with the kubeconfig given ---------------- */

static int cmd_get_namespace(const char *ns) {
  ctrain_err r = kube_client_get(client, &KUBE_GVR_NAMESPACES, NULL, ns, NULL, &st);
  printf("result=%s\nhttp_code=%d\nmessage=%s\n", ctrain_strerror(r), st.http_code, st.message);
  printf("err=%d\nhttp_version=%d\n", (int)r, st.http_version);
  return 0;
}

/* ---- informer: an interactive session the Python side drives ---------------
 * Prints "event add|update|delete ns/name rv" per handler call, and answers
 * stdin commands: "dump" -> "cache k1,k2,..." + "stats lists=.. events=..",
 * "owner UID" -> "owned n1,n2", "quit". */

static pthread_mutex_t out_mu = PTHREAD_MUTEX_INITIALIZER;

static void print_event(const char *what, const cJSON *o) {
  char key[256] = "";
  if (kube_informer_key(o, key, sizeof(key)))
    fail("informer", "a %s event's object has no namespace/name key", what);
  const char *rv = ctrain_json_str(ctrain_json_get(o, "metadata"), "resourceVersion");
  pthread_mutex_lock(&out_mu);
  printf("event %s %s %s\n", what, key, rv ? rv : "-");
  fflush(stdout);
  pthread_mutex_unlock(&out_mu);
}
static void inf_add(void *ud, const cJSON *o) {
  (void)ud;
  print_event("add", o);
}
static void inf_update(void *ud, const cJSON *old, const cJSON *cur) {
  (void)ud;
  if (old != cur)
    print_event("update", cur);
}
static void inf_delete(void *ud, const cJSON *o) {
  (void)ud;
  print_event("delete", o);
}

static int cmp_str(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

static void print_names(const char *label, cJSON *arr) {
  int n = cJSON_GetArraySize(arr);
  char **keys = calloc((size_t)n + 1, sizeof(*keys));
  for (int i = 0; i < n; i++) {
    char key[256] = "";
    if (kube_informer_key(cJSON_GetArrayItem(arr, i), key, sizeof(key)))
      fail("informer", "%s: item %d has no namespace/name key", label, i);
    keys[i] = strdup(key);
  }
  qsort(keys, (size_t)n, sizeof(*keys), cmp_str);
  pthread_mutex_lock(&out_mu);
  printf("%s ", label);
  for (int i = 0; i < n; i++) {
    printf("%s%s", i ? "," : "", keys[i]);
    free(keys[i]);
  }
  printf("\n");
  fflush(stdout);
  pthread_mutex_unlock(&out_mu);
  free(keys);
}

static int cmd_informer(const char *ns) {
  kube_informer_opts o = {.gvr = &KUBE_GVR_CONFIGMAPS,
                          .ns = ns,
                          .label_selector = "ctrain.dev/it=kubeclient",
                          .watch_timeout_s = 30,
                          .handlers = {inf_add, inf_update, inf_delete, NULL}};
  kube_informer *inf = NULL;
  if (kube_informer_new(client, &o, &inf) || kube_informer_start(inf))
    fail("informer", "could not start");
  if (kube_informer_wait_synced(inf, 30000))
    fail("informer", "not synced within 30 s");
  pthread_mutex_lock(&out_mu);
  printf("synced\n");
  fflush(stdout);
  pthread_mutex_unlock(&out_mu);
  char line[256];
  while (fgets(line, sizeof(line), stdin)) {
    line[strcspn(line, "\n")] = '\0';
    cJSON *arr = NULL;
    if (!strcmp(line, "quit"))
      break;
    if (!strcmp(line, "dump")) {
      if (kube_informer_list(inf, NULL, &arr))
        fail("informer", "dump: listing the cache failed");
      print_names("cache", arr);
      kube_informer_stats s;
      kube_informer_get_stats(inf, &s);
      pthread_mutex_lock(&out_mu);
      printf("stats lists=%ld events=%ld synced=%d\n", s.lists, s.events,
             kube_informer_has_synced(inf));
      fflush(stdout);
      pthread_mutex_unlock(&out_mu);
    } else if (!strncmp(line, "owner ", 6)) {
      if (kube_informer_by_owner(inf, line + 6, &arr))
        fail("informer", "owner %s: the lookup failed", line + 6);
      print_names("owned", arr);
    }
    cJSON_Delete(arr);
  }
  double t0 = ctrain_mono_s();
  kube_informer_stop(inf);
  printf("stopped_in_s=%.3f\n", ctrain_mono_s() - t0);
  kube_informer_free(inf);
  printf("PASS\n");
  return 0;
}

/* ---- lease: one leader-election candidate ---------------------------------
 * Prints "leading <id>", "stopped <id>", "new_leader <holder>" as they
 * happen (with a monotonic timestamp), renews until stdin says "quit" (or
 * EOF), then releases and prints "released". */

static const char *lease_id;

static void say(const char *what, const char *who) {
  pthread_mutex_lock(&out_mu);
  printf("%s %s t=%.3f\n", what, who, ctrain_mono_s());
  fflush(stdout);
  pthread_mutex_unlock(&out_mu);
}
static void lease_started(void *ud) {
  (void)ud;
  say("leading", lease_id);
}
static void lease_stopped(void *ud) {
  (void)ud;
  say("stopped", lease_id);
}
static void lease_new_leader(void *ud, const char *who) {
  (void)ud;
  say("new_leader", who);
}

static int cmd_lease(const char *ns, const char *id, long dur_s) {
  lease_id = id;
  kube_lease_opts o = {.ns = ns,
                       .name = "ctrain-it-leader",
                       .identity = id,
                       .lease_duration_ns = dur_s * 1000000000LL,
                       .renew_deadline_ns = dur_s * 2000000000LL / 3,
                       .retry_period_ns = dur_s * 1000000000LL / 6,
                       .on_started_leading = lease_started,
                       .on_stopped_leading = lease_stopped,
                       .on_new_leader = lease_new_leader};
  kube_lease *l = NULL;
  if (kube_lease_new(client, &o, &l) || kube_lease_start(l))
    fail("lease", "could not start");
  say("candidate", id);
  char line[64];
  while (fgets(line, sizeof(line), stdin) && strncmp(line, "quit", 4))
    ;
  kube_lease_stop(l);
  say("released", id);
  kube_lease_free(l);
  printf("PASS\n");
  return 0;
}

/* ---- crd: TrainingJob CRUD with the status subresource; Pod CRUD ---------- */

static const kube_gvr TJ = {"ctrain.dev", "v1alpha1", "trainingjobs"};

static int cmd_crd(const char *ns) {
  cJSON *tj = cJSON_Parse(
      "{\"apiVersion\":\"ctrain.dev/v1alpha1\",\"kind\":\"TrainingJob\",\"metadata\":{\"name\":"
      "\"it-tj\"},\"spec\":{\"replicaSpecs\":{\"Worker\":{\"replicas\":2,\"template\":{\"spec\":{"
      "\"containers\":[{\"name\":\"w\",\"image\":\"x\"}]}}}}}}");
  cJSON *out = NULL, *got = NULL;
  EXPECT(kube_client_create(client, &TJ, ns, tj, NULL, &out, &st), CTRAIN_OK, "create TrainingJob");
  const cJSON *port = cJSON_GetObjectItem(cJSON_GetObjectItem(out, "spec"), "port");
  CHECK(cJSON_IsNumber(port) && port->valueint == 2222, "CRD default applied (spec.port 2222)",
        "port missing");
  cJSON_Delete(out);
  EXPECT(kube_client_get(client, &TJ, ns, "it-tj", &got, &st), CTRAIN_OK, "get TrainingJob");
  /* Status through the subresource: the main resource ignores status. */
  cJSON *status = cJSON_CreateObject(); /* kept; copies go into requests */
  cJSON_AddNumberToObject(status, "restarts", 1);
  cJSON *conds = cJSON_AddArrayToObject(status, "conditions");
  cJSON *c0 = cJSON_CreateObject();
  cJSON_AddStringToObject(c0, "type", "Created");
  cJSON_AddStringToObject(c0, "status", "True");
  cJSON_AddStringToObject(c0, "reason", "ItTest");
  cJSON_AddItemToArray(conds, c0);
  cJSON_AddItemToObject(got, "status", cJSON_Duplicate(status, 1));
  cJSON *stale = cJSON_Duplicate(got, 1);
  cJSON *labels = cJSON_AddObjectToObject(cJSON_GetObjectItem(got, "metadata"), "labels");
  cJSON_AddStringToObject(labels, "touched", "yes"); /* a real change: the version moves */
  EXPECT(kube_client_update(client, &TJ, ns, got, NULL, &out, &st), CTRAIN_OK,
         "update main resource");
  CHECK(!cJSON_GetObjectItem(out, "status") ||
            !cJSON_GetObjectItem(cJSON_GetObjectItem(out, "status"), "restarts"),
        "main resource update ignores status", "status was written");
  cJSON_Delete(out);
  EXPECT(kube_client_update_status(client, &TJ, ns, stale, NULL, NULL, &st), CTRAIN_E_CONFLICT,
         "status update with a stale version conflicts");
  cJSON_Delete(got);
  EXPECT(kube_client_get(client, &TJ, ns, "it-tj", &got, &st), CTRAIN_OK, "re-get");
  cJSON_DeleteItemFromObject(got, "status");
  cJSON_AddItemToObject(got, "status", cJSON_Duplicate(status, 1));
  EXPECT(kube_client_update_status(client, &TJ, ns, got, NULL, &out, &st), CTRAIN_OK,
         "update status subresource");
  const cJSON *r = cJSON_GetObjectItem(cJSON_GetObjectItem(out, "status"), "restarts");
  CHECK(cJSON_IsNumber(r) && r->valueint == 1, "status written", "restarts missing");
  cJSON_Delete(out);
  EXPECT(kube_client_patch(client, &TJ, ns, "it-tj", "status", KUBE_PATCH_MERGE,
                           "{\"status\":{\"restarts\":2}}", NULL, &out, &st),
         CTRAIN_OK, "merge patch status subresource");
  r = cJSON_GetObjectItem(cJSON_GetObjectItem(out, "status"), "restarts");
  CHECK(cJSON_IsNumber(r) && r->valueint == 2, "status patched", "restarts != 2");
  cJSON_Delete(out);
  cJSON *bad = cJSON_Parse("{\"apiVersion\":\"ctrain.dev/v1alpha1\",\"kind\":\"TrainingJob\","
                           "\"metadata\":{\"name\":\"bad\"},\"spec\":{\"replicaSpecs\":{}}}");
  EXPECT(kube_client_create(client, &TJ, ns, bad, NULL, NULL, &st), CTRAIN_E_INVAL,
         "invalid TrainingJob is rejected (422)");
  printf("invalid_reason=%s\ninvalid_cause=%s\n", st.reason, st.details_cause);
  cJSON_Delete(bad);
  kube_delete_opts d = {.propagation_policy = "Foreground", .grace_period_seconds = -1};
  EXPECT(kube_client_delete(client, &TJ, ns, "it-tj", &d, NULL, &st), CTRAIN_OK,
         "delete TrainingJob (foreground)");

  /* Pods: create (unscheduled is fine), get, delete now. */
  cJSON *pod = cJSON_Parse("{\"apiVersion\":\"v1\",\"kind\":\"Pod\",\"metadata\":{\"name\":"
                           "\"it-pod\",\"labels\":{\"ctrain.dev/it\":\"kubeclient\"}},\"spec\":{"
                           "\"containers\":[{\"name\":\"c\",\"image\":\"busybox\"}]}}");
  EXPECT(kube_client_create(client, &KUBE_GVR_PODS, ns, pod, NULL, NULL, &st), CTRAIN_OK,
         "create pod");
  EXPECT(kube_client_get(client, &KUBE_GVR_PODS, ns, "it-pod", &out, &st), CTRAIN_OK, "get pod");
  cJSON_Delete(out);
  kube_delete_opts now = {.grace_period_seconds = 0};
  EXPECT(kube_client_delete(client, &KUBE_GVR_PODS, ns, "it-pod", &now, NULL, &st), CTRAIN_OK,
         "delete pod with grace 0");
  cJSON_Delete(pod);
  cJSON_Delete(tj);
  cJSON_Delete(stale);
  cJSON_Delete(got);
  cJSON_Delete(status);
  printf("PASS\n");
  return 0;
}

/* ---- events: a recorder aggregating repeats -------------------------------- */

static int cmd_events(const char *ns) {
  cJSON *cm = configmap("evented", "k", "v"), *obj = NULL;
  EXPECT(kube_client_create(client, &KUBE_GVR_CONFIGMAPS, ns, cm, NULL, &obj, &st), CTRAIN_OK,
         "create the involved object");
  kube_events_opts o = {.component = "ctrain-it", .instance = "kubeclient-check"};
  kube_events *ev = NULL;
  if (kube_events_new(client, &o, &ev))
    fail("events_new", "failed");
  int count = 0;
  for (int i = 0; i < 3; i++)
    EXPECT(kube_events_record(ev, obj, "Normal", "Tested", &count, "the same message"), CTRAIN_OK,
           "record repeat");
  CHECK(count == 3, "repeats aggregate into count 3", "count=%d", count);
  EXPECT(kube_events_record(ev, obj, "Warning", "Other", &count, "a different %s", "reason"),
         CTRAIN_OK, "record another");
  CHECK(count == 1, "another reason is a new event", "count=%d", count);
  kube_events_free(ev);
  cJSON_Delete(cm);
  cJSON_Delete(obj);
  printf("PASS\n");
  return 0;
}

/* ---- bench: pods en masse, list and watch throughput ----------------------- */

static long maxrss_kb(void) {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return ru.ru_maxrss;
}

static int cmd_mkpods(const char *ns, int n) {
  char body[512];
  for (int i = 0; i < n; i++) {
    snprintf(body, sizeof(body),
             "{\"apiVersion\":\"v1\",\"kind\":\"Pod\",\"metadata\":{\"name\":\"bench-%05d\","
             "\"labels\":{\"ctrain.dev/it\":\"kubeclient\",\"app\":\"bench\"}},\"spec\":{"
             "\"containers\":[{\"name\":\"c\",\"image\":\"busybox\",\"command\":[\"sleep\","
             "\"3600\"]}]}}",
             i);
    cJSON *pod = cJSON_Parse(body);
    ctrain_err r = kube_client_create(client, &KUBE_GVR_PODS, ns, pod, NULL, NULL, &st);
    cJSON_Delete(pod);
    if (r && r != CTRAIN_E_CONFLICT)
      fail("create pod", "%d: %s", i, st.message);
  }
  printf("PASS\n");
  return 0;
}

/* Lists all pods (pages of 500, each parsed) `rounds` times. */
static int cmd_listbench(const char *ns, int expect) {
  double t0 = ctrain_mono_s();
  int total = 0;
  char cont[4096] = "";
  do {
    cJSON *out = NULL;
    kube_list_opts lo = {.limit = 500, .continue_token = cont[0] ? cont : NULL};
    EXPECT(kube_client_list(client, &KUBE_GVR_PODS, ns[0] == '-' ? NULL : ns, &lo, &out, &st),
           CTRAIN_OK, "list page");
    total += cJSON_GetArraySize(cJSON_GetObjectItem(out, "items"));
    const char *c = ctrain_json_str(ctrain_json_get(out, "metadata"), "continue");
    snprintf(cont, sizeof(cont), "%s", c ? c : "");
    cJSON_Delete(out);
  } while (cont[0]);
  double dt = ctrain_mono_s() - t0;
  printf("items=%d\nlist_s=%.3f\nlist_per_s=%.0f\nmaxrss_kb=%ld\n", total, dt, total / dt,
         maxrss_kb());
  CHECK(expect <= 0 || total >= expect, "listed every pod", "%d < %d", total, expect);
  printf("PASS\n");
  return 0;
}

static int bench_seen, bench_want;
static kube_watch *bench_w;
static ctrain_err bench_event(void *ud, kube_watch_event *ev) {
  (void)ud;
  if (ev->type == KUBE_WATCH_ADDED && ++bench_seen >= bench_want)
    kube_watch_cancel(bench_w);
  return CTRAIN_OK;
}

/* Watches all pods from "now" (a synthetic ADDED per existing pod) until
 * `n` have arrived. */
static int cmd_watchbench(const char *ns, int n) {
  kube_watch_opts o = {
      .gvr = &KUBE_GVR_PODS, .ns = ns[0] == '-' ? NULL : ns, .timeout_seconds = 300};
  bench_want = n;
  if (kube_watch_new(client, &o, &bench_w))
    fail("watch_new", "failed");
  double t0 = ctrain_mono_s();
  ctrain_err r = kube_watch_run(bench_w, bench_event, NULL, &st);
  double dt = ctrain_mono_s() - t0;
  printf("events=%d\nwatch_s=%.3f\nwatch_per_s=%.0f\nmaxrss_kb=%ld\n", bench_seen, dt,
         bench_seen / dt, maxrss_kb());
  CHECK(r == CTRAIN_E_CANCELLED && bench_seen >= n, "watch delivered every pod", "%s, %d",
        ctrain_strerror(r), bench_seen);
  kube_watch_free(bench_w);
  printf("PASS\n");
  return 0;
}

int main(int argc, char **argv) {
  if (argc < 3) {
    fprintf(stderr,
            "usage: %s "
            "crud|notfound|paginate|watch|gone|informer|events|crd|mkpods|listbench|watchbench|"
            "getns NS [N] | lease "
            "NS ID "
            "DURATION_S\n",
            argv[0]);
    return 2;
  }
  curl_global_init(CURL_GLOBAL_DEFAULT);
  ctrain_log_init("kubeclient_check", CTRAIN_LOG_INFO, CTRAIN_LOG_TEXT);
  const char *cmd = argv[1], *ns = argv[2];
  long n = argc > 3 ? strtol(argv[3], NULL, 10) : 0;
  int rc = 2;
  int fast = !strcmp(cmd, "paginate") || !strcmp(cmd, "watch") || !strcmp(cmd, "mkpods") ||
             !strcmp(cmd, "listbench") || !strcmp(cmd, "watchbench");
  connect_cluster(fast ? -1 : 20, fast ? 1 : 40);
  if (!strcmp(cmd, "crud"))
    rc = cmd_crud(ns);
  else if (!strcmp(cmd, "notfound"))
    rc = cmd_notfound(ns);
  else if (!strcmp(cmd, "paginate"))
    rc = cmd_paginate(ns, (int)n);
  else if (!strcmp(cmd, "watch"))
    rc = cmd_watch(ns, (int)n);
  else if (!strcmp(cmd, "gone"))
    rc = cmd_gone(ns, argc > 3 ? argv[3] : NULL, argc > 4 ? (int)strtol(argv[4], NULL, 10) : -1);
  else if (!strcmp(cmd, "informer"))
    rc = cmd_informer(ns);
  else if (!strcmp(cmd, "lease") && argc > 4)
    rc = cmd_lease(ns, argv[3], strtol(argv[4], NULL, 10));
  else if (!strcmp(cmd, "mkpods"))
    rc = cmd_mkpods(ns, (int)n);
  else if (!strcmp(cmd, "listbench"))
    rc = cmd_listbench(ns, (int)n);
  else if (!strcmp(cmd, "watchbench"))
    rc = cmd_watchbench(ns, (int)n);
  else if (!strcmp(cmd, "crd"))
    rc = cmd_crd(ns);
  else if (!strcmp(cmd, "events"))
    rc = cmd_events(ns);
  else if (!strcmp(cmd, "getns"))
    rc = cmd_get_namespace(ns);
  else
    fprintf(stderr, "unknown command %s\n", cmd);
  kube_client_free(client);
  kube_config_free(cfg);
  curl_global_cleanup();
  return rc;
}
