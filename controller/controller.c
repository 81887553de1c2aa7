/* controller.c - ctrain-controller's control loop; see controller/ctl.h.
 *
 * Informers feed a work queue of TrainingJob keys ("ns/name"); pod and
 * Service events map to their controlling job. A worker takes a key, builds
 * the reconcile input from the caches, calls the pure recon_reconcile and
 * performs the actions in order, as reconcile.h says. Only the leader runs
 * informers and workers.
 *
 * What a pass costs is what bounds the pod-create rate, so:
 * - The job's token Secret (the controller holds no list/watch on Secrets)
 *   is read by name only when this process has no copy of it younger than
 *   SECRET_CACHE_TTL_S: the copy is what it last read or wrote itself, and a
 *   write that fails on it (AlreadyExists, a stale resourceVersion) drops it.
 *   A job that has no status yet has never been reconciled and so has no
 *   Secret: that first pass reads nothing.
 * - Pod creates go out with slow start (slowstart.h) on a pool of threads
 *   that keep their connections; a thread per create would pay a TLS
 *   handshake per pod.
 * - Events are recorded by one background thread from a bounded queue, as
 *   client-go's broadcaster does: a pass never waits on an Event write, and
 *   when the queue is full events are dropped and counted. */
#include "ctrain/clock.h"
#include "controller/ctl.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cjson/cJSON.h>
#include <curl/curl.h>

#include "controller/http.h"
#include "ctrain/kube_client.h"
#include "ctrain/kube_config.h"
#include "ctrain/kube_events.h"
#include "ctrain/kube_informer.h"
#include "ctrain/kube_lease.h"
#include "ctrain/strmap.h"
#include "ctrain/kube_workqueue.h"
#include "ctrain/log.h"
#include "controller/podbuild.h"
#include "controller/reconcile.h"
#include "controller/slowstart.h"
#include "ctrain/version.h"

#define CREATE_POOL_THREADS 16   /* pod creates in flight, besides one per worker */
#define SECRET_CACHE_TTL_S  60.0 /* re-read a job's Secret at least this often */
#define EVENT_QUEUE_MAX     4096 /* events waiting to be written; more are dropped */
#define EVENT_DRAIN_S       2.0  /* at shutdown, write queued events for at most this */
#define NS_PER_S            1000000000LL

static const kube_gvr GVR_TJ = {"ctrain.dev", "v1alpha1", "trainingjobs"};
static const kube_gvr GVR_NETPOL = {"networking.k8s.io", "v1", "networkpolicies"};

/* Set by the signal handler (on whichever thread the signal lands) and read
 * by the main thread and the lease thread (on_stopped): a lock-free atomic,
 * which C11 allows in a handler, where volatile sig_atomic_t orders nothing
 * between threads. */
static atomic_int stop_requested;
_Static_assert(ATOMIC_INT_LOCK_FREE == 2, "stop_requested must be lock-free for the handler");

/* What the controller keeps per job key between passes. */
typedef struct {
  recon_expectations x;
  int secret_valid;                 /* `secret` is what the apiserver had */
  cJSON *secret;                    /* the token Secret; NULL with secret_valid: absent */
  char secret_owner[RECON_UID_MAX]; /* the job uid it was read or written for */
  double secret_at;                 /* ctrain_mono_s() when */
} job_state;

/* An Event waiting to be written. */
typedef struct ev_item {
  struct ev_item *next;
  cJSON *involved;           /* the ObjectReference, owned */
  const char *type, *reason; /* static */
  char *message;             /* owned */
} ev_item;

typedef struct {
  const ctl_options *o;
  kube_config *cfg;
  kube_client *client;
  kube_informer *jobs, *pods, *services;
  kube_workqueue *q;
  kube_lease *lease;
  kube_events *events;
  ctl_http *http;
  slowstart_pool *create_pool;

  pthread_mutex_t state_mu;
  ctrain_strmap *states; /* job key -> job_state* */

  pthread_mutex_t ev_mu;
  pthread_cond_t ev_cv;
  ev_item *ev_head, *ev_tail;
  size_t ev_len;
  int ev_stop;
  double ev_deadline; /* ctrain_mono_s() after which a stopping writer drops the rest */
  pthread_t ev_thread;
  int ev_started;

  atomic_int leading;
  atomic_int lost_leadership;
  atomic_long reconciles, reconcile_errors, pods_created, pods_deleted, pod_create_errors,
      pod_creates_skipped, status_updates, status_conflicts, events_emitted, events_dropped,
      restarts_decided, secret_reads;
  pthread_mutex_t hist_mu;
  double reconcile_seconds_sum;
  long reconcile_buckets[8]; /* le 0.005 .. 2.5, +Inf */
} ctl;

static const double hist_le[] = {0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 2.5};

void ctl_request_stop(void) {
  atomic_store(&stop_requested, 1);
}

/* ---- state per job key ----------------------------------------------------- */

static void free_state(void *p) {
  job_state *s = p;
  if (!s)
    return;
  recon_expectations_free(&s->x);
  cJSON_Delete(s->secret);
  free(s);
}

/* The key's state, created on first use. Caller holds state_mu. */
static job_state *state_for(ctl *c, const char *key) {
  job_state *s = ctrain_strmap_get(c->states, key);
  if (s)
    return s;
  s = calloc(1, sizeof(*s));
  if (!s)
    return NULL;
  recon_expectations_init(&s->x);
  if (ctrain_strmap_put(c->states, key, s, NULL)) {
    free(s);
    return NULL;
  }
  return s;
}

static void state_drop(ctl *c, const char *key) {
  pthread_mutex_lock(&c->state_mu);
  job_state *s = ctrain_strmap_del(c->states, key, NULL);
  pthread_mutex_unlock(&c->state_mu);
  free_state(s);
}

