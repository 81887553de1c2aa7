/* test_kube_watch.c - the line splitter (every split point, CRLF, caps),
 * event parsing, and the reconnecting watch against a scripted server:
 * resourceVersion and bookmarks carried across reconnects, relist on 410,
 * cancellation from the handler and from another thread. */
#include "test.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/socket.h>
#include <unistd.h>

#include <curl/curl.h>

#include "ctrain/clock.h"
#include "ctrain/json.h"
#include "ctrain/kube_client.h"
#include "ctrain/kube_watch.h"
#include "kube_test_server.h"

/* ---- line splitter -------------------------------------------------------- */

typedef struct {
  char lines[16][64];
  int n;
} got_lines;

static ctrain_err take_line(void *ud, const char *line, size_t len) {
  got_lines *g = ud;
  ASSERT_LT(g->n, 16);
  ASSERT_LT(len, 64);
  memcpy(g->lines[g->n], line, len);
  g->lines[g->n][len] = '\0';
  g->n++;
  return CTRAIN_OK;
}

TEST(lines_every_split) {
  const char *in = "{\"a\":1}\n\r\n{\"b\":22}\r\n\n{\"c\":333}\npartial";
  size_t n = strlen(in);
  for (size_t i = 0; i <= n; i++) {
    for (size_t j = i; j <= n; j++) {
      kube_lines ls;
      got_lines g = {0};
      kube_lines_init(&ls, 64);
      ASSERT_OK(kube_lines_feed(&ls, in, i, take_line, &g));
      ASSERT_OK(kube_lines_feed(&ls, in + i, j - i, take_line, &g));
      ASSERT_OK(kube_lines_feed(&ls, in + j, n - j, take_line, &g));
      ASSERT_EQ(g.n, 3);
      ASSERT_STR_EQ(g.lines[0], "{\"a\":1}");
      ASSERT_STR_EQ(g.lines[1], "{\"b\":22}");
      ASSERT_STR_EQ(g.lines[2], "{\"c\":333}");
      ASSERT_EQ(ls.carry.len, 7); /* "partial" carried */
      kube_lines_free(&ls);
    }
  }
}

TEST(lines_cap) {
  kube_lines ls;
  got_lines g = {0};
  kube_lines_init(&ls, 8);
  ASSERT_OK(kube_lines_feed(&ls, "12345678\n", 9, take_line, &g)); /* exactly the cap */
  ASSERT_OK(kube_lines_feed(&ls, "1234", 4, take_line, &g));
  ASSERT_EQ(kube_lines_feed(&ls, "56789", 5, take_line, &g), CTRAIN_E_TOOBIG);
  ASSERT_LE(ls.carry.alloc, 9); /* never grew past the cap (+ its NUL) */
  kube_lines_reset(&ls);
  ASSERT_EQ(kube_lines_feed(&ls, "123456789\n", 10, take_line, &g), CTRAIN_E_TOOBIG);
  ASSERT_EQ(g.n, 1);
  kube_lines_free(&ls);
}

static ctrain_err stop_at_two(void *ud, const char *line, size_t len) {
  (void)line;
  (void)len;
  int *n = ud;
  return ++*n == 2 ? CTRAIN_E_CANCELLED : CTRAIN_OK;
}

TEST(lines_stop) {
  kube_lines ls;
  int n = 0;
  kube_lines_init(&ls, 0);
  ASSERT_EQ(kube_lines_feed(&ls, "a\nb\nc\n", 6, stop_at_two, &n), CTRAIN_E_CANCELLED);
  ASSERT_EQ(n, 2);
  kube_lines_free(&ls);
}

TEST(event_parse) {
  kube_watch_event ev;
  const char *l =
      "{\"type\":\"MODIFIED\",\"object\":{\"kind\":\"Pod\",\"metadata\":{\"name\":\"p\","
      "\"resourceVersion\":\"42\"}}}";
  ASSERT_OK(kube_watch_event_parse(l, strlen(l), &ev));
  ASSERT_EQ(ev.type, KUBE_WATCH_MODIFIED);
  ASSERT_STR_EQ(ev.resource_version, "42");
  ASSERT_STR_EQ(cJSON_GetObjectItem(ev.object, "kind")->valuestring, "Pod");
  kube_watch_event_clear(&ev);
  ASSERT_NULL(ev.object);
  const char *bad[] = {"",
                       "[]",
                       "{\"type\":\"ADDED\"}",
                       "{\"type\":\"NOPE\",\"object\":{}}",
                       "{\"type\":1,\"object\":{}}",
                       "{\"type\":\"ADDED\",\"object\":[]}",
                       "{\"type\":\"ADDED\",\"object\":{}"};
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    ASSERT_EQ(kube_watch_event_parse(bad[i], strlen(bad[i]), &ev), CTRAIN_E_PARSE);
    ASSERT_NULL(ev.object);
  }
  ASSERT_STR_EQ(kube_watch_type_name(KUBE_WATCH_BOOKMARK), "BOOKMARK");
}

/* ---- the watch ------------------------------------------------------------ */

