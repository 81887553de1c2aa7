/* kube_lease.c - leader election on a Lease; see ctrain/kube_lease.h. */
#include "ctrain/clock.h"
#include "ctrain/kube_lease.h"
#include "ctrain/kube_time.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ctrain/json.h"
#include "ctrain/log.h"
#include "ctrain/thread.h"
#include "kube_util.h"

#define HOLDER_CAP 256

struct kube_lease {
  kube_client *c;
  kube_lease_opts o;
  char *ns, *name, *identity;

  pthread_mutex_t mu;
  pthread_cond_t cv; /* CLOCK_MONOTONIC; stop */
  int stopping, leader, have_thread;
  pthread_t thread;

  /* The last record seen, and when (our monotonic clock) it last changed. */
  char observed_holder[HOLDER_CAP];
  char observed_renew[64];
  char observed_rv[64];
  int64_t observed_ns;
  int64_t last_renew_ns; /* our last successful write as leader */
};

static void now_micro(char *buf, size_t cap) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  kube_microtime_format(&ts, buf, cap);
}

ctrain_err kube_lease_new(kube_client *c, const kube_lease_opts *o, kube_lease **out) {
  ctrain_err result = CTRAIN_OK;
  kube_lease *l = NULL;
  *out = NULL;
  if (!c || !o || !o->ns || !o->name || !o->identity || !*o->identity ||
      strlen(o->identity) >= HOLDER_CAP)
    return CTRAIN_E_INVAL;
  l = calloc(1, sizeof(*l));
  if (!l)
    return CTRAIN_E_NOMEM;
  l->c = c;
  l->o = *o;
  if (l->o.lease_duration_ns <= 0)
    l->o.lease_duration_ns = 15000000000LL;
  if (l->o.renew_deadline_ns <= 0)
    l->o.renew_deadline_ns = 10000000000LL;
  if (l->o.retry_period_ns <= 0)
    l->o.retry_period_ns = 2000000000LL;
  if (l->o.renew_deadline_ns >= l->o.lease_duration_ns ||
      l->o.retry_period_ns >= l->o.renew_deadline_ns) {
    result = CTRAIN_E_INVAL; /* client-go's own validation */
    goto out;
  }
  l->ns = strdup(o->ns);
  l->name = strdup(o->name);
  l->identity = strdup(o->identity);
  if (!l->ns || !l->name || !l->identity) {
    result = CTRAIN_E_NOMEM;
    goto out;
  }
  pthread_mutex_init(&l->mu, NULL);
  ctrain_cond_init_mono(&l->cv);
  *out = l;
  l = NULL;
out:
  if (l) {
    free(l->ns);
    free(l->name);
    free(l->identity);
    free(l);
  }
  return result;
}

static cJSON *new_lease_obj(kube_lease *l) {
  cJSON *o = cJSON_CreateObject();
  if (!o)
    return NULL;
  cJSON_AddStringToObject(o, "apiVersion", "coordination.k8s.io/v1");
  cJSON_AddStringToObject(o, "kind", "Lease");
  cJSON *md = cJSON_AddObjectToObject(o, "metadata");
  cJSON_AddStringToObject(md, "name", l->name);
  cJSON_AddStringToObject(md, "namespace", l->ns);
  cJSON_AddObjectToObject(o, "spec");
  return o;
}

/* Writes the LeaseSpec fields; a NULL string removes its field. Allocation
 * failures leave a field out, which the apiserver's validation refuses. */
static void set_spec(cJSON *spec, const char *holder, long duration_s, const char *acquire,
                     const char *renew, double transitions) {
  const char *const strs[][2] = {
      {"holderIdentity", holder}, {"acquireTime", acquire}, {"renewTime", renew}};
  for (size_t i = 0; i < sizeof(strs) / sizeof(strs[0]); i++) {
    if (strs[i][1])
      ctrain_json_put(spec, strs[i][0], cJSON_CreateString(strs[i][1]));
    else
      cJSON_DeleteItemFromObjectCaseSensitive(spec, strs[i][0]);
  }
  ctrain_json_put(spec, "leaseDurationSeconds", cJSON_CreateNumber((double)duration_s));
  ctrain_json_put(spec, "leaseTransitions", cJSON_CreateNumber(transitions));
}

