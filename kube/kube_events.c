/* kube_events.c - event recorder with aggregation and its bounded
 * asynchronous front; see ctrain/kube_events.h. */
#include "ctrain/clock.h"
#include "ctrain/kube_events.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ctrain/json.h"
#include "ctrain/thread.h"
#include "ctrain/util.h"
#include "ctrain/log.h"
#include "ctrain/strmap.h"

#define MSG_CAP   1024
#define NS_PER_MS 1000000LL

/* An event waiting for the writer thread: one allocation, its strings
 * packed after it (a burst of pod creates queues thousands of these). */
enum { F_API, F_KIND, F_NAME, F_NS, F_UID, F_RV, F_TYPE, F_REASON, F_MSG, F_N };
typedef struct ev_item {
  struct ev_item *next;
  int64_t at_ns;      /* ctrain_mono_ns() when emitted */
  const char *f[F_N]; /* into buf; NULL: absent */
  char buf[];
} ev_item;

/* An Event written recently, for aggregation. */
typedef struct seen {
  char *name, *ns; /* the Event's; owned */
  int count;
  int64_t last_ns;
} seen;

static void seen_free(void *p) {
  seen *s = p;
  if (!s)
    return;
  free(s->name);
  free(s->ns);
  free(s);
}

struct kube_events {
  kube_client *c;
  kube_events_opts o;
  char *component, *instance;
  pthread_mutex_t mu;
  ctrain_strmap *cache; /* aggregation key -> seen* */

  /* The asynchronous front: q_mu guards the queue, the flags and counts;
   * the writer holds it only between records, never across one. */
  pthread_mutex_t q_mu;
  pthread_cond_t q_cv;    /* the writer waits for work or stop */
  pthread_cond_t idle_cv; /* flush waits for an empty queue and an idle writer */
  ev_item *head, *tail;
  size_t qlen;
  int writing; /* the writer is recording an item it took */
  int started, stopping;
  int64_t drain_until; /* ctrain_mono_ns() after which a stopping writer drops */
  pthread_t thread;
  kube_events_counts counts;
};

ctrain_err kube_events_new(kube_client *c, const kube_events_opts *o, kube_events **out) {
  ctrain_err result = CTRAIN_OK;
  kube_events *ev = NULL;
  *out = NULL;
  if (!c || !o || !o->component)
    return CTRAIN_E_INVAL;
  ev = calloc(1, sizeof(*ev));
  if (!ev)
    return CTRAIN_E_NOMEM;
  ev->c = c;
  ev->o = *o;
  if (ev->o.window_ns <= 0)
    ev->o.window_ns = 600LL * 1000000000LL;
  if (!ev->o.max_cache)
    ev->o.max_cache = 4096;
  ev->component = strdup(o->component);
  ev->instance = o->instance ? strdup(o->instance) : NULL;
  if (!ev->component || (o->instance && !ev->instance) || ctrain_strmap_new(&ev->cache)) {
    result = CTRAIN_E_NOMEM;
    goto out;
  }
  pthread_mutex_init(&ev->mu, NULL);
  pthread_mutex_init(&ev->q_mu, NULL);
  pthread_cond_init(&ev->q_cv, NULL);
  pthread_cond_init(&ev->idle_cv, NULL);
  if (!ev->o.queue_max)
    ev->o.queue_max = 4096;
  if (ev->o.yield_max_ns <= 0)
    ev->o.yield_max_ns = 2000LL * NS_PER_MS;
  *out = ev;
  ev = NULL;
out:
  if (ev) {
    free(ev->component);
    free(ev->instance);
    free(ev);
  }
  return result;
}