/* The job deleted meanwhile (state_drop) has nothing to undo: each of these
 * looks the key up again under the lock. */
static void expect_creation_failed(ctl *c, const char *key, const char *pod) {
  pthread_mutex_lock(&c->state_mu);
  job_state *s = ctrain_strmap_get(c->states, key);
  if (s)
    recon_expect_creation_failed(&s->x, pod);
  pthread_mutex_unlock(&c->state_mu);
}

static void expect_deletion_failed(ctl *c, const char *key, const char *uid) {
  pthread_mutex_lock(&c->state_mu);
  job_state *s = ctrain_strmap_get(c->states, key);
  if (s)
    recon_expect_deletion_failed(&s->x, uid);
  pthread_mutex_unlock(&c->state_mu);
}

/* The cached token Secret of job `uid`: sets *known when there is a fresh
 * copy and then *out to a duplicate (NULL: known absent). */
static ctrain_err secret_cached(ctl *c, const char *key, const char *uid, int *known, cJSON **out) {
  ctrain_err result = CTRAIN_OK;
  *known = 0;
  *out = NULL;
  pthread_mutex_lock(&c->state_mu);
  job_state *s = ctrain_strmap_get(c->states, key);
  if (s && s->secret_valid && !strcmp(s->secret_owner, uid) &&
      ctrain_mono_s() - s->secret_at < SECRET_CACHE_TTL_S) {
    if (s->secret && !(*out = cJSON_Duplicate(s->secret, 1)))
      result = CTRAIN_E_NOMEM;
    else
      *known = 1;
  }
  pthread_mutex_unlock(&c->state_mu);
  return result;
}

/* Remembers what the apiserver has as job `uid`'s Secret: `secret` (taken;
 * NULL: absent). */
static void secret_store(ctl *c, const char *key, const char *uid, cJSON *secret) {
  pthread_mutex_lock(&c->state_mu);
  job_state *s = state_for(c, key);
  if (s) {
    cJSON_Delete(s->secret);
    s->secret = secret;
    secret = NULL;
    s->secret_valid = 1;
    snprintf(s->secret_owner, sizeof(s->secret_owner), "%s", uid);
    s->secret_at = ctrain_mono_s();
  }
  pthread_mutex_unlock(&c->state_mu);
  cJSON_Delete(secret);
}

static void secret_forget(ctl *c, const char *key) {
  pthread_mutex_lock(&c->state_mu);
  job_state *s = ctrain_strmap_get(c->states, key);
  if (s) {
    cJSON_Delete(s->secret);
    s->secret = NULL;
    s->secret_valid = 0;
  }
  pthread_mutex_unlock(&c->state_mu);
}

/* ---- informer handlers: everything becomes a job key ---------------------- */

static void enqueue_obj(ctl *c, const cJSON *obj) {
  char key[320];
  if (kube_informer_key(obj, key, sizeof(key)) == CTRAIN_OK)
    kube_workqueue_add(c->q, key);
}

/* Enqueues the TrainingJob that controls `obj` (pod or Service), if any. */
static void enqueue_owner(ctl *c, const cJSON *obj) {
  const cJSON *md = cJSON_GetObjectItemCaseSensitive(obj, "metadata");
  const char *ns = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(md, "namespace"));
  const cJSON *refs = cJSON_GetObjectItemCaseSensitive(md, "ownerReferences");
  const cJSON *r;
  cJSON_ArrayForEach(r, refs) {
    const char *kind = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(r, "kind"));
    const char *api = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(r, "apiVersion"));
    const char *name = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(r, "name"));
    if (!cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(r, "controller")) || !kind || !api ||
        !name || !ns || strcmp(kind, PODBUILD_KIND) || strcmp(api, PODBUILD_API_VERSION))
      continue;
    char key[320];
    snprintf(key, sizeof(key), "%s/%s", ns, name);
    kube_workqueue_add(c->q, key);
  }
}

static void job_add(void *ud, const cJSON *o) {
  enqueue_obj(ud, o);
}
static void job_update(void *ud, const cJSON *old, const cJSON *o) {
  (void)old;
  enqueue_obj(ud, o);
}
static void job_delete(void *ud, const cJSON *o) {
  char key[320];
  if (kube_informer_key(o, key, sizeof(key)) == CTRAIN_OK) {
    state_drop(ud, key);
    LOG_INFO("trainingjob %s deleted", key);
  }
}
static void owned_add(void *ud, const cJSON *o) {
  enqueue_owner(ud, o);
}
static void owned_update(void *ud, const cJSON *old, const cJSON *o) {
  (void)old;
  enqueue_owner(ud, o);
}
static void owned_delete(void *ud, const cJSON *o) {
  enqueue_owner(ud, o);
}

/* ---- performing actions --------------------------------------------------- */

static const char *md_str(const cJSON *obj, const char *field) {
  return cJSON_GetStringValue(
      cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(obj, "metadata"), field));
}

/* ---- events: one writer thread behind a bounded queue ------------------------ */

static void ev_item_free(ev_item *e) {
  if (!e)
    return;
  cJSON_Delete(e->involved);
  free(e->message);
  free(e);
}

