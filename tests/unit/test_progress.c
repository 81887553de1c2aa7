/* test_progress.c - the progress port: the read token, authentication
 * (401 without or with a wrong bearer, 200 with the read token), the
 * /progress JSON and /metrics text from a published snapshot, slow and
 * oversized clients, and publishing while requests run (TSan build). */
#include "test.h"

#include <arpa/inet.h>
#include <cjson/cJSON.h>
#include <ctype.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/socket.h>

#include "ctrain/clock.h"
#include "worker/progress.h"
#include "test_http_client.h"

#define JOB_TOKEN "job-token-123"
/* hex(HMAC-SHA256(key = JOB_TOKEN, "ctrain-progress-read")), from Python's hmac. */
#define READ_TOKEN "56d18c07d5448fbff71a2848b867f206425bb26a37b144bab1f381dfbd713dd9"

/* GET path with the Authorization value auth (NULL: no header). */
static int http_get(int port, const char *path, const char *auth, char *resp, size_t cap) {
  char req[1024];
  if (auth)
    snprintf(req, sizeof(req), "GET %s HTTP/1.1\r\nHost: x\r\nAuthorization: %s\r\n\r\n", path,
             auth);
  else
    snprintf(req, sizeof(req), "GET %s HTTP/1.1\r\nHost: x\r\n\r\n", path);
  return http_raw(port, req, resp, cap);
}

static progress_server *start(int chief, int *port) {
  progress_server *s = NULL;
  char err[256] = "";
  progress_config pc = {
      .bind_host = "127.0.0.1", .port = 0, .read_token = READ_TOKEN, .chief = chief};
  int rc = progress_start(&pc, &s, port, err, sizeof(err));
  if (rc)
    TEST_FAIL_("progress_start: %s", err);
  ASSERT_GT(*port, 0);
  return s;
}

static void sample_snapshot(progress_snapshot *s) {
  progress_snapshot_init(s);
  s->state = PROGRESS_TRAINING;
  s->rank = 0;
  s->epoch = 3;
  s->epochs = 10;
  s->step = 120;
  s->steps_per_epoch = 937;
  s->global_step = 1994;
  s->samples_per_sec = 12345.6;
  s->loss = 0.4321;
  s->accuracy = 0.8765;
  s->val_loss = 0.5;
  s->val_accuracy = 0.85;
  s->replicas_in_sync = 4;
  s->workers = 2;
  s->step_ms = 1.5;
  s->n_worker_ms = 3;
  s->worker_ms[0] = 1.0;
  s->worker_ms[1] = 2.0;
  s->worker_ms[2] = 4.0;
  s->slowest_rank = 2;
  s->median_ms = 2.0;
  s->slowest_ratio = 2.0;
  s->backup_step = 1800;
}

TEST(read_token_is_hmac_of_job_token) {
  char t[CTRAIN_PROGRESS_TOKEN_HEX + 1];
  ctrain_progress_read_token(JOB_TOKEN, t);
  ASSERT_STR_EQ(t, READ_TOKEN);
  ctrain_progress_read_token("another-token", t);
  ASSERT(strcmp(t, READ_TOKEN) != 0);
  ASSERT_EQ(strlen(t), CTRAIN_PROGRESS_TOKEN_HEX);
}