static const char *stream_resp(const char *body) {
  static char bufs[8][4096];
  static int n;
  char *b = bufs[n++ % 8];
  snprintf(b, 4096,
           "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n"
           "Content-Length: %zu\r\n\r\n%s",
           strlen(body), body);
  return b;
}

#define EV(type, name, rv)                                                                         \
  "{\"type\":\"" type "\",\"object\":{\"kind\":\"ConfigMap\",\"metadata\":{\"name\":\"" name       \
  "\",\"resourceVersion\":\"" rv "\"}}}\n"

typedef struct {
  kube_watch *w;
  char seen[32][48];
  int n;
} recorder;

static ctrain_err record(void *ud, kube_watch_event *ev) {
  recorder *r = ud;
  const char *name = ctrain_json_str(ctrain_json_get(ev->object, "metadata"), "name");
  snprintf(r->seen[r->n++], 48, "%s %s %s", kube_watch_type_name(ev->type), name ? name : "-",
           ev->resource_version ? ev->resource_version : "-");
  if (ev->type == KUBE_WATCH_DELETED)
    kube_watch_cancel(r->w); /* from inside the handler */
  return CTRAIN_OK;
}

static int relists;
static ctrain_err relist(void *ud, char *rv, size_t cap) {
  (void)ud;
  relists++;
  snprintf(rv, cap, "100");
  return CTRAIN_OK;
}

TEST(watch_reconnect_bookmark_relist_cancel) {
  server s = {.resp = {stream_resp(EV("ADDED", "a", "5") "{\"type\":\"BOOKMARK\",\"object\":{"
                                                         "\"kind\":\"ConfigMap\",\"metadata\":{"
                                                         "\"resourceVersion\":\"7\"}}}\n"),
                       stream_resp(EV("MODIFIED", "a",
                                      "8") "{\"type\":\"ERROR\",\"object\":{\"kind\":\"Status\","
                                           "\"code\":410,\"reason\":\"Expired\",\"message\":\"too "
                                           "old\"}}\n"),
                       stream_resp(EV("MODIFIED", "a", "101") EV("DELETED", "a", "102")
                                       EV("ADDED", "never", "103"))}};
  pthread_t t = ks_start_server(&s);
  kube_client *c = ks_client_for(&s, NULL);
  kube_watch_opts o = {.gvr = &KUBE_GVR_CONFIGMAPS,
                       .ns = "ns",
                       .label_selector = "app=x",
                       .resource_version = "3",
                       .timeout_seconds = 60,
                       .relist = relist};
  recorder r = {0};
  ASSERT_OK(kube_watch_new(c, &o, &r.w));
  kube_status st;
  ASSERT_EQ(kube_watch_run(r.w, record, &r, &st), CTRAIN_E_CANCELLED);
  pthread_join(t, NULL);
  ASSERT_EQ(r.n, 5);
  ASSERT_STR_EQ(r.seen[0], "ADDED a 5");
  ASSERT_STR_EQ(r.seen[1], "BOOKMARK - 7");
  ASSERT_STR_EQ(r.seen[2], "MODIFIED a 8");
  ASSERT_STR_EQ(r.seen[3], "MODIFIED a 101");
  ASSERT_STR_EQ(r.seen[4], "DELETED a 102");
  ASSERT_STR_CONTAINS(s.req[0], "GET /api/v1/namespaces/ns/configmaps?watch=1&timeoutSeconds=60"
                                "&allowWatchBookmarks=true&resourceVersion=3&labelSelector=app%3Dx "
                                "HTTP/1.1");
  ASSERT_STR_CONTAINS(s.req[1], "resourceVersion=7&");   /* the bookmark's version */
  ASSERT_STR_CONTAINS(s.req[2], "resourceVersion=100&"); /* the relist's version */
  ASSERT_EQ(relists, 1);
  kube_watch_stats ws;
  kube_watch_get_stats(r.w, &ws);
  ASSERT_EQ(ws.bookmarks, 1);
  ASSERT_EQ(ws.events, 4);
  ASSERT_EQ(ws.relists, 1);
  ASSERT_EQ(ws.connects, 3);
  char rv[32];
  kube_watch_resource_version(r.w, rv, sizeof(rv));
  ASSERT_STR_EQ(rv, "102");
  kube_watch_free(r.w);
  ks_client_done(c);
}

TEST(watch_gone_without_relist) {
  server s = {
      .resp = {ks_resp_status(410, "Gone", "Connection: close\r\n",
                              "{\"kind\":\"Status\",\"code\":410,\"reason\":\"Expired\"}")}};
  pthread_t t = ks_start_server(&s);
  kube_client *c = ks_client_for(&s, NULL);
  kube_watch_opts o = {.gvr = &KUBE_GVR_PODS, .resource_version = "1"};
  kube_watch *w = NULL;
  ASSERT_OK(kube_watch_new(c, &o, &w));
  recorder r = {.w = w};
  kube_status st;
  ASSERT_EQ(kube_watch_run(w, record, &r, &st), CTRAIN_E_GONE);
  ASSERT_EQ(st.http_code, 410);
  ASSERT_STR_EQ(st.reason, "Expired");
  pthread_join(t, NULL);
  kube_watch_free(w);
  ks_client_done(c);
}

