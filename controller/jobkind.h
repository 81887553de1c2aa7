/* controller/jobkind.h - the kinds of job the controller serves, in one
 * table: TrainingJob (ctrain.dev/v1alpha1, always) and TFJob
 * (kubeflow.org/v1, with --enable-tfjob; controller/tfjob.h). An entry says
 * what its informer watches and keeps, which ownerReference names it, how
 * one of its objects becomes the job the reconciler reads and how the
 * pass's result goes back. The informer handlers, the pass and the executor
 * are written once over the table; a new kind is a new entry.
 *
 * Work-queue keys are typed (ctl_key: kind, namespace, name). The queue
 * dedups by string: ctl_key_format makes the one string of a key and
 * ctl_key_parse reads it back, nothing else makes or reads one. */
#ifndef CTRAIN_CTL_JOBKIND_H
#define CTRAIN_CTL_JOBKIND_H

#include <stddef.h>

#include <cjson/cJSON.h>

#include "controller/executor.h"
#include "controller/options.h"
#include "controller/reconcile.h"
#include "ctrain/err.h"
#include "ctrain/kube_informer.h"

/* An entry's index in ctl_kinds. */
typedef enum { CTL_KIND_TRAININGJOB, CTL_KIND_TFJOB, CTL_NKINDS } ctl_kind_id;

/* The reconciler's view of one observed object, for one pass. */
typedef struct ctl_view {
  const cJSON *job;    /* the TrainingJob-shaped job: the object itself, or built from it */
  const char *invalid; /* non-NULL: why the spec cannot run (recon_input.invalid_spec) */
  int foreign;         /* another controller manages it: no pass */
  void *priv;          /* the kind's own, released by its view_free */
} ctl_view;

typedef struct ctl_kind {
  ctl_kind_id id;
  const char *api_version; /* as an ownerReference names it: "ctrain.dev/v1alpha1" */
  const char *kind;        /* "TrainingJob" */
  /* Its resource (exec->gvr), its noun in logs (exec->noun: "trainingjob")
   * and how the executor writes its status. */
  const ctl_exec_kind *exec;
  kube_informer_transform_fn transform; /* what its cache keeps; NULL: whole objects */
  /* Whether this run serves it, and the flag that turns it on (NULL:
   * always served), named when its resource cannot be listed, with
   * `crd_hint` after the resource. */
  int (*enabled)(const ctl_options *o);
  const char *flag, *crd_hint;
  /* The view of the observed `obj` (borrowed; it outlives the view): on
   * success release it with view_free; on error (CTRAIN_E_NOMEM) *v is
   * empty. A spec that cannot run is no error: v->invalid says why. */
  ctrain_err (*view)(const cJSON *obj, ctl_view *v);
  void (*view_free)(ctl_view *v);
  /* Turns the result of a pass over `v` (built from `obj`) into the kind's,
   * in place (all borrowed but res). */
  ctrain_err (*adapt)(const cJSON *obj, const ctl_view *v, recon_result *res);
} ctl_kind;

extern const ctl_kind ctl_kinds[CTL_NKINDS];

/* Whether the options serve kind `k`. */
int ctl_kind_enabled(const ctl_kind *k, const ctl_options *o);

/* The kind an ownerReference's apiVersion and kind name (borrowed), or
 * NULL: not a job kind of the table. */
const ctl_kind *ctl_kind_of_owner(const char *api_version, const char *kind);

#define CTL_KEY_NS_MAX   256 /* with the NUL; a namespace is at most 63 */
#define CTL_KEY_NAME_MAX 256 /* with the NUL; a name is at most 253 */
#define CTL_KEY_MAX      544 /* a key's string (ctl_key_format), with the NUL */

/* A work-queue key: one job of one kind. */
typedef struct ctl_key {
  const ctl_kind *kind; /* an entry of ctl_kinds */
  char ns[CTL_KEY_NS_MAX];
  char name[CTL_KEY_NAME_MAX];
} ctl_key;

/* The key of job `ns`/`name` (borrowed) of kind `k`. CTRAIN_E_INVAL when
 * either is empty or cannot be a Kubernetes namespace or name as the
 * string needs (a '/' in either, a ':' in the namespace); CTRAIN_E_TOOBIG
 * when either is over its buffer. */
CTRAIN_NODISCARD ctrain_err ctl_key_make(const ctl_kind *k, const char *ns, const char *name,
                                         ctl_key *out);

/* The key of the object `obj` (its metadata's namespace and name) of kind
 * `k`, as ctl_key_make. */
CTRAIN_NODISCARD ctrain_err ctl_key_of(const ctl_kind *k, const cJSON *obj, ctl_key *out);

/* The key's string, for the queue (which dedups by it), the job states'
 * map and logs: "<ns>/<name>" for a TrainingJob (kube_informer_key's, the
 * progress poller's), "<noun>:<ns>/<name>" for another kind ("tfjob:ns/a").
 * A namespace, a DNS label, has no ':' or '/', so keys of two kinds never
 * collide. CTRAIN_E_TOOBIG when it does not fit in `len`. */
CTRAIN_NODISCARD ctrain_err ctl_key_format(const ctl_key *key, char *buf, size_t len);

/* The key of the string `s` (ctl_key_format's). CTRAIN_E_INVAL when it is
 * not one (an unknown noun, TrainingJob's noun written out, a part missing
 * or too long): ctl_key_format(ctl_key_parse(s)) == s for every s it
 * accepts. */
CTRAIN_NODISCARD ctrain_err ctl_key_parse(const char *s, ctl_key *out);

#endif
