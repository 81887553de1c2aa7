/* progress.c - the poller of the chiefs' /progress; see controller/progress.h.
 *
 * The schedule is one map, key -> {next poll, in flight}, under one lock:
 * a poller thread takes the lock, refreshes the map from the job cache at
 * most once a second (Running jobs in, others out), takes the entry due
 * first that nobody polls, sets its next time, and polls it unlocked. So
 * at most `concurrency` polls are in flight and one job is never polled
 * twice at once. */
#include "controller/progress.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <curl/curl.h>
#include <openssl/rand.h>

#include "controller/jobkind.h"
#include "controller/jobspec.h"
#include "controller/ownership.h"
#include "controller/podbuild.h"
#include "controller/reconcile.h"
#include "ctrain/buf.h"
#include "ctrain/clock.h"
#include "ctrain/contract.h"
#include "ctrain/json.h"
#include "ctrain/kube_time.h"
#include "ctrain/log.h"
#include "ctrain/strmap.h"
#include "ctrain/thread.h"

#define MAX_POLLERS   16
#define SCAN_PERIOD_S 1.0 /* the job cache is read at most this often */
#define IDLE_NAP_NS   200000000LL
#define JITTER        0.10 /* +-10% of the interval */

typedef struct {
  double next;  /* ctrain_mono_s() of the next poll */
  int inflight; /* a poller has it */
  int seen;     /* the scan generation that last saw the job Running */
} sched_entry;

struct ctl_progress {
  ctl_progress_opts o;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int stop;             /* guarded by mu */
  ctrain_strmap *sched; /* key -> sched_entry*, guarded by mu */
  double next_scan;     /* guarded by mu */
  int generation;       /* guarded by mu */
  pthread_t threads[MAX_POLLERS];
  int nthreads;
};

/* ---- pure parts ------------------------------------------------------------- */

/* /progress field -> status.progress field; `digits`: decimals kept (-1:
 * an integer), so a job's status does not churn on noise. */
static const struct {
  const char *from, *to;
  int digits;
} fields[] = {
    {"epoch", "epoch", -1},
    {"epochs", "epochs", -1},
    {"step", "step", -1},
    {"global_step", "globalStep", -1},
    {"steps_per_epoch", "stepsPerEpoch", -1},
    {"samples_per_sec", "samplesPerSec", 1},
    {"loss", "loss", 4},
    {"accuracy", "accuracy", 4},
    {"val_loss", "valLoss", 4},
    {"val_accuracy", "valAccuracy", 4},
    {"replicas_in_sync", "replicasInSync", -1},
    {"backup_step", "backupStep", -1},
};

static double round_to(double v, int digits) {
  if (digits < 0)
    return floor(v);
  double scale = pow(10, digits);
  return round(v * scale) / scale;
}

/* in[k] when present, not null, a number and within lo..hi (whole when
 * `whole`): 1 with *v; 0 when absent or null; -1 (why says) otherwise. */
static int number_in(const cJSON *in, const char *k, double lo, double hi, int whole, double *v,
                     char *why, size_t whylen) {
  const cJSON *j = ctrain_json_get(in, k);
  char num[40];
  if (!j || cJSON_IsNull(j))
    return 0;
  if (!cJSON_IsNumber(j)) {
    snprintf(why, whylen, "%s is not a number", k);
    return -1;
  }
  *v = j->valuedouble;
  if (!isfinite(*v) || *v < lo || *v > hi || (whole && *v != floor(*v))) {
    char l[40], h[40];
    snprintf(why, whylen, "%s: %s is not %s in %s..%s", k,
             ctrain_json_num_str(*v, num, sizeof(num)), whole ? "an integer" : "a number",
             ctrain_json_num_str(lo, l, sizeof(l)), ctrain_json_num_str(hi, h, sizeof(h)));
    return -1;
  }
  return 1;
}