typedef struct {
  kube_watch *w;
  int ms;
} canceller;

static void *cancel_after(void *arg) {
  canceller *k = arg;
  usleep((useconds_t)k->ms * 1000);
  kube_watch_cancel(k->w);
  return NULL;
}

/* Runs a pods watch on c until another thread cancels it after `ms`; the
 * watch (free it) and how long the run took. */
static kube_watch *run_until_cancelled(kube_client *c, int ms, double *secs) {
  kube_watch_opts o = {.gvr = &KUBE_GVR_PODS};
  kube_watch *w = NULL;
  ASSERT_OK(kube_watch_new(c, &o, &w));
  recorder r = {.w = w};
  canceller k = {w, ms};
  pthread_t ct;
  ASSERT_OK(pthread_create(&ct, NULL, cancel_after, &k));
  double a = ctrain_mono_s();
  ASSERT_EQ(kube_watch_run(w, record, &r, NULL), CTRAIN_E_CANCELLED);
  *secs = ctrain_mono_s() - a;
  pthread_join(ct, NULL);
  return w;
}

#define CANCEL_AFTER_MS 300 /* after the watch's event, past curl's early wake */

typedef struct {
  kube_watch *w;
  first_bytes event;        /* the stream's one event came */
  _Atomic int64_t fired_ns; /* when the cancel was */
} event_canceller;

static ctrain_err note_event(void *ud, kube_watch_event *ev) {
  (void)ev;
  ks_note_first_bytes(&((event_canceller *)ud)->event);
  return CTRAIN_OK;
}

static void *cancel_after_event(void *arg) {
  event_canceller *k = arg;
  atomic_store(&k->fired_ns, ks_wait_after_first_bytes(&k->event, CANCEL_AFTER_MS));
  kube_watch_cancel(k->w);
  return NULL;
}

TEST(watch_cancel_from_other_thread) {
  double look = ks_next_look_s(CANCEL_AFTER_MS);
  const char *ev = EV("ADDED", "a", "5");
  char resp[1024];
  snprintf(resp, sizeof(resp),
           "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
           "Transfer-Encoding: chunked\r\n\r\n%zx\r\n%s\r\n",
           strlen(ev), ev);
  server s = {.resp = {resp}, .stream_forever = 1};
  pthread_t srv = ks_start_server(&s);
  kube_client *c = ks_client_for(&s, NULL);
  kube_watch_opts o = {.gvr = &KUBE_GVR_PODS};
  kube_watch *w = NULL;
  ASSERT_OK(kube_watch_new(c, &o, &w));
  event_canceller k = {.w = w};
  pthread_t ct;
  ASSERT_OK(pthread_create(&ct, NULL, cancel_after_event, &k));
  ASSERT_EQ(kube_watch_run(w, note_event, &k, NULL), CTRAIN_E_CANCELLED);
  int64_t end = ctrain_mono_ns();
  pthread_join(ct, NULL);
  ks_assert_woken(end, atomic_load(&k.fired_ns), look, CANCEL_AFTER_MS);
  ks_stop_server(&s, srv);
  ASSERT_STR_CONTAINS(s.req[0], "GET /api/v1/pods?watch=1&timeoutSeconds=300"
                                "&allowWatchBookmarks=true HTTP/1.1");
  kube_watch_free(w);
  ks_client_done(c);
}

TEST(watch_reconnects_after_refused) {
  /* Nothing listens: the watch backs off and retries until cancelled. */
  server s = {.port = 1};
  kube_client *c = ks_client_for(&s, NULL);
  double secs = 0;
  kube_watch *w = run_until_cancelled(c, 800, &secs);
  kube_watch_stats ws;
  kube_watch_get_stats(w, &ws);
  ASSERT_GE(ws.connects, 2); /* 200 ms backoff within the 800 ms */
  kube_watch_free(w);
  ks_client_done(c);
}

static void init_curl(void) {
  curl_global_init(CURL_GLOBAL_DEFAULT);
}

#define WRAP(name)                                                                                 \
  static void wrapped_##name(void) {                                                               \
    init_curl();                                                                                   \
    test_##name();                                                                                 \
  }
#define TC(name)                                                                                   \
  { #name, wrapped_##name }
WRAP(lines_every_split)
WRAP(lines_cap)
WRAP(lines_stop)
WRAP(event_parse)
WRAP(watch_reconnect_bookmark_relist_cancel)
WRAP(watch_gone_without_relist)
WRAP(watch_cancel_from_other_thread)
WRAP(watch_reconnects_after_refused)

TEST_MAIN(TC(lines_every_split), TC(lines_cap), TC(lines_stop), TC(event_parse),
          TC(watch_reconnect_bookmark_relist_cancel), TC(watch_gone_without_relist),
          TC(watch_cancel_from_other_thread), TC(watch_reconnects_after_refused))
