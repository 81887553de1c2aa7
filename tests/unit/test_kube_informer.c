/* test_kube_informer.c - the informer against a scripted apiserver: paged
 * initial list, watch events into the cache and handlers, the owner index,
 * 410 -> relist that emits the delete of a vanished object, resync, stop;
 * a relist replaces the cache at once (readers never see a half-listed
 * cache), delivers its deltas once each, and leaves the cache alone when a
 * page fails. */
#include "test.h"

#include <curl/curl.h>

#include "ctrain/clock.h"
#include "ctrain/kube_informer.h"
#include "kube_test_server.h"

#define OBJ(name, rv, owner)                                                                       \
  "{\"metadata\":{\"name\":\"" name "\",\"namespace\":\"ns\",\"resourceVersion\":\"" rv "\""       \
  ",\"ownerReferences\":[{\"uid\":\"" owner "\"}]}}"
#define EV(type, obj) "{\"type\":\"" type "\",\"object\":" obj "}\n"
/* A ConfigMapList page: `md` is its metadata's members, `items` the objects. */
#define CM_LIST(md, items)                                                                         \
  "{\"kind\":\"ConfigMapList\",\"apiVersion\":\"v1\",\"metadata\":{" md "},\"items\":[" items "]}"

static const char *http(const char *extra, const char *body) {
  static char pool[8][2048];
  static int next;
  char *b = pool[next++ % 8];
  size_t n = sizeof(pool[0]);
  snprintf(b, n,
           "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n%sContent-Length: %zu\r\n\r\n%s",
           extra, strlen(body), body);
  return b;
}

typedef struct {
  pthread_mutex_t mu;
  char log[64][64];
  int n, resyncs;
} rec;

static void add_line(rec *r, const char *what, const cJSON *o) {
  char key[48] = "";
  ASSERT_OK(kube_informer_key(o, key, sizeof(key)));
  pthread_mutex_lock(&r->mu);
  if (r->n < 64)
    snprintf(r->log[r->n++], 64, "%s %s", what, key);
  pthread_mutex_unlock(&r->mu);
}
static void on_add(void *ud, const cJSON *o) {
  add_line(ud, "add", o);
}
static void on_update(void *ud, const cJSON *old, const cJSON *cur) {
  rec *r = ud;
  if (old == cur) { /* resync */
    pthread_mutex_lock(&r->mu);
    r->resyncs++;
    pthread_mutex_unlock(&r->mu);
    return;
  }
  add_line(ud, "update", cur);
}
static void on_delete(void *ud, const cJSON *o) {
  add_line(ud, "delete", o);
}

static int wait_n(rec *r, int n) {
  for (int i = 0; i < 500; i++) {
    pthread_mutex_lock(&r->mu);
    int have = r->n;
    pthread_mutex_unlock(&r->mu);
    if (have >= n)
      return have;
    usleep(10000);
  }
  return -1;
}

/* The head of a watch response the server keeps open. */
#define STREAM_OPEN                                                                                \
  "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"

/* An informer on c with o, its handlers recording into r, started and
 * synced (not before it started). */
static kube_informer *start_synced(kube_client *c, kube_informer_opts o, rec *r) {
  kube_informer *inf = NULL;
  o.handlers = (kube_informer_handlers){on_add, on_update, on_delete, r};
  ASSERT_OK(kube_informer_new(c, &o, &inf));
  ASSERT_EQ(kube_informer_has_synced(inf), 0);
  ASSERT_OK(kube_informer_start(inf));
  ASSERT_OK(kube_informer_wait_synced(inf, 5000));
  return inf;
}

/* kube_informer_each's callback: counts, collects "|name|", stops after stop_after. */
typedef struct {
  int n, stop_after;
  char names[256];
} each_seen;

static int see_each(void *ud, const cJSON *obj) {
  each_seen *e = ud;
  const cJSON *md = cJSON_GetObjectItem(obj, "metadata");
  const cJSON *name = md ? cJSON_GetObjectItem(md, "name") : NULL;
  size_t len = strlen(e->names);
  snprintf(e->names + len, sizeof(e->names) - len, "|%s|",
           cJSON_IsString(name) ? name->valuestring : "?");
  e->n++;
  return e->stop_after && e->n >= e->stop_after;
}

