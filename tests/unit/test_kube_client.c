/* test_kube_client.c - the REST client against a scripted HTTP/1.1 server on
 * loopback: paths and queries, headers, Status decoding, error mapping,
 * retry with Retry-After, the body cap, connection reuse, streaming with
 * cancellation from another thread. TLS is covered by the integration tests
 * against a real kube-apiserver. */
#include "test.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/socket.h>

#include <curl/curl.h>

#include "ctrain/clock.h"
#include "ctrain/kube_client.h"
#include "ctrain/kube_config.h"
#include "test_alloc.h"
#include "kube_test_server.h"

/* ---- tests ---------------------------------------------------------------- */

TEST(status_decode) {
  kube_status st = {0};
  const char *b = "{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"status\":\"Failure\","
                  "\"message\":\"pods \\\"x\\\" not found\",\"reason\":\"NotFound\","
                  "\"details\":{\"name\":\"x\",\"kind\":\"pods\",\"uid\":\"u-1\","
                  "\"causes\":[{\"field\":\"spec.x\",\"message\":\"bad\"}],"
                  "\"retryAfterSeconds\":3},\"code\":404}";
  kube_status_decode(b, strlen(b), 404, &st);
  ASSERT_EQ(st.http_code, 404);
  ASSERT_STR_EQ(st.reason, "NotFound");
  ASSERT_STR_EQ(st.message, "pods \"x\" not found");
  ASSERT_STR_EQ(st.details_name, "x");
  ASSERT_STR_EQ(st.details_kind, "pods");
  ASSERT_STR_EQ(st.details_uid, "u-1");
  ASSERT_STR_EQ(st.details_cause, "spec.x: bad");
  ASSERT_EQ(st.retry_after_s, 3);
  /* Not a Status: message keeps the printable start, reason stays empty. */
  kube_status_decode("<html>\n502</html>", 17, 502, &st);
  ASSERT_EQ(st.http_code, 502);
  ASSERT_STR_EQ(st.reason, "");
  ASSERT_STR_EQ(st.message, "<html> 502</html>");
  kube_status_decode(NULL, 0, 500, &st);
  ASSERT_STR_EQ(st.message, "");
  ASSERT_EQ(kube_status_to_err(404), CTRAIN_E_NOTFOUND);
  ASSERT_EQ(kube_status_to_err(409), CTRAIN_E_CONFLICT);
  ASSERT_EQ(kube_status_to_err(410), CTRAIN_E_GONE);
  ASSERT_EQ(kube_status_to_err(403), CTRAIN_E_AUTH);
  ASSERT_EQ(kube_status_to_err(422), CTRAIN_E_INVAL);
  ASSERT_EQ(kube_status_to_err(500), CTRAIN_E_HTTP);
  ASSERT_EQ(kube_status_to_err(201), CTRAIN_OK);
}

TEST(paths) {
  char p[256];
  ASSERT_OK(kube_client_path(&KUBE_GVR_PODS, "ns1", "p-0", NULL, p, sizeof(p)));
  ASSERT_STR_EQ(p, "/api/v1/namespaces/ns1/pods/p-0");
  ASSERT_OK(kube_client_path(&KUBE_GVR_NODES, NULL, "n1", "status", p, sizeof(p)));
  ASSERT_STR_EQ(p, "/api/v1/nodes/n1/status");
  kube_gvr tj = {"ctrain.dev", "v1alpha1", "trainingjobs"};
  ASSERT_OK(kube_client_path(&tj, "", NULL, NULL, p, sizeof(p)));
  ASSERT_STR_EQ(p, "/apis/ctrain.dev/v1alpha1/trainingjobs");
  ASSERT_OK(kube_client_path(&KUBE_GVR_LEASES, "kube-system", "ctrain", NULL, p, sizeof(p)));
  ASSERT_STR_EQ(p, "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/ctrain");
  ASSERT_EQ(kube_client_path(&KUBE_GVR_PODS, "ns", "a/../b", NULL, p, sizeof(p)), CTRAIN_E_INVAL);
  /* fuzz_kube_status found these: a whole segment "." or ".." climbs. */
  ASSERT_EQ(kube_client_path(&KUBE_GVR_PODS, "ns", "..", NULL, p, sizeof(p)), CTRAIN_E_INVAL);
  ASSERT_EQ(kube_client_path(&KUBE_GVR_PODS, "..", "p", NULL, p, sizeof(p)), CTRAIN_E_INVAL);
  ASSERT_EQ(kube_client_path(&KUBE_GVR_PODS, "ns", ".", NULL, p, sizeof(p)), CTRAIN_E_INVAL);
  ASSERT_OK(kube_client_path(&KUBE_GVR_PODS, "ns", "a..b", NULL, p, sizeof(p)));
  ASSERT_EQ(kube_client_path(&KUBE_GVR_PODS, "ns", "a?b", NULL, p, sizeof(p)), CTRAIN_E_INVAL);
  ASSERT_EQ(kube_client_path(&KUBE_GVR_PODS, "ns", "", NULL, p, sizeof(p)), CTRAIN_E_INVAL);
  ASSERT_EQ(kube_client_path(&KUBE_GVR_PODS, "ns", "x", NULL, p, 10), CTRAIN_E_TOOBIG);
}