TEST(auth_401_without_or_with_wrong_bearer_200_with_read_token) {
  int port = 0;
  progress_server *s = start(1, &port);
  char resp[16384];
  ASSERT_EQ(http_get(port, "/progress", NULL, resp, sizeof(resp)), 401);
  ASSERT_STR_CONTAINS(resp, "\r\nWWW-Authenticate: Bearer");
  ASSERT(strstr(resp, "epoch") == NULL);
  ASSERT_EQ(http_get(port, "/metrics", NULL, resp, sizeof(resp)), 401);
  /* Wrong in the last digit; the job token itself; another scheme; empty. */
  char wrong[] = "Bearer " READ_TOKEN;
  wrong[strlen(wrong) - 1] = wrong[strlen(wrong) - 1] == '0' ? '1' : '0';
  ASSERT_EQ(http_get(port, "/progress", wrong, resp, sizeof(resp)), 401);
  ASSERT_EQ(http_get(port, "/progress", "Bearer " JOB_TOKEN, resp, sizeof(resp)), 401);
  ASSERT_EQ(http_get(port, "/progress", "Basic " READ_TOKEN, resp, sizeof(resp)), 401);
  ASSERT_EQ(http_get(port, "/progress", "Bearer ", resp, sizeof(resp)), 401);
  ASSERT_EQ(http_get(port, "/progress", "Bearer " READ_TOKEN "00", resp, sizeof(resp)), 401);
  ASSERT_EQ(http_get(port, "/progress", "Bearer " READ_TOKEN, resp, sizeof(resp)), 200);
  ASSERT_STR_CONTAINS(resp, "Content-Type: application/json");
  /* The scheme is case-insensitive (RFC 7235), the header name too. */
  ASSERT_EQ(http_raw(port, "GET /metrics HTTP/1.1\r\nauthorization: bearer " READ_TOKEN "\r\n\r\n",
                     resp, sizeof(resp)),
            200);
  ASSERT_EQ(http_get(port, "/healthz", NULL, resp, sizeof(resp)), 200);
  ASSERT_STR_EQ(body_of(resp), "ok\n");
  ASSERT_EQ(http_get(port, "/nothing", "Bearer " READ_TOKEN, resp, sizeof(resp)), 404);
  ASSERT_EQ(http_raw(port, "POST /progress HTTP/1.1\r\n\r\n", resp, sizeof(resp)), 405);
  progress_stop(s);
}

TEST(only_the_chief_serves_progress) {
  int port = 0;
  progress_server *s = start(0, &port);
  char resp[16384];
  ASSERT_EQ(http_get(port, "/progress", "Bearer " READ_TOKEN, resp, sizeof(resp)), 404);
  ASSERT_EQ(http_get(port, "/metrics", "Bearer " READ_TOKEN, resp, sizeof(resp)), 200);
  ASSERT_STR_CONTAINS(body_of(resp), "\nctrain_worker_epoch 0\n");
  progress_stop(s);
}

TEST(start_refuses_without_read_token) {
  progress_server *s = NULL;
  char err[256] = "";
  progress_config pc = {.bind_host = "127.0.0.1", .read_token = NULL};
  ASSERT_EQ(progress_start(&pc, &s, NULL, err, sizeof(err)), CTRAIN_E_INVAL);
  ASSERT_NULL(s);
  ASSERT_STR_CONTAINS(err, "no read token");
  pc.read_token = "short";
  ASSERT_EQ(progress_start(&pc, &s, NULL, err, sizeof(err)), CTRAIN_E_INVAL);
}

TEST(port_in_use_is_a_net_error_naming_the_port) {
  int port = 0;
  progress_server *a = start(1, &port), *b = NULL;
  char err[256] = "";
  progress_config pc = {.bind_host = "127.0.0.1", .port = port, .read_token = READ_TOKEN};
  ASSERT_EQ(progress_start(&pc, &b, NULL, err, sizeof(err)), CTRAIN_E_NET);
  ASSERT_NULL(b);
  char want[32];
  snprintf(want, sizeof(want), "port %d", port);
  ASSERT_STR_CONTAINS(err, want);
  progress_stop(a);
}

