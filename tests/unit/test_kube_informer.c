/* test_kube_informer.c - the informer against a scripted apiserver: paged
 * initial list, watch events into the cache and handlers, the owner index,
 * 410 -> relist that emits the delete of a vanished object, resync, stop. */
#include "test.h"

#include <curl/curl.h>

#include "ctrain/clock.h"
#include "ctrain/kube_informer.h"
#include "test_kube_server.h"

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
  kube_informer_key(o, key, sizeof(key));
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
  pthread_t srv = start_server(&s);
  kube_client *c = client_for(&s, NULL);
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
  double t0 = ctrain_mono_s();
  kube_informer_stop(inf); /* with the last watch hanging open */
  ASSERT(ctrain_mono_s() - t0 < 2.0);
  stop_server(&s, srv);
  ASSERT_STR_CONTAINS(s.req[0], "limit=2");
  ASSERT_STR_CONTAINS(s.req[1], "continue=c1");
  ASSERT_STR_CONTAINS(s.req[2], "watch=1");
  ASSERT_STR_CONTAINS(s.req[2], "resourceVersion=10");
  ASSERT_STR_CONTAINS(s.req[4], "resourceVersion=20");
  kube_informer_free(inf);
  client_done(c);
}

TEST(resync) {
  curl_global_init(CURL_GLOBAL_DEFAULT);
  server s = {
      .resp = {http("Connection: close\r\n", CM_LIST("\"resourceVersion\":\"5\"",
                                                     OBJ("a", "1", "O") "," OBJ("b", "2", "O"))),
               STREAM_OPEN},
      .stream_forever = 1};
  pthread_t srv = start_server(&s);
  kube_client *c = client_for(&s, NULL);
  rec r = {.mu = PTHREAD_MUTEX_INITIALIZER};
  kube_informer *inf =
      start_synced(c, (kube_informer_opts){.gvr = &KUBE_GVR_CONFIGMAPS, .resync_ms = 100}, &r);
  usleep(450 * 1000);
  kube_informer_stop(inf);
  stop_server(&s, srv);
  kube_informer_stats st;
  kube_informer_get_stats(inf, &st);
  ASSERT_GE(st.resyncs, 3);
  ASSERT_EQ(r.resyncs, st.resyncs * 2); /* every object, every period */
  kube_informer_free(inf);
  client_done(c);
}

TEST(wait_synced_times_out) {
  curl_global_init(CURL_GLOBAL_DEFAULT);
  server s = {.port = 1};
  kube_client *c = client_for(&s, NULL);
  kube_informer_opts o = {.gvr = &KUBE_GVR_PODS};
  kube_informer *inf = NULL;
  ASSERT_OK(kube_informer_new(c, &o, &inf));
  ASSERT_OK(kube_informer_start(inf));
  ASSERT_EQ(kube_informer_wait_synced(inf, 300), CTRAIN_E_TIMEOUT);
  ASSERT_EQ(kube_informer_has_synced(inf), 0);
  kube_informer_free(inf);
  client_done(c);
}

TEST_MAIN(T(list_watch_relist_delete), T(resync), T(wait_synced_times_out))
