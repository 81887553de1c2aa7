/* ctl_leader.c - the controller's leadership: leader election's callbacks
 * (kube_lease), the wait for the Lease, and the leader label on our own pod
 * (controller/leader.h); see controller/ctl_internal.h. Every replica runs
 * the informers (a warm standby); only the leader runs workers and writes;
 * a leader that loses the Lease exits (ctl_run), so a new one starts from a
 * fresh cache. */
#include "controller/ctl_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "controller/leader.h"
#include "ctrain/clock.h"
#include "ctrain/log.h"

#define MARK_RETRY_NS (5 * NS_PER_S) /* a failed leader label write, again after */

static void on_started(void *ud) {
  ctl *c = ud;
  LOG_INFO("became leader");
  atomic_store(&c->leading, 1);
}

static void on_stopped(void *ud) {
  ctl *c = ud;
  if (atomic_exchange(&c->leading, 0)) {
    LOG_WARN("lost leadership");
    if (!ctl_stop_requested())
      atomic_store(&c->lost_leadership, 1);
  }
}

static void on_new_leader(void *ud, const char *id) {
  (void)ud;
  LOG_INFO("leader is %s", id);
}

/* Brings the leader label on our pod (controller/leader.h) in line with
 * whether we lead; a failed write is logged and tried again after
 * MARK_RETRY_NS (the daemon goes on: only scrapes through the Service
 * miss it). Outside a pod (no POD_NAME, POD_NAMESPACE) there is no pod to
 * label. */
void ctl_leader_sync_mark(ctl *c) {
  const char *pod = getenv("POD_NAME"), *ns = getenv("POD_NAMESPACE");
  int want = atomic_load(&c->leading);
  if (!pod || !*pod || !ns || !*ns || c->marked == want || ctrain_mono_ns() < c->mark_next_ns)
    return;
  char err[1400];
  if (leader_mark(c->client, ns, pod, want, err, sizeof(err))) {
    LOG_WARN("%s; again in %lld s", err, (long long)(MARK_RETRY_NS / NS_PER_S));
    c->mark_next_ns = ctrain_mono_ns() + MARK_RETRY_NS;
    return;
  }
  c->marked = want;
  LOG_INFO("pod %s/%s: label %s %s", ns, pod, LEADER_LABEL, want ? "set" : "removed");
}

ctrain_err ctl_leader_run(ctl *c) {
  ctrain_err result;
  const ctl_options *o = c->o;
  if (!o->leader_elect) {
    atomic_store(&c->leading, 1);
    return CTRAIN_OK;
  }
  char identity[300], host[256] = "";
  gethostname(host, sizeof(host) - 1);
  const char *pod = getenv("POD_NAME");
  snprintf(identity, sizeof(identity), "%s_%d", pod && *pod ? pod : host, (int)getpid());
  const char *lns = ctl_own_namespace(o);
  kube_lease_opts lo = {.ns = lns,
                        .name = o->lease_name,
                        .identity = identity,
                        .lease_duration_ns = (int64_t)(o->lease_s * 1e9),
                        .renew_deadline_ns = (int64_t)(o->renew_s * 1e9),
                        .retry_period_ns = (int64_t)(o->retry_s * 1e9),
                        .on_started_leading = on_started,
                        .on_stopped_leading = on_stopped,
                        .on_new_leader = on_new_leader,
                        .ud = c};
  if ((result = kube_lease_new(c->client, &lo, &c->lease)) || (result = kube_lease_start(c->lease)))
    return result;
  LOG_INFO("waiting for leadership of lease %s/%s as %s", lns, o->lease_name, identity);
  while (!atomic_load(&c->leading) && !ctl_stop_requested()) {
    ctl_tick(c); /* the label: a standby's pod gets no scrapes */
    usleep(100000);
  }
  return CTRAIN_OK;
}