TEST(progress_json_fields_from_published_snapshot) {
  int port = 0;
  progress_server *s = start(1, &port);
  progress_snapshot snap;
  sample_snapshot(&snap);
  progress_publish(s, &snap);
  char resp[16384];
  ASSERT_EQ(http_get(port, "/progress", "Bearer " READ_TOKEN, resp, sizeof(resp)), 200);
  cJSON *j = cJSON_Parse(body_of(resp));
  ASSERT_NOT_NULL(j);
  const struct {
    const char *k;
    double v;
  } want[] = {{"epoch", 3},
              {"epochs", 10},
              {"step", 120},
              {"steps_per_epoch", 937},
              {"global_step", 1994},
              {"samples_per_sec", 12345.6},
              {"loss", 0.4321},
              {"accuracy", 0.8765},
              {"val_loss", 0.5},
              {"val_accuracy", 0.85},
              {"replicas_in_sync", 4},
              {"workers", 2},
              {"rank", 0},
              {"step_ms", 1.5},
              {"slowest_rank", 2},
              {"median_ms", 2.0},
              {"slowest_ratio", 2.0},
              {"backup_step", 1800}};
  for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, want[i].k);
    if (!cJSON_IsNumber(v))
      TEST_FAIL_("/progress: %s is not a number in %s", want[i].k, body_of(resp));
    ASSERT_NEAR(v->valuedouble, want[i].v, 1e-6);
  }
  ASSERT_STR_EQ(cJSON_GetObjectItemCaseSensitive(j, "state")->valuestring, "Training");
  const cJSON *ms = cJSON_GetObjectItemCaseSensitive(j, "worker_ms");
  ASSERT(cJSON_IsArray(ms));
  ASSERT_EQ(cJSON_GetArraySize(ms), 3);
  ASSERT_NEAR(cJSON_GetArrayItem(ms, 2)->valuedouble, 4.0, 1e-9);
  cJSON_Delete(j);

  /* Unknown numbers are null, not NaN (which JSON has not). */
  progress_snapshot_init(&snap);
  progress_publish(s, &snap);
  ASSERT_EQ(http_get(port, "/progress", "Bearer " READ_TOKEN, resp, sizeof(resp)), 200);
  j = cJSON_Parse(body_of(resp));
  ASSERT_NOT_NULL(j);
  const char *nulls[] = {"loss",         "accuracy",      "val_accuracy", "samples_per_sec",
                         "slowest_rank", "slowest_ratio", "backup_step"};
  for (size_t i = 0; i < sizeof(nulls) / sizeof(nulls[0]); i++)
    if (!cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(j, nulls[i])))
      TEST_FAIL_("/progress: %s should be null in %s", nulls[i], body_of(resp));
  ASSERT_STR_EQ(cJSON_GetObjectItemCaseSensitive(j, "state")->valuestring, "Starting");
  ASSERT_EQ(cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(j, "worker_ms")), 0);
  cJSON_Delete(j);

  /* A diverged loss stays a (short, exact-enough) number. */
  snap.loss = 3e200;
  progress_publish(s, &snap);
  ASSERT_EQ(http_get(port, "/progress", "Bearer " READ_TOKEN, resp, sizeof(resp)), 200);
  j = cJSON_Parse(body_of(resp));
  ASSERT_NOT_NULL(j);
  ASSERT_NEAR(cJSON_GetObjectItemCaseSensitive(j, "loss")->valuedouble / 3e200, 1.0, 1e-6);
  cJSON_Delete(j);
  progress_stop(s);
}

static int is_metric_name(const char *s, size_t n) {
  if (!n || !(isalpha((unsigned char)s[0]) || s[0] == '_' || s[0] == ':'))
    return 0;
  for (size_t i = 1; i < n; i++)
    if (!(isalnum((unsigned char)s[i]) || s[i] == '_' || s[i] == ':'))
      return 0;
  return 1;
}

/* Checks the exposition format line by line (# HELP name text, # TYPE name
 * gauge, then `name value` for that same name) and returns the value of
 * `want` (NAN if absent). */
static double check_prometheus(const char *text, const char *want, int *samples) {
  double found = NAN;
  char help[128] = "", type[128] = "";
  *samples = 0;
  for (const char *line = text; *line;) {
    const char *nl = strchr(line, '\n');
    ASSERT_NOT_NULL(nl); /* every line ends with \n */
    char l[512];
    size_t n = (size_t)(nl - line);
    ASSERT_LT(n, sizeof(l));
    memcpy(l, line, n);
    l[n] = '\0';
    line = nl + 1;
    if (!strncmp(l, "# HELP ", 7)) {
      ASSERT_EQ(sscanf(l + 7, "%127s", help), 1);
      ASSERT(strlen(l + 7) > strlen(help) + 1); /* has a text */
      continue;
    }
    if (!strncmp(l, "# TYPE ", 7)) {
      char kind[32] = "";
      ASSERT_EQ(sscanf(l + 7, "%127s %31s", type, kind), 2);
      ASSERT_STR_EQ(type, help);
      ASSERT_STR_EQ(kind, "gauge");
      continue;
    }
    const char *sp = strchr(l, ' ');
    ASSERT_NOT_NULL(sp);
    ASSERT(is_metric_name(l, (size_t)(sp - l)));
    ASSERT(strchr(sp + 1, ' ') == NULL); /* exactly `name value` */
    char name[128];
    snprintf(name, sizeof(name), "%.*s", (int)(sp - l), l);
    ASSERT_STR_EQ(name, type); /* announced by HELP and TYPE */
    char *end = NULL;
    double v = strtod(sp + 1, &end);
    ASSERT(end && *end == '\0' && end != sp + 1);
    if (!strcmp(name, want))
      found = v;
    (*samples)++;
  }
  return found;
}