ctrain_err ctl_progress_parse(const char *body, size_t len, int64_t now, cJSON **progress,
                              int *rank, double *ratio, char *why, size_t whylen) {
  ctrain_err result = CTRAIN_E_NOMEM;
  cJSON *in = cJSON_ParseWithLength(body, len), *out = NULL;
  char ts[40], scratch[8];
  double v = 0, sr = -1, sq = NAN, workers = 0;
  int got;
  if (!why || !whylen) {
    why = scratch;
    whylen = sizeof(scratch);
  }
  why[0] = '\0';
  *progress = NULL;
  *rank = -1;
  *ratio = NAN;
  if (!cJSON_IsObject(in)) {
    snprintf(why, whylen, "answer is not a JSON object");
    result = CTRAIN_E_PARSE;
    goto out;
  }
  out = cJSON_CreateObject();
  if (!out)
    goto out;
  for (size_t i = 0; i < sizeof(fields) / sizeof(fields[0]); i++) {
    int whole = fields[i].digits < 0;
    got = number_in(in, fields[i].from, whole ? 0 : -CTL_PROGRESS_NUM_MAX, CTL_PROGRESS_NUM_MAX,
                    whole, &v, why, whylen);
    if (got < 0) {
      result = CTRAIN_E_PARSE;
      goto out;
    }
    if (got && !cJSON_AddNumberToObject(out, fields[i].to, round_to(v, fields[i].digits)))
      goto out;
  }
  /* slowest_rank -1 (or null): not known yet. */
  const cJSON *jr = ctrain_json_get(in, "slowest_rank");
  int have_rank = !(cJSON_IsNumber(jr) && jr->valuedouble == -1);
  if ((have_rank &&
       number_in(in, "slowest_rank", 0, CTL_PROGRESS_RANK_MAX, 1, &sr, why, whylen) < 0) ||
      number_in(in, "slowest_ratio", 0, CTL_PROGRESS_RATIO_MAX, 0, &sq, why, whylen) < 0 ||
      number_in(in, "workers", 0, CTL_PROGRESS_RANK_MAX + 1, 1, &workers, why, whylen) < 0) {
    result = CTRAIN_E_PARSE;
    goto out;
  }
  if (have_rank && cJSON_IsNumber(jr) && ctrain_json_get(in, "workers") && sr >= workers) {
    snprintf(why, whylen, "slowest_rank %d is not below workers %d", (int)sr, (int)workers);
    result = CTRAIN_E_PARSE;
    goto out;
  }
  if (sr >= 0 && cJSON_IsNumber(ctrain_json_get(in, "slowest_ratio")) && workers > 1) {
    *rank = (int)sr;
    *ratio = sq;
    cJSON *sw = cJSON_AddObjectToObject(out, "slowestWorker");
    if (!sw || !cJSON_AddNumberToObject(sw, "rank", *rank) ||
        !cJSON_AddNumberToObject(sw, "ratio", round_to(*ratio, 2)))
      goto out;
  }
  if (kube_time_format(now, ts, sizeof(ts)) || !cJSON_AddStringToObject(out, "lastPollTime", ts))
    goto out;
  *progress = out;
  out = NULL;
  result = CTRAIN_OK;
out:
  if (result) {
    *rank = -1;
    *ratio = NAN;
  }
  cJSON_Delete(out);
  cJSON_Delete(in);
  return result;
}

/* ---- one poll ----------------------------------------------------------------- */

/* The IP of the rank-0 pod (the chief, or worker 0 without one) of
 * `attempt` when it runs, in ip[]; 0 when there is none. */
static int chief_ip(ctl_progress *p, const job_spec *spec, const char *uid, int attempt, char *ip,
                    size_t len) {
  cJSON *pods = NULL;
  int found = 0;
  const char *want = spec->replicas[PODBUILD_CHIEF] > 0 ? "chief" : "worker";
  char attempt_s[16];
  snprintf(attempt_s, sizeof(attempt_s), "%d", attempt);
  /* The job's own pods only (controller/ownership.h): a pod of another
   * namespace naming the job's uid, or a labelled namesake, is never polled. */
  own_job oj = {.ns = spec->ns,
                .name = spec->name,
                .uid = uid,
                .api_version = PODBUILD_API_VERSION,
                .kind = PODBUILD_KIND};
  if (kube_informer_by_owner_name(p->o.pods, spec->ns, spec->name, &pods))
    return 0;
  const cJSON *pod;
  cJSON_ArrayForEach(pod, pods) {
    if (!own_is_mine(pod, &oj))
      continue;
    const cJSON *labels = ctrain_json_get(ctrain_json_get(pod, "metadata"), "labels");
    const cJSON *st = ctrain_json_get(pod, "status");
    const char *t = ctrain_json_str(labels, PODBUILD_LABEL_TYPE);
    const char *i = ctrain_json_str(labels, PODBUILD_LABEL_INDEX);
    const char *a = ctrain_json_str(labels, PODBUILD_LABEL_ATTEMPT);
    const char *phase = ctrain_json_str(st, "phase"), *pip = ctrain_json_str(st, "podIP");
    if (t && i && a && phase && pip && *pip && !strcmp(t, want) && !strcmp(i, "0") &&
        !strcmp(a, attempt_s) && !strcmp(phase, "Running") && strlen(pip) < len) {
      snprintf(ip, len, "%s", pip);
      found = 1;
      break;
    }
  }
  cJSON_Delete(pods);
  return found;
}

