/* controller/runtime.h - TrainingRuntime (namespaced) and
 * ClusterTrainingRuntime (cluster-scoped): the defaults of a job that an
 * admin sets once for a team or the cluster (docs/api.md "Runtimes").
 *
 * A TrainingJob names one with spec.runtimeRef. The first pass of such a
 * job records the runtime as it is then in status.runtime (the snapshot:
 * kind, name, uid, generation, resourceVersion and its whole spec), and
 * every later pass, every attempt included, reads the job merged over that
 * snapshot, never over the live runtime: editing a runtime changes the jobs
 * admitted after the edit, never a running one.
 *
 * The merge (runtime_merge), the job's fields over the runtime's:
 * - objects merge key by key, recursively; where both give a value that is
 *   not an object (a number, a string, a list), the job's wins;
 * - lists whose items are all objects with a string `name` merge by name:
 *   the runtime's items in their order, then the job's others in theirs; a
 *   container (containers, initContainers) given by both is merged as an
 *   object, any other item (env, volumes, volumeMounts, ports,
 *   imagePullSecrets, ...) given by both is the job's;
 * - other lists (command, args, tolerations, envFrom) are the job's when
 *   it gives one.
 * spec.replicaSpecs keeps the job's replica types: a runtime's template
 * for a type the job does not ask for is not used. A runtime's queueName
 * becomes the job's Kueue label (kueue.x-k8s.io/queue-name) unless the job
 * has its own. Pure: no I/O. */
#ifndef CTRAIN_CTL_RUNTIME_H
#define CTRAIN_CTL_RUNTIME_H

#include <stddef.h>

#include <cjson/cJSON.h>

#include "ctrain/err.h"

#define RUNTIME_KIND         "TrainingRuntime"
#define RUNTIME_KIND_CLUSTER "ClusterTrainingRuntime"

/* spec.runtimeRef as written (borrowed strings). */
typedef struct {
  const char *kind; /* RUNTIME_KIND (the default) or RUNTIME_KIND_CLUSTER */
  const char *name;
  int cluster; /* kind is RUNTIME_KIND_CLUSTER */
} runtime_ref;

/* 1 and *ref filled when `job` has a spec.runtimeRef with a name; 0 when
 * it has none (or one without a name, which the CRD schema refuses). */
int runtime_ref_of(const cJSON *job, runtime_ref *ref);

/* The job's status.runtime, the snapshot recorded at admission; NULL when
 * there is none. */
const cJSON *runtime_snapshot_of(const cJSON *job);

/* "TrainingRuntime <ns>/<name>" or "ClusterTrainingRuntime <name>", for
 * conditions, events and logs (`ns` the job's). */
void runtime_describe(const runtime_ref *ref, const char *ns, char *buf, size_t len);

/* The snapshot of runtime object `rt` (borrowed) for status.runtime, into
 * *out (owned by the caller). CTRAIN_E_CONFIG with msg when `rt` has no
 * spec object (the CRD schema requires one); CTRAIN_E_NOMEM. */
CTRAIN_NODISCARD ctrain_err runtime_snapshot(const cJSON *rt, const runtime_ref *ref, cJSON **out,
                                             char *msg, size_t len);

/* A new value (owned by the caller; NULL: out of memory): `over` (the
 * job's) merged over `base` (the runtime's) by the rules above; `key` is
 * the member name both sit under (NULL at the top), which decides how the
 * items of a named list merge. Either may be NULL (the other is copied). */
cJSON *runtime_merge(const cJSON *base, const cJSON *over, const char *key);

/* The job as the reconciler reads it: a copy of `job` whose spec is its
 * own merged over `snapshot`'s spec (status.runtime), and whose labels get
 * the runtime's queueName. CTRAIN_E_CONFIG with msg naming the runtime
 * when the snapshot is not one this controller wrote (no spec object, or
 * another kind or name than spec.runtimeRef); CTRAIN_E_NOMEM. */
CTRAIN_NODISCARD ctrain_err runtime_apply(const cJSON *job, const cJSON *snapshot, cJSON **out,
                                          char *msg, size_t len);

#endif