static void *event_writer(void *arg) {
  ctl *c = arg;
  pthread_mutex_lock(&c->ev_mu);
  for (;;) {
    while (!c->ev_head && !c->ev_stop)
      pthread_cond_wait(&c->ev_cv, &c->ev_mu);
    ev_item *e = c->ev_head;
    if (!e)
      break;
    c->ev_head = e->next;
    if (!c->ev_head)
      c->ev_tail = NULL;
    c->ev_len--;
    if (c->ev_stop && ctrain_mono_s() > c->ev_deadline) {
      atomic_fetch_add(&c->events_dropped, 1);
      ev_item_free(e);
      continue;
    }
    pthread_mutex_unlock(&c->ev_mu);
    ctrain_err result =
        kube_events_record(c->events, e->involved, e->type, e->reason, NULL, "%s", e->message);
    if (result)
      LOG_WARN("event %s %s: %s", md_str(e->involved, "name") ? md_str(e->involved, "name") : "?",
               e->reason, ctrain_strerror(result));
    else
      atomic_fetch_add(&c->events_emitted, 1);
    ev_item_free(e);
    pthread_mutex_lock(&c->ev_mu);
  }
  pthread_mutex_unlock(&c->ev_mu);
  return NULL;
}

/* Queues an Event about `involved` (an ObjectReference, as the reconcile
 * returns it; borrowed) for the writer thread and the aggregating recorder.
 * Never waits on the apiserver; a full queue drops the event. */
static void emit_event(ctl *c, const cJSON *involved, const char *type, const char *reason,
                       const char *message) {
  ev_item *e = calloc(1, sizeof(*e));
  cJSON *md = NULL;
  static const char *const ref_fields[] = {"apiVersion", "kind"};
  static const char *const md_fields[] = {"name", "namespace", "uid", "resourceVersion"};
  if (!e || !(e->involved = cJSON_CreateObject()) || !(e->message = strdup(message)) ||
      !(md = cJSON_AddObjectToObject(e->involved, "metadata")))
    goto drop;
  e->type = type;
  e->reason = reason;
  for (size_t i = 0; i < 2; i++) {
    const char *v = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(involved, ref_fields[i]));
    if (v && !cJSON_AddStringToObject(e->involved, ref_fields[i], v))
      goto drop;
  }
  for (size_t i = 0; i < 4; i++) {
    const char *v = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(involved, md_fields[i]));
    if (v && !cJSON_AddStringToObject(md, md_fields[i], v))
      goto drop;
  }
  pthread_mutex_lock(&c->ev_mu);
  if (c->ev_started && !c->ev_stop && c->ev_len < EVENT_QUEUE_MAX) {
    if (c->ev_tail)
      c->ev_tail->next = e;
    else
      c->ev_head = e;
    c->ev_tail = e;
    c->ev_len++;
    e = NULL;
    pthread_cond_signal(&c->ev_cv);
  }
  pthread_mutex_unlock(&c->ev_mu);
  if (!e)
    return;
drop:;
  long n = atomic_fetch_add(&c->events_dropped, 1) + 1;
  if ((n & (n - 1)) == 0) /* 1, 2, 4, ...: say so without flooding the log */
    LOG_WARN("event %s dropped (queue full or stopping); %ld dropped so far", reason, n);
  ev_item_free(e);
}

/* Stops the writer once the queue is written, or after EVENT_DRAIN_S. */
static void events_stop(ctl *c) {
  pthread_mutex_lock(&c->ev_mu);
  int started = c->ev_started;
  c->ev_stop = 1;
  c->ev_deadline = ctrain_mono_s() + EVENT_DRAIN_S;
  pthread_cond_broadcast(&c->ev_cv);
  pthread_mutex_unlock(&c->ev_mu);
  if (started)
    pthread_join(c->ev_thread, NULL);
  while (c->ev_head) {
    ev_item *e = c->ev_head;
    c->ev_head = e->next;
    ev_item_free(e);
  }
  c->ev_tail = NULL;
  c->ev_len = 0;
}

/* ---- pod creates with slow start ------------------------------------------- */

typedef struct {
  ctrain_err result;
  int existed; /* AlreadyExists: someone (an earlier pass) created it */
  kube_status st;
} create_out;

typedef struct {
  ctl *c;
  const char *ns;
  recon_action **acts; /* (n) the creates, in list order */
  create_out *out;     /* (n) */
} create_run;

static int create_one(void *ud, size_t i) {
  create_run *r = ud;
  create_out *o = &r->out[i];
  o->result = kube_client_create(r->c->client, &KUBE_GVR_PODS, r->ns, r->acts[i]->object, NULL,
                                 NULL, &o->st);
  if (o->result == CTRAIN_E_CONFLICT && !strcmp(o->st.reason, "AlreadyExists")) {
    o->result = CTRAIN_OK;
    o->existed = 1;
  }
  return o->result != CTRAIN_OK;
}

/* Performs every CREATE_POD action of res from index `from` on (marking them
 * in `handled`; their results in `ok`), with slow start, or none of them
 * when `give_up` (their token Secret could not be written). Creates not sent
 * leave the expectations, so the next pass returns them. Returns the first
 * failure, or CTRAIN_OK. */