TEST(query_add_escapes_and_keeps_buf_on_overflow) {
  char p[64] = "/api/v1/pods";
  ASSERT_OK(kube_client_query_add(p, sizeof(p), "labelSelector", "app=x, t!=y"));
  ASSERT_STR_EQ(p, "/api/v1/pods?labelSelector=app%3Dx%2C%20t%21%3Dy");
  ASSERT_OK(kube_client_query_add(p, sizeof(p), "unused", NULL)); /* NULL: nothing */
  ASSERT_OK(kube_client_query_add(p, sizeof(p), "limit", "5"));
  ASSERT_STR_EQ(p, "/api/v1/pods?labelSelector=app%3Dx%2C%20t%21%3Dy&limit=5");
  char q[24] = "/p?a=1";
  ASSERT_OK(kube_client_query_add(q, sizeof(q), "k", "-._~Az09\xc3\xa9"));
  ASSERT_STR_EQ(q, "/p?a=1&k=-._~Az09%C3%A9"); /* 23 bytes + NUL: exactly fits */
  char r[24] = "/p";
  ASSERT_EQ(kube_client_query_add(r, sizeof(r), "k", "1234567890123456789"), CTRAIN_E_TOOBIG);
  ASSERT_STR_EQ(r, "/p"); /* as it was */
  ASSERT_EQ(kube_client_query_add(r, sizeof(r), "k", "12345678901234567/"),
            CTRAIN_E_TOOBIG); /* no room for %2F */
  ASSERT_STR_EQ(r, "/p");
  ASSERT_EQ(kube_client_query_add(r, 4, "key", "v"), CTRAIN_E_TOOBIG); /* the "?key=" */
  ASSERT_STR_EQ(r, "/p");
}

