/* controller/tfjob_write.h - a TFJob's status written back: the executor's
 * view of the TFJob kind (its resource and status write), the I/O side of
 * the pure adapter in controller/tfjob.h. */
#ifndef CTRAIN_CTL_TFJOB_WRITE_H
#define CTRAIN_CTL_TFJOB_WRITE_H

#include <cjson/cJSON.h>

#include "controller/executor.h"
#include "ctrain/err.h"
#include "ctrain/kube_client.h"

/* tfjobs.kubeflow.org/v1 */
extern const kube_gvr tfjob_write_gvr;

/* The executor's view of TFJob: its resource, and tfjob_write_status. */
extern const ctl_exec_kind tfjob_write_exec_kind;

/* The executor's write_status for TFJob: `obj` (from tfjob_adapt_result)
 * for the observed `tf`. The annotations first when they changed (a merge
 * patch with tf's resourceVersion as precondition), then the status through
 * the status subresource when it changed (PUT, with the resourceVersion the
 * patch returned). CTRAIN_E_CONFLICT when tf is stale. */
CTRAIN_NODISCARD ctrain_err tfjob_write_status(kube_client *client, const cJSON *tf,
                                               const cJSON *obj, kube_status *st);

#endif