TEST(metrics_prometheus_text_format) {
  int port = 0;
  progress_server *s = start(0, &port);
  progress_snapshot snap;
  sample_snapshot(&snap);
  snap.rank = 1;
  progress_publish(s, &snap);
  char resp[16384];
  ASSERT_EQ(http_get(port, "/metrics", "Bearer " READ_TOKEN, resp, sizeof(resp)), 200);
  ASSERT_STR_CONTAINS(resp, "Content-Type: text/plain; version=0.0.4");
  const char *body = body_of(resp);
  int samples = 0;
  ASSERT_NEAR(check_prometheus(body, "ctrain_worker_epoch", &samples), 3, 0);
  ASSERT_GE(samples, 14);
  ASSERT_NEAR(check_prometheus(body, "ctrain_worker_step", &samples), 120, 0);
  ASSERT_NEAR(check_prometheus(body, "ctrain_worker_samples_per_second", &samples), 12345.6, 1e-6);
  ASSERT_NEAR(check_prometheus(body, "ctrain_worker_loss", &samples), 0.4321, 1e-9);
  ASSERT_NEAR(check_prometheus(body, "ctrain_worker_accuracy", &samples), 0.8765, 1e-9);
  ASSERT_NEAR(check_prometheus(body, "ctrain_worker_replicas_in_sync", &samples), 4, 0);
  ASSERT_NEAR(check_prometheus(body, "ctrain_worker_step_seconds", &samples), 0.0015, 1e-12);
  ASSERT_NEAR(check_prometheus(body, "ctrain_worker_backup_step", &samples), 1800, 0);
  ASSERT_NEAR(check_prometheus(body, "ctrain_worker_rank", &samples), 1, 0);
  /* Unknown values are NaN, which Prometheus parses. */
  progress_snapshot_init(&snap);
  progress_publish(s, &snap);
  ASSERT_EQ(http_get(port, "/metrics", "Bearer " READ_TOKEN, resp, sizeof(resp)), 200);
  ASSERT(isnan(check_prometheus(body_of(resp), "ctrain_worker_loss", &samples)));
  ASSERT_STR_CONTAINS(body_of(resp), "\nctrain_worker_backup_step NaN\n");
  progress_stop(s);
}

TEST(a_silent_client_neither_blocks_others_nor_stays) {
  int port = 0;
  progress_server *s = start(1, &port);
  char resp[16384];
  int silent = connect_to(port);
  int64_t t0 = ctrain_mono_ns();
  ASSERT_EQ(http_get(port, "/healthz", NULL, resp, sizeof(resp)), 200);
  /* Not behind the silent one: answered while it is still open, before its
   * deadline dropped it (nothing to read, no EOF). An order, not a
   * wall-clock ceiling, which flakes on a loaded machine. */
  errno = 0;
  ASSERT_EQ(recv(silent, resp, 1, MSG_DONTWAIT | MSG_PEEK), -1);
  ASSERT(errno == EAGAIN || errno == EWOULDBLOCK);
  /* The silent connection is closed after the deadline (a server that
   * keeps it hangs here: ctest's TIMEOUT). */
  struct pollfd p = {.fd = silent, .events = POLLIN};
  ASSERT_EQ(poll(&p, 1, -1), 1);
  char c;
  ASSERT_EQ(recv(silent, &c, 1, 0), 0);
  ASSERT_GE(ctrain_mono_ns() - t0, (int64_t)(PROGRESS_DEADLINE_MS - 100) * 1000000);
  close(silent);
  progress_stop(s);
}