static size_t on_body(char *data, size_t size, size_t n, void *ud) {
  return ctrain_buf_append(ud, data, size * n) ? 0 : size * n;
}

/* GET url with the bearer; the body in *body. CTRAIN_E_NET/_TIMEOUT/_AUTH/
 * _HTTP/_TOOBIG with `why` filled. */
static ctrain_err http_get(CURL *h, const char *url, const char *bearer, ctrain_buf *body,
                           char *why, size_t whylen) {
  char auth[128], err[CURL_ERROR_SIZE] = "";
  struct curl_slist *hdrs = NULL;
  long code = 0;
  ctrain_err result = CTRAIN_OK;
  snprintf(auth, sizeof(auth), "Authorization: Bearer %s", bearer);
  hdrs = curl_slist_append(hdrs, auth);
  if (!hdrs)
    return CTRAIN_E_NOMEM;
  curl_easy_reset(h);
  curl_easy_setopt(h, CURLOPT_URL, url);
  curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdrs);
  curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(h, CURLOPT_ERRORBUFFER, err);
  curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, (long)CTL_PROGRESS_TIMEOUT_MS);
  curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, (long)CTL_PROGRESS_TIMEOUT_MS);
  curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http");
  curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_body);
  curl_easy_setopt(h, CURLOPT_WRITEDATA, body);
  curl_easy_setopt(h, CURLOPT_USERAGENT, "ctrain-controller");
  CURLcode cc = curl_easy_perform(h);
  curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &code);
  if (cc == CURLE_WRITE_ERROR) {
    snprintf(why, whylen, "answer over %d bytes", CTL_PROGRESS_BODY_MAX);
    result = CTRAIN_E_TOOBIG;
  } else if (cc != CURLE_OK) {
    snprintf(why, whylen, "%s", err[0] ? err : curl_easy_strerror(cc));
    result = cc == CURLE_OPERATION_TIMEDOUT ? CTRAIN_E_TIMEOUT : CTRAIN_E_NET;
  } else if (code != 200) {
    snprintf(why, whylen, "HTTP %ld", code);
    result = code == 401 || code == 403 ? CTRAIN_E_AUTH : CTRAIN_E_HTTP;
  }
  curl_slist_free_all(hdrs);
  return result;
}

/* Polls the chief of job `key` once. Every outcome is counted; none is the
 * job's error. */