static void rfc3339(char *buf, size_t cap) {
  time_t t = time(NULL);
  struct tm tm;
  gmtime_r(&t, &tm);
  strftime(buf, cap, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

static ctrain_err create_event(kube_events *ev, const cJSON *involved, const char *ns,
                               const char *type, const char *reason, const char *msg, seen *s) {
  ctrain_err result = CTRAIN_OK;
  cJSON *e = NULL, *out = NULL;
  kube_status st;
  char now[32];
  struct timespec ts;
  const cJSON *md = ctrain_json_get(involved, "metadata");
  const char *iname = ctrain_json_str(md, "name");
  rfc3339(now, sizeof(now));
  clock_gettime(CLOCK_REALTIME, &ts);
  /* client-go names events "<object>.<unix nanos in hex>". */
  char name[320];
  snprintf(name, sizeof(name), "%.240s.%llx", iname ? iname : "unknown",
           (unsigned long long)ts.tv_sec * 1000000000ULL + (unsigned long long)ts.tv_nsec);
  free(s->name);
  free(s->ns);
  s->name = strdup(name);
  s->ns = strdup(ns);
  e = cJSON_CreateObject();
  if (!e || !s->name || !s->ns) {
    result = CTRAIN_E_NOMEM;
    goto out;
  }
  cJSON_AddStringToObject(e, "apiVersion", "v1");
  cJSON_AddStringToObject(e, "kind", "Event");
  cJSON *emd = cJSON_AddObjectToObject(e, "metadata");
  cJSON_AddStringToObject(emd, "name", name);
  cJSON_AddStringToObject(emd, "namespace", ns);
  cJSON *io = cJSON_AddObjectToObject(e, "involvedObject");
  const char *fields[][2] = {{"apiVersion", ctrain_json_str(involved, "apiVersion")},
                             {"kind", ctrain_json_str(involved, "kind")},
                             {"name", iname},
                             {"namespace", ctrain_json_str(md, "namespace")},
                             {"uid", ctrain_json_str(md, "uid")},
                             {"resourceVersion", ctrain_json_str(md, "resourceVersion")}};
  for (size_t i = 0; i < sizeof(fields) / sizeof(fields[0]); i++)
    if (fields[i][1])
      cJSON_AddStringToObject(io, fields[i][0], fields[i][1]);
  cJSON_AddStringToObject(e, "reason", reason);
  cJSON_AddStringToObject(e, "message", msg);
  cJSON_AddStringToObject(e, "type", type);
  cJSON_AddStringToObject(e, "firstTimestamp", now);
  cJSON_AddStringToObject(e, "lastTimestamp", now);
  cJSON_AddNumberToObject(e, "count", 1);
  cJSON *src = cJSON_AddObjectToObject(e, "source");
  cJSON_AddStringToObject(src, "component", ev->component);
  if (ev->instance)
    cJSON_AddStringToObject(src, "host", ev->instance);
  cJSON_AddStringToObject(e, "reportingComponent", ev->component);
  cJSON_AddStringToObject(e, "reportingInstance", ev->instance ? ev->instance : ev->component);
  result = kube_client_create(ev->c, &KUBE_GVR_EVENTS, ns, e, NULL, &out, &st);
  if (result) {
    LOG_WARN("kube: event %s/%s %s: %s", ns, iname ? iname : "?", reason, st.message);
    goto out;
  }
  s->count = 1;
out:
  cJSON_Delete(e);
  cJSON_Delete(out);
  return result;
}

ctrain_err kube_events_record(kube_events *ev, const cJSON *involved, const char *type,
                              const char *reason, int *count_out, const char *fmt, ...) {
  ctrain_err result = CTRAIN_OK;
  char raw[MSG_CAP], msg[MSG_CAP], key[2048], now[32], patch[128];
  seen *s = NULL;
  kube_status st;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(raw, sizeof(raw), fmt, ap);
  va_end(ap);
  ctrain_escape_ctl(raw, msg, sizeof(msg)); /* names and messages from the apiserver */
  const cJSON *md = ctrain_json_get(involved, "metadata");
  const char *ns = ctrain_json_str(md, "namespace");
  if (!ns || !*ns)
    ns = "default"; /* events about cluster-scoped objects */
  snprintf(key, sizeof(key), "%s\x1f%s\x1f%s\x1f%s\x1f%s\x1f%s",
           ctrain_json_str(md, "uid") ? ctrain_json_str(md, "uid") : "",
           ctrain_json_str(involved, "kind") ? ctrain_json_str(involved, "kind") : "",
           ctrain_json_str(md, "name") ? ctrain_json_str(md, "name") : "", type, reason, msg);
  int64_t mono = ctrain_mono_ns();

  /* One recorder call at a time: aggregation needs the count to be exact. */
  ctrain_mutex_lock(&ev->mu);
  s = ctrain_strmap_get(ev->cache, key);
  if (s && mono - s->last_ns < ev->o.window_ns) {
    rfc3339(now, sizeof(now));
    snprintf(patch, sizeof(patch), "{\"count\":%d,\"lastTimestamp\":\"%s\"}", s->count + 1, now);
    result = kube_client_patch(ev->c, &KUBE_GVR_EVENTS, s->ns, s->name, NULL, KUBE_PATCH_MERGE,
                               patch, NULL, NULL, &st);
    if (result == CTRAIN_OK) {
      s->count++;
      s->last_ns = mono;
      goto done;
    }
    if (result != CTRAIN_E_NOTFOUND) {
      LOG_WARN("kube: event %s/%s %s: %s", s->ns, s->name, reason, st.message);
      goto done;
    }
    /* The Event expired: start a new one below. */
  }
  if (!s) {
    if (ctrain_strmap_len(ev->cache) >= ev->o.max_cache) {
      ctrain_strmap_free(ev->cache, seen_free);
      ev->cache = NULL;
      if ((result = ctrain_strmap_new(&ev->cache)))
        goto done;
    }
    s = calloc(1, sizeof(*s));
    if (!s) {
      result = CTRAIN_E_NOMEM;
      goto done;
    }
    if ((result = ctrain_strmap_put(ev->cache, key, s, NULL))) {
      seen_free(s);
      s = NULL;
      goto done;
    }
  }
  result = create_event(ev, involved, ns, type, reason, msg, s);
  s->last_ns = mono;
  if (result) {
    seen_free(ctrain_strmap_del(ev->cache, key, NULL));
    s = NULL;
  }
done:
  if (count_out)
    *count_out = (!result && s) ? s->count : 0;
  ctrain_mutex_unlock(&ev->mu);
  return result;
}

/* ---- the asynchronous front ------------------------------------------------ */

static void item_free(ev_item *e) {
  free(e);
}

/* The object shape kube_events_record reads, from a queued item. NULL: out
 * of memory. */
static cJSON *item_object(const ev_item *e) {
  static const struct {
    int f, md;
    const char *name;
  } map[] = {{F_API, 0, "apiVersion"}, {F_KIND, 0, "kind"}, {F_NAME, 1, "name"},
             {F_NS, 1, "namespace"},   {F_UID, 1, "uid"},   {F_RV, 1, "resourceVersion"}};
  cJSON *o = cJSON_CreateObject();
  cJSON *md = o ? cJSON_AddObjectToObject(o, "metadata") : NULL;
  if (!md)
    goto fail;
  for (size_t i = 0; i < sizeof(map) / sizeof(map[0]); i++)
    if (e->f[map[i].f] && !cJSON_AddStringToObject(map[i].md ? md : o, map[i].name, e->f[map[i].f]))
      goto fail;
  return o;
fail:
  cJSON_Delete(o);
  return NULL;
}

static void *writer_main(void *arg) {
  kube_events *ev = arg;
  ctrain_mutex_lock(&ev->q_mu);
  for (;;) {
    while (!ev->head && !ev->stopping)
      ctrain_cond_wait(&ev->q_cv, &ev->q_mu);
    ev_item *e = ev->head;
    if (!e)
      break;
    ev->head = e->next;
    if (!ev->head)
      ev->tail = NULL;
    ev->qlen--;
    if (ev->stopping && ctrain_mono_ns() > ev->drain_until) {
      ev->counts.dropped++;
      item_free(e);
      continue;
    }
    ev->writing = 1;
    /* Held back while the owner's creates go first (bounded; never when stopping). */
    while (ev->o.yield && !ev->stopping && ctrain_mono_ns() - e->at_ns < ev->o.yield_max_ns) {
      ctrain_mutex_unlock(&ev->q_mu);
      int hold = ev->o.yield(ev->o.yield_ud);
      if (hold) {
        struct timespec nap = {0, 5 * NS_PER_MS};
        nanosleep(&nap, NULL);
      }
      ctrain_mutex_lock(&ev->q_mu);
      if (!hold)
        break;
    }
    ctrain_mutex_unlock(&ev->q_mu);
    /* A failure is logged by the recorder, and not retried. */
    cJSON *involved = item_object(e);
    ctrain_err result = involved ? kube_events_record(ev, involved, e->f[F_TYPE], e->f[F_REASON],
                                                      NULL, "%s", e->f[F_MSG])
                                 : CTRAIN_E_NOMEM;
    cJSON_Delete(involved);
    item_free(e);
    ctrain_mutex_lock(&ev->q_mu);
    ev->writing = 0;
    if (result)
      ev->counts.failed++;
    else
      ev->counts.written++;
    if (!ev->head)
      ctrain_cond_broadcast(&ev->idle_cv);
  }
  ctrain_cond_broadcast(&ev->idle_cv);
  ctrain_mutex_unlock(&ev->q_mu);
  return NULL;
}

ctrain_err kube_events_start(kube_events *ev) {
  ctrain_err result = CTRAIN_OK;
  ctrain_mutex_lock(&ev->q_mu);
  if (!ev->started && !ev->stopping) {
    if (pthread_create(&ev->thread, NULL, writer_main, ev))
      result = CTRAIN_E_NOMEM;
    else
      ev->started = 1;
  }
  ctrain_mutex_unlock(&ev->q_mu);
  return result;
}

/* A queued item of the ObjectReference `ref` and the rest, its strings
 * packed after it. NULL: out of memory. */
static ev_item *item_new(const cJSON *ref, const char *type, const char *reason, const char *msg) {
  const char *v[F_N] = {ctrain_json_str(ref, "apiVersion"),
                        ctrain_json_str(ref, "kind"),
                        ctrain_json_str(ref, "name"),
                        ctrain_json_str(ref, "namespace"),
                        ctrain_json_str(ref, "uid"),
                        ctrain_json_str(ref, "resourceVersion"),
                        type,
                        reason,
                        msg};
  size_t len[F_N], total = 0;
  for (int i = 0; i < F_N; i++) {
    len[i] = v[i] ? strlen(v[i]) + 1 : 0;
    total += len[i];
  }
  ev_item *e = malloc(sizeof(*e) + total);
  if (!e)
    return NULL;
  e->next = NULL;
  e->at_ns = ctrain_mono_ns();
  char *p = e->buf;
  for (int i = 0; i < F_N; i++) {
    e->f[i] = v[i] ? p : NULL;
    if (v[i]) {
      memcpy(p, v[i], len[i]);
      p += len[i];
    }
  }
  return e;
}

ctrain_err kube_events_emit(kube_events *ev, const cJSON *ref, const char *type, const char *reason,
                            const char *fmt, ...) {
  ctrain_err result = CTRAIN_E_NOMEM;
  char raw[MSG_CAP], msg[MSG_CAP];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(raw, sizeof(raw), fmt, ap);
  va_end(ap);
  ctrain_escape_ctl(raw, msg, sizeof(msg)); /* names and messages from the apiserver */
  ev_item *e = item_new(ref, type, reason, msg);
  if (!e)
    goto drop;
  ctrain_mutex_lock(&ev->q_mu);
  if (ev->stopping) {
    result = CTRAIN_E_CANCELLED;
  } else if (ev->qlen >= ev->o.queue_max) {
    result = CTRAIN_E_TOOBIG;
  } else {
    if (ev->tail)
      ev->tail->next = e;
    else
      ev->head = e;
    ev->tail = e;
    ev->qlen++;
    e = NULL;
    result = CTRAIN_OK;
    ctrain_cond_signal(&ev->q_cv);
  }
  ctrain_mutex_unlock(&ev->q_mu);
  if (!result)
    return result;
drop:;
  ctrain_mutex_lock(&ev->q_mu);
  long n = ++ev->counts.dropped;
  ctrain_mutex_unlock(&ev->q_mu);
  if ((n & (n - 1)) == 0) /* 1, 2, 4, ...: say so without flooding the log */
    LOG_WARN("kube: event %s dropped (%s); %ld dropped so far", reason,
             result == CTRAIN_E_TOOBIG ? "queue full" : ctrain_strerror(result), n);
  item_free(e);
  return result;
}

ctrain_err kube_events_flush(kube_events *ev, int timeout_ms) {
  ctrain_err result = CTRAIN_OK;
  struct timespec until;
  clock_gettime(CLOCK_REALTIME, &until);
  int64_t ns = until.tv_nsec + (int64_t)timeout_ms * NS_PER_MS;
  until.tv_sec += ns / 1000000000LL;
  until.tv_nsec = ns % 1000000000LL;
  ctrain_mutex_lock(&ev->q_mu);
  while ((ev->head || ev->writing) && result == CTRAIN_OK) {
    if (!ev->started || ctrain_cond_timedwait(&ev->idle_cv, &ev->q_mu, &until))
      result = (ev->head || ev->writing) ? CTRAIN_E_TIMEOUT : CTRAIN_OK;
  }
  ctrain_mutex_unlock(&ev->q_mu);
  return result;
}

void kube_events_stop(kube_events *ev, int drain_ms) {
  if (!ev)
    return;
  ctrain_mutex_lock(&ev->q_mu);
  int join = ev->started && !ev->stopping;
  if (!ev->stopping) {
    ev->stopping = 1;
    ev->drain_until = ctrain_mono_ns() + (int64_t)drain_ms * NS_PER_MS;
  }
  ctrain_cond_broadcast(&ev->q_cv);
  ctrain_mutex_unlock(&ev->q_mu);
  if (join)
    pthread_join(ev->thread, NULL);
  /* Never started, or the writer is gone: what is left is dropped. */
  ctrain_mutex_lock(&ev->q_mu);
  while (ev->head) {
    ev_item *e = ev->head;
    ev->head = e->next;
    ev->counts.dropped++;
    item_free(e);
  }
  ev->tail = NULL;
  ev->qlen = 0;
  ctrain_mutex_unlock(&ev->q_mu);
}

kube_events_counts kube_events_get_counts(kube_events *ev) {
  ctrain_mutex_lock(&ev->q_mu);
  kube_events_counts c = ev->counts;
  c.queued = ev->qlen;
  ctrain_mutex_unlock(&ev->q_mu);
  return c;
}

void kube_events_free(kube_events *ev) {
  if (!ev)
    return;
  kube_events_stop(ev, 0);
  ctrain_strmap_free(ev->cache, seen_free);
  pthread_mutex_destroy(&ev->mu);
  pthread_mutex_destroy(&ev->q_mu);
  pthread_cond_destroy(&ev->q_cv);
  pthread_cond_destroy(&ev->idle_cv);
  free(ev->component);
  free(ev->instance);
  free(ev);
}