TEST(get_list_headers_reuse) {
  server s = {.resp = {ks_resp200("{\"kind\":\"Pod\",\"metadata\":{\"name\":\"p\"}}"),
                       ks_resp200("{\"kind\":\"PodList\",\"items\":[]}"), ks_resp200("{}")}};
  pthread_t t = ks_start_server(&s);
  kube_client *c = ks_client_for(&s, NULL);
  cJSON *o = NULL;
  kube_status st;
  ASSERT_OK(kube_client_get(c, &KUBE_GVR_PODS, "ns", "p", &o, &st));
  ASSERT_EQ(st.http_code, 200);
  ASSERT_EQ(st.http_version, 11); /* plain http: no h2 upgrade attempted */
  ASSERT_STR_EQ(cJSON_GetObjectItem(o, "kind")->valuestring, "Pod");
  cJSON_Delete(o);
  kube_list_opts lo = {.label_selector = "app=x,tier!=y", .limit = 500, .continue_token = "a+b/c"};
  ASSERT_OK(kube_client_list(c, &KUBE_GVR_PODS, NULL, &lo, &o, &st));
  cJSON_Delete(o);
  kube_delete_opts d = {
      .propagation_policy = "Foreground", .precondition_uid = "u-1", .grace_period_seconds = -1};
  ASSERT_OK(kube_client_delete(c, &KUBE_GVR_PODS, "ns", "p", &d, NULL, &st));
  pthread_join(t, NULL);
  ASSERT_STR_CONTAINS(s.req[0], "GET /api/v1/namespaces/ns/pods/p HTTP/1.1");
  ASSERT_STR_CONTAINS(s.req[0], "Authorization: Bearer tok-123");
  ASSERT_STR_CONTAINS(s.req[0], "Accept: application/json");
  ASSERT_STR_CONTAINS(s.req[1], "GET /api/v1/pods?labelSelector=app%3Dx%2Ctier%21%3Dy&limit=500"
                                "&continue=a%2Bb%2Fc HTTP/1.1");
  ASSERT_STR_CONTAINS(s.req[2], "DELETE /api/v1/namespaces/ns/pods/p HTTP/1.1");
  ASSERT_STR_CONTAINS(s.req[2], "\"propagationPolicy\":\"Foreground\"");
  ASSERT_STR_CONTAINS(s.req[2], "\"preconditions\":{\"uid\":\"u-1\"}");
  ASSERT_EQ(s.nconn, 1); /* one connection for all three */
  ks_client_done(c);
}

TEST(errors_carry_status) {
  server s = {
      .resp = {ks_resp_status(404, "Not Found", "",
                              "{\"kind\":\"Status\",\"reason\":\"NotFound\",\"message\":"
                              "\"configmaps \\\"x\\\" not found\",\"details\":{\"name\":"
                              "\"x\",\"kind\":\"configmaps\"},\"code\":404}"),
               ks_resp_status(409, "Conflict", "",
                              "{\"kind\":\"Status\",\"reason\":\"Conflict\",\"message\":"
                              "\"the object has been modified\",\"code\":409}"),
               ks_resp_status(422, "Unprocessable", "",
                              "{\"kind\":\"Status\",\"reason\":\"Invalid\",\"code\":422}")}};
  pthread_t t = ks_start_server(&s);
  kube_client *c = ks_client_for(&s, NULL);
  kube_status st;
  cJSON *o = NULL;
  ASSERT_EQ(kube_client_get(c, &KUBE_GVR_CONFIGMAPS, "ns", "x", &o, &st), CTRAIN_E_NOTFOUND);
  ASSERT_NULL(o);
  ASSERT_EQ(st.http_code, 404);
  ASSERT_STR_EQ(st.reason, "NotFound");
  ASSERT_STR_EQ(st.details_name, "x");
  ASSERT_EQ(st.attempts, 1);
  cJSON *cm = cJSON_Parse("{\"metadata\":{\"name\":\"x\",\"resourceVersion\":\"1\"}}");
  ASSERT_EQ(kube_client_update(c, &KUBE_GVR_CONFIGMAPS, "ns", cm, NULL, NULL, &st),
            CTRAIN_E_CONFLICT);
  ASSERT_STR_EQ(st.reason, "Conflict");
  ASSERT_STR_CONTAINS(st.message, "modified");
  kube_write_opts wo = {.field_manager = "ctrain", .force = 1};
  ASSERT_EQ(kube_client_patch(c, &KUBE_GVR_CONFIGMAPS, "ns", "x", NULL, KUBE_PATCH_APPLY, "{}", &wo,
                              NULL, &st),
            CTRAIN_E_INVAL);
  ASSERT_STR_EQ(st.reason, "Invalid");
  pthread_join(t, NULL);
  ASSERT_STR_CONTAINS(s.req[1], "PUT /api/v1/namespaces/ns/configmaps/x HTTP/1.1");
  ASSERT_STR_CONTAINS(s.req[1], "\"resourceVersion\":\"1\"");
  ASSERT_STR_CONTAINS(s.req[2], "PATCH /api/v1/namespaces/ns/configmaps/x?fieldManager=ctrain"
                                "&force=true HTTP/1.1");
  ASSERT_STR_CONTAINS(s.req[2], "Content-Type: application/apply-patch+yaml");
  /* Apply without a field manager is refused before sending. */
  ASSERT_EQ(kube_client_patch(c, &KUBE_GVR_CONFIGMAPS, "ns", "x", NULL, KUBE_PATCH_APPLY, "{}",
                              NULL, NULL, &st),
            CTRAIN_E_INVAL);
  cJSON_Delete(cm);
  ks_client_done(c);
}

