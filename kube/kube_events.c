/* kube_events.c - event recorder with aggregation; see ctrain/kube_events.h. */
#include "ctrain/clock.h"
#include "ctrain/kube_events.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ctrain/strmap.h"
#include "ctrain/log.h"
#include "kube_util.h"

#define MSG_CAP 1024

typedef struct seen {
  char name[320]; /* the Event's name */
  char ns[128];
  int count;
  int64_t last_ns;
} seen;

struct kube_events {
  kube_client *c;
  kube_events_opts o;
  char *component, *instance;
  pthread_mutex_t mu;
  ctrain_strmap *cache; /* aggregation key -> seen* */
};

static const char *jstr(const cJSON *o, const char *k) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
  return cJSON_IsString(v) ? v->valuestring : NULL;
}

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
  const cJSON *md = cJSON_GetObjectItemCaseSensitive(involved, "metadata");
  const char *iname = jstr(md, "name");
  rfc3339(now, sizeof(now));
  clock_gettime(CLOCK_REALTIME, &ts);
  /* client-go names events "<object>.<unix nanos in hex>". */
  snprintf(s->name, sizeof(s->name), "%.240s.%llx", iname ? iname : "unknown",
           (unsigned long long)ts.tv_sec * 1000000000ULL + (unsigned long long)ts.tv_nsec);
  snprintf(s->ns, sizeof(s->ns), "%s", ns);
  e = cJSON_CreateObject();
  if (!e) {
    result = CTRAIN_E_NOMEM;
    goto out;
  }
  cJSON_AddStringToObject(e, "apiVersion", "v1");
  cJSON_AddStringToObject(e, "kind", "Event");
  cJSON *emd = cJSON_AddObjectToObject(e, "metadata");
  cJSON_AddStringToObject(emd, "name", s->name);
  cJSON_AddStringToObject(emd, "namespace", ns);
  cJSON *io = cJSON_AddObjectToObject(e, "involvedObject");
  const char *fields[][2] = {{"apiVersion", jstr(involved, "apiVersion")},
                             {"kind", jstr(involved, "kind")},
                             {"name", iname},
                             {"namespace", jstr(md, "namespace")},
                             {"uid", jstr(md, "uid")},
                             {"resourceVersion", jstr(md, "resourceVersion")}};
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
  char msg[MSG_CAP], key[2048], now[32], patch[128];
  seen *s = NULL;
  kube_status st;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  const cJSON *md = cJSON_GetObjectItemCaseSensitive(involved, "metadata");
  const char *ns = jstr(md, "namespace");
  if (!ns || !*ns)
    ns = "default"; /* events about cluster-scoped objects */
  snprintf(key, sizeof(key), "%s\x1f%s\x1f%s\x1f%s\x1f%s\x1f%s",
           jstr(md, "uid") ? jstr(md, "uid") : "",
           jstr(involved, "kind") ? jstr(involved, "kind") : "",
           jstr(md, "name") ? jstr(md, "name") : "", type, reason, msg);
  int64_t mono = ctrain_mono_ns();

  /* One recorder call at a time: aggregation needs the count to be exact. */
  pthread_mutex_lock(&ev->mu);
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
    if (result != CTRAIN_E_NOTFOUND)
      goto done;
    /* The Event expired: start a new one below. */
  }
  if (!s) {
    if (ctrain_strmap_len(ev->cache) >= ev->o.max_cache) {
      ctrain_strmap_free(ev->cache, free);
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
      free(s);
      s = NULL;
      goto done;
    }
  }
  result = create_event(ev, involved, ns, type, reason, msg, s);
  s->last_ns = mono;
  if (result) {
    free(ctrain_strmap_del(ev->cache, key, NULL));
    s = NULL;
  }
done:
  if (count_out)
    *count_out = (!result && s) ? s->count : 0;
  pthread_mutex_unlock(&ev->mu);
  return result;
}

void kube_events_free(kube_events *ev) {
  if (!ev)
    return;
  ctrain_strmap_free(ev->cache, free);
  pthread_mutex_destroy(&ev->mu);
  free(ev->component);
  free(ev->instance);
  free(ev);
}