static ctrain_err create_pods(ctl *c, const char *key, const char *ns, recon_result *res,
                              size_t from, int *ok, int *handled, const cJSON *jobref,
                              int give_up) {
  ctrain_err result = CTRAIN_OK;
  create_run run = {.c = c, .ns = ns};
  size_t n = 0, sent = 0;
  size_t *idx = calloc(res->n_actions, sizeof(*idx));
  run.acts = calloc(res->n_actions, sizeof(*run.acts));
  run.out = calloc(res->n_actions, sizeof(*run.out));
  if (!idx || !run.acts || !run.out) {
    result = CTRAIN_E_NOMEM;
    give_up = 1;
  }
  for (size_t i = from; i < res->n_actions; i++) {
    if (res->actions[i].kind != RECON_CREATE_POD)
      continue;
    handled[i] = 1;
    ok[i] = 0;
    if (idx) {
      idx[n] = i;
      run.acts[n] = &res->actions[i];
    }
    n++;
  }
  if (!give_up)
    sent = slowstart_run(c->create_pool, n, 1, create_one, &run);
  for (size_t k = 0; k < sent; k++) {
    recon_action *a = run.acts[k];
    create_out *o = &run.out[k];
    if (o->result) {
      atomic_fetch_add(&c->pod_create_errors, 1);
      expect_creation_failed(c, key, a->name);
      char msg[1400];
      snprintf(msg, sizeof(msg), "Error creating pod %s: %s (HTTP %d %s: %s)", a->name,
               ctrain_strerror(o->result), o->st.http_code, o->st.reason, o->st.message);
      LOG_WARN("%s: %s", key, msg);
      emit_event(c, jobref, "Warning", "FailedCreatePod", msg);
      if (!result)
        result = o->result;
    } else if (o->existed) {
      /* not created by us: no "created" event */
      LOG_WARN("%s: pod %s already exists (cache behind the apiserver)", key, a->name);
    } else {
      ok[idx[k]] = 1;
      atomic_fetch_add(&c->pods_created, 1);
      LOG_INFO("%s: created pod %s (attempt %d)", key, a->name, a->attempt);
    }
  }
  if (sent < n) {
    /* Given up: the next pass (this key is requeued with backoff) returns them again. */
    for (size_t i = from, k = 0; i < res->n_actions; i++)
      if (res->actions[i].kind == RECON_CREATE_POD && k++ >= sent)
        expect_creation_failed(c, key, res->actions[i].name);
    atomic_fetch_add(&c->pod_creates_skipped, (long)(n - sent));
    LOG_INFO("%s: %zu of %zu pod creates not sent (%s)", key, n - sent, n,
             give_up ? "no token Secret" : "slow start stopped after a failed batch");
    if (!result)
      result = CTRAIN_E_CANCELLED;
  }
  free(idx);
  free(run.acts);
  free(run.out);
  return result;
}

/* PUTs the job with `status` replaced through the status subresource; out
 * of memory sends nothing (never the job without its status). */
static ctrain_err write_status(ctl *c, const cJSON *job, const cJSON *status, kube_status *st) {
  cJSON *obj = NULL;
  ctrain_err result = recon_status_object(job, status, &obj);
  if (result) {
    snprintf(st->message, sizeof(st->message), "status write: out of memory");
    goto out;
  }
  result =
      kube_client_update_status(c->client, &GVR_TJ, md_str(job, "namespace"), obj, NULL, NULL, st);
out:
  cJSON_Delete(obj);
  return result;
}

/* Whether anything of this job was ever written: the status goes before
 * every other action, so a job without one has no Secret yet. */
static int job_reconciled(const cJSON *job) {
  const cJSON *st = cJSON_GetObjectItemCaseSensitive(job, "status");
  return cJSON_GetObjectItemCaseSensitive(st, "startTime") ||
         cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(st, "conditions")) > 0;
}

/* The job's token Secret for the reconcile input: the cached copy, nothing
 * for a job never reconciled, else a GET by name (cached). *secret NULL:
 * absent. */
static ctrain_err job_secret(ctl *c, const char *key, const cJSON *job, cJSON **secret) {
  ctrain_err result;
  const char *ns = md_str(job, "namespace"), *name = md_str(job, "name"), *uid = md_str(job, "uid");
  char secret_name[RECON_NAME_MAX + 8];
  int known = 0;
  kube_status st;
  *secret = NULL;
  result = secret_cached(c, key, uid, &known, secret);
  if (result || known || !job_reconciled(job))
    goto out;
  result = podbuild_secret_name(name, secret_name, sizeof(secret_name));
  if (result)
    goto out;
  atomic_fetch_add(&c->secret_reads, 1);
  result = kube_client_get(c->client, &KUBE_GVR_SECRETS, ns, secret_name, secret, &st);
  if (result == CTRAIN_E_NOTFOUND)
    result = CTRAIN_OK;
  if (result) {
    LOG_WARN("%s: get secret %s: %s (HTTP %d %s: %s)", key, secret_name, ctrain_strerror(result),
             st.http_code, st.reason, st.message);
    goto out;
  }
  cJSON *copy = *secret ? cJSON_Duplicate(*secret, 1) : NULL;
  if (!*secret || copy)
    secret_store(c, key, uid, copy);
out:
  return result;
}

/* One reconcile of one key. Returns CTRAIN_OK, or an error that makes the
 * caller requeue the key with backoff. *requeue_after_s is set when the
 * result asks for a delayed requeue. */
