/* progress.c - the progress port's server and renderers; see progress.h. */
#include "worker/progress.h"

#include <math.h>
#include <openssl/crypto.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "ctrain/contract.h"
#include "ctrain/httpd.h"
#include "ctrain/thread.h"

void progress_snapshot_init(progress_snapshot *s) {
  memset(s, 0, sizeof(*s));
  s->state = PROGRESS_STARTING;
  s->samples_per_sec = s->loss = s->accuracy = NAN;
  s->val_loss = s->val_accuracy = NAN;
  s->step_ms = s->median_ms = s->slowest_ratio = NAN;
  s->slowest_rank = -1;
  s->backup_step = -1;
}

static const char *state_name(progress_state s) {
  switch (s) {
  case PROGRESS_TRAINING:
    return "Training";
  case PROGRESS_SUCCEEDED:
    return "Succeeded";
  case PROGRESS_FAILED:
    return "Failed";
  default:
    return "Starting";
  }
}

/* A JSON number, or null when not finite. */
static ctrain_err json_num(ctrain_buf *b, const char *key, double v, int decimals) {
  ctrain_err result = ctrain_buf_printf(b, ",\"%s\":", key);
  if (result)
    return result;
  if (!isfinite(v))
    return ctrain_buf_append(b, "null", 4);
  char num[64];
  if (fabs(v) < 1e9)
    snprintf(num, sizeof(num), "%.*f", decimals, v);
  else /* a diverged loss: no 300-digit number */
    snprintf(num, sizeof(num), "%.6e", v);
  return ctrain_buf_append(b, num, strlen(num));
}

ctrain_err progress_render_json(const progress_snapshot *s, ctrain_buf *b) {
  ctrain_err result = ctrain_buf_printf(
      b,
      "{\"state\":\"%s\",\"rank\":%d,\"epoch\":%d,\"epochs\":%d,\"step\":%llu,"
      "\"steps_per_epoch\":%llu,\"global_step\":%llu,\"replicas_in_sync\":%d,\"workers\":%d",
      state_name(s->state), s->rank, s->epoch, s->epochs, (unsigned long long)s->step,
      (unsigned long long)s->steps_per_epoch, (unsigned long long)s->global_step,
      s->replicas_in_sync, s->workers);
  const struct {
    const char *k;
    double v;
    int decimals;
  } nums[] = {{"samples_per_sec", s->samples_per_sec, 1},
              {"loss", s->loss, 6},
              {"accuracy", s->accuracy, 6},
              {"val_loss", s->val_loss, 6},
              {"val_accuracy", s->val_accuracy, 6},
              {"step_ms", s->step_ms, 3},
              {"median_ms", s->median_ms, 3},
              {"slowest_ratio", s->slowest_ratio, 3}};
  for (size_t i = 0; !result && i < sizeof(nums) / sizeof(nums[0]); i++)
    result = json_num(b, nums[i].k, nums[i].v, nums[i].decimals);
  if (!result)
    result = s->slowest_rank >= 0 ? ctrain_buf_printf(b, ",\"slowest_rank\":%d", s->slowest_rank)
                                  : ctrain_buf_printf(b, ",\"slowest_rank\":null");
  if (!result)
    result = ctrain_buf_printf(b, ",\"worker_ms\":[");
  for (int i = 0; !result && i < s->n_worker_ms && i < PROGRESS_MAX_WORKERS; i++) {
    double v = s->worker_ms[i];
    result = isfinite(v) ? ctrain_buf_printf(b, "%s%.3f", i ? "," : "", v)
                         : ctrain_buf_printf(b, "%snull", i ? "," : "");
  }
  if (!result)
    result = s->backup_step >= 0
                 ? ctrain_buf_printf(b, "],\"backup_step\":%lld}\n", (long long)s->backup_step)
                 : ctrain_buf_printf(b, "],\"backup_step\":null}\n");
  return result;
}

/* One gauge with its HELP and TYPE lines; NaN when not known. */
static ctrain_err gauge(ctrain_buf *b, const char *name, const char *help, double v) {
  char num[64];
  if (isnan(v))
    snprintf(num, sizeof(num), "NaN");
  else
    snprintf(num, sizeof(num), "%.9g", v);
  return ctrain_buf_printf(b, "# HELP %s %s\n# TYPE %s gauge\n%s %s\n", name, help, name, name,
                           num);
}

ctrain_err progress_render_metrics(const progress_snapshot *s, ctrain_buf *b) {
  const struct {
    const char *name, *help;
    double v;
  } g[] = {
      {"ctrain_worker_rank", "This worker's rank (chief 0).", s->rank},
      {"ctrain_worker_epoch", "Epoch in progress, 1-based (0: not started).", s->epoch},
      {"ctrain_worker_epochs", "Epochs to train.", s->epochs},
      {"ctrain_worker_step", "Steps done of the epoch in progress.", (double)s->step},
      {"ctrain_worker_steps_per_epoch", "Steps per epoch.", (double)s->steps_per_epoch},
      {"ctrain_worker_global_step", "Optimizer steps since the job's start.",
       (double)s->global_step},
      {"ctrain_worker_samples_per_second", "Global training throughput this epoch.",
       s->samples_per_sec},
      {"ctrain_worker_loss", "Training loss (running mean of the epoch).", s->loss},
      {"ctrain_worker_accuracy", "Training accuracy (running mean of the epoch).", s->accuracy},
      {"ctrain_worker_val_loss", "Loss on the test data after the last epoch.", s->val_loss},
      {"ctrain_worker_val_accuracy", "Accuracy on the test data after the last epoch.",
       s->val_accuracy},
      {"ctrain_worker_replicas_in_sync", "Replicas in sync (workers x local replicas).",
       s->replicas_in_sync},
      {"ctrain_worker_step_seconds", "This worker's compute time per step this epoch.",
       s->step_ms / 1000.0},
      {"ctrain_worker_backup_step", "Global step of the newest backup (NaN: none).",
       s->backup_step >= 0 ? (double)s->backup_step : NAN},
      {"ctrain_worker_state", "0 starting, 1 training, 2 succeeded, 3 failed.", s->state},
  };
  ctrain_err result = CTRAIN_OK;
  for (size_t i = 0; !result && i < sizeof(g) / sizeof(g[0]); i++)
    result = gauge(b, g[i].name, g[i].help, g[i].v);
  return result;
}

