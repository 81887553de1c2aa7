/* controller/executor_int.h - what the files of the executor share
 * (private to them): one pass's state, the small helpers they use, and the
 * writes of the job's objects.
 *
 *   executor.c          the pass: its control flow, the prelude, the status
 *                       write, the NetworkPolicy, events, exec_name_taken
 *   executor_pods.c     the pods: creates (slow start), deletes (and the
 *                       job's), finalizer removals
 *   executor_objects.c  the job's other objects: the Service, the token
 *                       Secret, the cluster ConfigMap (and its delete), the
 *                       Kueue Workload (and its status) */
#ifndef CTRAIN_CTL_EXECUTOR_INT_H
#define CTRAIN_CTL_EXECUTOR_INT_H

#include <pthread.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "controller/executor.h"
#include "controller/ownership.h"
#include "ctrain/json.h"
#include "ctrain/thread.h"

/* One execution of one pass. */
typedef struct pass {
  const ctl_exec *e;
  const ctl_exec_kind *kind;
  ctl_job *state;
  const char *key, *ns, *uid;
  const cJSON *job, *jobref;
  const recon_result *res;
  int *ok;        /* (n_actions) the action succeeded */
  int *handled;   /* (n_actions) done already (the creates, all at once) */
  int no_creates; /* the token Secret could not be written: pods would not start */
  own_job owner;  /* whose objects the pass may touch (controller/ownership.h) */
  /* A name the job uses found taken (exec_name_taken); set from the create
   * pool's threads, under mu. The first one is what the job shows. */
  pthread_mutex_t mu;
  int waited, creates; /* names found taken; creates sent (pods and the prelude's) */
  char waiting[RECON_CREATE_ERROR_MAX];
} pass;

static inline const char *md_str(const cJSON *obj, const char *field) {
  return ctrain_json_str(ctrain_json_get(obj, "metadata"), field);
}

/* A create that found the object there: an earlier pass made it, or
 * someone else did (exec_name_taken tells). */
static inline int already_exists(ctrain_err r, const kube_status *st) {
  return r == CTRAIN_E_CONFLICT && !strcmp(st->reason, "AlreadyExists");
}

/* The controller is stopping: send nothing more. */
static inline int exec_stopping(const ctl_exec *e) {
  return e->stopping && e->stopping(e->stopping_ud);
}

static inline void pass_sent(pass *p) {
  ctrain_mutex_lock(&p->mu);
  p->creates++;
  ctrain_mutex_unlock(&p->mu);
}

typedef enum {
  TAKEN_MINE, /* the job's own: the create is done */
  TAKEN_WAIT, /* an earlier job's (deleted, going) or someone else's: wait, touch nothing */
  TAKEN_ERROR /* it could not be read: the pass fails and is retried */
} taken;

/* A create of `what` `name` (of `g`) met AlreadyExists: whose the object is
 * decides (executor.c). */
taken exec_name_taken(pass *p, const kube_gvr *g, const char *what, const char *name, cJSON **mine,
                      kube_status *st, ctrain_err *err);

/* Performs every CREATE_POD action from index `from` on (marking them
 * handled; their results in p->ok), with slow start, or none of them when
 * the token Secret could not be written. Creates not sent leave the
 * expectations, so the next pass returns them. Returns the first failure,
 * or CTRAIN_OK (executor_pods.c). */
CTRAIN_NODISCARD ctrain_err exec_pods_send_creates(pass *p, size_t from);

/* DELETE_POD / DELETE_JOB, with the uid as precondition; NotFound is done. */
CTRAIN_NODISCARD ctrain_err exec_pods_delete(pass *p, const recon_action *a, kube_status *st);

/* REMOVE_FINALIZER: ctl_exec_remove_finalizer on the action's pod. */
CTRAIN_NODISCARD ctrain_err exec_pods_remove_finalizer(pass *p, const recon_action *a,
                                                       kube_status *st);

/* One action each (executor_objects.c); `st` gets the apiserver's answer. */
CTRAIN_NODISCARD ctrain_err exec_objects_create_service(pass *p, const recon_action *a,
                                                        kube_status *st);
CTRAIN_NODISCARD ctrain_err exec_objects_write_secret(pass *p, const recon_action *a,
                                                      kube_status *st);
CTRAIN_NODISCARD ctrain_err exec_objects_create_configmap(pass *p, const recon_action *a,
                                                          kube_status *st);
CTRAIN_NODISCARD ctrain_err exec_objects_delete_configmap(pass *p, const recon_action *a,
                                                          kube_status *st);
CTRAIN_NODISCARD ctrain_err exec_objects_create_workload(pass *p, const recon_action *a,
                                                         kube_status *st);
CTRAIN_NODISCARD ctrain_err exec_objects_update_workload(pass *p, const recon_action *a,
                                                         kube_status *st);

#endif