TEST(list_watch_relist_delete) {
  curl_global_init(CURL_GLOBAL_DEFAULT);
  server s = {
      .resp = {http("Connection: close\r\n",
                    CM_LIST("\"continue\":\"c1\"", OBJ("a", "1", "O1") "," OBJ("b", "2", "O2"))),
               http("Connection: close\r\n",
                    CM_LIST("\"resourceVersion\":\"10\"", OBJ("c", "3", "O2"))),
               http("Connection: close\r\n",
                    EV("MODIFIED", OBJ("a", "11", "O1")) EV("DELETED", OBJ("b", "12", "O2"))
                        EV("ADDED", OBJ("d", "13", "O1")) "{\"type\":\"ERROR\",\"object\":{"
                                                          "\"kind\":\"Status\",\"code\":410}}\n"),
               http("Connection: close\r\n",
                    CM_LIST("\"resourceVersion\":\"20\"",
                            OBJ("a", "11", "O1") "," OBJ("d", "14", "O1"))),
               STREAM_OPEN},
      .stream_forever = 1};
  pthread_t srv = ks_start_server(&s);
  kube_client *c = ks_client_for(&s, NULL);
  rec r = {.mu = PTHREAD_MUTEX_INITIALIZER};
  kube_informer *inf = start_synced(
      c, (kube_informer_opts){.gvr = &KUBE_GVR_CONFIGMAPS, .ns = "ns", .page_size = 2}, &r);
  int got = wait_n(&r, 8);
  for (int i = 0; i < r.n; i++)
    fprintf(stderr, "log[%d] %s\n", i, r.log[i]);
  ASSERT_EQ(got, 8);
  ASSERT_STR_EQ(r.log[0], "add ns/a");
  ASSERT_STR_EQ(r.log[1], "add ns/b");
  ASSERT_STR_EQ(r.log[2], "add ns/c");
  ASSERT_STR_EQ(r.log[3], "update ns/a");
  ASSERT_STR_EQ(r.log[4], "delete ns/b");
  ASSERT_STR_EQ(r.log[5], "add ns/d");
  /* The relist after 410: d changed (14), a unchanged (no event), c gone. */
  ASSERT_STR_EQ(r.log[6], "update ns/d");
  ASSERT_STR_EQ(r.log[7], "delete ns/c");
  usleep(100000);
  ASSERT_EQ(r.n, 8);
  ASSERT_EQ(kube_informer_len(inf), 2);
  cJSON *a = kube_informer_get(inf, "ns", "a");
  ASSERT_NOT_NULL(a);
  ASSERT_STR_EQ(cJSON_GetObjectItem(a, "kind")->valuestring, "ConfigMap"); /* from the list */
  cJSON_Delete(a);
  ASSERT_NULL(kube_informer_get(inf, "ns", "c"));
  cJSON *owned = NULL;
  ASSERT_OK(kube_informer_by_owner(inf, "O1", &owned));
  ASSERT_EQ(cJSON_GetArraySize(owned), 2);
  cJSON_Delete(owned);
  ASSERT_OK(kube_informer_by_owner(inf, "O2", &owned));
  ASSERT_EQ(cJSON_GetArraySize(owned), 0);
  cJSON_Delete(owned);
  cJSON *all = NULL;
  ASSERT_OK(kube_informer_list(inf, "ns", &all));
  ASSERT_EQ(cJSON_GetArraySize(all), 2);
  cJSON_Delete(all);
  ASSERT_OK(kube_informer_list(inf, "other", &all));
  ASSERT_EQ(cJSON_GetArraySize(all), 0);
  cJSON_Delete(all);
  /* kube_informer_each: the same objects, one parsed copy at a time; a
   * nonzero return stops it. */
  each_seen es = {0};
  ASSERT_OK(kube_informer_each(inf, "ns", see_each, &es));
  ASSERT_EQ(es.n, 2);
  ASSERT(strstr(es.names, "|a|") && strstr(es.names, "|d|"));
  es = (each_seen){.stop_after = 1};
  ASSERT_OK(kube_informer_each(inf, NULL, see_each, &es));
  ASSERT_EQ(es.n, 1);
  es = (each_seen){0};
  ASSERT_OK(kube_informer_each(inf, "other", see_each, &es));
  ASSERT_EQ(es.n, 0);
  kube_informer_stats st;
  kube_informer_get_stats(inf, &st);
  ASSERT_EQ(st.lists, 2);
  ASSERT_EQ(st.events, 3);
  /* Stops with the last watch hanging open: the stop cancels it rather than
   * waiting out its idle timeout (timeoutSeconds + 30 s, past ctest's
   * TIMEOUT, which is what fails a stop that waits). That the cancel wakes
   * the stream at once, not at its next poll, is test_kube_client's
   * stream_and_cancel and test_kube_watch's watch_cancel_from_other_thread,
   * held to a time of their own run; no wall-clock ceiling here (one
   * flakes on a loaded machine). */
  kube_informer_stop(inf);
  ks_stop_server(&s, srv);
  ASSERT_STR_CONTAINS(s.req[0], "limit=2");
  ASSERT_STR_CONTAINS(s.req[1], "continue=c1");
  ASSERT_STR_CONTAINS(s.req[2], "watch=1");
  ASSERT_STR_CONTAINS(s.req[2], "resourceVersion=10");
  ASSERT_STR_CONTAINS(s.req[4], "resourceVersion=20");
  kube_informer_free(inf);
  ks_client_done(c);
}