TEST(more_clients_than_slots_wait_then_are_served) {
  int port = 0;
  progress_server *s = start(1, &port);
  char resp[16384];
  int held[PROGRESS_MAX_CONNS + 4];
  /* Each client sends its request as it connects, as a real one does (a
   * connection silent past CTRAIN_HTTPD_GRACE_MS may be shed for a new one
   * when the table is full: the idle-flood test below covers that); the
   * extra ones wait in the backlog until a slot frees. */
  for (int i = 0; i < PROGRESS_MAX_CONNS + 4; i++) {
    const char *req = "GET /healthz HTTP/1.1\r\n\r\n";
    held[i] = connect_to(port);
    ASSERT_EQ(send(held[i], req, strlen(req), MSG_NOSIGNAL), (long long)strlen(req));
  }
  for (int i = 0; i < PROGRESS_MAX_CONNS + 4; i++) {
    size_t len = 0;
    ssize_t r;
    while ((r = recv(held[i], resp + len, sizeof(resp) - 1 - len, 0)) > 0)
      len += (size_t)r;
    resp[len] = '\0';
    ASSERT_STR_CONTAINS(resp, "HTTP/1.1 200 OK");
    close(held[i]);
  }
  progress_stop(s);
}

TEST(oversized_request_gets_431) {
  int port = 0;
  progress_server *s = start(1, &port);
  /* Exactly the cap and no end of head: the server has read it all when it
   * answers, so its close is not a reset. */
  char *req = malloc(PROGRESS_REQ_MAX), resp[4096];
  ASSERT_NOT_NULL(req);
  memset(req, 'a', PROGRESS_REQ_MAX);
  memcpy(req, "GET /progress HTTP/1.1\r\nX: ", 27);
  int fd = connect_to(port);
  ASSERT_EQ(send(fd, req, PROGRESS_REQ_MAX, MSG_NOSIGNAL), PROGRESS_REQ_MAX);
  size_t len = 0;
  ssize_t r;
  while ((r = recv(fd, resp + len, sizeof(resp) - 1 - len, 0)) > 0)
    len += (size_t)r;
  resp[len] = '\0';
  ASSERT_STR_CONTAINS(resp, "HTTP/1.1 431");
  close(fd);
  free(req);
  progress_stop(s);
}

/* A publisher writes snapshots whose fields all derive from one counter;
 * every answer must be one whole snapshot (no torn read), and the counter
 * never goes back. Run under TSan (tools/test.sh). */
typedef struct {
  progress_server *s;
  atomic_int stop;
} pub_arg;

static void *publisher(void *arg) {
  pub_arg *a = arg;
  progress_snapshot snap;
  progress_snapshot_init(&snap);
  snap.state = PROGRESS_TRAINING;
  for (uint64_t i = 1; !atomic_load(&a->stop); i++) {
    snap.global_step = i;
    snap.step = i % 1000;
    snap.epoch = (int)(i / 1000) + 1;
    snap.loss = (double)i;
    snap.n_worker_ms = 2;
    snap.worker_ms[0] = snap.worker_ms[1] = (double)i;
    progress_publish(a->s, &snap);
  }
  return NULL;
}

TEST(concurrent_publish_while_requests_run) {
  int port = 0;
  pub_arg a = {.s = start(1, &port)};
  atomic_init(&a.stop, 0);
  pthread_t t;
  ASSERT_OK(pthread_create(&t, NULL, publisher, &a));
  char resp[16384];
  double last = 0;
  for (int i = 0; i < 200; i++) {
    ASSERT_EQ(http_get(port, "/progress", "Bearer " READ_TOKEN, resp, sizeof(resp)), 200);
    cJSON *j = cJSON_Parse(body_of(resp));
    ASSERT_NOT_NULL(j);
    const cJSON *g = cJSON_GetObjectItemCaseSensitive(j, "global_step");
    const cJSON *l = cJSON_GetObjectItemCaseSensitive(j, "loss");
    const cJSON *st = cJSON_GetObjectItemCaseSensitive(j, "step");
    const cJSON *ms = cJSON_GetObjectItemCaseSensitive(j, "worker_ms");
    double gs = g->valuedouble;
    if (gs > 0) {
      ASSERT_NEAR(l->valuedouble, gs, 0);
      ASSERT_NEAR(st->valuedouble, fmod(gs, 1000), 0);
      ASSERT_NEAR(cJSON_GetArrayItem(ms, 1)->valuedouble, gs, 0);
    }
    ASSERT_GE(gs, last);
    last = gs;
    cJSON_Delete(j);
  }
  ASSERT_GT(last, 0);
  atomic_store(&a.stop, 1);
  pthread_join(t, NULL);
  progress_stop(a.s);
}