static void poll_job(ctl_progress *p, CURL *h, const char *key) {
  char ip[64], url[128], token[256], bearer[CTRAIN_PROGRESS_TOKEN_HEX + 1];
  char why[CURL_ERROR_SIZE + 64] = "";
  cJSON *job = NULL, *progress = NULL;
  ctrain_buf body;
  ctl_job *state = NULL;
  ctrain_buf_init(&body, CTL_PROGRESS_BODY_MAX);
  ctl_key k;
  if (ctl_key_parse(key, &k) || k.kind->id != CTL_KIND_TRAININGJOB)
    goto out;
  job = kube_informer_get(p->o.jobs, k.ns, k.name);
  const cJSON *st = ctrain_json_get(job, "status");
  const char *uid = ctrain_json_str(ctrain_json_get(job, "metadata"), "uid");
  int64_t attempt = 1;
  if (ctrain_json_int_in(st, "attempt", 1, INT32_MAX, 1, &attempt, "status.attempt", NULL, 0))
    attempt = 1; /* a status.attempt that is not an int32 reads as the first */
  if (!job || !uid || strcmp(recon_state(st), "Running"))
    goto out;
  job_spec spec;
  jobspec_read(job, &spec);
  if (!chief_ip(p, &spec, uid, (int)attempt, ip, sizeof(ip)) ||
      p->o.token(p->o.token_ud, job, (int)attempt, token, sizeof(token))) {
    atomic_fetch_add(&p->o.metrics->progress_polls_skipped, 1);
    LOG_DEBUG("%s: progress poll skipped: no running chief or no token yet", key);
    goto out;
  }
  ctrain_progress_read_token(token, bearer);
  memset(token, 0, sizeof(token));
  snprintf(url, sizeof(url), strchr(ip, ':') ? "http://[%s]:%d/progress" : "http://%s:%d/progress",
           ip, spec.progress_port);
  ctrain_err result = http_get(h, url, bearer, &body, why, sizeof(why));
  int rank = -1;
  double ratio = NAN;
  if (!result) {
    result = ctl_progress_parse(body.p ? body.p : "", body.len, (int64_t)time(NULL), &progress,
                                &rank, &ratio, why, sizeof(why));
  }
  if (!result) {
    state = ctl_jobs_acquire(p->o.states, key);
    if (!state)
      result = CTRAIN_E_NOMEM;
  }
  if (result) {
    atomic_fetch_add(&p->o.metrics->progress_polls_error, 1);
    LOG_DEBUG("%s: progress poll of %s: %s: %s", key, url, ctrain_strerror(result), why);
    goto out;
  }
  atomic_fetch_add(&p->o.metrics->progress_polls_ok, 1);
  int news = ctl_job_progress_store(state, (int)attempt, progress, rank, ratio, p->o.threshold,
                                    (int64_t)time(NULL));
  progress = NULL;
  /* else the status already says it: no pass, no write */
  if (news && kube_workqueue_add(p->o.q, key))
    LOG_WARN("%s: out of memory queueing the pass for its new progress; the informer's resync "
             "queues it again",
             key);
out:
  ctl_jobs_release(p->o.states, state);
  ctrain_buf_free(&body);
  cJSON_Delete(progress);
  cJSON_Delete(job);
}

/* ---- the schedule ------------------------------------------------------------- */

/* A uniform number in [0, 1). */
static double uniform(void) {
  uint32_t r = 0;
  if (RAND_bytes((unsigned char *)&r, sizeof(r)) != 1)
    r = (uint32_t)rand();
  return r / 4294967296.0;
}

typedef struct {
  ctl_progress *p;
  double now;
  const char *best;
  double best_next;
  char **gone;
  size_t ngone, capgone;
} pick_ctx;

static int pick_each(void *ud, const char *key, void *val) {
  pick_ctx *k = ud;
  sched_entry *e = val;
  if (e->seen != k->p->generation) {
    if (!e->inflight && !ctrain_grow(&k->gone, &k->capgone, k->ngone + 1, sizeof(char *), 8, 0))
      k->gone[k->ngone++] = (char *)key;
    return 0;
  }
  if (!e->inflight && e->next <= k->now && (!k->best || e->next < k->best_next)) {
    k->best = key;
    k->best_next = e->next;
  }
  return 0;
}

typedef struct {
  ctl_progress *p;
  double now;
} scan_ctx;

static int scan_one(void *ud, const cJSON *job) {
  scan_ctx *s = ud;
  ctl_progress *p = s->p;
  char key[CTL_KEY_MAX];
  ctl_key k;
  if (strcmp(recon_state(ctrain_json_get(job, "status")), "Running") ||
      ctl_key_of(&ctl_kinds[CTL_KIND_TRAININGJOB], job, &k) || ctl_key_format(&k, key, sizeof(key)))
    return 0;
  sched_entry *e = ctrain_strmap_get(p->sched, key);
  if (!e) {
    e = calloc(1, sizeof(*e));
    if (!e || ctrain_strmap_put(p->sched, key, e, NULL)) {
      free(e);
      return 0;
    }
    e->next = s->now + uniform() * p->o.interval_s;
  }
  e->seen = p->generation;
  return 0;
}