static ctrain_err reconcile_key(ctl *c, const char *key, int64_t *requeue_after_s) {
  ctrain_err result = CTRAIN_OK;
  cJSON *job = NULL, *pods = NULL, *svc = NULL, *secret = NULL, *jobref = NULL;
  recon_result res = {0};
  int *ok = NULL, *handled = NULL;
  int no_creates = 0; /* the token Secret could not be written: pods would not start */
  char ns[256], name[256], errbuf[512] = "";
  *requeue_after_s = -1;

  const char *slash = strchr(key, '/');
  if (!slash || (size_t)(slash - key) >= sizeof(ns) || strlen(slash + 1) >= sizeof(name))
    return CTRAIN_OK; /* not a key we made: drop it */
  memcpy(ns, key, (size_t)(slash - key));
  ns[slash - key] = '\0';
  snprintf(name, sizeof(name), "%s", slash + 1);

  job = kube_informer_get(c->jobs, ns, name);
  if (!job) {
    state_drop(c, key);
    goto out;
  }
  const char *uid = md_str(job, "uid");
  if (!uid)
    goto out;
  result = kube_informer_by_owner(c->pods, uid, &pods);
  if (result)
    goto out;
  svc = kube_informer_get(c->services, ns, name);
  result = job_secret(c, key, job, &secret);
  if (result)
    goto out;

  /* What events name; built before the pass, which records expectations of
   * its actions, so running out of memory here leaves nothing expected. */
  jobref = cJSON_CreateObject();
  if (!jobref || !cJSON_AddStringToObject(jobref, "apiVersion", PODBUILD_API_VERSION) ||
      !cJSON_AddStringToObject(jobref, "kind", PODBUILD_KIND) ||
      !cJSON_AddStringToObject(jobref, "namespace", ns) ||
      !cJSON_AddStringToObject(jobref, "name", name) ||
      !cJSON_AddStringToObject(jobref, "uid", uid)) {
    result = CTRAIN_E_NOMEM;
    goto out;
  }

  struct timespec now;
  clock_gettime(CLOCK_REALTIME, &now);
  recon_input in = {.job = job, .pods = pods, .service = svc, .secret = secret, .now = now.tv_sec};
  pthread_mutex_lock(&c->state_mu);
  job_state *s = state_for(c, key);
  if (!s) {
    pthread_mutex_unlock(&c->state_mu);
    result = CTRAIN_E_NOMEM;
    goto out;
  }
  result = recon_reconcile(&in, &s->x, &res, errbuf, sizeof(errbuf));
  pthread_mutex_unlock(&c->state_mu);
  if (result) {
    LOG_ERROR("%s: reconcile: %s: %s", key, ctrain_strerror(result), errbuf);
    goto out;
  }

  ok = calloc(res.n_actions + 1, sizeof(int));
  handled = calloc(res.n_actions + 1, sizeof(int));
  if (!ok || !handled) {
    result = CTRAIN_E_NOMEM;
    goto out;
  }
  for (size_t i = 0; i < res.n_actions; i++) {
    recon_action *a = &res.actions[i];
    kube_status st;
    memset(&st, 0, sizeof(st));
    ctrain_err r = CTRAIN_OK;
    switch (a->kind) {
    case RECON_UPDATE_STATUS:
      r = write_status(c, job, a->object, &st);
      if (r == CTRAIN_E_CONFLICT) {
        atomic_fetch_add(&c->status_conflicts, 1);
        LOG_INFO("%s: status write conflicted; requeue", key);
        result = CTRAIN_E_CONFLICT;
        goto out;
      }
      if (!r) {
        atomic_fetch_add(&c->status_updates, 1);
        LOG_INFO("%s: status -> %s", key, recon_state(a->object));
      }
      break;
    case RECON_CREATE_SERVICE:
      r = kube_client_create(c->client, &KUBE_GVR_SERVICES, ns, a->object, NULL, NULL, &st);
      if (r == CTRAIN_E_CONFLICT && !strcmp(st.reason, "AlreadyExists")) {
        LOG_INFO("%s: service %s already exists", key, md_str(a->object, "name"));
        r = CTRAIN_OK;
      } else if (!r) {
        LOG_INFO("%s: created service %s", key, md_str(a->object, "name"));
      }
      break;
    case RECON_CREATE_NETWORK_POLICY: {
      /* Best effort: a cluster without the API, or RBAC without the rule,
       * gets a Warning event, and the job runs without the policy. */
      kube_status nst;
      ctrain_err nr = kube_client_create(c->client, &GVR_NETPOL, ns, a->object, NULL, NULL, &nst);
      if (nr == CTRAIN_E_CONFLICT && !strcmp(nst.reason, "AlreadyExists"))
        nr = CTRAIN_OK;
      if (!nr) {
        LOG_INFO("%s: created networkpolicy %s", key, md_str(a->object, "name"));
      } else {
        char msg[1400];
        snprintf(msg, sizeof(msg),
                 "Error creating NetworkPolicy %s (pods stay reachable from other pods): %s "
                 "(HTTP %d %s: %s)",
                 md_str(a->object, "name"), ctrain_strerror(nr), nst.http_code, nst.reason,
                 nst.message);
        LOG_WARN("%s: %s", key, msg);
        emit_event(c, jobref, "Warning", "FailedCreateNetworkPolicy", msg);
      }
      break;
    }
    case RECON_CREATE_SECRET:
    case RECON_UPDATE_SECRET: {
      /* What the apiserver answers is the new cached copy. A Secret that
       * exists after all, or changed under us, is read again next pass; no
       * pod is created before its token is known to be there. */
      cJSON *written = NULL;
      if (a->kind == RECON_CREATE_SECRET)
        r = kube_client_create(c->client, &KUBE_GVR_SECRETS, ns, a->object, NULL, &written, &st);
      else
        r = kube_client_update(c->client, &KUBE_GVR_SECRETS, ns, a->object, NULL, &written, &st);
      if (!r) {
        LOG_INFO("%s: %s secret %s", key, a->kind == RECON_CREATE_SECRET ? "created" : "updated",
                 md_str(a->object, "name"));
        secret_store(c, key, uid, written);
        written = NULL;
      } else {
        secret_forget(c, key);
        no_creates = 1;
        if (r == CTRAIN_E_CONFLICT)
          LOG_INFO("%s: secret %s: %s; read it again", key, md_str(a->object, "name"),
                   st.reason[0] ? st.reason : "conflict");
      }
      cJSON_Delete(written);
      break;
    }
    case RECON_CREATE_POD:
      if (!handled[i]) {
        r = create_pods(c, key, ns, &res, i, ok, handled, jobref, no_creates);
        if (r && !result)
          result = r;
      }
      continue;
    case RECON_DELETE_POD:
    case RECON_DELETE_JOB: {
      kube_delete_opts d = {.precondition_uid = a->uid,
                            .grace_period_seconds = -1,
                            .propagation_policy = "Background"};
      const kube_gvr *g = a->kind == RECON_DELETE_POD ? &KUBE_GVR_PODS : &GVR_TJ;
      r = kube_client_delete(c->client, g, ns, a->name, &d, NULL, &st);
      if (r == CTRAIN_E_NOTFOUND)
        r = CTRAIN_OK;
      if (r && a->kind == RECON_DELETE_POD)
        expect_deletion_failed(c, key, a->uid);
      if (!r) {
        if (a->kind == RECON_DELETE_POD)
          atomic_fetch_add(&c->pods_deleted, 1);
        LOG_INFO("%s: deleted %s %s", key, a->kind == RECON_DELETE_POD ? "pod" : "trainingjob",
                 a->name);
      }
      break;
    }
    case RECON_EVENT:
      if (a->after >= 0 && (size_t)a->after < res.n_actions && !ok[a->after])
        continue;
      if (!strcmp(a->reason, "Restarting"))
        atomic_fetch_add(&c->restarts_decided, 1);
      /* Written in the background; one that cannot be written is logged, not retried. */
      emit_event(c, a->object ? a->object : jobref, a->event_type, a->reason, a->message);
      break;
    case RECON_REQUEUE:
      *requeue_after_s = a->seconds;
      break;
    }
    ok[i] = r == CTRAIN_OK;
    if (r) {
      LOG_WARN("%s: %s %s: %s (HTTP %d %s: %s)", key, recon_action_kind_name(a->kind),
               a->name ? a->name : "", ctrain_strerror(r), st.http_code, st.reason, st.message);
      result = r;
    }
  }
  if (res.requeue_after_s >= 0 && (*requeue_after_s < 0 || res.requeue_after_s < *requeue_after_s))
    *requeue_after_s = res.requeue_after_s;
out:
  free(ok);
  free(handled);
  recon_result_free(&res);
  cJSON_Delete(job);
  cJSON_Delete(pods);
  cJSON_Delete(svc);
  cJSON_Delete(secret);
  cJSON_Delete(jobref);
  return result;
}