TEST(retry_after_then_success) {
  server s = {.resp = {ks_resp_status(429, "Too Many Requests", "Retry-After: 1\r\n",
                                      "{\"kind\":\"Status\",\"reason\":\"TooManyRequests\"}"),
                       ks_resp_status(503, "Unavailable", "", "{}"), ks_resp200("{\"ok\":true}")}};
  pthread_t t = ks_start_server(&s);
  kube_client *c = ks_client_for(&s, NULL);
  kube_status st;
  double a = ctrain_mono_s();
  ASSERT_OK(kube_client_get(c, &KUBE_GVR_PODS, "ns", "p", NULL, &st));
  double secs = ctrain_mono_s() - a;
  ASSERT_EQ(st.attempts, 3);
  ASSERT(secs >= 1.2); /* 1 s Retry-After + 0.5 s backoff for the 503 (a floor: no
                          ceiling holds on a loaded machine) */
  pthread_join(t, NULL);
  ks_client_done(c);
}

TEST(retries_bounded) {
  server s = {
      .resp = {
          ks_resp_status(500, "ISE", "", "{\"kind\":\"Status\",\"reason\":\"InternalError\"}"),
          ks_resp_status(500, "ISE", "", "{\"kind\":\"Status\",\"reason\":\"InternalError\"}"),
          ks_resp_status(500, "ISE", "", "{\"kind\":\"Status\",\"reason\":\"InternalError\"}")}};
  pthread_t t = ks_start_server(&s);
  kube_client_opts o = {.max_retries = 2};
  kube_client *c = ks_client_for(&s, &o);
  kube_status st;
  ASSERT_EQ(kube_client_get(c, &KUBE_GVR_PODS, "ns", "p", NULL, &st), CTRAIN_E_HTTP);
  ASSERT_EQ(st.attempts, 3);
  ASSERT_EQ(kube_client_requests(c), 3); /* every retry is a request */
  ASSERT_EQ(st.http_code, 500);
  ASSERT_STR_EQ(st.reason, "InternalError");
  pthread_join(t, NULL);
  ks_client_done(c);
}

TEST(body_cap) {
  static char big[4200];
  memset(big, 'a', sizeof(big) - 1);
  big[0] = '"';
  big[sizeof(big) - 2] = '"';
  /* Over ks_resp200's 1024 bytes: build the big response by hand. */
  static char r[5000];
  snprintf(r, sizeof(r), "HTTP/1.1 200 OK\r\nContent-Length: %zu\r\n\r\n%s", strlen(big), big);
  server s = {.resp = {r}};
  pthread_t t = ks_start_server(&s);
  kube_client_opts o = {.max_body = 1000};
  kube_client *c = ks_client_for(&s, &o);
  kube_status st;
  ASSERT_EQ(kube_client_get(c, &KUBE_GVR_PODS, "ns", "p", NULL, &st), CTRAIN_E_TOOBIG);
  ASSERT_STR_CONTAINS(st.message, "cap");
  pthread_join(t, NULL);
  ks_client_done(c);
}

TEST(connection_refused) {
  server s = {.port = 1}; /* nothing listens on port 1 */
  kube_client_opts o = {.max_retries = -1};
  kube_client *c = ks_client_for(&s, &o);
  kube_status st;
  ASSERT_EQ(kube_client_get(c, &KUBE_GVR_PODS, "ns", "p", NULL, &st), CTRAIN_E_NET);
  ASSERT_EQ(st.http_code, 0);
  ASSERT_STR_CONTAINS(st.message, "/api/v1/namespaces/ns/pods/p");
  ks_client_done(c);
}