TEST(resync) {
  curl_global_init(CURL_GLOBAL_DEFAULT);
  server s = {
      .resp = {http("Connection: close\r\n", CM_LIST("\"resourceVersion\":\"5\"",
                                                     OBJ("a", "1", "O") "," OBJ("b", "2", "O"))),
               STREAM_OPEN},
      .stream_forever = 1};
  pthread_t srv = ks_start_server(&s);
  kube_client *c = ks_client_for(&s, NULL);
  rec r = {.mu = PTHREAD_MUTEX_INITIALIZER};
  kube_informer *inf =
      start_synced(c, (kube_informer_opts){.gvr = &KUBE_GVR_CONFIGMAPS, .resync_ms = 100}, &r);
  usleep(450 * 1000);
  kube_informer_stop(inf);
  ks_stop_server(&s, srv);
  kube_informer_stats st;
  kube_informer_get_stats(inf, &st);
  ASSERT_GE(st.resyncs, 3);
  ASSERT_EQ(r.resyncs, st.resyncs * 2); /* every object, every period */
  kube_informer_free(inf);
  ks_client_done(c);
}

TEST(wait_synced_times_out) {
  curl_global_init(CURL_GLOBAL_DEFAULT);
  server s = {.port = 1};
  kube_client *c = ks_client_for(&s, NULL);
  kube_informer_opts o = {.gvr = &KUBE_GVR_PODS};
  kube_informer *inf = NULL;
  ASSERT_OK(kube_informer_new(c, &o, &inf));
  ASSERT_OK(kube_informer_start(inf));
  ASSERT_EQ(kube_informer_wait_synced(inf, 300), CTRAIN_E_TIMEOUT);
  ASSERT_EQ(kube_informer_has_synced(inf), 0);
  kube_informer_free(inf);
  ks_client_done(c);
}

/* ---- relist: an atomic replace ------------------------------------------ */

/* Handlers that log "what key@rv n=LEN", LEN the cache's size when the
 * handler ran (the cache must already be the new one). */
typedef struct {
  rec r;
  kube_informer *_Atomic inf;
} drec;