static void observe(ctl *c, double secs) {
  pthread_mutex_lock(&c->hist_mu);
  c->reconcile_seconds_sum += secs;
  size_t b = 0;
  while (b < sizeof(hist_le) / sizeof(hist_le[0]) && secs > hist_le[b])
    b++;
  c->reconcile_buckets[b]++;
  pthread_mutex_unlock(&c->hist_mu);
}

static void *worker_main(void *arg) {
  ctl *c = arg;
  for (;;) {
    char *key = NULL;
    ctrain_err r = kube_workqueue_get(c->q, -1, &key);
    if (r == CTRAIN_E_CANCELLED)
      break;
    if (r)
      continue;
    int64_t after = -1;
    double t0 = ctrain_mono_s();
    ctrain_err result = reconcile_key(c, key, &after);
    observe(c, ctrain_mono_s() - t0);
    atomic_fetch_add(&c->reconciles, 1);
    if (result) {
      atomic_fetch_add(&c->reconcile_errors, 1);
      kube_workqueue_add_rate_limited(c->q, key);
    } else {
      kube_workqueue_forget(c->q, key);
    }
    if (after >= 0)
      kube_workqueue_add_after(c->q, key, after * NS_PER_S + NS_PER_S / 2);
    kube_workqueue_done(c->q, key);
    free(key);
  }
  return NULL;
}

/* ---- metrics and health --------------------------------------------------- */