/* ---- the server: routes and auth over ctrain_httpd ---------------------- */

struct progress_server {
  ctrain_httpd *httpd;
  int chief;
  char token[CTRAIN_PROGRESS_TOKEN_HEX + 1];
  pthread_mutex_t mu; /* guards snap */
  progress_snapshot snap;
};

void progress_publish(progress_server *s, const progress_snapshot *snap) {
  if (!s)
    return;
  ctrain_mutex_lock(&s->mu);
  s->snap = *snap;
  ctrain_mutex_unlock(&s->mu);
}

/* `Authorization: Bearer <token>` with the read token, compared in constant
 * time (the length is not secret). */
static int authorized(const progress_server *s, const ctrain_httpd_request *req) {
  char v[256];
  int ok = 0;
  if (!ctrain_httpd_header(req, "Authorization", v, sizeof(v)) && !strncasecmp(v, "Bearer ", 7)) {
    const char *t = v + 7;
    while (*t == ' ')
      t++;
    ok = strlen(t) == CTRAIN_PROGRESS_TOKEN_HEX &&
         !CRYPTO_memcmp(t, s->token, CTRAIN_PROGRESS_TOKEN_HEX);
  }
  OPENSSL_cleanse(v, sizeof(v));
  return ok;
}

/* A short text answer. The status is set before the body is appended, so a
 * body that could not be allocated still leaves a well-formed answer (an
 * empty body, its Content-Length 0) on a connection that closes after it:
 * the result is dropped on purpose. */
static void reply(ctrain_httpd_response *resp, int status, const char *text) {
  ctrain_ignore(ctrain_httpd_text(resp, status, text));
}

static void handle(void *ud, const ctrain_httpd_request *req, ctrain_httpd_response *resp) {
  progress_server *s = ud;
  if (strcmp(req->method, "GET") && strcmp(req->method, "HEAD")) {
    reply(resp, 405, "method not allowed\n");
    /* Without the Allow line (out of memory) the 405 still says no. */
    ctrain_ignore(ctrain_httpd_add_header(resp, "Allow", "GET, HEAD"));
    return;
  }
  if (!strcmp(req->path, "/healthz")) {
    reply(resp, 200, "ok\n");
    return;
  }
  int is_progress = !strcmp(req->path, "/progress") && s->chief;
  int is_metrics = !strcmp(req->path, "/metrics");
  if (!is_progress && !is_metrics) {
    reply(resp, 404, "not found\n");
    return;
  }
  if (!authorized(s, req)) {
    reply(resp, 401, "unauthorized\n");
    /* Without the challenge line (out of memory) the 401 still refuses. */
    ctrain_ignore(ctrain_httpd_add_header(resp, "WWW-Authenticate", "Bearer realm=\"ctrain\""));
    return;
  }
  progress_snapshot *snap = malloc(sizeof(*snap));
  if (!snap) {
    reply(resp, 503, "busy\n");
    return;
  }
  ctrain_mutex_lock(&s->mu);
  *snap = s->snap;
  ctrain_mutex_unlock(&s->mu);
  ctrain_err result = is_progress ? progress_render_json(snap, &resp->body)
                                  : progress_render_metrics(snap, &resp->body);
  free(snap);
  if (result) {
    reply(resp, 500, "error\n");
    return;
  }
  resp->status = 200;
  resp->content_type =
      is_progress ? "application/json" : "text/plain; version=0.0.4; charset=utf-8";
}

ctrain_err progress_start(const progress_config *cfg, progress_server **out, int *port_out,
                          char *errbuf, size_t errlen) {
  ctrain_err result = CTRAIN_OK;
  progress_server *s = NULL;
  if (!cfg->read_token || strlen(cfg->read_token) != CTRAIN_PROGRESS_TOKEN_HEX)
    CTRAIN_FAIL(CTRAIN_E_INVAL, "progress server: no read token");
  s = calloc(1, sizeof(*s));
  if (!s)
    CTRAIN_FAIL(CTRAIN_E_NOMEM, "progress server: out of memory");
  memcpy(s->token, cfg->read_token, CTRAIN_PROGRESS_TOKEN_HEX + 1);
  s->chief = cfg->chief;
  progress_snapshot_init(&s->snap);
  pthread_mutex_init(&s->mu, NULL);
  ctrain_httpd_config hc = {.name = "progress server",
                            .bind_host = cfg->bind_host,
                            .port = cfg->port,
                            .max_conns = PROGRESS_MAX_CONNS,
                            .deadline_ms = PROGRESS_DEADLINE_MS,
                            .req_max = PROGRESS_REQ_MAX,
                            .body_max = 1 << 20,
                            .handler = handle,
                            .ud = s};
  result = ctrain_httpd_start(&hc, &s->httpd, port_out, errbuf, errlen);
  if (result)
    goto out;
  *out = s;
  s = NULL;
out:
  progress_stop(s);
  return result;
}

void progress_stop(progress_server *s) {
  if (!s)
    return;
  ctrain_httpd_stop(s->httpd);
  pthread_mutex_destroy(&s->mu);
  OPENSSL_cleanse(s->token, sizeof(s->token));
  free(s);
}