static void note_holder(kube_lease *l, const char *holder) {
  int changed;
  ctrain_mutex_lock(&l->mu);
  changed = strcmp(l->observed_holder, holder ? holder : "");
  snprintf(l->observed_holder, sizeof(l->observed_holder), "%s", holder ? holder : "");
  ctrain_mutex_unlock(&l->mu);
  if (changed && holder && *holder && l->o.on_new_leader)
    l->o.on_new_leader(l->o.ud, holder);
}

ctrain_err kube_lease_try(kube_lease *l, int *is_leader, kube_status *st) {
  ctrain_err result = CTRAIN_OK;
  cJSON *cur = NULL, *obj = NULL;
  char now[64];
  long dur_s = (long)((l->o.lease_duration_ns + 999999999) / 1000000000);
  int64_t mono = ctrain_mono_ns();
  *is_leader = 0;
  now_micro(now, sizeof(now));

  result = kube_client_get(l->c, &KUBE_GVR_LEASES, l->ns, l->name, &cur, st);
  if (result == CTRAIN_E_NOTFOUND) {
    obj = new_lease_obj(l);
    if (!obj) {
      result = CTRAIN_E_NOMEM;
      goto out;
    }
    set_spec(cJSON_GetObjectItemCaseSensitive(obj, "spec"), l->identity, dur_s, now, now, 0);
    result = kube_client_create(l->c, &KUBE_GVR_LEASES, l->ns, obj, NULL, NULL, st);
    if (result)
      goto out; /* AlreadyExists: someone was faster; next round */
    *is_leader = 1;
    l->last_renew_ns = mono;
    l->observed_ns = mono;
    note_holder(l, l->identity);
    goto out;
  }
  if (result)
    goto out;

  cJSON *spec = cJSON_GetObjectItemCaseSensitive(cur, "spec");
  if (!spec)
    spec = cJSON_AddObjectToObject(cur, "spec");
  const char *holder = ctrain_json_str(spec, "holderIdentity");
  const char *renew = ctrain_json_str(spec, "renewTime");
  const char *rv = ctrain_json_str(ctrain_json_get(cur, "metadata"), "resourceVersion");
  int64_t d = ctrain_json_int(spec, "leaseDurationSeconds", 0); /* an int32 */
  int64_t their_dur = d > 0 && d < INT32_MAX ? d * 1000000000LL : l->o.lease_duration_ns;
  double transitions = (double)ctrain_json_int(spec, "leaseTransitions", 0);

  /* The record changed since we last looked: restart its expiry clock. */
  if (strcmp(l->observed_rv, rv ? rv : "") || strcmp(l->observed_renew, renew ? renew : "")) {
    snprintf(l->observed_rv, sizeof(l->observed_rv), "%s", rv ? rv : "");
    snprintf(l->observed_renew, sizeof(l->observed_renew), "%s", renew ? renew : "");
    l->observed_ns = mono;
  }
  note_holder(l, holder);
  int mine = holder && !strcmp(holder, l->identity);
  if (holder && *holder && !mine && l->observed_ns + their_dur > mono)
    goto out; /* held by someone else, not expired */

  const char *acquire = ctrain_json_str(spec, "acquireTime");
  char acq[64];
  snprintf(acq, sizeof(acq), "%s", mine && acquire ? acquire : now);
  set_spec(spec, l->identity, dur_s, acq, now, mine ? transitions : transitions + 1);
  result = kube_client_update(l->c, &KUBE_GVR_LEASES, l->ns, cur, NULL, &obj, st);
  if (result)
    goto out; /* CONFLICT: another candidate wrote first */
  const char *nrv = ctrain_json_str(ctrain_json_get(obj, "metadata"), "resourceVersion");
  snprintf(l->observed_rv, sizeof(l->observed_rv), "%s", nrv ? nrv : "");
  snprintf(l->observed_renew, sizeof(l->observed_renew), "%s", now);
  l->observed_ns = mono;
  l->last_renew_ns = mono;
  *is_leader = 1;
  note_holder(l, l->identity);
out:
  cJSON_Delete(cur);
  cJSON_Delete(obj);
  return result;
}