static int render_metrics(void *ud, char **b, size_t *l, size_t *cap) {
  ctl *c = ud;
  int e = 0;
#define COUNTER(name, help, val)                                                                   \
  e |= ctl_http_appendf(b, l, cap, "# HELP %s %s\n# TYPE %s counter\n%s %ld\n", name, help, name,  \
                        name, (long)(val))
#define GAUGE(name, help, val)                                                                     \
  e |= ctl_http_appendf(b, l, cap, "# HELP %s %s\n# TYPE %s gauge\n%s %ld\n", name, help, name,    \
                        name, (long)(val))
  COUNTER("ctrain_reconcile_total", "Reconciles run.", atomic_load(&c->reconciles));
  COUNTER("ctrain_reconcile_errors_total", "Reconciles that failed and were requeued.",
          atomic_load(&c->reconcile_errors));
  COUNTER("ctrain_pods_created_total", "Pods created.", atomic_load(&c->pods_created));
  COUNTER("ctrain_pod_create_errors_total", "Pod creations that failed.",
          atomic_load(&c->pod_create_errors));
  COUNTER("ctrain_pod_creates_skipped_total",
          "Pod creates not sent: slow start stopped after a failed batch, or no token Secret.",
          atomic_load(&c->pod_creates_skipped));
  COUNTER("ctrain_pods_deleted_total", "Pods deleted.", atomic_load(&c->pods_deleted));
  COUNTER("ctrain_status_updates_total", "Status writes.", atomic_load(&c->status_updates));
  COUNTER("ctrain_status_conflicts_total", "Status writes that hit a conflict.",
          atomic_load(&c->status_conflicts));
  COUNTER("ctrain_events_total", "Events written.", atomic_load(&c->events_emitted));
  COUNTER("ctrain_events_dropped_total", "Events dropped: queue full, or not written by shutdown.",
          atomic_load(&c->events_dropped));
  COUNTER("ctrain_secret_reads_total", "GETs of a job's token Secret (no cached copy).",
          atomic_load(&c->secret_reads));
  COUNTER("ctrain_kube_requests_total",
          "HTTP requests sent to the apiserver (retries and watches included).",
          c->client ? kube_client_requests(c->client) : 0);
  COUNTER("ctrain_gang_restarts_total", "Gang restarts decided.",
          atomic_load(&c->restarts_decided));
  GAUGE("ctrain_leader", "1 while this replica leads.", atomic_load(&c->leading));
  GAUGE("ctrain_workqueue_depth", "Keys ready in the work queue.",
        c->q ? kube_workqueue_len(c->q) : 0);
  GAUGE("ctrain_workqueue_waiting", "Keys waiting on a delayed requeue.",
        c->q ? kube_workqueue_waiting(c->q) : 0);
  pthread_mutex_lock(&c->ev_mu);
  size_t ev_len = c->ev_len;
  pthread_mutex_unlock(&c->ev_mu);
  GAUGE("ctrain_events_queued", "Events waiting to be written.", ev_len);
  GAUGE("ctrain_trainingjobs", "TrainingJobs in the cache.",
        c->jobs ? kube_informer_len(c->jobs) : 0);
  pthread_mutex_lock(&c->hist_mu);
  e |= ctl_http_appendf(b, l, cap,
                        "# HELP ctrain_reconcile_duration_seconds Time per reconcile.\n"
                        "# TYPE ctrain_reconcile_duration_seconds histogram\n");
  long cum = 0;
  for (size_t i = 0; i < sizeof(hist_le) / sizeof(hist_le[0]); i++) {
    cum += c->reconcile_buckets[i];
    e |= ctl_http_appendf(b, l, cap, "ctrain_reconcile_duration_seconds_bucket{le=\"%g\"} %ld\n",
                          hist_le[i], cum);
  }
  cum += c->reconcile_buckets[7];
  e |= ctl_http_appendf(b, l, cap,
                        "ctrain_reconcile_duration_seconds_bucket{le=\"+Inf\"} %ld\n"
                        "ctrain_reconcile_duration_seconds_sum %.6f\n"
                        "ctrain_reconcile_duration_seconds_count %ld\n",
                        cum, c->reconcile_seconds_sum, cum);
  pthread_mutex_unlock(&c->hist_mu);
  e |= ctl_http_appendf(b, l, cap,
                        "# TYPE ctrain_build_info gauge\nctrain_build_info{version=\"%s\"} 1\n",
                        CTRAIN_VERSION);
  return e;
#undef COUNTER
#undef GAUGE
}

/* Ready: the leader once its caches synced; a standby is ready too (it
 * serves nothing but is healthy), so a rollout does not wait on election. */
static int ready(void *ud) {
  ctl *c = ud;
  if (!atomic_load(&c->leading))
    return !c->o->leader_elect ? 0 : 1;
  return c->jobs && kube_informer_has_synced(c->jobs) && kube_informer_has_synced(c->pods) &&
         kube_informer_has_synced(c->services);
}

static void on_started(void *ud) {
  ctl *c = ud;
  LOG_INFO("became leader");
  atomic_store(&c->leading, 1);
}

static void on_stopped(void *ud) {
  ctl *c = ud;
  if (atomic_exchange(&c->leading, 0)) {
    LOG_WARN("lost leadership");
    if (!atomic_load(&stop_requested))
      atomic_store(&c->lost_leadership, 1);
  }
}

static void on_new_leader(void *ud, const char *id) {
  (void)ud;
  LOG_INFO("leader is %s", id);
}

/* ---- run ------------------------------------------------------------------ */

static ctrain_err start_informers(ctl *c) {
  ctrain_err result;
  const char *ns = c->o->namespace_;
  kube_informer_opts jo = {.gvr = &GVR_TJ,
                           .ns = ns,
                           .resync_ms = 300000,
                           .handlers = {job_add, job_update, job_delete, c}};
  kube_informer_opts po = {.gvr = &KUBE_GVR_PODS,
                           .ns = ns,
                           .label_selector = PODBUILD_LABEL_JOB,
                           .handlers = {owned_add, owned_update, owned_delete, c}};
  kube_informer_opts so = {.gvr = &KUBE_GVR_SERVICES,
                           .ns = ns,
                           .label_selector = PODBUILD_LABEL_JOB,
                           .handlers = {owned_add, owned_update, owned_delete, c}};
  if ((result = kube_informer_new(c->client, &jo, &c->jobs)) ||
      (result = kube_informer_new(c->client, &po, &c->pods)) ||
      (result = kube_informer_new(c->client, &so, &c->services)) ||
      (result = kube_informer_start(c->pods)) || (result = kube_informer_start(c->services)) ||
      (result = kube_informer_start(c->jobs)))
    return result;
  return CTRAIN_OK;
}