TEST(publish_and_stop_accept_null) {
  progress_snapshot snap;
  progress_snapshot_init(&snap);
  progress_publish(NULL, &snap);
  progress_stop(NULL);
  ASSERT_EQ(snap.backup_step, -1);
  ASSERT_EQ(snap.slowest_rank, -1);
}

/* 1,000 idle connections to the progress port, re-opened as they are
 * dropped; an authorized GET /metrics and /healthz are still answered
 * (every /metrics timed out before). The targets are "within 2 s" and
 * "within 1 s"; on a loaded 2-core machine under a sanitizer an absolute
 * ceiling flakes, and a ratio to an unloaded request is
 * no requirement either, so those are printed figures, with the unloaded
 * times of the same run beside them; what is asserted is the behaviour:
 * every request answered in full, while the attack was on (the attacker
 * still re-opening connections the server shed). */
TEST(metrics_and_healthz_are_answered_under_1000_idle_connections) {
  int port = 0;
  progress_server *s = start(1, &port);
  progress_snapshot snap;
  sample_snapshot(&snap);
  progress_publish(s, &snap);
  enum { R = 10 };
  double metrics[R], probe[R], base[R];
  char resp[16384];
  for (int i = 0; i < R; i++) {
    int64_t t0 = ctrain_mono_ns();
    ASSERT_EQ(http_get(port, "/metrics", "Bearer " READ_TOKEN, resp, sizeof(resp)), 200);
    base[i] = (double)(ctrain_mono_ns() - t0) / 1e6;
  }
  hostile_load h;
  hostile_start(&h, port, 1000);
  ctrain_sleep_ns(500000000);
  long opened_before = atomic_load(&h.opened);
  for (int i = 0; i < R; i++) {
    int64_t t0 = ctrain_mono_ns();
    ASSERT_EQ(http_get(port, "/metrics", "Bearer " READ_TOKEN, resp, sizeof(resp)), 200);
    metrics[i] = (double)(ctrain_mono_ns() - t0) / 1e6;
    ASSERT_STR_CONTAINS(body_of(resp), "\nctrain_worker_rank ");
    t0 = ctrain_mono_ns();
    ASSERT_EQ(http_get(port, "/healthz", NULL, resp, sizeof(resp)), 200);
    probe[i] = (double)(ctrain_mono_ns() - t0) / 1e6;
    ctrain_sleep_ns(100000000);
  }
  long opened = atomic_load(&h.opened);
  hostile_stop(&h);
  latency_figures m = latency_of(metrics, R), p = latency_of(probe, R), b = latency_of(base, R);
  printf("# under 1000 idle connections (%ld opened): /metrics median %.1f max %.1f ms "
         "(target: within 2000 ms), /healthz median %.1f max %.1f ms (within 1000 ms); "
         "/metrics without them: median %.2f max %.2f ms\n",
         opened, m.median_ms, m.max_ms, p.median_ms, p.max_ms, b.median_ms, b.max_ms);
  ASSERT_GT(opened, 1000);          /* the server did shed some */
  ASSERT_GT(opened, opened_before); /* and went on shedding while serving them */
  progress_stop(s);
}

TEST_MAIN(T(read_token_is_hmac_of_job_token),
          T(auth_401_without_or_with_wrong_bearer_200_with_read_token),
          T(only_the_chief_serves_progress), T(start_refuses_without_read_token),
          T(port_in_use_is_a_net_error_naming_the_port),
          T(progress_json_fields_from_published_snapshot), T(metrics_prometheus_text_format),
          T(a_silent_client_neither_blocks_others_nor_stays),
          T(more_clients_than_slots_wait_then_are_served), T(oversized_request_gets_431),
          T(concurrent_publish_while_requests_run), T(publish_and_stop_accept_null),
          T(metrics_and_healthz_are_answered_under_1000_idle_connections))
