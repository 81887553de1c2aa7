/* controller/ownership.h - whose an object is: the one rule every read,
 * create, patch and delete of the controller goes through (pure).
 *
 * An object belongs to a job only when it is in the job's namespace and its
 * controller ownerReference (controller: true) names the job: its uid, with
 * its kind, API group and name (as the pod informer's owner-name index
 * finds it; a reference with the uid under another name is no one's). Nothing
 * else decides it: not a label (anyone who may create a pod may label it),
 * not an ownerReference in another namespace (uids are not secret), not a
 * name. Of the objects that are not the job's, those under a name the job
 * uses whose controller is a job of the same kind and name with another uid
 * are an earlier incarnation of the job (deleted and re-applied under the
 * same name): the controller may end its pods, by a delete whose
 * precondition is that uid, and release our finalizer from them; its other
 * objects are the garbage collector's. Anything else is foreign and is
 * never written or deleted. */
#ifndef CTRAIN_CTL_OWNERSHIP_H
#define CTRAIN_CTL_OWNERSHIP_H

#include <stddef.h>

#include <cjson/cJSON.h>

#include "ctrain/err.h"

/* The job as ownership sees it; all borrowed. */
typedef struct own_job {
  const char *ns, *name, *uid;
  const char *api_version; /* "ctrain.dev/v1alpha1", or TFJob's "kubeflow.org/v1" */
  const char *kind;        /* "TrainingJob", "TFJob" */
} own_job;

typedef enum {
  OWN_MINE,    /* the job's own */
  OWN_EARLIER, /* an earlier incarnation's: same namespace, kind and name, another uid */
  OWN_FOREIGN  /* anyone else's, or no one's */
} own_verdict;

/* The controller ownerReference of obj (the first with controller: true),
 * or NULL. */
const cJSON *own_controller_ref(const cJSON *obj);

/* Whose `obj` is, for job `j`. */
own_verdict own_classify(const cJSON *obj, const own_job *j);

/* 1 when obj is the job's own (own_classify == OWN_MINE). */
int own_is_mine(const cJSON *obj, const own_job *j);

/* The uid of obj's controller (borrowed), or NULL. */
const char *own_controller_uid(const cJSON *obj);

/* Splits `candidates` (a JSON array, borrowed) into a new array of
 * copies of the job's own objects (*mine) and, when `earlier` is
 * non-NULL, one of the earlier incarnations' (*earlier). Foreign objects
 * go into neither. CTRAIN_E_NOMEM: nothing is returned. */
CTRAIN_NODISCARD ctrain_err own_split(const cJSON *candidates, const own_job *j, cJSON **mine,
                                      cJSON **earlier);

/* Describes obj's owner for an event or a condition ("no controller",
 * "TrainingJob team-b/x uid 1234", ...) into buf. */
void own_describe(const cJSON *obj, char *buf, size_t len);

#endif