static void d_line(drec *d, const char *what, const cJSON *o) {
  char key[48] = "";
  ASSERT_OK(kube_informer_key(o, key, sizeof(key)));
  const char *rv = cJSON_GetStringValue(
      cJSON_GetObjectItem(cJSON_GetObjectItem(o, "metadata"), "resourceVersion"));
  kube_informer *inf = d->inf;
  size_t len = inf ? kube_informer_len(inf) : 0;
  pthread_mutex_lock(&d->r.mu);
  if (d->r.n < 64)
    snprintf(d->r.log[d->r.n++], 64, "%s %s@%s n=%zu", what, key, rv ? rv : "?", len);
  pthread_mutex_unlock(&d->r.mu);
}
static void d_add(void *ud, const cJSON *o) {
  d_line(ud, "add", o);
}
static void d_update(void *ud, const cJSON *old, const cJSON *cur) {
  (void)old;
  d_line(ud, "update", cur);
}
static void d_delete(void *ud, const cJSON *o) {
  d_line(ud, "delete", o);
}

static kube_informer *start_drec(kube_client *c, long page_size, drec *d) {
  kube_informer_opts o = {.gvr = &KUBE_GVR_CONFIGMAPS,
                          .ns = "ns",
                          .page_size = page_size,
                          .handlers = {d_add, d_update, d_delete, d}};
  kube_informer *inf = NULL;
  ASSERT_OK(kube_informer_new(c, &o, &inf));
  d->inf = inf;
  ASSERT_OK(kube_informer_start(inf));
  ASSERT_OK(kube_informer_wait_synced(inf, 5000));
  return inf;
}