ctrain_err ctl_run(const ctl_options *o) {
  ctrain_err result = CTRAIN_OK;
  ctl c;
  memset(&c, 0, sizeof(c));
  c.o = o;
  pthread_t workers[256];
  int nworkers = 0;
  char err[512] = "";
  pthread_mutex_init(&c.state_mu, NULL);
  pthread_mutex_init(&c.ev_mu, NULL);
  pthread_cond_init(&c.ev_cv, NULL);
  pthread_mutex_init(&c.hist_mu, NULL);

  result = kube_config_load_default(o->kubeconfig, o->context, &c.cfg, err, sizeof(err));
  if (result) {
    LOG_ERROR("kubeconfig: %s", err);
    goto out;
  }
  LOG_INFO("API server %s (configuration: %s)", c.cfg->server, c.cfg->source);
  kube_client_opts co = {.qps = o->qps, .burst = o->burst};
  result = kube_client_new(c.cfg, &co, &c.client, err, sizeof(err));
  if (result) {
    LOG_ERROR("kube client: %s", err);
    goto out;
  }
  /* Fail fast, with the apiserver's words, when the CRD is missing or RBAC
   * forbids the one thing the controller cannot work without. */
  {
    kube_list_opts lo = {.limit = 1};
    kube_status st;
    cJSON *l = NULL;
    result = kube_client_list(c.client, &GVR_TJ, o->namespace_, &lo, &l, &st);
    cJSON_Delete(l);
    if (result) {
      LOG_ERROR("cannot list trainingjobs.ctrain.dev: %s (HTTP %d %s: %s)", ctrain_strerror(result),
                st.http_code, st.reason, st.message);
      goto out;
    }
  }
  if ((result = ctrain_strmap_new(&c.states)))
    goto out;
  {
    const char *pod = getenv("POD_NAME");
    kube_events_opts eo = {.component = "ctrain-controller", .instance = pod && *pod ? pod : NULL};
    if ((result = kube_events_new(c.client, &eo, &c.events)))
      goto out;
    if (pthread_create(&c.ev_thread, NULL, event_writer, &c)) {
      result = CTRAIN_E_NOMEM;
      goto out;
    }
    c.ev_started = 1;
  }
  if ((result = slowstart_pool_new(CREATE_POOL_THREADS, &c.create_pool)))
    goto out;
  kube_workqueue_opts qo = {.qps = 10, .burst = 100};
  if ((result = kube_workqueue_new(&qo, &c.q)))
    goto out;

  if (strcmp(o->metrics_addr, "0")) {
    ctl_http_handlers h = {render_metrics, ready, &c};
    int port = 0;
    result = ctl_http_start(o->metrics_addr, &h, &c.http, &port, err, sizeof(err));
    if (result) {
      LOG_ERROR("%s", err);
      goto out;
    }
    LOG_INFO("serving /metrics, /healthz, /readyz on port %d", port);
  }

  if (o->leader_elect) {
    char identity[300], host[256] = "";
    gethostname(host, sizeof(host) - 1);
    const char *pod = getenv("POD_NAME");
    snprintf(identity, sizeof(identity), "%s_%d", pod && *pod ? pod : host, (int)getpid());
    const char *lns = o->lease_namespace;
    if (!lns || !*lns)
      lns = getenv("POD_NAMESPACE");
    if (!lns || !*lns)
      lns = "ctrain-system";
    kube_lease_opts lo = {.ns = lns,
                          .name = o->lease_name,
                          .identity = identity,
                          .on_started_leading = on_started,
                          .on_stopped_leading = on_stopped,
                          .on_new_leader = on_new_leader,
                          .ud = &c};
    if ((result = kube_lease_new(c.client, &lo, &c.lease)) || (result = kube_lease_start(c.lease)))
      goto out;
    LOG_INFO("waiting for leadership of lease %s/%s as %s", lns, o->lease_name, identity);
    while (!atomic_load(&c.leading) && !atomic_load(&stop_requested))
      usleep(100000);
    if (atomic_load(&stop_requested))
      goto out;
  } else {
    atomic_store(&c.leading, 1);
  }

  if ((result = start_informers(&c))) {
    LOG_ERROR("informers: %s", ctrain_strerror(result));
    goto out;
  }
  /* No worker may decide on a partial cache: a pod informer that has not
   * listed yet would look like "no pods" and duplicate them. */
  while (!atomic_load(&stop_requested) &&
         (kube_informer_wait_synced(c.jobs, 200) || kube_informer_wait_synced(c.pods, 200) ||
          kube_informer_wait_synced(c.services, 200)))
    ;
  if (atomic_load(&stop_requested))
    goto out;
  LOG_INFO("caches synced: %zu trainingjobs, %zu pods, %zu services", kube_informer_len(c.jobs),
           kube_informer_len(c.pods), kube_informer_len(c.services));
  for (; nworkers < o->workers && nworkers < 256; nworkers++)
    if (pthread_create(&workers[nworkers], NULL, worker_main, &c)) {
      result = CTRAIN_E_NOMEM;
      goto out;
    }
  LOG_INFO("ctrain-controller %s running: %d workers, namespace %s", CTRAIN_VERSION, nworkers,
           o->namespace_ ? o->namespace_ : "(all)");

  while (!atomic_load(&stop_requested) && !atomic_load(&c.lost_leadership))
    usleep(100000);
  if (atomic_load(&c.lost_leadership)) {
    LOG_ERROR("leadership lost; exiting so a new leader starts from a fresh cache");
    result = CTRAIN_E_CANCELLED;
  } else {
    LOG_INFO("stopping (signal)");
  }

out:
  if (c.q)
    kube_workqueue_shutdown(c.q);
  for (int i = 0; i < nworkers; i++)
    pthread_join(workers[i], NULL);
  slowstart_pool_free(c.create_pool); /* its threads' handles go before the client */
  events_stop(&c);
  kube_informer_free(c.jobs);
  kube_informer_free(c.pods);
  kube_informer_free(c.services);
  kube_events_free(c.events);
  kube_lease_free(c.lease); /* releases the Lease so a standby takes over at once */
  ctl_http_stop(c.http);
  kube_workqueue_free(c.q);
  ctrain_strmap_free(c.states, free_state);
  kube_client_free(c.client);
  kube_config_free(c.cfg);
  pthread_mutex_destroy(&c.state_mu);
  pthread_mutex_destroy(&c.ev_mu);
  pthread_cond_destroy(&c.ev_cv);
  pthread_mutex_destroy(&c.hist_mu);
  return result;
}
