/* ctrain/kube_lease.h - leader election on a coordination.k8s.io/v1 Lease,
 * with client-go's leaderelection rules.
 *
 * A candidate tries every retry period to take the Lease: it may when the
 * Lease does not exist, has no holder, or its record has not changed for a
 * whole lease duration as measured on the candidate's own monotonic clock
 * (so clock skew between machines does not matter). Writes are
 * compare-and-swap on resourceVersion, so two candidates never both win.
 * The leader renews every retry period; if it cannot renew within the renew
 * deadline it stops leading (on_stopped_leading) and becomes a candidate
 * again; the caller usually exits then. kube_lease_stop() releases a held
 * Lease (holder cleared, duration 1 s) so a successor takes over at once
 * instead of waiting out the lease. */
#ifndef CTRAIN_KUBE_LEASE_H
#define CTRAIN_KUBE_LEASE_H

#include <stddef.h>
#include <stdint.h>

#include "ctrain/err.h"
#include <time.h>

#include "ctrain/kube_client.h"

typedef struct kube_lease_opts {
  const char *ns;            /* copied */
  const char *name;          /* copied */
  const char *identity;      /* unique per candidate (hostname_pid, pod name); copied */
  int64_t lease_duration_ns; /* default 15 s */
  int64_t renew_deadline_ns; /* default 10 s; < lease duration */
  int64_t retry_period_ns;   /* default 2 s */
  int no_release;            /* 1: keep the Lease on stop (let it expire) */
  /* Callbacks run on the election thread; keep them short. */
  void (*on_started_leading)(void *ud);
  void (*on_stopped_leading)(void *ud);
  void (*on_new_leader)(void *ud, const char *identity); /* borrowed string */
  void *ud;
} kube_lease_opts;

typedef struct kube_lease kube_lease;

/* `c` borrowed, must outlive the elector. *out owned by the caller. */
CTRAIN_NODISCARD ctrain_err kube_lease_new(kube_client *c, const kube_lease_opts *o,
                                           kube_lease **out);

/* One acquire-or-renew round (what the thread does every retry period).
 * *is_leader is 1 when this candidate holds the Lease afterwards. */
CTRAIN_NODISCARD ctrain_err kube_lease_try(kube_lease *l, int *is_leader, kube_status *st);

/* Starts the election thread. */
CTRAIN_NODISCARD ctrain_err kube_lease_start(kube_lease *l);

/* Stops the thread; releases the Lease if held (unless no_release), then
 * calls on_stopped_leading. Idempotent. */
void kube_lease_stop(kube_lease *l);

int kube_lease_is_leader(kube_lease *l);

/* The holder last observed (possibly ""), copied into buf. */
void kube_lease_holder(kube_lease *l, char *buf, size_t cap);

/* Stops if running, then frees. Accepts NULL. */
void kube_lease_free(kube_lease *l);

#endif