typedef struct {
  char got[256];
  size_t n;
  first_bytes first; /* read by another thread */
} sink;

static ctrain_err collect(void *ud, const char *d, size_t n) {
  sink *k = ud;
  if (k->n + n < sizeof(k->got)) {
    memcpy(k->got + k->n, d, n);
    k->n += n;
  }
  ks_note_first_bytes(&k->first);
  return CTRAIN_OK;
}

typedef struct {
  kube_client_cancel *k;
  sink *after;              /* fires CANCEL_AFTER_MS after this sink's first bytes */
  _Atomic int64_t fired_ns; /* when it fired */
} canceller;

#define CANCEL_AFTER_MS 300 /* after the stream's bytes, past curl's early wake */

static void *cancel_later(void *arg) {
  canceller *cc = arg;
  atomic_store(&cc->fired_ns, ks_wait_after_first_bytes(&cc->after->first, CANCEL_AFTER_MS));
  kube_client_cancel_fire(cc->k);
  return NULL;
}

TEST(stream_and_cancel) {
  double look = ks_next_look_s(CANCEL_AFTER_MS);
  server s = {.resp = {"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                       "Transfer-Encoding: chunked\r\n\r\n6\r\nline1\n\r\n"},
              .stream_forever = 1};
  pthread_t t = ks_start_server(&s);
  kube_client *c = ks_client_for(&s, NULL);
  kube_client_cancel *k = NULL;
  ASSERT_OK(kube_client_cancel_new(&k));
  sink sk = {0};
  canceller cc = {.k = k, .after = &sk};
  pthread_t ct;
  ASSERT_OK(pthread_create(&ct, NULL, cancel_later, &cc));
  kube_status st;
  ASSERT_EQ(kube_client_stream(c, "/api/v1/pods?watch=1", collect, &sk, k, 0, &st),
            CTRAIN_E_CANCELLED);
  int64_t end = ctrain_mono_ns();
  pthread_join(ct, NULL);
  ks_assert_woken(end, atomic_load(&cc.fired_ns), look, CANCEL_AFTER_MS);
  ASSERT_EQ(sk.n, 6);
  ASSERT(!memcmp(sk.got, "line1\n", 6));
  ASSERT_EQ(kube_client_requests(c), 1);
  ks_stop_server(&s, t);
  kube_client_cancel_free(k);
  ks_client_done(c);
}

TEST(stream_error_status) {
  server s = {.resp = {ks_resp_status(410, "Gone", "",
                                      "{\"kind\":\"Status\",\"reason\":\"Expired\",\"message\":"
                                      "\"too old resource version\",\"code\":410}")}};
  pthread_t t = ks_start_server(&s);
  kube_client *c = ks_client_for(&s, NULL);
  sink sk = {0};
  kube_status st;
  ASSERT_EQ(kube_client_stream(c, "/api/v1/pods?watch=1", collect, &sk, NULL, 0, &st),
            CTRAIN_E_GONE);
  ASSERT_EQ(sk.n, 0);
  ASSERT_STR_EQ(st.reason, "Expired");
  pthread_join(t, NULL);
  ks_client_done(c);
}

TEST(tls_server_name_routes_by_connect_to) {
  server s = {.resp = {ks_resp200("{}")}};
  pthread_t t = ks_start_server(&s);
  char kc[512], err[256];
  snprintf(kc, sizeof(kc),
           "current-context: t\nclusters:\n- name: c\n  cluster: {server: 'http://127.0.0.1:%d',"
           " tls-server-name: apiserver.example}\n"
           "contexts:\n- name: t\n  context: {cluster: c}\n",
           s.port);
  kube_config *cfg = NULL;
  ASSERT_OK(kube_config_parse(kc, strlen(kc), "test", NULL, NULL, &cfg, err, sizeof(err)));
  ASSERT_STR_EQ(cfg->tls_server_name, "apiserver.example");
  kube_client *c = NULL;
  ASSERT_OK(kube_client_new(cfg, NULL, &c, err, sizeof(err)));
  kube_status st;
  ASSERT_OK(kube_client_get(c, &KUBE_GVR_PODS, "ns", "p", NULL, &st));
  pthread_join(t, NULL);
  /* The URL (so SNI and certificate checks) names the server name; the
   * connection went to the configured address. */
  char host[64];
  snprintf(host, sizeof(host), "Host: apiserver.example:%d", s.port);
  ASSERT_STR_CONTAINS(s.req[0], host);
  ks_client_done(c);
}

/* Every allocation of building the DeleteOptions fails in turn: each call
 * either fails with CTRAIN_E_NOMEM and sends nothing, or sends every option.
 * A delete that went out without its uid precondition (or its dryRun) would
 * delete an object the caller meant to keep. */
TEST(delete_options_whole_or_not_sent) {
  kube_delete_opts d = {.propagation_policy = "Background",
                        .precondition_uid = "uid-1",
                        .precondition_rv = "7",
                        .grace_period_seconds = 0,
                        .dry_run = 1};
  static const char *const want[] = {
      "\"kind\":\"DeleteOptions\"", "\"propagationPolicy\":\"Background\"",
      "\"gracePeriodSeconds\":0",   "\"preconditions\":{\"uid\":\"uid-1\"",
      "\"resourceVersion\":\"7\"}", "\"dryRun\":[\"All\"]",
  };
  int failures = 0;
  for (long n = 0;; n++) {
    server s = {.resp = {ks_resp200("{}")}};
    pthread_t t = ks_start_server(&s);
    kube_client *c = ks_client_for(&s, NULL);
    kube_status st;
    test_alloc_fail_nth(n);
    ctrain_err r = kube_client_delete(c, &KUBE_GVR_PODS, "ns", "p", &d, NULL, &st);
    int fired = test_alloc_fired();
    test_alloc_off();
    ks_stop_server(&s, t);
    if (!fired) {
      ASSERT_OK(r);
      ASSERT_EQ(s.nreq, 1);
    } else {
      failures++;
      if (r != CTRAIN_E_NOMEM)
        TEST_FAIL_("allocation %ld failed: result %d, want %d (NOMEM)", n, (int)r,
                   (int)CTRAIN_E_NOMEM);
      if (s.nreq)
        TEST_FAIL_("allocation %ld failed, yet a request was sent:\n%s", n, s.req[0]);
      ASSERT_STR_CONTAINS(st.message, "out of memory");
    }
    for (int i = 0; i < s.nreq; i++)
      for (size_t k = 0; k < sizeof(want) / sizeof(want[0]); k++)
        if (!strstr(s.req[i], want[k]))
          TEST_FAIL_("allocation %ld failed: DELETE sent without %s:\n%s", n, want[k], s.req[i]);
    ks_client_done(c);
    if (!fired)
      break;
  }
  ASSERT_GT(failures, 10); /* the loop did reach the options */
}

static void setup(void) {
  curl_global_init(CURL_GLOBAL_DEFAULT);
}

#define TC(name)                                                                                   \
  { #name, test_##name##_wrapped }
#define WRAP(name)                                                                                 \
  static void test_##name##_wrapped(void) {                                                        \
    setup();                                                                                       \
    test_##name();                                                                                 \
  }
WRAP(status_decode)
WRAP(paths)
WRAP(query_add_escapes_and_keeps_buf_on_overflow)
WRAP(get_list_headers_reuse)
WRAP(errors_carry_status)
WRAP(retry_after_then_success)
WRAP(retries_bounded)
WRAP(body_cap)
WRAP(connection_refused)
WRAP(stream_and_cancel)
WRAP(stream_error_status)
WRAP(tls_server_name_routes_by_connect_to)
WRAP(delete_options_whole_or_not_sent)

TEST_MAIN(TC(status_decode), TC(paths), TC(query_add_escapes_and_keeps_buf_on_overflow),
          TC(get_list_headers_reuse), TC(errors_carry_status), TC(retry_after_then_success),
          TC(retries_bounded), TC(body_cap), TC(connection_refused), TC(stream_and_cancel),
          TC(stream_error_status), TC(tls_server_name_routes_by_connect_to),
          TC(delete_options_whole_or_not_sent))