/* Running jobs of the cache into the schedule (new ones at a random point
 * of the first interval), the others out. Under p->mu. The cache is read
 * one job at a time (kube_informer_each): a list of 1,000 jobs parsed at
 * once every second was the controller's largest allocation. On NOMEM the
 * schedule keeps every job it had. */
static int keep_one(void *ud, const char *key, void *val) {
  (void)key;
  ((sched_entry *)val)->seen = ((ctl_progress *)ud)->generation;
  return 0;
}

static void scan(ctl_progress *p, double now) {
  scan_ctx s = {p, now};
  p->generation++;
  if (kube_informer_each(p->o.jobs, NULL, scan_one, &s))
    ctrain_strmap_each(p->sched, keep_one, p); /* a partial scan takes nothing out */
}

/* The key due first that no poller has (copied into key[]), its next poll
 * set; 0 when none is due. */
static int take_due(ctl_progress *p, char *key, size_t len) {
  double now = ctrain_mono_s();
  pick_ctx k = {.p = p, .now = now};
  if (now >= p->next_scan) {
    scan(p, now);
    p->next_scan = now + SCAN_PERIOD_S;
  }
  ctrain_strmap_each(p->sched, pick_each, &k);
  int found = 0;
  if (k.best) {
    sched_entry *e = ctrain_strmap_get(p->sched, k.best);
    e->inflight = 1;
    e->next = now + p->o.interval_s * (1.0 - JITTER + 2 * JITTER * uniform());
    snprintf(key, len, "%s", k.best);
    found = 1;
  }
  for (size_t i = 0; i < k.ngone; i++) {
    char gone[CTL_KEY_MAX];
    snprintf(gone, sizeof(gone), "%s", k.gone[i]); /* the map owns the key it frees */
    free(ctrain_strmap_del(p->sched, gone, NULL));
  }
  free(k.gone);
  return found;
}

static void *poller_main(void *arg) {
  ctl_progress *p = arg;
  CURL *h = curl_easy_init();
  char key[CTL_KEY_MAX];
  ctrain_mutex_lock(&p->mu);
  while (!p->stop) {
    if (!h || !take_due(p, key, sizeof(key))) {
      ctrain_mutex_unlock(&p->mu);
      ctrain_cond_nap(&p->cv, &p->mu, &p->stop, IDLE_NAP_NS);
      ctrain_mutex_lock(&p->mu);
      continue;
    }
    ctrain_mutex_unlock(&p->mu);
    poll_job(p, h, key);
    ctrain_mutex_lock(&p->mu);
    sched_entry *e = ctrain_strmap_get(p->sched, key);
    if (e)
      e->inflight = 0;
  }
  ctrain_mutex_unlock(&p->mu);
  if (h)
    curl_easy_cleanup(h);
  return NULL;
}

ctrain_err ctl_progress_start(const ctl_progress_opts *o, ctl_progress **out) {
  *out = NULL;
  if (o->interval_s <= 0)
    return CTRAIN_OK;
  ctl_progress *p = calloc(1, sizeof(*p));
  if (!p)
    return CTRAIN_E_NOMEM;
  p->o = *o;
  if (p->o.concurrency < 1)
    p->o.concurrency = 1;
  if (p->o.concurrency > MAX_POLLERS)
    p->o.concurrency = MAX_POLLERS;
  if (ctrain_strmap_new(&p->sched)) {
    free(p);
    return CTRAIN_E_NOMEM;
  }
  pthread_mutex_init(&p->mu, NULL);
  ctrain_cond_init_mono(&p->cv);
  for (; p->nthreads < p->o.concurrency; p->nthreads++)
    if (pthread_create(&p->threads[p->nthreads], NULL, poller_main, p)) {
      ctl_progress_stop(p);
      return CTRAIN_E_NOMEM;
    }
  *out = p;
  return CTRAIN_OK;
}

void ctl_progress_stop(ctl_progress *p) {
  if (!p)
    return;
  ctrain_mutex_lock(&p->mu);
  p->stop = 1;
  ctrain_cond_broadcast(&p->cv);
  ctrain_mutex_unlock(&p->mu);
  for (int i = 0; i < p->nthreads; i++)
    pthread_join(p->threads[i], NULL);
  ctrain_strmap_free(p->sched, free);
  pthread_cond_destroy(&p->cv);
  pthread_mutex_destroy(&p->mu);
  free(p);
}