static int cmp_str(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

/* "name:rv,..." of an array of objects, sorted by name, into buf. */
static void gen_of(const cJSON *arr, char *buf, size_t cap) {
  char items[16][32], *p[16];
  int n = 0;
  const cJSON *o;
  cJSON_ArrayForEach(o, arr) {
    const cJSON *md = cJSON_GetObjectItem(o, "metadata");
    if (n < 16) {
      snprintf(items[n], sizeof(items[n]), "%s:%s",
               cJSON_GetStringValue(cJSON_GetObjectItem(md, "name")),
               cJSON_GetStringValue(cJSON_GetObjectItem(md, "resourceVersion")));
      p[n] = items[n];
      n++;
    }
  }
  qsort(p, (size_t)n, sizeof(*p), cmp_str);
  buf[0] = '\0';
  for (int i = 0; i < n; i++) {
    size_t len = strlen(buf);
    snprintf(buf + len, cap - len, "%s%s", i ? "," : "", p[i]);
  }
}

#define GEN_OLD "a:1,b:2,c:3,d:4"
#define GEN_NEW "a:1,b:21,c:22,e:23,f:24"

typedef struct {
  kube_informer *inf;
  _Atomic int stop;
  int reads, old_seen, bad;
  _Atomic int new_seen;
  char bad_gen[128];
} reader;

/* 1 when gen is one whole generation (counted), else records it. */
static void judge(reader *rd, const char *gen) {
  if (!strcmp(gen, GEN_OLD))
    rd->old_seen++;
  else if (!strcmp(gen, GEN_NEW))
    rd->new_seen++;
  else if (!rd->bad++)
    snprintf(rd->bad_gen, sizeof(rd->bad_gen), "%s", gen);
}

/* Reads the cache in a loop through list and the owner index: each read
 * must be the old complete set or the new one. */
static void *read_loop(void *arg) {
  reader *rd = arg;
  char gen[128];
  while (!rd->stop) {
    cJSON *arr = NULL;
    if (kube_informer_list(rd->inf, "ns", &arr) == CTRAIN_OK) {
      gen_of(arr, gen, sizeof(gen));
      judge(rd, gen);
    }
    cJSON_Delete(arr);
    arr = NULL;
    if (kube_informer_by_owner(rd->inf, "O", &arr) == CTRAIN_OK) {
      gen_of(arr, gen, sizeof(gen));
      judge(rd, gen);
    }
    cJSON_Delete(arr);
    size_t len = kube_informer_len(rd->inf);
    if (len != 4 && len != 5 && !rd->bad++)
      snprintf(rd->bad_gen, sizeof(rd->bad_gen), "len %zu", len);
    rd->reads++;
    usleep(200);
  }
  return NULL;
}

static int wait_held(server *s, int which) {
  for (int i = 0; i < 500; i++) {
    if (s->held == which)
      return 1;
    usleep(10000);
  }
  return 0;
}

/* (1) A 3-page relist after a 410, its second and third pages held back
 * while a reader thread reads the cache: every read is the old generation
 * or the new one, never a mix of pages. Then (2)'s deltas, once each. */
TEST(relist_is_atomic_for_readers) {
  curl_global_init(CURL_GLOBAL_DEFAULT);
  server s = {
      .resp = {http("Connection: close\r\n",
                    CM_LIST("\"continue\":\"c0\"", OBJ("a", "1", "O") "," OBJ("b", "2", "O"))),
               http("Connection: close\r\n", CM_LIST("\"resourceVersion\":\"10\"",
                                                     OBJ("c", "3", "O") "," OBJ("d", "4", "O"))),
               http("Connection: close\r\n",
                    "{\"type\":\"ERROR\",\"object\":{\"kind\":\"Status\",\"code\":410}}\n"),
               http("Connection: close\r\n",
                    CM_LIST("\"continue\":\"k1\"", OBJ("a", "1", "O") "," OBJ("b", "21", "O"))),
               http("Connection: close\r\n",
                    CM_LIST("\"continue\":\"k2\"", OBJ("c", "22", "O") "," OBJ("e", "23", "O"))),
               http("Connection: close\r\n",
                    CM_LIST("\"resourceVersion\":\"30\"", OBJ("f", "24", "O"))),
               STREAM_OPEN},
      .stream_forever = 1,
      .hold = 5}; /* the relist's second page (response 4) */
  pthread_t srv = ks_start_server(&s);
  kube_client *c = ks_client_for(&s, NULL);
  drec d = {.r.mu = PTHREAD_MUTEX_INITIALIZER};
  kube_informer *inf = start_drec(c, 2, &d);
  reader rd = {.inf = inf};
  pthread_t rt;
  ASSERT_OK(pthread_create(&rt, NULL, read_loop, &rd));
  /* The relist has its first page (a and a changed b) and waits for its
   * second: the cache is still the old generation. */
  ASSERT(wait_held(&s, 5));
  usleep(50000);
  s.hold = 6; /* serve the second page, hold the third */
  ASSERT(wait_held(&s, 6));
  usleep(50000);
  s.hold = 0;
  for (int i = 0; i < 500 && !rd.new_seen; i++)
    usleep(10000);
  usleep(20000);
  rd.stop = 1;
  pthread_join(rt, NULL);
  fprintf(stderr, "reads %d old %d new %d bad %d %s\n", rd.reads, rd.old_seen, rd.new_seen, rd.bad,
          rd.bad_gen);
  ASSERT_EQ(rd.bad, 0);
  ASSERT_GT(rd.old_seen, 0);
  ASSERT_GT(rd.new_seen, 0);
  int got = wait_n(&d.r, 9);
  for (int i = 0; i < d.r.n; i++)
    fprintf(stderr, "log[%d] %s\n", i, d.r.log[i]);
  ASSERT_EQ(got, 9);
  /* The initial (paged) list is one replace too: its adds come after it is
   * whole, in list order. */
  ASSERT_STR_EQ(d.r.log[0], "add ns/a@1 n=4");
  ASSERT_STR_EQ(d.r.log[1], "add ns/b@2 n=4");
  ASSERT_STR_EQ(d.r.log[2], "add ns/c@3 n=4");
  ASSERT_STR_EQ(d.r.log[3], "add ns/d@4 n=4");
  /* The relist: a unchanged (nothing), b and c changed, e and f new, in
   * list order; then d, gone, with its last known state. */
  ASSERT_STR_EQ(d.r.log[4], "update ns/b@21 n=5");
  ASSERT_STR_EQ(d.r.log[5], "update ns/c@22 n=5");
  ASSERT_STR_EQ(d.r.log[6], "add ns/e@23 n=5");
  ASSERT_STR_EQ(d.r.log[7], "add ns/f@24 n=5");
  ASSERT_STR_EQ(d.r.log[8], "delete ns/d@4 n=5");
  kube_informer_stats st;
  kube_informer_get_stats(inf, &st);
  ASSERT_EQ(st.lists, 2);
  kube_informer_stop(inf);
  ks_stop_server(&s, srv);
  ASSERT_STR_CONTAINS(s.req[4], "continue=k1");
  ASSERT_STR_CONTAINS(s.req[5], "continue=k2");
  ASSERT_STR_CONTAINS(s.req[6], "resourceVersion=30");
  kube_informer_free(inf);
  ks_client_done(c);
}

/* (2) The deltas of a relist: add for new keys, update for changed ones,
 * nothing for unchanged ones (resourceVersion equal), delete for the gone
 * with their last known state; each once, after the cache is the new one;
 * a watch event after it applies to the new cache. */
TEST(relist_deltas_once_each) {
  curl_global_init(CURL_GLOBAL_DEFAULT);
  server s = {
      .resp = {http("Connection: close\r\n",
                    CM_LIST("\"resourceVersion\":\"10\"",
                            OBJ("a", "1", "O") "," OBJ("b", "2", "O") "," OBJ(
                                "c", "3", "P") "," OBJ("d", "4", "O"))),
               http("Connection: close\r\n",
                    "{\"type\":\"ERROR\",\"object\":{\"kind\":\"Status\",\"code\":410}}\n"),
               http("Connection: close\r\n",
                    CM_LIST("\"continue\":\"k1\"",
                            OBJ("d", "4", "O") "," OBJ("c", "5", "O") "," OBJ("x", "6", "P"))),
               http("Connection: close\r\n", CM_LIST("\"resourceVersion\":\"20\"",
                                                     OBJ("a", "1", "O") "," OBJ("y", "7", "P"))),
               http("Connection: close\r\n", EV("MODIFIED", OBJ("a", "21", "O"))), STREAM_OPEN},
      .stream_forever = 1};
  pthread_t srv = ks_start_server(&s);
  kube_client *c = ks_client_for(&s, NULL);
  drec d = {.r.mu = PTHREAD_MUTEX_INITIALIZER};
  kube_informer *inf = start_drec(c, 3, &d);
  int got = wait_n(&d.r, 9);
  usleep(100000);
  for (int i = 0; i < d.r.n; i++)
    fprintf(stderr, "log[%d] %s\n", i, d.r.log[i]);
  ASSERT_EQ(got, 9);
  ASSERT_EQ(d.r.n, 9);
  ASSERT_STR_EQ(d.r.log[0], "add ns/a@1 n=4");
  ASSERT_STR_EQ(d.r.log[3], "add ns/d@4 n=4");
  ASSERT_STR_EQ(d.r.log[4], "update ns/c@5 n=5");
  ASSERT_STR_EQ(d.r.log[5], "add ns/x@6 n=5");
  ASSERT_STR_EQ(d.r.log[6], "add ns/y@7 n=5");
  ASSERT_STR_EQ(d.r.log[7], "delete ns/b@2 n=5");
  ASSERT_STR_EQ(d.r.log[8], "update ns/a@21 n=5");
  /* The owner index is the new list's: c moved from P to O, b is gone. */
  cJSON *owned = NULL;
  char gen[128];
  ASSERT_OK(kube_informer_by_owner(inf, "O", &owned));
  gen_of(owned, gen, sizeof(gen));
  ASSERT_STR_EQ(gen, "a:21,c:5,d:4");
  cJSON_Delete(owned);
  ASSERT_OK(kube_informer_by_owner(inf, "P", &owned));
  gen_of(owned, gen, sizeof(gen));
  ASSERT_STR_EQ(gen, "x:6,y:7");
  cJSON_Delete(owned);
  cJSON *all = NULL;
  ASSERT_OK(kube_informer_list(inf, NULL, &all));
  gen_of(all, gen, sizeof(gen));
  ASSERT_STR_EQ(gen, "a:21,c:5,d:4,x:6,y:7");
  cJSON_Delete(all);
  kube_informer_stop(inf);
  ks_stop_server(&s, srv);
  kube_informer_free(inf);
  ks_client_done(c);
}

/* (3) A relist whose second page fails (410: its continue token expired)
 * leaves the cache as it was and delivers nothing; the next relist (after
 * the watch's backoff and another 410) applies. */
TEST(relist_failing_page_changes_nothing) {
  curl_global_init(CURL_GLOBAL_DEFAULT);
  server s = {
      .resp = {http("Connection: close\r\n", CM_LIST("\"resourceVersion\":\"10\"",
                                                     OBJ("a", "1", "O") "," OBJ("b", "2", "O"))),
               http("Connection: close\r\n",
                    "{\"type\":\"ERROR\",\"object\":{\"kind\":\"Status\",\"code\":410}}\n"),
               http("Connection: close\r\n",
                    CM_LIST("\"continue\":\"k1\"", OBJ("b", "5", "O") "," OBJ("c", "6", "O"))),
               ks_resp_status(410, "Gone", "Connection: close\r\n",
                              "{\"kind\":\"Status\",\"code\":410,\"reason\":\"Expired\","
                              "\"message\":\"continue token expired\"}"),
               http("Connection: close\r\n",
                    "{\"type\":\"ERROR\",\"object\":{\"kind\":\"Status\",\"code\":410}}\n"),
               http("Connection: close\r\n",
                    CM_LIST("\"continue\":\"k2\"", OBJ("b", "5", "O") "," OBJ("c", "6", "O"))),
               http("Connection: close\r\n", CM_LIST("\"resourceVersion\":\"20\"", "")),
               STREAM_OPEN},
      .stream_forever = 1,
      .hold = 5}; /* the watch after the failed relist (response 4) */
  pthread_t srv = ks_start_server(&s);
  kube_client *c = ks_client_for(&s, NULL);
  drec d = {.r.mu = PTHREAD_MUTEX_INITIALIZER};
  kube_informer *inf = start_drec(c, 2, &d);
  ASSERT(wait_held(&s, 5));
  /* The failed relist had b changed and c new on its first page: none of
   * it is in the cache, no handler ran. */
  cJSON *all = NULL;
  char gen[128];
  ASSERT_OK(kube_informer_list(inf, NULL, &all));
  gen_of(all, gen, sizeof(gen));
  ASSERT_STR_EQ(gen, "a:1,b:2");
  cJSON_Delete(all);
  ASSERT_OK(kube_informer_by_owner(inf, "O", &all));
  gen_of(all, gen, sizeof(gen));
  ASSERT_STR_EQ(gen, "a:1,b:2");
  cJSON_Delete(all);
  ASSERT_NULL(kube_informer_get(inf, "ns", "c"));
  pthread_mutex_lock(&d.r.mu);
  ASSERT_EQ(d.r.n, 2);
  pthread_mutex_unlock(&d.r.mu);
  kube_informer_stats st;
  kube_informer_get_stats(inf, &st);
  ASSERT_EQ(st.lists, 1);
  s.hold = 0;
  int got = wait_n(&d.r, 5);
  usleep(100000);
  for (int i = 0; i < d.r.n; i++)
    fprintf(stderr, "log[%d] %s\n", i, d.r.log[i]);
  ASSERT_EQ(got, 5);
  ASSERT_EQ(d.r.n, 5);
  ASSERT_STR_EQ(d.r.log[2], "update ns/b@5 n=2");
  ASSERT_STR_EQ(d.r.log[3], "add ns/c@6 n=2");
  ASSERT_STR_EQ(d.r.log[4], "delete ns/a@1 n=2");
  kube_informer_get_stats(inf, &st);
  ASSERT_EQ(st.lists, 2);
  kube_informer_stop(inf);
  ks_stop_server(&s, srv);
  ASSERT_STR_CONTAINS(s.req[3], "continue=k1");
  ASSERT_STR_CONTAINS(s.req[4], "watch=1");
  ASSERT_STR_CONTAINS(s.req[4], "resourceVersion=10");
  ASSERT_STR_CONTAINS(s.req[6], "continue=k2");
  kube_informer_free(inf);
  ks_client_done(c);
}

/* The owner index by namespace and owner name: an object is found under
 * "<its namespace>/<owner name>" for each ownerReference that names one
 * (any uid, any kind), never under another namespace's; a watch event that
 * changes the references moves it. */
#define NOBJ(name, ns, rv, oname, ouid)                                                            \
  "{\"metadata\":{\"name\":\"" name "\",\"namespace\":\"" ns "\",\"resourceVersion\":\"" rv "\""   \
  ",\"ownerReferences\":[{\"name\":\"" oname "\",\"uid\":\"" ouid "\",\"controller\":true}]}}"
TEST(owner_name_index) {
  curl_global_init(CURL_GLOBAL_DEFAULT);
  server s = {
      .resp = {http("Connection: close\r\n",
                    CM_LIST("\"resourceVersion\":\"10\"",
                            NOBJ("p1", "a", "1", "job", "U1") "," NOBJ(
                                "p2", "a", "2", "job",
                                "U0") "," NOBJ("p3", "b", "3", "job",
                                               "U1") "," NOBJ("p4", "a", "4", "other", "U9"))),
               http("Connection: close\r\n", EV("MODIFIED", NOBJ("p2", "a", "11", "other", "U9"))),
               STREAM_OPEN},
      .stream_forever = 1};
  pthread_t srv = ks_start_server(&s);
  kube_client *c = ks_client_for(&s, NULL);
  rec r = {.mu = PTHREAD_MUTEX_INITIALIZER};
  kube_informer *inf =
      start_synced(c, (kube_informer_opts){.gvr = &KUBE_GVR_CONFIGMAPS, .page_size = 10}, &r);
  ASSERT_EQ(wait_n(&r, 5), 5);
  cJSON *got = NULL;
  char gen[128];
  ASSERT_OK(kube_informer_by_owner_name(inf, "a", "job", &got));
  gen_of(got, gen, sizeof(gen));
  ASSERT_STR_EQ(gen, "p1:1"); /* p2 moved to "other"; p3 is in b */
  cJSON_Delete(got);
  ASSERT_OK(kube_informer_by_owner_name(inf, "b", "job", &got));
  gen_of(got, gen, sizeof(gen));
  ASSERT_STR_EQ(gen, "p3:3");
  cJSON_Delete(got);
  ASSERT_OK(kube_informer_by_owner_name(inf, "a", "other", &got));
  gen_of(got, gen, sizeof(gen));
  ASSERT_STR_EQ(gen, "p2:11,p4:4");
  cJSON_Delete(got);
  ASSERT_OK(kube_informer_by_owner_name(inf, "c", "job", &got));
  ASSERT_EQ(cJSON_GetArraySize(got), 0);
  cJSON_Delete(got);
  /* The uid index is across namespaces, as before; a name never reads as a uid. */
  ASSERT_OK(kube_informer_by_owner(inf, "U1", &got));
  ASSERT_EQ(cJSON_GetArraySize(got), 2);
  cJSON_Delete(got);
  ASSERT_OK(kube_informer_by_owner(inf, "a/job", &got));
  ASSERT_EQ(cJSON_GetArraySize(got), 0);
  cJSON_Delete(got);
  kube_informer_stop(inf);
  ks_stop_server(&s, srv);
  kube_informer_free(inf);
  ks_client_done(c);
}

TEST_MAIN(T(list_watch_relist_delete), T(resync), T(wait_synced_times_out),
          T(relist_is_atomic_for_readers), T(relist_deltas_once_each),
          T(relist_failing_page_changes_nothing), T(owner_name_index))