/* Clears the holder if it is still us, so a successor need not wait. */
static void release(kube_lease *l) {
  cJSON *cur = NULL;
  kube_status st;
  char now[64];
  if (kube_client_get(l->c, &KUBE_GVR_LEASES, l->ns, l->name, &cur, &st))
    goto out;
  cJSON *spec = cJSON_GetObjectItemCaseSensitive(cur, "spec");
  const char *holder = ctrain_json_str(spec, "holderIdentity");
  if (!spec || !holder || strcmp(holder, l->identity))
    goto out;
  now_micro(now, sizeof(now));
  set_spec(spec, NULL, 1, now, now, (double)ctrain_json_int(spec, "leaseTransitions", 0));
  if (kube_client_update(l->c, &KUBE_GVR_LEASES, l->ns, cur, NULL, NULL, &st))
    LOG_WARN("kube: lease %s/%s: release failed: %s", l->ns, l->name, st.message);
  else
    LOG_INFO("kube: lease %s/%s: released by %s", l->ns, l->name, l->identity);
out:
  cJSON_Delete(cur);
}

/* Sleeps ns (monotonic) unless stopped; returns 1 when stopping. */
static int nap(kube_lease *l, int64_t ns) {
  return ctrain_cond_nap(&l->cv, &l->mu, &l->stopping, ns);
}

static void set_leader(kube_lease *l, int v) {
  ctrain_mutex_lock(&l->mu);
  l->leader = v;
  ctrain_mutex_unlock(&l->mu);
}

static void *run(void *arg) {
  kube_lease *l = arg;
  unsigned seed = (unsigned)ctrain_mono_ns();
  for (;;) {
    /* Candidate: try every retry period (with up to 20% jitter). */
    int leader = 0;
    kube_status st;
    while (!leader) {
      ctrain_err r = kube_lease_try(l, &leader, &st);
      if (r && r != CTRAIN_E_CONFLICT)
        LOG_DEBUG("kube: lease %s/%s: %s: %s", l->ns, l->name, ctrain_strerror(r), st.message);
      if (leader)
        break;
      int64_t jitter = (int64_t)(rand_r(&seed) % 1000) * l->o.retry_period_ns / 5000;
      if (nap(l, l->o.retry_period_ns + jitter))
        return NULL;
    }
    LOG_INFO("kube: lease %s/%s: %s is the leader", l->ns, l->name, l->identity);
    set_leader(l, 1);
    if (l->o.on_started_leading)
      l->o.on_started_leading(l->o.ud);
    /* Leader: renew every retry period; give up past the renew deadline. */
    for (;;) {
      if (nap(l, l->o.retry_period_ns))
        return NULL; /* stop() releases and reports */
      ctrain_err r = kube_lease_try(l, &leader, &st);
      if (leader)
        continue;
      if (r)
        LOG_WARN("kube: lease %s/%s: renew failed: %s (%s)", l->ns, l->name, ctrain_strerror(r),
                 st.message);
      if (!r || ctrain_mono_ns() - l->last_renew_ns > l->o.renew_deadline_ns)
        break; /* someone else holds it, or we could not renew in time */
    }
    LOG_WARN("kube: lease %s/%s: %s lost leadership", l->ns, l->name, l->identity);
    set_leader(l, 0);
    if (l->o.on_stopped_leading)
      l->o.on_stopped_leading(l->o.ud);
  }
}

ctrain_err kube_lease_start(kube_lease *l) {
  if (l->have_thread)
    return CTRAIN_E_INVAL;
  if (pthread_create(&l->thread, NULL, run, l))
    return CTRAIN_E_NOMEM;
  l->have_thread = 1;
  return CTRAIN_OK;
}

void kube_lease_stop(kube_lease *l) {
  ctrain_mutex_lock(&l->mu);
  l->stopping = 1;
  ctrain_cond_broadcast(&l->cv);
  ctrain_mutex_unlock(&l->mu);
  if (l->have_thread)
    pthread_join(l->thread, NULL);
  l->have_thread = 0;
  if (kube_lease_is_leader(l)) {
    if (!l->o.no_release)
      release(l);
    set_leader(l, 0);
    if (l->o.on_stopped_leading)
      l->o.on_stopped_leading(l->o.ud);
  }
}

int kube_lease_is_leader(kube_lease *l) {
  ctrain_mutex_lock(&l->mu);
  int v = l->leader;
  ctrain_mutex_unlock(&l->mu);
  return v;
}

void kube_lease_holder(kube_lease *l, char *buf, size_t cap) {
  ctrain_mutex_lock(&l->mu);
  snprintf(buf, cap, "%s", l->observed_holder);
  ctrain_mutex_unlock(&l->mu);
}

void kube_lease_free(kube_lease *l) {
  if (!l)
    return;
  kube_lease_stop(l);
  pthread_mutex_destroy(&l->mu);
  pthread_cond_destroy(&l->cv);
  free(l->ns);
  free(l->name);
  free(l->identity);
  free(l);
}
